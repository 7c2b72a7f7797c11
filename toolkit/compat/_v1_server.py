"""``tf.train`` and ``tf.distribute`` of ``toolkit.compat.v1``: TF1's, with a ``Server`` whose ``join()`` ends.

In TF1 a ps task ends its script with ``server.join()``, which never returns
(tensorflow#25858). Here ``Server`` is ``strategies._hand_built``'s: ``join()``
serves until the chief (worker 0 in TF1's layout without a chief) says
goodbye, which it does at exit once the other workers are done, and returns,
so the ps script ends with 0. Everything else in both namespaces is
``tf.compat.v1``'s own.
"""
from __future__ import annotations

import types
from typing import Any

import tensorflow as _tf

from strategies._hand_built import server_class

__all__ = ["namespace"]


def namespace(name: str) -> types.ModuleType:
    """``tf.compat.v1.<name>`` with ``Server`` replaced (``name`` is ``train`` or ``distribute``)."""
    original = getattr(_tf.compat.v1, name)
    module = types.ModuleType(f"toolkit.compat.v1.{name}", original.__doc__)
    server = server_class()

    def __getattr__(attribute: str) -> Any:
        return getattr(original, attribute)

    def __dir__() -> list[str]:
        return sorted(set(dir(original)) | {"Server"})

    module.__dict__.update(__getattr__=__getattr__, __dir__=__dir__, Server=server)
    return module
