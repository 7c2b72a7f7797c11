"""tf.estimator's small public helpers around the canned estimators.

* ``classifier_parse_example_spec`` / ``regressor_parse_example_spec``: the
  ``tf.io.parse_example`` spec of the feature columns plus the label (and the
  weight column), for an input_fn reading ``tf.train.Example`` records.
* ``VocabInfo``: how to warm-start an embedding or linear weight whose
  vocabulary changed (``tf.compat.v1.train.VocabInfo``, checked here: a
  missing vocabulary file is refused when the VocabInfo is made, not minutes
  into warm-starting).
* ``dnn_logit_fn_builder`` / ``linear_logit_fn_builder`` (TF1's
  ``tf.compat.v1.estimator.experimental``) build the canned networks' logits
  inside your own model_fn; ``call_logit_fn`` calls a logit_fn with the
  arguments it takes.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import tensorflow as tf

from toolkit._compat.tensorflow import parse_example_spec
from toolkit.estimator.canned import _args
from toolkit.estimator.canned._errors import CannedError
from toolkit.estimator.canned._nets import dnn_logits

__all__ = [
    "VocabInfo",
    "call_logit_fn",
    "classifier_parse_example_spec",
    "dnn_logit_fn_builder",
    "linear_logit_fn_builder",
    "regressor_parse_example_spec",
]


def _spec_with_label(feature_columns: Iterable[Any], label_key: str, label: Any, weight_column: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for column in feature_columns:
        spec.update(parse_example_spec(column))
    if label_key in spec:
        raise CannedError(f"label should not be used as feature. label_key: {label_key!r}, features: {sorted(spec)}. "
                          "Rename the label or drop the column that parses it.", field="label_key")
    spec[label_key] = label
    if weight_column is None:
        return spec
    if isinstance(weight_column, str):
        weight_column = tf.feature_column.numeric_column(weight_column)
    if type(weight_column).__name__ not in ("NumericColumn", "_NumericColumn"):
        raise CannedError(f"weight_column should be an instance of tf.feature_column.numeric_column. Given type: "
                          f"{type(weight_column)} value: {weight_column!r}.", field="weight_column")
    spec.update(parse_example_spec(weight_column))
    return spec


def classifier_parse_example_spec(feature_columns: Iterable[Any], label_key: str, label_dtype: Any = tf.int64,
                                  label_default: Any = None, weight_column: Any = None) -> dict[str, Any]:
    """The parse spec of ``feature_columns`` plus a ``[1]``-shaped label (and the weight column).

    Example:
        >>> spec = classifier_parse_example_spec([tf.feature_column.numeric_column("x")], label_key="y")
        >>> sorted(spec)
        ['x', 'y']
    """
    return _spec_with_label(feature_columns, label_key, tf.io.FixedLenFeature((1,), label_dtype, label_default),
                            weight_column)


def regressor_parse_example_spec(feature_columns: Iterable[Any], label_key: str, label_dtype: Any = tf.float32,
                                 label_default: Any = None, label_dimension: int = 1,
                                 weight_column: Any = None) -> dict[str, Any]:
    """The parse spec of ``feature_columns`` plus a ``[label_dimension]``-shaped label (and the weight column)."""
    return _spec_with_label(feature_columns, label_key,
                            tf.io.FixedLenFeature((label_dimension,), label_dtype, label_default), weight_column)


class VocabInfo(tf.compat.v1.train.VocabInfo):
    """``tf.estimator.VocabInfo`` whose vocabulary files are checked when it is made."""

    def __new__(cls, new_vocab: str, new_vocab_size: int, num_oov_buckets: int, old_vocab: str,
                old_vocab_size: int = -1, backup_initializer: Any = None, axis: int = 0) -> VocabInfo:
        for field, path in (("new_vocab", new_vocab), ("old_vocab", old_vocab)):
            if not isinstance(path, str) or not tf.io.gfile.exists(path):
                raise CannedError(f"VocabInfo `{field}` is {path!r}, which is not an existing vocabulary file; "
                                  "expected the path of a file with one vocabulary entry per line. Fix the path.",
                                  field=field)
        if axis not in (0, 1):
            raise CannedError(f"VocabInfo `axis` is {axis!r}; expected 0 (an embedding's rows) or 1 (a layer's "
                              "columns).", field="axis")
        return super().__new__(cls, new_vocab, new_vocab_size, num_oov_buckets, old_vocab, old_vocab_size,
                               backup_initializer, axis)


def dnn_logit_fn_builder(units: int, hidden_units: Iterable[int], feature_columns: Iterable[Any],
                         activation_fn: Callable[..., Any], dropout: float | None, input_layer_partitioner: Any,
                         batch_norm: bool) -> Callable[[Any, str], tf.Tensor]:
    """A ``logit_fn(features, mode)`` building DNNClassifier's network (scope ``dnn``) with ``units`` logits."""
    units = _args.check_label_dimension(units)
    hidden = _args.check_hidden_units("hidden_units", hidden_units)
    columns = _args.check_feature_columns("feature_columns", feature_columns, dense=True)
    dropout = _args.check_dropout("dropout", dropout)

    def dnn_logit_fn(features: Any, mode: str) -> tf.Tensor:
        return dnn_logits(features, mode, units=units, hidden_units=hidden, feature_columns=columns,
                          activation_fn=activation_fn, dropout=dropout, batch_norm=bool(batch_norm),
                          input_layer_partitioner=input_layer_partitioner)

    return dnn_logit_fn


def linear_logit_fn_builder(units: int, feature_columns: Iterable[Any],
                            sparse_combiner: str = "sum") -> Callable[[Any], tf.Tensor]:
    """A ``logit_fn(features)`` building LinearClassifier's model (``linear_model/...``) with ``units`` logits."""
    units = _args.check_label_dimension(units)
    columns = _args.check_feature_columns("feature_columns", feature_columns, dense=False)
    combiner = _args.check_sparse_combiner("sparse_combiner", sparse_combiner)

    def linear_logit_fn(features: Any) -> tf.Tensor:
        # TF's builder made the variables at the caller's scope (linear_model/...); the estimator adds 'linear'
        return tf.compat.v1.feature_column.linear_model(dict(features), list(columns), units=units,
                                                         sparse_combiner=combiner)

    return linear_logit_fn


def call_logit_fn(logit_fn: Callable[..., Any], features: Any, mode: str, params: Any, config: Any) -> Any:
    """Calls ``logit_fn`` with those of ``mode``, ``params`` and ``config`` it takes; checks what it returns."""
    names = inspect.signature(logit_fn).parameters
    offered = {"mode": mode, "params": params, "config": config}
    kwargs = {k: v for k, v in offered.items() if k in names}
    logits = logit_fn(features=features, **kwargs)
    values = logits.values() if isinstance(logits, Mapping) else [logits]
    if not all(isinstance(v, tf.Tensor) for v in values) or (isinstance(logits, Mapping)
                                                             and not all(isinstance(k, str) for k in logits)):
        raise CannedError(f"logit_fn should return a Tensor or a dictionary mapping strings to Tensors. logit_fn "
                          f"returned: {logits!r}. Return the logits tensor (or {{name: tensor}}).", field="logit_fn")
    return logits
