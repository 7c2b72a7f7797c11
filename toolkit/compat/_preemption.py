"""Preemption in a TF1 between-graph script: the ps and the chief of ``import toolkit.compat.v1 as tf``.

The same protocol as every other ps in tfdist (docs/preemption.md): the ps
speaks through the cluster (``strategies._server_preemption``): on the signal
it writes ``preempted-ps-<i>`` into the chief's process and serves on. The
chief's ``MonitoredTrainingSession`` carries ``PreemptionHook`` (the graph-mode
Estimator's), which looks for those notices: the session stops after the step
in flight, the chief's ``CheckpointSaverHook`` saves at that step as the
session closes, the chief says goodbye with 143 (the ps leaves then, once the
checkpoint is on disk) and raises ``TrainingPreempted``. The same hook on a
signalled worker stops its loop after its step; its updates are in the ps
variables, so it exits 143 and the chief trains on.

Nothing to do in the script beyond the one import: the ps's ``server.join()``
and the chief's ``MonitoredTrainingSession(checkpoint_dir=...)`` carry it.
A script that saves by itself (no ``checkpoint_dir``) still stops at the step
reached and exits 143, but without a checkpoint there.
"""
from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from strategies._cluster import tf2_cluster
from toolkit.estimator._preemption import PreemptionHook, raise_if_preempted
from toolkit.training.preemption import watcher

__all__ = ["end_if_preempted", "preemptible_session", "remember_server"]

logger = logging.getLogger(__name__)

Cluster = Mapping[str, Sequence[str]]

#: the cluster and task of the ``tf.train.Server`` this process started (a TF1 script starts one)
_SERVER: dict[str, Any] = {}


def remember_server(cluster: Cluster, job: str, index: int) -> None:
    """Notes this process's server, so the session knows whom to listen to and whom to say goodbye to."""
    _SERVER.update(cluster={k: list(v) for k, v in cluster.items()}, job=job, index=index)


def end_if_preempted(checkpoint_dir: str | None, task: str, cluster: Cluster | None, *, chief: bool) -> None:
    """After the session closed (the chief's checkpoint written): if preempted, the chief's goodbye, then 143.

    The chief tells the ps to exit with 143 (a preempted ps serves until then);
    a worker only leaves.

    Raises:
        TrainingPreempted: this task got the signal, or (the chief) a ps's notice stopped it.
    """
    raise_if_preempted(checkpoint_dir, task, cluster if chief else None)


def preemptible_session(original: Any) -> Any:
    """``tf.compat.v1.train.MonitoredTrainingSession`` with the preemption hook, ending with 143 when preempted."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def MonitoredTrainingSession(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - TF1's name
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        chief, directory = bool(bound.arguments["is_chief"]), bound.arguments["checkpoint_dir"]
        cluster = tf2_cluster(_SERVER["cluster"]) if _SERVER else None
        hook = PreemptionHook(cluster if chief and cluster and cluster.get("ps") else None)
        bound.arguments["hooks"] = [*(bound.arguments["hooks"] or ()), hook]
        task = f"{_SERVER['job']}-{_SERVER['index']}" if _SERVER else watcher().task
        if _SERVER and watcher().task == "local":  # the log names the task (the launcher's name wins)
            watcher().task = task
        session = original(*bound.args, **bound.kwargs)
        session.__class__ = _preemptible_class(type(session))
        session._tfdist_preemption = (directory, task, cluster, chief)
        return session

    return MonitoredTrainingSession


_CLASSES: dict[type, type] = {}


def _preemptible_class(base: type) -> type:
    """``base`` (``MonitoredSession``) whose ``close()`` and ``with`` exit end a preempted task with 143."""
    if base in _CLASSES:
        return _CLASSES[base]

    class PreemptibleSession(base):  # type: ignore[misc, valid-type]
        _tfdist_preemption: tuple[str | None, str, dict[str, list[str]] | None, bool]

        def _end_if_preempted(self) -> None:
            if getattr(self, "_tfdist_ended", False):
                return
            self._tfdist_ended = True
            end_if_preempted(*self._tfdist_preemption[:3], chief=self._tfdist_preemption[3])

        def close(self) -> None:
            super().close()
            self._end_if_preempted()

        def __exit__(self, exception_type: Any, exception_value: Any, traceback: Any) -> Any:
            suppressed = super().__exit__(exception_type, exception_value, traceback)
            self._end_if_preempted()
            return suppressed

    PreemptibleSession.__name__ = PreemptibleSession.__qualname__ = base.__name__
    _CLASSES[base] = PreemptibleSession
    return PreemptibleSession
