// tfdist's native kernels, compiled against the installed TensorFlow by strategies._native.
//
// TfdistSparseApplyAdagrad: TensorFlow's ResourceSparseApplyAdagradV2 with use_locking=True and
// update_slots=True, the same maths in the same order per element (accum += g * g;
// var -= lr * g / (sqrt(accum) + epsilon)), bit for bit (built with -ffp-contract=off). With
// use_epsilon=false it is TF1's ResourceSparseApplyAdagrad (var -= lr * g * rsqrt(accum); epsilon
// unused), whose rsqrt TensorFlow's vectorized kernel approximates and refines (a Newton step): here
// 1 / sqrt, exact, so the two can differ in the last bit or two of a row's update. TensorFlow's
// CPU kernel evaluates two Eigen chip expressions per row, whose set-up costs more than a 16-wide
// row's arithmetic; here each row is a plain loop, and the rows a few indices ahead are prefetched
// (a click-through batch's rows are scattered over a table much larger than the caches).
//
// TfdistRowSum: UnsortedSegmentSum of the rows of a 2-D tensor (output[s] = sum of data[i] where
// segment_ids[i] == s; negative ids dropped, ids from num_segments up refused), what a worker sums
// a lookup's gradient per distinct row with. TensorFlow's CPU kernel adds each row with an Eigen chip
// expression, about 60 ns per 16-wide row; here a plain loop, adding the rows of a segment in input
// order as TensorFlow's does (bit for bit).
//
// TfdistGatherParts and TfdistSparseApplyAdagradParts: a ResourceGather and a TF1 Adagrad row update
// (use_epsilon=false above) over many parts of tables at once, each row named by (which part, row
// in it). A packed click-through lookup reads and updates some fifty table parts on each ps every
// step; one op each instead of fifty spares the ps fifty ops' scheduling, allocations and locks.
// Row for row, the same values as the single-part ops.
#define EIGEN_USE_THREADS
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/kernels/training_op_helpers.h"
#include "tensorflow/core/framework/resource_var.h"
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

namespace tensorflow {
namespace {

using CPUDevice = Eigen::ThreadPoolDevice;

REGISTER_OP("TfdistSparseApplyAdagrad")
    .Input("var: resource")
    .Input("accum: resource")
    .Input("lr: T")
    .Input("epsilon: T")
    .Input("grad: T")
    .Input("indices: Tindices")
    .Attr("T: {float, double}")
    .Attr("Tindices: {int32, int64}")
    .Attr("use_epsilon: bool = true")
    .SetShapeFn([](shape_inference::InferenceContext* c) { return absl::OkStatus(); });

template <typename T, typename Tindex>
class TfdistSparseApplyAdagradOp : public OpKernel {
 public:
  explicit TfdistSparseApplyAdagradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("use_epsilon", &use_epsilon_));
  }

  void Compute(OpKernelContext* ctx) override {
    const bool sparse = true;
    auto locks = MaybeLockVariableInputMutexesInOrder<CPUDevice, T>(ctx, /*do_lock=*/true, sparse, {0, 1});
    Tensor var, accum;
    OP_REQUIRES_OK(ctx, GetInputTensorFromVariable<CPUDevice, T>(ctx, 0, /*lock_held=*/true, sparse, &var));
    OP_REQUIRES_OK(ctx, GetInputTensorFromVariable<CPUDevice, T>(ctx, 1, /*lock_held=*/true, sparse, &accum));
    OP_REQUIRES(ctx, var.IsInitialized() && accum.IsInitialized(),
                errors::FailedPrecondition("TfdistSparseApplyAdagrad: a variable is not initialized"));
    OP_REQUIRES(ctx, var.shape().IsSameSize(accum.shape()),
                errors::InvalidArgument("var and accum differ in shape: ", var.shape().DebugString(), " ",
                                        accum.shape().DebugString()));
    OP_REQUIRES(ctx, TensorShapeUtils::IsVectorOrHigher(var.shape()),
                errors::InvalidArgument("var must be at least 1 dimensional"));
    const Tensor& lr = ctx->input(2);
    const Tensor& epsilon = ctx->input(3);
    const Tensor& grad = ctx->input(4);
    const Tensor& indices = ctx->input(5);
    OP_REQUIRES(ctx, TensorShapeUtils::IsScalar(lr.shape()) && TensorShapeUtils::IsScalar(epsilon.shape()),
                errors::InvalidArgument("lr and epsilon must be scalars"));
    OP_REQUIRES(ctx, TensorShapeUtils::IsVector(indices.shape()),
                errors::InvalidArgument("indices must be one-dimensional"));
    const int64_t n = indices.dim_size(0);
    const int64_t rows = var.dim_size(0);
    const int64_t inner = rows > 0 ? var.NumElements() / rows : 0;
    OP_REQUIRES(ctx, grad.dims() >= 1 && grad.dim_size(0) == n && grad.NumElements() == n * inner,
                errors::InvalidArgument("grad must be [len(indices), ...var.shape[1:]]: ",
                                        grad.shape().DebugString(), " for var ", var.shape().DebugString()));
    const T lr_v = lr.scalar<T>()();
    const T eps_v = epsilon.scalar<T>()();
    const auto idx = indices.vec<Tindex>();
    for (int64_t i = 0; i < n; ++i) {
      const Tindex r = idx(i);
      OP_REQUIRES(ctx, r >= 0 && r < rows,
                  errors::InvalidArgument("index ", r, " at position ", i, " is not in [0, ", rows, ")"));
    }
    T* v = var.flat<T>().data();
    T* a = accum.flat<T>().data();
    const T* g = grad.flat<T>().data();
    constexpr int64_t kAhead = 8;  // rows are scattered over a large table: fetch a few rows ahead
    for (int64_t i = 0; i < n; ++i) {
      if (i + kAhead < n) {
        const int64_t next = static_cast<int64_t>(idx(i + kAhead)) * inner;
        __builtin_prefetch(v + next, 1);
        __builtin_prefetch(a + next, 1);
      }
      T* vr = v + static_cast<int64_t>(idx(i)) * inner;
      T* ar = a + static_cast<int64_t>(idx(i)) * inner;
      const T* gr = g + i * inner;
      if (use_epsilon_) {
        for (int64_t j = 0; j < inner; ++j) {
          const T gj = gr[j];
          const T aj = ar[j] + gj * gj;
          ar[j] = aj;
          vr[j] -= lr_v * gj / (std::sqrt(aj) + eps_v);
        }
      } else {
        for (int64_t j = 0; j < inner; ++j) {
          const T gj = gr[j];
          const T aj = ar[j] + gj * gj;
          ar[j] = aj;
          vr[j] -= lr_v * gj * (T(1) / std::sqrt(aj));
        }
      }
    }
  }

 private:
  bool use_epsilon_ = true;
};

#define REGISTER(T, Tindex)                                                     \
  REGISTER_KERNEL_BUILDER(Name("TfdistSparseApplyAdagrad")                      \
                              .Device(DEVICE_CPU)                               \
                              .TypeConstraint<T>("T")                           \
                              .TypeConstraint<Tindex>("Tindices"),              \
                          TfdistSparseApplyAdagradOp<T, Tindex>);
REGISTER(float, int32)
REGISTER(float, int64_t)
REGISTER(double, int32)
REGISTER(double, int64_t)
#undef REGISTER

REGISTER_OP("TfdistRowSum")
    .Input("data: T")
    .Input("segment_ids: Tindices")
    .Input("num_segments: Tnumsegments")
    .Output("output: T")
    .Attr("T: {float, double}")
    .Attr("Tindices: {int32, int64}")
    .Attr("Tnumsegments: {int32, int64} = DT_INT32")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle data;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &data));
      shape_inference::DimensionHandle segments;
      TF_RETURN_IF_ERROR(c->MakeDimForScalarInput(2, &segments));
      c->set_output(0, c->Matrix(segments, c->Dim(data, 1)));
      return absl::OkStatus();
    });

template <typename T, typename Tindex, typename Tnum>
class TfdistRowSumOp : public OpKernel {
 public:
  explicit TfdistRowSumOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& data = ctx->input(0);
    const Tensor& ids = ctx->input(1);
    const Tensor& num = ctx->input(2);
    OP_REQUIRES(ctx, data.dims() == 2, errors::InvalidArgument("data must be 2-D: ", data.shape().DebugString()));
    OP_REQUIRES(ctx, TensorShapeUtils::IsVector(ids.shape()) && ids.dim_size(0) == data.dim_size(0),
                errors::InvalidArgument("segment_ids must be [len(data)]: ", ids.shape().DebugString(), " for data ",
                                        data.shape().DebugString()));
    OP_REQUIRES(ctx, TensorShapeUtils::IsScalar(num.shape()), errors::InvalidArgument("num_segments must be a scalar"));
    const int64_t segments = static_cast<int64_t>(num.scalar<Tnum>()());
    OP_REQUIRES(ctx, segments >= 0, errors::InvalidArgument("num_segments must be non-negative: ", segments));
    const int64_t n = data.dim_size(0);
    const int64_t width = data.dim_size(1);
    const auto idx = ids.vec<Tindex>();
    for (int64_t i = 0; i < n; ++i) {
      OP_REQUIRES(ctx, static_cast<int64_t>(idx(i)) < segments,
                  errors::InvalidArgument("segment_ids[", i, "] = ", idx(i), " is out of range [0, ", segments, ")"));
    }
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({segments, width}), &output));
    T* out = output->flat<T>().data();
    std::fill(out, out + segments * width, T(0));
    const T* in = data.flat<T>().data();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t s = static_cast<int64_t>(idx(i));
      if (s < 0) continue;
      T* o = out + s * width;
      const T* r = in + i * width;
      for (int64_t j = 0; j < width; ++j) o[j] += r[j];
    }
  }
};

#define REGISTER_SUM(T, Tindex, Tnum)                                            \
  REGISTER_KERNEL_BUILDER(Name("TfdistRowSum")                                  \
                              .Device(DEVICE_CPU)                               \
                              .TypeConstraint<T>("T")                           \
                              .TypeConstraint<Tindex>("Tindices")               \
                              .TypeConstraint<Tnum>("Tnumsegments")             \
                              .HostMemory("num_segments"),                      \
                          TfdistRowSumOp<T, Tindex, Tnum>);
#define REGISTER_SUMS(T)                                                         \
  REGISTER_SUM(T, int32, int32)                                                  \
  REGISTER_SUM(T, int32, int64_t)                                                \
  REGISTER_SUM(T, int64_t, int32)                                                \
  REGISTER_SUM(T, int64_t, int64_t)
REGISTER_SUMS(float)
REGISTER_SUMS(double)
#undef REGISTER_SUMS
#undef REGISTER_SUM

REGISTER_OP("TfdistGatherParts")
    .Input("parts: N * resource")
    .Input("which: int32")
    .Input("rows: Tindices")
    .Output("output: dtype")
    .Attr("N: int >= 1")
    .Attr("dtype: {float, double}")
    .Attr("Tindices: {int32, int64}")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle which;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(c->num_inputs() - 2), 1, &which));
      shape_inference::DimensionHandle width = c->UnknownDim();
      const auto* handle = c->input_handle_shapes_and_types(0);
      if (handle != nullptr && handle->size() == 1 && c->RankKnown((*handle)[0].shape) &&
          c->Rank((*handle)[0].shape) == 2) {
        width = c->Dim((*handle)[0].shape, 1);
      }
      c->set_output(0, c->Matrix(c->Dim(which, 0), width));
      return absl::OkStatus();
    });

// Checks (which, rows) against the parts' row counts; the parts' common width, or an error.
template <typename Tindex>
absl::Status CheckParts(const std::vector<const Tensor*>& parts, const Tensor& which, const Tensor& rows,
                        int64_t* width) {
  if (!TensorShapeUtils::IsVector(which.shape()) || !TensorShapeUtils::IsVector(rows.shape()) ||
      which.dim_size(0) != rows.dim_size(0)) {
    return errors::InvalidArgument("which and rows must be vectors of one length: ", which.shape().DebugString(),
                                   " ", rows.shape().DebugString());
  }
  for (size_t p = 0; p < parts.size(); ++p) {
    if (!parts[p]->IsInitialized()) return errors::FailedPrecondition("part ", p, " is not initialized");
    if (parts[p]->dims() != 2 || parts[p]->dim_size(1) != parts[0]->dim_size(1)) {
      return errors::InvalidArgument("parts must be matrices of one width: part ", p, " is ",
                                     parts[p]->shape().DebugString(), ", part 0 ", parts[0]->shape().DebugString());
    }
  }
  *width = parts[0]->dim_size(1);
  const auto w = which.vec<int32>();
  const auto r = rows.vec<Tindex>();
  for (int64_t i = 0; i < which.dim_size(0); ++i) {
    const int32 p = w(i);
    if (p < 0 || p >= static_cast<int32>(parts.size())) {
      return errors::InvalidArgument("which[", i, "] = ", p, " is not in [0, ", parts.size(), ")");
    }
    if (r(i) < 0 || r(i) >= parts[p]->dim_size(0)) {
      return errors::InvalidArgument("rows[", i, "] = ", r(i), " is not in [0, ", parts[p]->dim_size(0),
                                     ") (part ", p, ")");
    }
  }
  return absl::OkStatus();
}

template <typename T, typename Tindex>
class TfdistGatherPartsOp : public OpKernel {
 public:
  explicit TfdistGatherPartsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const int n = ctx->num_inputs() - 2;
    std::vector<core::RefCountPtr<Var>> vars(n);
    for (int p = 0; p < n; ++p) {
      OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, p), &vars[p]));
      OP_REQUIRES_OK(ctx, EnsureSparseVariableAccess<CPUDevice, T>(ctx, vars[p].get()));
    }
    std::vector<int> order(n);  // shared locks in address order, as writers take theirs
    for (int p = 0; p < n; ++p) order[p] = p;
    std::sort(order.begin(), order.end(), [&vars](int a, int b) { return vars[a]->mu() < vars[b]->mu(); });
    std::vector<tsl::tf_shared_lock> locks;
    locks.reserve(n);
    for (int k = 0; k < n; ++k) {
      if (k > 0 && vars[order[k]]->mu() == vars[order[k - 1]]->mu()) continue;
      locks.emplace_back(*vars[order[k]]->mu());
    }
    std::vector<const Tensor*> parts(n);
    for (int p = 0; p < n; ++p) parts[p] = vars[p]->tensor();
    const Tensor& which = ctx->input(n);
    const Tensor& rows = ctx->input(n + 1);
    int64_t width = 0;
    OP_REQUIRES_OK(ctx, CheckParts<Tindex>(parts, which, rows, &width));
    const int64_t count = which.dim_size(0);
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({count, width}), &output));
    const auto w = which.vec<int32>();
    const auto r = rows.vec<Tindex>();
    std::vector<const T*> data(n);
    for (int p = 0; p < n; ++p) data[p] = parts[p]->flat<T>().data();
    T* out = output->flat<T>().data();
    constexpr int64_t kAhead = 8;
    for (int64_t i = 0; i < count; ++i) {
      if (i + kAhead < count) __builtin_prefetch(data[w(i + kAhead)] + static_cast<int64_t>(r(i + kAhead)) * width);
      std::memcpy(out + i * width, data[w(i)] + static_cast<int64_t>(r(i)) * width, width * sizeof(T));
    }
  }
};

#define REGISTER_GATHER(T, Tindex)                                              \
  REGISTER_KERNEL_BUILDER(Name("TfdistGatherParts")                             \
                              .Device(DEVICE_CPU)                               \
                              .TypeConstraint<T>("dtype")                       \
                              .TypeConstraint<Tindex>("Tindices"),              \
                          TfdistGatherPartsOp<T, Tindex>);
REGISTER_GATHER(float, int32)
REGISTER_GATHER(float, int64_t)
REGISTER_GATHER(double, int32)
REGISTER_GATHER(double, int64_t)
#undef REGISTER_GATHER

REGISTER_OP("TfdistSparseApplyAdagradParts")
    .Input("vars: N * resource")
    .Input("accums: N * resource")
    .Input("lr: T")
    .Input("grad: T")
    .Input("which: int32")
    .Input("rows: Tindices")
    .Attr("N: int >= 1")
    .Attr("T: {float, double}")
    .Attr("Tindices: {int32, int64}")
    .SetShapeFn([](shape_inference::InferenceContext* c) { return absl::OkStatus(); });

template <typename T, typename Tindex>
class TfdistSparseApplyAdagradPartsOp : public OpKernel {
 public:
  explicit TfdistSparseApplyAdagradPartsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const int n = (ctx->num_inputs() - 4) / 2;
    std::vector<int> inputs(2 * n);
    for (int i = 0; i < 2 * n; ++i) inputs[i] = i;
    auto locks = MaybeLockVariableInputMutexesInOrder<CPUDevice, T>(ctx, /*do_lock=*/true, /*sparse=*/true, inputs);
    std::vector<Tensor> tensors(2 * n);
    for (int i = 0; i < 2 * n; ++i) {
      OP_REQUIRES_OK(ctx, GetInputTensorFromVariable<CPUDevice, T>(ctx, i, /*lock_held=*/true, /*sparse=*/true,
                                                                     &tensors[i]));
    }
    std::vector<const Tensor*> parts(2 * n);
    for (int i = 0; i < 2 * n; ++i) parts[i] = &tensors[i];
    for (int p = 0; p < n; ++p) {
      OP_REQUIRES(ctx, tensors[p].shape().IsSameSize(tensors[n + p].shape()),
                  errors::InvalidArgument("var and accum of part ", p, " differ in shape: ",
                                          tensors[p].shape().DebugString(), " ", tensors[n + p].shape().DebugString()));
    }
    const Tensor& lr = ctx->input(2 * n);
    const Tensor& grad = ctx->input(2 * n + 1);
    const Tensor& which = ctx->input(2 * n + 2);
    const Tensor& rows = ctx->input(2 * n + 3);
    OP_REQUIRES(ctx, TensorShapeUtils::IsScalar(lr.shape()), errors::InvalidArgument("lr must be a scalar"));
    int64_t width = 0;
    OP_REQUIRES_OK(ctx, CheckParts<Tindex>(std::vector<const Tensor*>(parts.begin(), parts.begin() + n), which,
                                           rows, &width));
    const int64_t count = which.dim_size(0);
    OP_REQUIRES(ctx, grad.dims() == 2 && grad.dim_size(0) == count && grad.dim_size(1) == width,
                errors::InvalidArgument("grad must be [len(rows), width]: ", grad.shape().DebugString(),
                                        " for width ", width));
    const T lr_v = lr.scalar<T>()();
    const auto w = which.vec<int32>();
    const auto r = rows.vec<Tindex>();
    std::vector<T*> v(n), a(n);
    for (int p = 0; p < n; ++p) {
      v[p] = tensors[p].flat<T>().data();
      a[p] = tensors[n + p].flat<T>().data();
    }
    const T* g = grad.flat<T>().data();
    constexpr int64_t kAhead = 8;
    for (int64_t i = 0; i < count; ++i) {
      if (i + kAhead < count) {
        const int64_t next = static_cast<int64_t>(r(i + kAhead)) * width;
        __builtin_prefetch(v[w(i + kAhead)] + next, 1);
        __builtin_prefetch(a[w(i + kAhead)] + next, 1);
      }
      T* vr = v[w(i)] + static_cast<int64_t>(r(i)) * width;
      T* ar = a[w(i)] + static_cast<int64_t>(r(i)) * width;
      const T* gr = g + i * width;
      for (int64_t j = 0; j < width; ++j) {
        const T gj = gr[j];
        const T aj = ar[j] + gj * gj;
        ar[j] = aj;
        vr[j] -= lr_v * gj * (T(1) / std::sqrt(aj));
      }
    }
  }
};

#define REGISTER_PARTS(T, Tindex)                                               \
  REGISTER_KERNEL_BUILDER(Name("TfdistSparseApplyAdagradParts")                 \
                              .Device(DEVICE_CPU)                               \
                              .TypeConstraint<T>("T")                           \
                              .TypeConstraint<Tindex>("Tindices"),              \
                          TfdistSparseApplyAdagradPartsOp<T, Tindex>);
REGISTER_PARTS(float, int32)
REGISTER_PARTS(float, int64_t)
REGISTER_PARTS(double, int32)
REGISTER_PARTS(double, int64_t)
#undef REGISTER_PARTS

}  // namespace
}  // namespace tensorflow
