"""The loop's knobs as one frozen, self-validating object.

Every number ``fit`` takes is checked here, before TensorFlow builds anything or
a cluster connects, so a typo fails in milliseconds with a message that names
the argument, shows the value, and says what to pass instead.
"""
from __future__ import annotations

import dataclasses

from tf_config.checks import check_int
from tf_config.errors import FieldError

__all__ = ["PS_STEPS_PER_EXECUTION", "FitConfig", "TrainingError", "default_steps_per_execution"]

#: ``steps_per_execution`` chosen under parameter servers when the caller sets none: four loop
#: iterations of ``runners.UNROLL_LIMIT`` straight steps, as fast as the longest executions measured.
PS_STEPS_PER_EXECUTION = 32


class TrainingError(FieldError):
    """Bad input to the training loop; ``.field`` names the offending argument."""


def _positive(field: str, value: object, example: str, *, optional: bool = False) -> None:
    check_int(value, field=field, example=example, optional=optional, error=TrainingError)


@dataclasses.dataclass(frozen=True)
class FitConfig:
    """How long to train and how often to stop for chief duties.

    Attributes:
        epochs: number of epochs; an epoch is ``steps_per_epoch`` optimizer steps.
        steps_per_epoch: optimizer steps (global batches) per epoch.
        steps_per_execution: steps run per ``tf.function`` call (or per closure
            scheduled on a parameter-server worker). Larger values amortise the
            Python and RPC overhead, the main lever for small models. None (the
            default) lets ``fit`` choose with ``default_steps_per_execution``:
            1 where every step is visible to callbacks, more under parameter
            servers, whose coordinator only sees chunks of steps anyway.
        checkpoint_every_steps: save a checkpoint every this many global steps
            (None: at the end of each epoch). A checkpoint is always written at
            the end of training.
        keep_checkpoints: how many checkpoints ``tf.train.CheckpointManager`` keeps.
        log_every_steps: under parameter_server, the coordinator waits for the
            scheduled steps and reports progress this often (None: ten times an
            epoch, but at least four executions per worker between waits, so
            no worker idles). Synchronous strategies report after every execution.
        summary_every_steps: TensorBoard scalars this often (plus every epoch end).
        validation_steps: batches per validation (None: the whole validation set).
        global_batch_size: examples per step over all replicas, used to average
            the loss (None: inferred from the batch each replica receives).
        sync_replicas: parameter_server only: average ``replicas_to_aggregate``
            worker contributions into each update (TF1's SyncReplicasOptimizer)
            instead of applying every worker's gradients as they arrive.
            Contributions computed on an outdated global step are dropped.
        replicas_to_aggregate: contributions per synchronous update (None: one
            per worker). Only meaningful with ``sync_replicas``.
    """

    epochs: int = 1
    steps_per_epoch: int = 100
    steps_per_execution: int | None = None
    checkpoint_every_steps: int | None = None
    keep_checkpoints: int = 3
    log_every_steps: int | None = None
    summary_every_steps: int = 100
    validation_steps: int | None = None
    global_batch_size: int | None = None
    sync_replicas: bool = False
    replicas_to_aggregate: int | None = None

    def __post_init__(self) -> None:
        _positive("epochs", self.epochs, "5")
        _positive("steps_per_epoch", self.steps_per_epoch, "len(train) // global_batch_size")
        _positive("steps_per_execution", self.steps_per_execution, "10", optional=True)
        _positive("checkpoint_every_steps", self.checkpoint_every_steps, "500", optional=True)
        _positive("keep_checkpoints", self.keep_checkpoints, "3")
        _positive("log_every_steps", self.log_every_steps, "50", optional=True)
        _positive("summary_every_steps", self.summary_every_steps, "100")
        _positive("validation_steps", self.validation_steps, "10", optional=True)
        _positive("global_batch_size", self.global_batch_size, "64", optional=True)
        self._check_sync()

    def _check_sync(self) -> None:
        if not isinstance(self.sync_replicas, bool):
            raise TrainingError(
                f"`sync_replicas` must be True or False. Received: sync_replicas={self.sync_replicas!r}. "
                "Pass sync_replicas=True for synchronous parameter-server updates.", field="sync_replicas")
        _positive("replicas_to_aggregate", self.replicas_to_aggregate, "2", optional=True)
        if self.replicas_to_aggregate is not None and not self.sync_replicas:
            raise TrainingError(
                f"`replicas_to_aggregate` is {self.replicas_to_aggregate!r} but sync_replicas=False, so nothing "
                "would be aggregated. Pass sync_replicas=True as well, or drop replicas_to_aggregate.",
                field="replicas_to_aggregate")

    def resolved(self, *, parameter_server: bool) -> FitConfig:
        """This config with ``steps_per_execution`` chosen if it was left None."""
        if self.steps_per_execution is not None:
            return self
        chosen = default_steps_per_execution(parameter_server=parameter_server)
        return dataclasses.replace(self, steps_per_execution=chosen)

    @property
    def steps_per_call(self) -> int:
        """``steps_per_execution`` as the loop uses it (1 if it was never resolved)."""
        return self.steps_per_execution or 1

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch

    @property
    def checkpoint_interval(self) -> int:
        return self.checkpoint_every_steps or self.steps_per_epoch

    @property
    def log_interval(self) -> int:
        return self.log_every_steps or max(1, self.steps_per_epoch // 10)


def default_steps_per_execution(*, parameter_server: bool) -> int:
    """The ``steps_per_execution`` ``fit`` uses when the caller leaves it None.

    Synchronous strategies (one process, mirrored, multi-worker mirrored) run
    one step per call, like Keras: Keras callbacks and the progress bar see
    every step. Under parameter servers the coordinator only waits every few
    hundred steps, so callbacks see chunks whatever the execution length, and
    each closure costs an RPC round trip to a worker: ``PS_STEPS_PER_EXECUTION``
    steps per closure, which ``benchmarks/bench_training.py`` measures at 3-4x
    one step per closure. Chunks still end exactly on checkpoint steps and
    epoch ends (a shorter last execution), so results do not depend on it.
    """
    return PS_STEPS_PER_EXECUTION if parameter_server else 1
