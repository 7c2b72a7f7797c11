"""The front doors with the layers plugged in: ``toolkit.fit`` and ``toolkit.enable_distributed_keras``.

Importing ``toolkit.layers`` registers what the engine needs for embedding tables
(``ShardedTrainStep`` for models that hold them, their copy into exports) and makes
``keras.layers.Embedding`` shard itself under parameter servers
(``toolkit.layers.keras_embedding``). The engine cannot import the layers built on it,
so the names users reach through ``toolkit`` come from here, after that import.
"""
from __future__ import annotations

import toolkit.layers  # noqa: F401  (registrations, as the docstring says)
from toolkit.keras_dist import disable_distributed_keras, enable_distributed_keras
from toolkit.training import fit

__all__ = ["disable_distributed_keras", "enable_distributed_keras", "fit"]
