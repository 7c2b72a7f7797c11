"""The training engine's error and its choice of ``steps_per_execution``.

The run's numbers are checked in ``toolkit.training.options`` (``FitConfig`` and
the option groups), before TensorFlow builds anything or a cluster connects.
"""
from __future__ import annotations

from tf_config.errors import FieldError

__all__ = ["PS_STEPS_PER_EXECUTION", "TrainingError", "default_steps_per_execution"]

#: ``steps_per_execution`` chosen under parameter servers when the caller sets none: four loop
#: iterations of ``runners.UNROLL_LIMIT`` straight steps, as fast as the longest executions measured.
PS_STEPS_PER_EXECUTION = 32


class TrainingError(FieldError):
    """Bad input to the training loop; ``.field`` names the offending argument."""


def default_steps_per_execution(*, parameter_server: bool) -> int:
    """The ``steps_per_execution`` ``fit`` uses when the caller leaves it None.

    Synchronous strategies (one process, mirrored, multi-worker mirrored) run
    one step per call, like Keras: Keras callbacks and the progress bar see
    every step. Under parameter servers the coordinator only waits every few
    hundred steps, so callbacks see chunks whatever the execution length, and
    each closure costs an RPC round trip to a worker, so ``PS_STEPS_PER_EXECUTION``
    steps share one (``benchmarks/bench_training.py`` measures it). Chunks still end exactly on checkpoint steps and
    epoch ends (a shorter last execution), so results do not depend on it.
    """
    return PS_STEPS_PER_EXECUTION if parameter_server else 1
