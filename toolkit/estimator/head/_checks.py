"""What every head checks and shares: labels, logits and weights shapes, the loss reduction, the train op.

TF 2's heads run both in a ``tf.Graph`` (inside an Estimator's model_fn) and
eagerly (a custom training loop). A shape known when the op is built is
checked at once (a ``HeadError``); a shape only known when the graph runs is
checked by an assert op whose message carries the same words and the shapes
it saw (``[expected_labels_shape: ] [2 1] [labels_shape: ] [2 2]``), as TF's
heads did, so code that matched TF's messages keeps matching.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from toolkit.estimator.estimator import EstimatorError

__all__ = [
    "HeadError",
    "HeadTypeError",
    "SUM",
    "SUM_OVER_BATCH_SIZE",
    "call_loss_fn",
    "check_label_range",
    "check_labels",
    "check_logits",
    "check_loss_fn",
    "check_loss_reduction",
    "reduce_loss",
    "train_op",
    "weights_of",
]

v1 = tf.compat.v1
SUM = "sum"
SUM_OVER_BATCH_SIZE = "sum_over_batch_size"
_REDUCTIONS = ("auto", SUM, SUM_OVER_BATCH_SIZE)


class HeadError(EstimatorError):
    """A head's argument, or the labels, logits or weights it was given, is invalid; ``.field`` names it."""


class HeadTypeError(HeadError, TypeError):
    """An argument of the wrong type (TF raised ``TypeError`` here)."""


def check_loss_reduction(loss_reduction: Any) -> None:
    if loss_reduction not in _REDUCTIONS:
        raise HeadError(f"Invalid loss_reduction: {loss_reduction}. `loss_reduction` must be one of "
                        f"tf.losses.Reduction {list(_REDUCTIONS)} (NONE is not allowed: a head returns a scalar "
                        "loss). See `tf.losses.Reduction` for valid options.", field="loss_reduction")


def _arg_names(fn: Callable[..., Any]) -> tuple[str, ...]:
    params = inspect.signature(fn).parameters.values()
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def check_loss_fn(loss_fn: Callable[..., Any]) -> None:
    """TF's rule: ``labels`` and ``logits`` are required, ``features`` and ``loss_reduction`` allowed."""
    names = _arg_names(loss_fn)
    for required in ("labels", "logits"):
        if required not in names:
            raise HeadError(f"loss_fn must contain argument: {required}. Given arguments: {names}. Define "
                            "loss_fn(labels, logits, features=None).", field="loss_fn")
    unexpected = [n for n in names if n not in ("labels", "logits", "features", "loss_reduction")]
    if unexpected:
        raise HeadError(f"loss_fn has unexpected args: {unexpected}. loss_fn may take only labels, logits, "
                        "features and loss_reduction; remove the others.", field="loss_fn")


def call_loss_fn(loss_fn: Callable[..., Any], labels: tf.Tensor, logits: tf.Tensor, features: Any,
                 expected_dim: int) -> tf.Tensor:
    """The user's per-example loss, checked to have the shape ``[D0, ... DN, expected_dim]``."""
    kwargs = {"features": features} if "features" in _arg_names(loss_fn) else {}
    loss = tf.convert_to_tensor(loss_fn(labels=labels, logits=logits, **kwargs))
    what = f"loss_fn must return Tensor of shape [D0, D1, ... DN, {expected_dim}]. "
    if tf.executing_eagerly():
        expected = tuple(logits.shape[:-1]) + (expected_dim,)
        if tuple(loss.shape) != expected:
            raise HeadError(f"{what}Received: logits_shape: {tuple(logits.shape)}, loss_shape: "
                            f"{tuple(loss.shape)}. Return one loss per example (and per label dimension).",
                            field="loss_fn")
        return loss
    logits_shape = tf.shape(logits, name="logits_shape")
    expected = tf.concat([logits_shape[:-1], [expected_dim]], axis=0, name="expected_loss_shape")
    loss_shape = tf.shape(loss, name="loss_shape")
    check = tf.debugging.Assert(tf.reduce_all(tf.equal(loss_shape, expected)),
                                [what, "logits_shape: ", logits_shape, "loss_shape: ", loss_shape],
                                name="check_loss_shape")
    with tf.control_dependencies([check]):
        return tf.identity(loss)


def check_logits(logits: Any, dimension: int) -> tf.Tensor:
    """Float32 logits of shape ``[D0, ... DN, dimension]``."""
    logits = tf.cast(logits, tf.float32)
    what = "logits shape must be [D0, D1, ... DN, logits_dimension]"
    shape = logits.shape
    if shape.rank is not None:
        if shape.rank < 2:
            raise HeadError(f"{what} (logits_dimension={dimension}), got {tuple(shape)} (rank {shape.rank}). "
                            "Give logits a last dimension, e.g. tf.expand_dims(logits, -1).", field="logits")
        static = isinstance(dimension, int)
        if static and shape[-1] is not None and shape[-1] != dimension:
            raise HeadError(f"{what} (logits_dimension={dimension}), got {tuple(shape)}. Build the last layer "
                            "with head.logits_dimension units.", field="logits")
        if static and shape[-1] is not None:
            return logits
    if tf.executing_eagerly():
        return logits
    dynamic = tf.shape(logits)
    rank_check = v1.debugging.assert_rank_at_least(logits, 2, data=[dynamic], message=what)
    with tf.control_dependencies([rank_check]):
        dim_check = v1.debugging.assert_equal(dimension, tf.shape(logits)[-1], data=[dynamic], message=what)
    with tf.control_dependencies([dim_check]):
        return tf.identity(logits)


def check_labels(labels: Any, logits: tf.Tensor, dimension: int) -> tf.Tensor:
    """Dense labels of shape ``logits.shape[:-1] + [dimension]`` (``[D0, ... DN]`` gains the last axis)."""
    if labels is None:
        raise HeadError("You must provide a labels Tensor. Given: None. Check that your input_fn returns "
                        "(features, labels) and that your data holds the label.", field="labels")
    labels = v1.convert_to_tensor_or_sparse_tensor(labels)
    if isinstance(labels, tf.SparseTensor):
        raise HeadError(f"SparseTensor labels are not supported. Labels must be a Tensor of shape "
                        f"[D0, D1, ... DN, {dimension}]; convert them in input_fn with tf.sparse.to_dense(labels).",
                        field="labels")
    what = f"labels shape must be [D0, D1, ... DN, {dimension}]"
    if labels.shape.rank is not None and logits.shape.rank is not None and labels.shape.rank == logits.shape.rank - 1:
        labels = tf.expand_dims(labels, -1)
    last = labels.shape[-1] if labels.shape.rank else None
    if last is not None and last != dimension:
        raise HeadError(f"Mismatched label shape. Expected labels dimension={dimension}. Received {last} (labels "
                        f"of shape {tuple(labels.shape)}). Check n_classes / label_dimension and the shape of the "
                        "labels input_fn returns.", field="labels")
    if tf.executing_eagerly():
        expected = tuple(logits.shape[:-1]) + (dimension,)
        if labels.shape.rank is None or labels.shape.rank < 2 or tuple(labels.shape) != expected:
            raise HeadError(f"{what}, expected_labels_shape: {expected}. labels_shape: {tuple(labels.shape)}. "
                            "Return one label row per logits row.", field="labels")
        return labels
    rank_check = v1.debugging.assert_rank_at_least(labels, 2, message=what)
    with tf.control_dependencies([rank_check]):
        expected = tf.concat([tf.shape(logits)[:-1], [dimension]], axis=0)
        actual = tf.shape(labels)
        check = v1.debugging.assert_equal(expected, actual, message=what,
                                          data=["expected_labels_shape: ", expected, "labels_shape: ", actual])
    with tf.control_dependencies([check]):
        return tf.identity(labels)


def check_label_range(labels: tf.Tensor, n_classes: int, message: str | None = None) -> tf.Tensor:
    """Labels in ``[0, n_classes - 1]``: checked now when eager, by assert ops in a graph."""
    if tf.executing_eagerly():
        if not bool(tf.reduce_all(labels <= n_classes - 1)):
            raise HeadError(message or f"Labels must be <= {n_classes} - 1 (n_classes={n_classes}); received "
                            f"{labels.numpy().ravel().tolist()[:8]}. Fix the data or n_classes.", field="labels")
        if not bool(tf.reduce_all(labels >= 0)):
            raise HeadError(message or f"Labels must be >= 0; received {labels.numpy().ravel().tolist()[:8]} "
                            "(a label outside label_vocabulary maps to -1). Fix the data or the vocabulary.",
                            field="labels")
        return labels
    below = v1.debugging.assert_less_equal(labels, tf.cast(n_classes - 1, labels.dtype),
                                           message=message or "Labels must be <= n_classes - 1")
    above = v1.debugging.assert_non_negative(labels, message=message or "Labels must be >= 0")
    with tf.control_dependencies([below, above]):
        return tf.identity(labels)


def _weight_tensor(features: Mapping[str, Any], column: Any) -> tf.Tensor:
    if isinstance(column, str):
        key, normalizer = column, None
    elif type(column).__name__ == "NumericColumn" and hasattr(column, "key"):
        key, normalizer = column.key, column.normalizer_fn
    else:
        raise HeadTypeError(f"Weight column must be either a string or NumericColumn. Given type: "
                            f"{type(column)}. Pass weight_column='name' or tf.feature_column.numeric_column('name').",
                            field="weight_column")
    if features is None or key not in features:
        keys = sorted(features) if isinstance(features, Mapping) else features
        raise HeadError(f"weight_column is {key!r} but the features have no such key (keys: {keys}). Add the "
                        "weights to the features input_fn returns.", field="weight_column")
    weights = v1.convert_to_tensor_or_sparse_tensor(features[key])
    if isinstance(weights, tf.SparseTensor):
        raise HeadError(f"weight_column {key!r} is a SparseTensor; weights must be dense. Convert with "
                        "tf.sparse.to_dense in input_fn.", field="weight_column")
    if normalizer is not None:
        weights = normalizer(weights)
    if not (weights.dtype.is_floating or weights.dtype.is_integer):
        raise HeadError(f"Weight column should be castable to float. Given dtype: {weights.dtype}. Feed numbers "
                        f"as weight_column {key!r}.", field="weight_column")
    return tf.cast(weights, tf.float32, name="weights")


def weights_of(features: Any, weight_column: Any, logits: tf.Tensor, *, per_logit: bool = False) -> Any:
    """Weights of shape ``[D0, ... DN, 1]`` (or ``[..., logits_dimension]`` when ``per_logit``); 1. without."""
    if weight_column is None:
        return 1.0
    weights = _weight_tensor(features, weight_column)
    what = ("weights shape must be [D0, D1, ... DN], [D0, D1, ... DN, 1] or [D0, D1, ... DN, logits_dimension]"
            if per_logit else "weights shape must be [D0, D1, ... DN] or [D0, D1, ... DN, 1]")
    one_less = (weights.shape.rank is not None and logits.shape.rank is not None
                and weights.shape.rank == logits.shape.rank - 1)
    if tf.executing_eagerly():
        w_shape, l_shape = tuple(weights.shape), tuple(logits.shape)
        allowed = [l_shape[:-1]] if one_less else [l_shape[:-1] + (1,)] + ([l_shape] if per_logit else [])
        if w_shape not in allowed:
            raise HeadError(f"{what}, logits_shape: {l_shape}. weights_shape: {w_shape}. Give one weight per "
                            "example.", field="weight_column")
        return tf.expand_dims(weights, -1) if one_less else weights
    w_shape, l_shape = tf.shape(weights, name="weights_shape"), tf.shape(logits, name="logits_shape")
    data = ["logits_shape: ", l_shape, "weights_shape: ", w_shape]
    if one_less:
        check = v1.debugging.assert_equal(l_shape[:-1], w_shape, message=what, data=data)
        with tf.control_dependencies([check]):
            return tf.expand_dims(weights, -1)
    supported = tf.concat([l_shape[:-1], [1]], axis=0)

    ok = _same(supported, w_shape)
    if per_logit:
        ok = tf.logical_or(ok, _same(l_shape, w_shape))
    check = tf.debugging.Assert(ok, [what, *data])
    with tf.control_dependencies([check]):
        return tf.identity(weights)


def _same(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """Two shape vectors are equal (False, not an error, when their ranks differ)."""
    return tf.cond(tf.equal(tf.size(a), tf.size(b)), lambda: tf.reduce_all(tf.equal(a, b)),
                   lambda: tf.constant(False))


def reduce_loss(unweighted: tf.Tensor, weights: Any, reduction: str) -> tf.Tensor:
    """Keras' reduction: the weighted sum, divided by the number of loss values unless ``SUM``."""
    weighted = tf.multiply(unweighted, tf.cast(weights, unweighted.dtype))
    if isinstance(weights, tf.Tensor):
        weighted = weighted * tf.ones_like(unweighted)
    total = tf.reduce_sum(weighted)
    if reduction == SUM:
        return total
    return tf.math.divide_no_nan(total, tf.cast(tf.size(weighted), total.dtype), name="value")


def regularized(loss: tf.Tensor, regularization_losses: Sequence[Any] | None) -> tf.Tensor:
    if regularization_losses is None:
        return loss
    return loss + tf.math.add_n(list(regularization_losses))


def _check_sequence(name: str, value: Any) -> None:
    if not isinstance(value, (list, tuple)):
        raise HeadError(f"{name} should be a list or a tuple. Given type: {type(value)}. Pass a list.", field=name)


def train_op(*, loss: tf.Tensor, optimizer: Any, trainable_variables: Any, train_op_fn: Any,
             update_ops: Any, loss_reduction: str) -> Any:
    """TF's rule: exactly one of ``optimizer`` (with ``trainable_variables``) and ``train_op_fn``."""
    if update_ops is not None:
        _check_sequence("update_ops", update_ops)
    with v1.name_scope(None), v1.name_scope("training"):
        if optimizer is not None:
            if train_op_fn is not None:
                raise HeadError("train_op_fn and optimizer cannot both be set. Pass one of them.", field="optimizer")
            if not (hasattr(optimizer, "get_updates") or hasattr(optimizer, "apply_gradients")):
                raise HeadError(f"The given optimizer is not a tf.keras.optimizers.Optimizer instance. Given: "
                                f"{optimizer!r}. Pass e.g. tf.keras.optimizers.Adagrad(0.1).", field="optimizer")
            if trainable_variables is None:
                raise HeadError("trainable_variables cannot be None. Given None; pass the model's variables, "
                                "e.g. trainable_variables=model.trainable_variables.", field="trainable_variables")
            _check_sequence("trainable_variables", trainable_variables)
            if loss_reduction == SUM_OVER_BATCH_SIZE:
                replicas = tf.distribute.get_strategy().num_replicas_in_sync
                if replicas > 1:
                    loss = loss * (1.0 / replicas)
            op = _optimizer_updates(optimizer, loss, list(trainable_variables))
        elif train_op_fn is not None:
            op = train_op_fn(loss)
        else:
            raise HeadError("train_op_fn and optimizer cannot both be None in mode 'train'. Pass optimizer= (with "
                            "trainable_variables=) or train_op_fn=.", field="optimizer")
        if update_ops is not None:
            op = tf.group(op, *update_ops)
        return op


def _optimizer_updates(optimizer: Any, loss: tf.Tensor, variables: list[Any]) -> Any:
    """``optimizer.get_updates`` as TF 2's heads called it; other Keras optimizers train as their v1 twin."""
    if hasattr(optimizer, "get_updates"):
        return optimizer.get_updates(loss, variables)[0]
    from toolkit.estimator.canned.optimizers import check_optimizer, get_optimizer
    resolved = get_optimizer("optimizer", check_optimizer("optimizer", optimizer), learning_rate=None)
    return resolved.minimize(loss, var_list=variables)


def write_summaries(loss: tf.Tensor, regularization_losses: Sequence[Any] | None,
                    key: Callable[[str], str]) -> None:
    if tf.executing_eagerly():
        return
    with v1.name_scope(None):
        v1.summary.scalar(key("loss"), loss)
        if regularization_losses is not None:
            v1.summary.scalar(key("regularization_loss"), tf.math.add_n(list(regularization_losses)))
