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
#define EIGEN_USE_THREADS
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/kernels/training_op_helpers.h"
#include <cmath>

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

}  // namespace
}  // namespace tensorflow
