"""Feature columns as boosted trees read them: one small integer (a bucket id) per feature dimension.

As upstream's boosted trees, columns are sorted by name and flattened into
*feature ids*: a numeric column of shape ``(d,)`` gives ``d`` float features,
each bucketized by the quantile boundaries learned from the first
``n_batches_per_layer`` batches; a bucketized column gives one feature (its
bucket id); an indicator column over ``k`` categories gives ``k`` 0/1 features.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from toolkit.estimator.canned._errors import CannedError

__all__ = ["Layout", "bucket_ids", "check_columns", "float_features", "float_values", "layout"]

v1 = tf.compat.v1
NUMERIC, BUCKETIZED, INDICATOR = "numeric", "bucketized", "indicator"
_KINDS = {"NumericColumn": NUMERIC, "BucketizedColumn": BUCKETIZED, "IndicatorColumn": INDICATOR}


def kind_of(column: Any) -> str | None:
    return _KINDS.get(type(column).__name__.lstrip("_"))


def width(column: Any) -> int:
    """How many feature ids the column takes."""
    kind = kind_of(column)
    if kind == INDICATOR:
        return int(column.categorical_column.num_buckets)
    if kind == NUMERIC:
        return int(column.shape[0]) if column.shape else 1
    return 1


def check_columns(columns: Sequence[Any]) -> tuple[Any, ...]:
    """The columns sorted by name; refuses what the trees cannot split on, naming the column."""
    for i, column in enumerate(columns):
        kind = kind_of(column)
        if kind is None:
            raise CannedError(f"`feature_columns[{i}]` is {type(column).__name__} {getattr(column, 'name', column)!r}; "
                              "boosted trees take numeric_column, bucketized_column and indicator_column. Wrap a "
                              "categorical column: tf.feature_column.indicator_column(col).", field="feature_columns")
        if kind == NUMERIC and len(column.shape) > 1:
            raise CannedError(f"numeric column {column.name!r} has shape {column.shape}; boosted trees take columns "
                              "of rank 1 (shape (d,)). Reshape the feature or split it into columns.",
                              field="feature_columns")
        if kind == BUCKETIZED and width(column.source_column) != 1:
            raise CannedError(f"bucketized column {column.name!r} is over a source of shape "
                              f"{column.source_column.shape}; boosted trees take bucketized columns of one value. "
                              "Bucketize each dimension in its own column.", field="feature_columns")
    return tuple(sorted(columns, key=lambda c: c.name))


def float_features(columns: Sequence[Any]) -> list[Any]:
    return [c for c in columns if kind_of(c) == NUMERIC]


@dataclass(frozen=True)
class Layout:
    """The flattened features: their count, each one's column name, and the most buckets any has."""

    n_features: int
    n_floats: int
    names: tuple[str, ...]
    n_buckets: int


def layout(columns: Sequence[Any], num_quantiles: int) -> Layout:
    """Numeric features take ``num_quantiles`` buckets, indicators 2, bucketized columns len(boundaries) + 1."""
    names: list[str] = []
    n_buckets = 2
    for column in columns:
        kind = kind_of(column)
        names.extend([column.categorical_column.name if kind == INDICATOR else column.name] * width(column))
        if kind == BUCKETIZED:
            n_buckets = max(n_buckets, len(column.boundaries) + 1)
        elif kind == NUMERIC:
            n_buckets = max(n_buckets, num_quantiles)
    n_floats = sum(width(c) for c in float_features(columns))
    return Layout(len(names), n_floats, tuple(names), n_buckets)


def _dense(features: Mapping[str, Any], column: Any) -> tf.Tensor:
    return v1.feature_column.input_layer(dict(features), [column])


def float_values(features: Mapping[str, Any], columns: Sequence[Any]) -> tf.Tensor:
    """``[batch, float features]``: the numeric columns' raw values (what the quantiles are taken of)."""
    return tf.concat([_dense(features, c) for c in float_features(columns)], axis=1)


def bucket_ids(features: Mapping[str, Any], columns: Sequence[Any], boundaries: tf.Tensor | None) -> tf.Tensor:
    """``[batch, n_features]`` int32: each feature id's bucket.

    A numeric value's bucket counts the learned boundaries below it (``boundaries`` is
    ``[float features, quantiles - 1]``, rows in feature-id order); a bucketized column gives its
    bucket, an indicator column 0 or 1 per category.
    """
    out: list[tf.Tensor] = []
    float_index = 0
    for column in columns:
        kind = kind_of(column)
        if kind == BUCKETIZED:
            source = _dense(features, column.source_column)
            out.append(tf.raw_ops.Bucketize(input=source, boundaries=[float(b) for b in column.boundaries]))
        elif kind == INDICATOR:
            out.append(tf.cast(_dense(features, column), tf.int32))
        else:
            assert boundaries is not None
            values = _dense(features, column)                               # [batch, d]
            rows = boundaries[float_index:float_index + width(column)]       # [d, q - 1]
            float_index += width(column)
            ids = tf.searchsorted(rows, tf.transpose(values), side="left")   # [d, batch]
            out.append(tf.transpose(tf.cast(ids, tf.int32)))
    return tf.concat(out, axis=1)
