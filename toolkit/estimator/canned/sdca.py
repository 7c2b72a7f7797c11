"""``experimental.LinearSDCA``: the stochastic dual coordinate ascent optimizer of the linear estimators.

Pass it as the ``optimizer`` of ``LinearClassifier`` (two classes),
``LinearRegressor`` (``label_dimension=1``) or ``LinearEstimator`` (a
``BinaryClassHead`` or ``RegressionHead``), as with ``tf.estimator``. The
input_fn's features must hold ``example_id_column``: one string (or integer)
id per example, the same id each time the example comes back, which is how
the solver finds the example's dual variable. Binary classification trains on
the logistic loss, regression on the squared loss; ``sparse_combiner`` must be
'sum'. Evaluation and prediction are those of the linear model.

Example (``tests/unit/test_estimator_sdca.py`` runs the same)::

    sdca = LinearSDCA(example_id_column="example_id", symmetric_l2_regularization=2.0)
    est = LinearClassifier([age, city], optimizer=sdca)
    est.train(input_fn, steps=50)
"""
from __future__ import annotations

import logging
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from toolkit.estimator.canned import _sdca_solver
from toolkit.estimator.canned._errors import CannedError
from toolkit.estimator.canned._head_base import TRAIN
from toolkit.estimator.canned._head_base import Head as CannedHead

__all__ = ["LinearSDCA", "check_sdca", "sdca_train_op"]

logger = logging.getLogger(__name__)
v1 = tf.compat.v1
_FeatureCache = tf.__internal__.feature_column.FeatureTransformationCache


def _number(field: str, value: Any, *, minimum: float, strict: bool, hint: str) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok or not (float(value) > minimum if strict else float(value) >= minimum):
        bound = f"> {minimum}" if strict else f">= {minimum}"
        raise CannedError(f"LinearSDCA `{field}` is {value!r}; expected a number {bound}. {hint}", field=field)
    return float(value)


def _count(field: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise CannedError(f"LinearSDCA `{field}` is {value!r}; expected an integer >= 1.", field=field)
    return value


class LinearSDCA:
    """Stochastic dual coordinate ascent for the linear estimators (``tf.estimator.experimental.LinearSDCA``).

    Not a ``tf.compat.v1.train.Optimizer``: pass it as ``optimizer`` to a
    linear estimator, which then trains by SDCA instead of gradient steps.

    Args:
        example_id_column: the feature key of the example ids (a ``[batch]``
            string or integer tensor; each example keeps its id across epochs).
        num_loss_partitions: the number of workers training concurrently (the
            solver's sigma'); 1 for one process.
        num_table_shards: shards of the per-example state table (e.g. the
            number of ps); None means 1.
        symmetric_l1_regularization: L1 strength, >= 0.
        symmetric_l2_regularization: L2 strength, > 0 (typically > 1).
        adaptive: sample examples adaptively (by their duality gap).
    """

    def __init__(self, example_id_column: str, num_loss_partitions: int = 1, num_table_shards: int | None = None,
                 symmetric_l1_regularization: float = 0.0, symmetric_l2_regularization: float = 1.0,
                 adaptive: bool = False) -> None:
        if not isinstance(example_id_column, str) or not example_id_column:
            raise CannedError(f"LinearSDCA `example_id_column` is {example_id_column!r}; expected the feature key "
                              "(a non-empty string) of the example ids, e.g. 'example_id'.",
                              field="example_id_column")
        self.example_id_column = example_id_column
        self.num_loss_partitions = _count("num_loss_partitions", num_loss_partitions)
        self.num_table_shards = None if num_table_shards is None else _count("num_table_shards", num_table_shards)
        self.symmetric_l1_regularization = _number(
            "symmetric_l1_regularization", symmetric_l1_regularization, minimum=0.0, strict=False,
            hint="symmetric_l1_regularization should be non-negative; use 0.0 for none.")
        self.symmetric_l2_regularization = _number(
            "symmetric_l2_regularization", symmetric_l2_regularization, minimum=0.0, strict=True,
            hint="symmetric_l2_regularization should be positive (SDCA needs a strongly convex objective).")
        if not isinstance(adaptive, bool):
            raise CannedError(f"LinearSDCA `adaptive` is {adaptive!r}; expected True or False.", field="adaptive")
        self.adaptive = adaptive
        if self.symmetric_l2_regularization <= 1.0:
            logger.warning("symmetric_l2_regularization for SDCA should typically be larger than for online "
                           "optimization methods (got %s). Recommended value is of the order of the average L2 "
                           "norm of the training examples.", self.symmetric_l2_regularization)

    def __repr__(self) -> str:
        return (f"LinearSDCA(example_id_column={self.example_id_column!r}, "
                f"num_loss_partitions={self.num_loss_partitions}, num_table_shards={self.num_table_shards}, "
                f"symmetric_l1_regularization={self.symmetric_l1_regularization}, "
                f"symmetric_l2_regularization={self.symmetric_l2_regularization}, adaptive={self.adaptive})")


def _loss_type(head: Any) -> str | None:
    """TF's rule: a binary head trains on the logistic loss, a one-value regression head on the squared loss."""
    from toolkit.estimator.canned.heads import BinaryClassHead as CannedBinary
    from toolkit.estimator.canned.heads import RegressionHead as CannedRegression
    from toolkit.estimator.head import BinaryClassHead, RegressionHead
    if isinstance(head, CannedBinary) or type(head) is BinaryClassHead:
        return "logistic_loss"
    if (isinstance(head, CannedRegression) or type(head) is RegressionHead) and head.logits_dimension == 1:
        return "squared_loss"
    return None


def _is_categorical(column: Any) -> bool:
    return hasattr(column, "get_sparse_tensors") and hasattr(column, "num_buckets")


def check_sdca(head: Any, columns: Sequence[Any], sparse_combiner: str, partitioner: Any) -> None:
    """The estimator arguments SDCA cannot train with, refused at construction (TF's checks, and a few more)."""
    if sparse_combiner != "sum":
        raise CannedError(f"`sparse_combiner` is {sparse_combiner!r}; sparse_combiner must be \"sum\" when "
                          "optimizer is a LinearSDCA object. Pass sparse_combiner='sum'.", field="sparse_combiner")
    if _loss_type(head) is None:
        what = f"{getattr(head, 'n_classes', '?')} classes" if hasattr(head, "n_classes") else type(head).__name__
        raise CannedError(f"the model has {what} (logits dimension {head.logits_dimension}); LinearSDCA cannot "
                          "be used in a multi-class setting, and regresses only a one-dimensional label. Use "
                          "n_classes=2, label_dimension=1, a BinaryClassHead or a RegressionHead, or a gradient "
                          "optimizer such as 'Ftrl'.", field="optimizer")
    if partitioner is not None:
        raise CannedError("`partitioner` is set; LinearSDCA trains unpartitioned weights (shard its example "
                          "state with num_table_shards instead). Pass partitioner=None.", field="partitioner")
    for column in columns:
        if not (_is_categorical(column) or hasattr(column, "get_dense_tensor")):
            raise CannedError(f"feature column {getattr(column, 'name', column)!r} is a TF1 column; V2 feature "
                              "columns required when optimizer is a LinearSDCA object. Use tf.feature_column.",
                              field="feature_columns")
        if not _is_categorical(column) and "embedding" in type(column).__name__.lower():
            raise CannedError(f"feature column {column.name!r} is an {type(column).__name__}; LinearSDCA does not "
                              "support column type embedding (its table would not train). Use the categorical "
                              "column itself.", field="feature_columns")


def _unique_ids(id_tensor: Any, weight_tensor: Any) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(example index, feature id, summed weight), each id once per example; out-of-vocabulary ids (< 0) dropped."""
    rows = id_tensor.indices[:, 0]
    ids = tf.cast(tf.reshape(id_tensor.values, [-1]), tf.int64)
    values = (tf.cast(weight_tensor.values, tf.float32) if weight_tensor is not None
              else tf.ones(tf.shape(ids), tf.float32))
    valid = ids >= 0
    rows, ids, values = (tf.boolean_mask(t, valid) for t in (rows, ids, values))
    width = tf.reduce_max(ids) + 1
    pairs, index = tf.unique(rows * width + ids)
    count = tf.shape(pairs)[0]
    first_rows = tf.math.unsorted_segment_min(rows, index, count)
    return first_rows, pairs - first_rows * width, tf.math.unsorted_segment_sum(values, index, count)


def _weight_var(name: str) -> Any:
    wanted = f"{v1.get_variable_scope().name}/linear/linear_model/{name}".lstrip("/")
    found = [v for v in v1.global_variables() if v.op.name == wanted]
    if not found:
        raise CannedError(f"LinearSDCA found no weights {wanted!r} for the linear model (a partitioned or shared "
                          "column?). Use one weight variable per column.", field="feature_columns")
    return found[0]


def _batch(features: Mapping[str, Any], columns: Sequence[Any], batch: tf.Tensor) -> tuple[Any, ...]:
    """The batch's sparse and dense inputs and the model weights each updates, columns in name order (TF's)."""
    cache = _FeatureCache(dict(features))
    sparse, sparse_vars, dense, dense_vars = [], [], [], []
    for column in sorted(columns, key=lambda c: c.name):
        if _is_categorical(column):
            pair = column.get_sparse_tensors(cache, None)
            sparse.append(_unique_ids(pair.id_tensor, pair.weight_tensor))
            sparse_vars.append(_weight_var(f"{column.name}/weights"))
            continue
        if column.variable_shape.ndims != 1:
            raise CannedError(f"feature column {column.name!r} has rank {column.variable_shape.ndims}, larger "
                              "than 1; LinearSDCA needs flat dense columns. Reshape it to one dimension.",
                              field="feature_columns")
        dense.append(tf.reshape(tf.cast(column.get_dense_tensor(cache, None), tf.float32), [batch, -1]))
        dense_vars.append(_weight_var(f"{column.name}/weights"))
    dense.append(tf.ones([batch, 1]))
    dense_vars.append(_weight_var("bias_weights"))
    return sparse, sparse_vars, dense, dense_vars


def _labels_and_weights(head: Any, features: Mapping[str, Any], labels: Any, logits: tf.Tensor) -> tuple[Any, Any]:
    if isinstance(head, CannedHead):
        processed = head.processed_labels(head.labels_tensor(labels, logits, TRAIN), logits)
        weights = head.weights(features)
    else:
        _, processed, _, weights = head._loss_and_weights(logits, labels, features)
    flat = tf.reshape(tf.cast(processed, tf.float32), [-1])
    if weights is None or not tf.is_tensor(weights):
        return flat, tf.ones_like(flat) * (1.0 if weights is None else float(weights))
    return flat, tf.reshape(tf.cast(weights, tf.float32), [-1])


def sdca_train_op(optimizer: LinearSDCA, *, head: Any, features: Mapping[str, Any], labels: Any,
                  logits: tf.Tensor, columns: Sequence[Any]) -> Callable[[tf.Tensor], Any]:
    """The ``train_op_fn`` of the linear model_fn when its optimizer is a ``LinearSDCA`` (the loss is not used)."""
    key = optimizer.example_id_column
    if key not in features:
        raise CannedError(f"LinearSDCA `example_id_column` is {key!r} but the features have no such key "
                          f"(keys: {sorted(features)}). Return one id per example under {key!r} from input_fn.",
                          field="example_id_column")
    ids = tf.reshape(features[key], [-1])
    if ids.dtype != tf.string:
        ids = tf.strings.as_string(ids)

    def train_op_fn(loss: tf.Tensor) -> Any:
        del loss  # SDCA minimises its own (dual) objective
        example_labels, example_weights = _labels_and_weights(head, features, labels, logits)
        sparse, sparse_vars, dense, dense_vars = _batch(features, columns, tf.shape(ids)[0])
        examples = _sdca_solver.Examples(ids=ids, labels=example_labels, weights=example_weights,
                                         sparse=sparse, dense=dense)
        return _sdca_solver.train_op(
            examples, sparse_vars=sparse_vars, dense_vars=dense_vars, loss_type=str(_loss_type(head)),
            l1=optimizer.symmetric_l1_regularization, l2=optimizer.symmetric_l2_regularization,
            num_loss_partitions=optimizer.num_loss_partitions, num_table_shards=optimizer.num_table_shards or 1,
            adaptive=optimizer.adaptive, global_step=v1.train.get_or_create_global_step())

    return train_op_fn
