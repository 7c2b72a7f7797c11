"""``tf.compat.v1.estimator.inputs``: input functions over in-memory NumPy arrays and pandas DataFrames.

Example:
    >>> import numpy as np
    >>> from toolkit.estimator.inputs import numpy_input_fn
    >>> input_fn = numpy_input_fn({"x": np.arange(4.0)}, np.arange(4), batch_size=2, shuffle=False)
"""
from __future__ import annotations

from tf_config.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "numpy_input_fn": "toolkit.estimator.inputs.numpy_io",
    "pandas_input_fn": "toolkit.estimator.inputs.pandas_io",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
