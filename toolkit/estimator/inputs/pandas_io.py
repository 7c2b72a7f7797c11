"""``pandas_input_fn``: ``tf.compat.v1.estimator.inputs.pandas_input_fn`` on ``tf.data``.

The DataFrame's columns become the features (its index is not fed); ``y``
(a Series, or a DataFrame for several targets) must share ``x``'s index.
Epochs, shuffling and batching as ``numpy_input_fn``. pandas is imported only
when ``pandas_input_fn`` is called.

Example:
    >>> import pandas as pd  # doctest: +SKIP
    >>> input_fn = pandas_input_fn(pd.DataFrame({"a": [1, 2]}), pd.Series([0, 1]), shuffle=False)  # doctest: +SKIP
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from toolkit.estimator.inputs._feed import InputsError, InputsTypeError, batches, check_feed_args, unique_key

__all__ = ["pandas_input_fn"]


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as exc:
        raise InputsError("pandas_input_fn needs pandas, which is not installed: pip install pandas, or feed "
                          "NumPy arrays with numpy_input_fn.", field="x") from exc
    return pandas


def _column(values: Any) -> np.ndarray:
    array = np.asarray(values)
    return array.astype(str) if array.dtype == object else array


def pandas_input_fn(x: Any, y: Any = None, batch_size: int = 128, num_epochs: int | None = 1,
                    shuffle: bool | None = None, queue_capacity: int = 1000, num_threads: int = 1,
                    target_column: str = "target") -> Callable[[], Any]:
    """An ``input_fn`` feeding a DataFrame's columns (and ``y``) in batches.

    Args:
        x: a ``pandas.DataFrame``; each column is a feature.
        y: a ``pandas.Series`` (one target), a DataFrame (a dict of targets), or None.
        batch_size, num_epochs, shuffle, queue_capacity, num_threads: as ``numpy_input_fn``.
        target_column: the name ``y`` is carried under; must not be a column of ``x``.

    Returns:
        ``input_fn()`` -> ``features`` or ``(features, target)``.
    """
    pd = _pandas()
    if not isinstance(shuffle, bool):
        raise InputsError(f"shuffle must be provided and explicitly set as boolean (it is recommended to set it "
                          f"as True for training); got {shuffle}. Pass shuffle=True or shuffle=False.",
                          field="shuffle")
    if not isinstance(target_column, str):
        raise InputsTypeError(f"target_column must be a string type; got {target_column!r}.", field="target_column")
    if not isinstance(x, pd.DataFrame):
        raise InputsTypeError(f"x must be a pandas DataFrame; got {type(x).__name__}. Use numpy_input_fn for "
                              "arrays.", field="x")
    check_feed_args(batch_size=batch_size, num_epochs=num_epochs, queue_capacity=queue_capacity,
                    num_threads=num_threads)
    x = x.copy()
    target: Any = None
    if y is not None:
        if target_column in x:
            raise InputsError(f"Cannot use name {target_column} for target column: DataFrame already has a "
                              f"column with that name: {list(x.columns)}. Pass another target_column.",
                              field="target_column")
        if not np.array_equal(x.index, y.index):
            raise InputsError(f"Index for x and y are mismatched.\nIndex for x: {x.index}\nIndex for y: "
                              f"{y.index}\nAlign them, e.g. y = y.loc[x.index].", field="y")
        if isinstance(y, pd.DataFrame):
            target = [(column, unique_key(column, x)) for column in list(y)]
            for column, key in target:
                x[key] = y[column]
        else:
            target = target_column
            x[target_column] = y
    columns = {str(name): _column(x[name].values) for name in x.columns}
    names = list(x.columns)

    def input_fn() -> Any:
        return batches(columns, lambda batch: _split(batch, names, target), batch_size=batch_size,
                       num_epochs=num_epochs, shuffle=shuffle, queue_capacity=queue_capacity)

    return input_fn


def _split(batch: dict[str, Any], names: list[Any], target: Any) -> Any:
    features = {name: batch[str(name)] for name in names}
    if target is None:
        return features
    if isinstance(target, list):
        return features, {column: features.pop(key) for column, key in target}
    return features, features.pop(target)
