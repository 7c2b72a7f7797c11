"""The two logit builders: a feed-forward net over ``input_layer``, and ``linear_model``.

Variables carry TF's canned names (``dnn/hiddenlayer_0/kernel``,
``dnn/logits/bias``, ``linear/linear_model/<column>/weights``,
``linear/linear_model/bias_weights``) so ``get_variable_value`` and
warm-starting read the same names TF's estimators wrote.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from toolkit._compat.tensorflow import parse_example_spec
from toolkit.estimator.canned._errors import CannedError
from toolkit.estimator.canned._fast_columns import fast_input_layer, fast_linear_logits

__all__ = ["check_features", "dnn_logits", "linear_logits"]

v1 = tf.compat.v1
_TRAIN = "train"


def _raw_keys(column: Any) -> set[str]:
    return set(parse_example_spec(column))


def check_features(features: Any, columns: Sequence[Any]) -> Mapping[str, Any]:
    """Refuses non-dict features and names the feature keys the columns need but did not get."""
    if not isinstance(features, Mapping):
        kind = "a single Tensor" if tf.is_tensor(features) else type(features).__name__
        raise CannedError(f"input_fn returned features as {kind}; canned estimators "
                          "read features by name through feature columns. Return a dict {name: tensor}, "
                          "e.g. ({'x': x}, labels).", field="features")
    needed = set().union(*(_raw_keys(c) for c in columns)) if columns else set()
    missing = sorted(needed - set(features))
    if missing:
        raise CannedError(f"the feature columns need feature(s) {missing} but input_fn returned only "
                          f"{sorted(features)}. Add them to the features dict, or drop their columns.",
                          field="features")
    return features


def _dense(net: tf.Tensor, units: int, activation: Callable[..., Any] | None, scope: str) -> tf.Tensor:
    with v1.variable_scope(scope):
        kernel = v1.get_variable("kernel", [net.shape[-1], units], initializer=v1.glorot_uniform_initializer())
        bias = v1.get_variable("bias", [units], initializer=v1.zeros_initializer())
        out = tf.nn.bias_add(tf.matmul(net, kernel), bias)
        return activation(out) if activation is not None else out


def _batch_norm(net: tf.Tensor, *, training: bool, scope: str, momentum: float = 0.999,
                epsilon: float = 1e-3) -> tf.Tensor:
    """Batch normalisation as TF's DNN used it (momentum 0.999); moving averages update through UPDATE_OPS."""
    size = net.shape[-1]
    with v1.variable_scope(scope):
        gamma = v1.get_variable("gamma", [size], initializer=v1.ones_initializer())
        beta = v1.get_variable("beta", [size], initializer=v1.zeros_initializer())
        moving_mean = v1.get_variable("moving_mean", [size], initializer=v1.zeros_initializer(), trainable=False)
        moving_var = v1.get_variable("moving_variance", [size], initializer=v1.ones_initializer(), trainable=False)
        if training:
            mean, var = tf.nn.moments(net, axes=[0])
            for moving, value in ((moving_mean, mean), (moving_var, var)):
                v1.add_to_collection(v1.GraphKeys.UPDATE_OPS,
                                     v1.assign_sub(moving, (moving - value) * (1.0 - momentum)))
        else:
            mean, var = moving_mean, moving_var
        return tf.nn.batch_normalization(net, mean, var, beta, gamma, epsilon)


def _layer_summary(value: tf.Tensor, tag: str) -> None:
    v1.summary.scalar(f"{tag}/fraction_of_zero_values", tf.math.zero_fraction(value))
    v1.summary.histogram(f"{tag}/activation", value)


def dnn_logits(features: Mapping[str, Any], mode: str, *, units: int, hidden_units: Sequence[int],
               feature_columns: Sequence[Any], activation_fn: Callable[..., Any], dropout: float | None,
               batch_norm: bool, input_layer_partitioner: Any = None) -> tf.Tensor:
    """Logits ``[batch, units]`` of the DNN, built under variable scope ``dnn``."""
    training = mode == _TRAIN
    with v1.variable_scope("dnn"):
        with v1.variable_scope("input_from_feature_columns", partitioner=input_layer_partitioner):
            net = fast_input_layer(features, feature_columns)
        for i, width in enumerate(hidden_units):
            net = _dense(net, width, activation_fn, f"hiddenlayer_{i}")
            if dropout is not None and training:
                net = tf.nn.dropout(net, rate=dropout)
            if batch_norm:
                net = _batch_norm(net, training=training, scope=f"batchnorm_{i}")
            _layer_summary(net, f"hiddenlayer_{i}")  # under the dnn scope: dnn/hiddenlayer_0/..., as TF
        logits = _dense(net, units, None, "logits")
        _layer_summary(logits, "logits")
        return logits


def linear_logits(features: Mapping[str, Any], *, units: int, feature_columns: Sequence[Any],
                  sparse_combiner: str, partitioner: Any = None) -> tf.Tensor:
    """Logits ``[batch, units]`` of the linear model, built under variable scope ``linear``."""
    with v1.variable_scope("linear", partitioner=partitioner):
        logits = fast_linear_logits(features, feature_columns, units=units, sparse_combiner=sparse_combiner)
        bias = [v for v in v1.global_variables() if v.op.name.endswith("linear_model/bias_weights")
                and v.op.name.startswith(v1.get_variable_scope().name)]
        if bias and units == 1:
            v1.summary.scalar("bias", bias[-1][0])
        elif bias:
            v1.summary.histogram("bias", bias[-1])
        return logits
