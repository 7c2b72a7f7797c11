"""The three canned model_fns (DNN, linear, both combined), as plain TF1 graph code over a head.

Each returns ``make(**fields)``: an ``EstimatorSpec`` by default, or the
fields themselves when a test passes ``make=dict``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from toolkit._compat.tensorflow import distinct_row_updates
from toolkit.estimator.canned._errors import CannedError
from toolkit.estimator.canned._head_base import TRAIN, Head, make_spec
from toolkit.estimator.canned._nets import check_features, dnn_logits, linear_logits
from toolkit.estimator.canned.optimizers import get_optimizer
from toolkit.estimator.canned.sdca import LinearSDCA, sdca_train_op

__all__ = ["combined_model_fn", "dnn_model_fn", "linear_learning_rate", "linear_model_fn", "refuse_sync_replicas"]

v1 = tf.compat.v1
_LINEAR_LEARNING_RATE = 0.2            # TF's linear estimators, for an optimizer given by name
_COMBINED_DNN_LEARNING_RATE = 0.001    # TF's DNNLinearCombined*, dnn half
_COMBINED_LINEAR_LEARNING_RATE = 0.005  # TF's DNNLinearCombined*, linear half: min(0.005, 1/sqrt(#columns))


def linear_learning_rate(num_columns: int) -> float:
    return min(_COMBINED_LINEAR_LEARNING_RATE, 1.0 / num_columns ** 0.5)


def _spec(head: Any, make: Callable[..., Any], **fields: Any) -> Any:
    """The spec from a canned head (``build``) or from a public ``toolkit.estimator.Head``."""
    if isinstance(head, Head):
        return make(**head.build(**fields))
    return head.create_estimator_spec(**fields)


def _needed_columns(head: Any, mode: str, *groups: Sequence[Any]) -> list[Any]:
    columns = [c for group in groups for c in group]
    weight = getattr(head, "weight_column", None)
    if weight is not None and not isinstance(weight, str) and mode != "infer":
        columns.append(weight)
    return columns


def _minimize(optimizer: Any, loss: tf.Tensor, var_list: list[Any], *, global_step: Any) -> Any:
    update_ops = v1.get_collection(v1.GraphKeys.UPDATE_OPS)
    with tf.control_dependencies(update_ops):
        # gradients next to their forward ops: a ps's packed lookup gets its rows' gradient as one tensor
        # and splits it there (canned._fast_columns); a Keras optimizer computes its own gradients
        colocate = {"colocate_gradients_with_ops": True} if isinstance(optimizer, v1.train.Optimizer) else {}
        # a packed part's gradient holds each of its rows once: no Unique and segment sum per part
        distinct_row_updates()
        return optimizer.minimize(loss, global_step=global_step, var_list=var_list or None, **colocate)


def _scope_vars(scope: str) -> list[Any]:
    return v1.get_collection(v1.GraphKeys.TRAINABLE_VARIABLES, scope=scope)


def dnn_model_fn(features: Any, labels: Any, mode: str, *, head: Any, hidden_units: Sequence[int],
                 feature_columns: Sequence[Any], optimizer: Any, activation_fn: Callable[..., Any],
                 dropout: float | None, batch_norm: bool, make: Callable[..., Any] = make_spec,
                 name_learning_rate: float | None = None, input_layer_partitioner: Any = None) -> Any:
    """``name_learning_rate``: the rate for an optimizer given by name (None: Keras' default, TF 2's choice)."""
    features = check_features(features, _needed_columns(head, mode, feature_columns))
    logits = dnn_logits(features, mode, units=head.logits_dimension, hidden_units=hidden_units,
                        feature_columns=feature_columns, activation_fn=activation_fn, dropout=dropout,
                        batch_norm=batch_norm, input_layer_partitioner=input_layer_partitioner)

    def train_op_fn(loss: tf.Tensor) -> Any:
        opt = get_optimizer("optimizer", optimizer, learning_rate=name_learning_rate)
        return _minimize(opt, loss, _scope_vars("dnn"), global_step=v1.train.get_or_create_global_step())

    return _spec(head, make, features=features, mode=mode, logits=logits, labels=labels,
                 train_op_fn=train_op_fn if mode == TRAIN else None)


def linear_model_fn(features: Any, labels: Any, mode: str, *, head: Any, feature_columns: Sequence[Any],
                    optimizer: Any, sparse_combiner: str, make: Callable[..., Any] = make_spec,
                    partitioner: Any = None) -> Any:
    features = check_features(features, _needed_columns(head, mode, feature_columns))
    logits = linear_logits(features, units=head.logits_dimension, feature_columns=feature_columns,
                           sparse_combiner=sparse_combiner, partitioner=partitioner)

    def train_op_fn(loss: tf.Tensor) -> Any:
        opt = get_optimizer("optimizer", optimizer, learning_rate=_LINEAR_LEARNING_RATE)
        return _minimize(opt, loss, _scope_vars("linear"), global_step=v1.train.get_or_create_global_step())

    train: Callable[[tf.Tensor], Any] | None = train_op_fn if mode == TRAIN else None
    if isinstance(optimizer, LinearSDCA) and mode == TRAIN:
        train = sdca_train_op(optimizer, head=head, features=features, labels=labels, logits=logits,
                              columns=feature_columns)
    return _spec(head, make, features=features, mode=mode, logits=logits, labels=labels, train_op_fn=train)


def combined_model_fn(features: Any, labels: Any, mode: str, *, head: Any, linear_feature_columns: Sequence[Any],
                      linear_optimizer: Any, dnn_feature_columns: Sequence[Any], dnn_optimizer: Any,
                      dnn_hidden_units: Sequence[int] | None, dnn_activation_fn: Callable[..., Any],
                      dnn_dropout: float | None, batch_norm: bool, linear_sparse_combiner: str,
                      make: Callable[..., Any] = make_spec, input_layer_partitioner: Any = None) -> Any:
    """Wide & deep: the sum of both logits; each half trained by its own optimizer, one global step per batch."""
    features = check_features(features, _needed_columns(head, mode, linear_feature_columns, dnn_feature_columns))
    parts = []
    if dnn_feature_columns:
        parts.append(dnn_logits(features, mode, units=head.logits_dimension, hidden_units=dnn_hidden_units or (),
                                feature_columns=dnn_feature_columns, activation_fn=dnn_activation_fn,
                                dropout=dnn_dropout, batch_norm=batch_norm,
                                input_layer_partitioner=input_layer_partitioner))
    if linear_feature_columns:
        linear = linear_logits(features, units=head.logits_dimension, feature_columns=linear_feature_columns,
                               sparse_combiner=linear_sparse_combiner, partitioner=input_layer_partitioner)
        v1.summary.scalar("linear/fraction_of_zero_values", tf.math.zero_fraction(linear))
        parts.append(linear)
    logits = tf.add_n(parts) if len(parts) > 1 else parts[0]

    def train_op_fn(loss: tf.Tensor) -> Any:
        global_step = v1.train.get_or_create_global_step()
        ops = []
        if dnn_feature_columns:
            opt = get_optimizer("dnn_optimizer", dnn_optimizer, learning_rate=_COMBINED_DNN_LEARNING_RATE)
            refuse_sync_replicas("dnn_optimizer", opt)
            ops.append(_minimize(opt, loss, _scope_vars("dnn"), global_step=None))
        if linear_feature_columns:
            opt = get_optimizer("linear_optimizer", linear_optimizer,
                                learning_rate=linear_learning_rate(len(linear_feature_columns)))
            refuse_sync_replicas("linear_optimizer", opt)
            ops.append(_minimize(opt, loss, _scope_vars("linear"), global_step=None))
        with tf.control_dependencies([tf.group(*ops)]):
            return v1.assign_add(global_step, 1).op

    return _spec(head, make, features=features, mode=mode, logits=logits, labels=labels,
                 train_op_fn=train_op_fn if mode == TRAIN else None)


def refuse_sync_replicas(field: str, optimizer: Any) -> None:
    if isinstance(optimizer, v1.train.SyncReplicasOptimizer):
        raise CannedError(f"`{field}` is a SyncReplicasOptimizer; a combined model trains with two "
                          "optimizers and SyncReplicasOptimizer supports one (as in TF). Use DNN* or Linear* "
                          "estimators for synchronous training.", field=field)
