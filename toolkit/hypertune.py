"""``report_metric``: hand a tuning trial its objective from code that does not use ``toolkit.fit``.

``toolkit.fit`` already writes TensorBoard scalars that a tuning job reads by
``hyperparameterMetricTag``. A trainer with its own loop (or none) calls
``report_metric`` instead, as it would call cloudml-hypertune's
``report_hyperparameter_tuning_metric`` on CMLE.

Where it writes: CMLE's helper appends JSON lines to a file the service reads;
ours writes the same scalar as a TensorBoard event, so the tuner has one way to
read objectives and TensorBoard shows them too. The file is
``events.out.tfevents.<time>.<host>.<pid>.hypertune`` in the trial's output
directory, which a tuning job gives every trial task as ``TFDIST_TRIAL_DIR``
(the same directory it passes as ``--job-dir``). Outside a tuning job nothing
sets the variable, so the call logs and writes nothing unless ``directory`` is
given: the same trainer runs untouched as a plain job.

A trainer that already reports with cloudml-hypertune (``import hypertune``)
needs no change: ``trial_environment`` points that package's
``CLOUD_ML_HP_METRIC_FILE`` into the trial's directory too, and the tuning job
reads its JSON lines as it reads these events.

Only the chief (or ``master``) task writes, so a distributed trial reports once.
TensorFlow is not imported. Call it once per evaluation with its ``step``: the
tuning job reads each call while the trial runs, as an intermediate measurement
(``allMetrics``), and with ``enableTrialEarlyStopping`` may stop a trial whose
measurements fall behind the others'.

Example:
    >>> import tempfile
    >>> from toolkit import report_metric
    >>> trial_dir = tempfile.mkdtemp()       # a tuning job passes it as TFDIST_TRIAL_DIR
    >>> for epoch, accuracy in enumerate([0.81, 0.90, 0.93]):   # the trainer's own loop
    ...     path = report_metric("accuracy", accuracy, step=epoch, directory=trial_dir)
    >>> path.name.endswith(".hypertune")
    True
    >>> report_metric("accuracy", 0.93, environ={}) is None   # outside a tuning job: nothing written
    True
"""
from __future__ import annotations

import logging
import math
import os
import socket
import struct
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from tf_config.checks import check_int
from tf_config.errors import FieldError

__all__ = ["report_metric", "MetricError", "ENV_TRIAL_DIR", "ENV_METRIC_FILE", "ENV_TRIAL_ID", "METRIC_FILE",
           "trial_environment"]

ENV_TRIAL_DIR = "TFDIST_TRIAL_DIR"
# cloudml-hypertune's variables: where ``HyperTune`` writes its JSON lines, and the trial id it stamps on them.
ENV_METRIC_FILE = "CLOUD_ML_HP_METRIC_FILE"
ENV_TRIAL_ID = "CLOUD_ML_TRIAL_ID"
METRIC_FILE = "hypertune/output.metrics"   # under the trial's directory (the package's own default is shared)
_log = logging.getLogger(__name__)
_files: dict[Path, Path] = {}   # directory -> this process's event file in it
_lock = threading.Lock()


class MetricError(FieldError):
    """A bad argument to ``report_metric``; ``field`` names it."""


def trial_environment(trial_dir: str | os.PathLike, trial_id: int) -> dict[str, str]:
    """The variables every task of tuning trial ``trial_id`` gets, whatever engine runs it.

    ``TFDIST_TRIAL_DIR`` for ``report_metric``, and cloudml-hypertune's pair as CMLE set them,
    so a published trainer's ``hypertune.HyperTune()`` writes into this trial's own directory
    (never the package's default under the shared temporary directory) and stamps its trial id.

    Example:
        >>> trial_environment("out/3", 3)["CLOUD_ML_TRIAL_ID"]
        '3'
    """
    return {ENV_TRIAL_DIR: os.fspath(trial_dir), ENV_METRIC_FILE: os.fspath(Path(trial_dir) / METRIC_FILE),
            ENV_TRIAL_ID: str(trial_id)}


def task_environment(env: Mapping[str, str], task_name: str, *, is_chief: bool) -> dict[str, str]:
    """``env`` for one task of a job: a task other than the chief reports to a metric file of its own.

    cloudml-hypertune rewrites its whole file on every report, so tasks sharing one
    file would overwrite each other's reports; on CMLE each machine had its own, and
    the master's counted. Here the chief keeps the trial's file, the one the tuner reads.

    Example:
        >>> task_environment({"CLOUD_ML_HP_METRIC_FILE": "t/output.metrics"}, "worker-1", is_chief=False)
        {'CLOUD_ML_HP_METRIC_FILE': 't/output.metrics.worker-1'}
    """
    if is_chief or ENV_METRIC_FILE not in env:
        return dict(env)
    return {**env, ENV_METRIC_FILE: f"{env[ENV_METRIC_FILE]}.{task_name}"}


def _frame(payload: bytes) -> bytes:
    """One TFRecord: length, its masked CRC, the payload, the payload's masked CRC."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    length = struct.pack("<Q", len(payload))
    return (length + struct.pack("<I", masked_crc32c(length)) + payload
            + struct.pack("<I", masked_crc32c(payload)))


def _event_file(directory: Path) -> Path:
    """This process's event file in ``directory``, created with its file-version header."""
    from tensorboard.compat.proto import event_pb2

    path = _files.get(directory)
    if path is None:
        directory.mkdir(parents=True, exist_ok=True)
        now = time.time()
        path = directory / f"events.out.tfevents.{int(now)}.{socket.gethostname()}.{os.getpid()}.hypertune"
        header = event_pb2.Event(wall_time=now, file_version="brain.Event:2")
        with path.open("ab") as fh:
            fh.write(_frame(header.SerializeToString()))
        _files[directory] = path
    return path


def _check(tag: object, value: object, step: object) -> float:
    if not isinstance(tag, str) or not tag:
        raise MetricError(f"report_metric `tag` received {tag!r}; expected a non-empty string such as "
                                 "'accuracy'. Pass the job's hyperparameterMetricTag.", field="tag")
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise MetricError(f"report_metric `value` received {value!r}; expected a number. "
                                   "Pass float(metric).", field="value")
    check_int(step, field="step", minimum=0, error=MetricError, owner="report_metric",
              fix="Pass the training step or epoch.")
    number = float(value)
    if math.isinf(number):
        raise MetricError(f"report_metric `value` received {number}; expected a finite number "
                                   "(NaN is accepted and fails the trial). Check the metric's computation.",
                                   field="value")
    return number


def _is_primary(environ: Mapping[str, str]) -> bool:
    from tf_config import TFConfig
    return TFConfig.from_env(environ).is_chief


def report_metric(tag: str, value: float, step: int = 0, *, directory: str | os.PathLike | None = None,
                  environ: Mapping[str, str] | None = None) -> Path | None:
    """Records ``value`` of metric ``tag`` at ``step`` for the tuning job to read.

    Args:
        tag: the metric's name; the job's ``hyperparameterMetricTag`` selects it.
        value: the metric (a NaN fails the trial when it is the final value).
        step: training step or epoch of this measurement. Each step is one intermediate
            measurement of the trial (what early stopping compares, step for step, with
            the other trials); the last is the one at the largest step. Calls that leave
            it at 0 all land on step 0 and count as one measurement, the latest.
        directory: where to write; default ``$TFDIST_TRIAL_DIR``.
        environ: the environment to read (tests pass their own); default ``os.environ``.

    Returns:
        The event file written, or None when there is nowhere to write (not a
        tuning trial) or this task is not the chief.

    Raises:
        MetricError: ``tag``, ``value`` or ``step`` is not usable.
    """
    number = _check(tag, value, step)
    environ = os.environ if environ is None else environ
    target = directory if directory is not None else environ.get(ENV_TRIAL_DIR)
    if not target:
        _log.info("report_metric(%r, %g): not a tuning trial (%s is unset); nothing written",
                  tag, number, ENV_TRIAL_DIR)
        return None
    if not _is_primary(environ):
        return None
    from tensorboard.compat.proto import event_pb2, summary_pb2

    event = event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=tag, simple_value=number)]))
    with _lock:
        path = _event_file(Path(target).resolve())
        with path.open("ab") as fh:
            fh.write(_frame(event.SerializeToString()))
    return path
