"""Preemption in a TF1 between-graph script: the ps and the chief of ``import toolkit.compat.v1 as tf``.

The same protocol as every other ps in tfdist (docs/preemption.md), with no
checkpoint directory on the ps: a TF1 ps knows only its cluster. So the ps
speaks through the cluster, as ``run_role()``'s servers do
(``strategies._server_preemption``): on the signal it writes
``preempted-ps-<i>`` into the chief's process and serves on. The chief's
``MonitoredTrainingSession`` carries ``PreemptionHook`` (the graph-mode
Estimator's), which here also looks for those notices: the session stops
after the step in flight, the chief's ``CheckpointSaverHook`` saves at that
step as the session closes, the chief says goodbye with 143 (the ps leaves
then, once the checkpoint is on disk) and raises ``TrainingPreempted``. The
same hook on a signalled worker stops its loop after its step; its updates are
in the ps variables, so it exits 143 and the chief trains on.

Nothing to do in the script beyond the one import: the ps's ``server.join()``
and the chief's ``MonitoredTrainingSession(checkpoint_dir=...)`` carry it.
A script that saves by itself (no ``checkpoint_dir``) still stops at the step
reached and exits 143, but without a checkpoint there.
"""
from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from strategies._cluster import tf2_cluster
from toolkit.estimator._preemption import _NOTICE_POLL, PreemptionHook, raise_if_preempted
from toolkit.training.preemption import EXIT_PREEMPTED, watcher

__all__ = ["ClusterPreemptionHook", "end_if_preempted", "preemptible_session", "remember_server"]

logger = logging.getLogger(__name__)

Cluster = Mapping[str, Sequence[str]]

#: the cluster and task of the ``tf.train.Server`` this process started (a TF1 script starts one)
_SERVER: dict[str, Any] = {}


def remember_server(cluster: Cluster, job: str, index: int) -> None:
    """Notes this process's server, so the session knows whom to listen to and whom to say goodbye to."""
    _SERVER.update(cluster={k: list(v) for k, v in cluster.items()}, job=job, index=index)


class ClusterPreemptionHook(PreemptionHook):
    """``PreemptionHook`` whose chief also takes the notices a preempted ps sends through the cluster.

    Args:
        cluster: the TF2 cluster (``chief``/``worker``/``ps``) this chief ends.
        notices_in: the checkpoint directory, where an Estimator-style ps
            leaves its notice instead (None: none).
    """

    def __init__(self, cluster: Cluster, notices_in: str | None = None) -> None:
        super().__init__(notices_in)
        from strategies._server_preemption import notice_paths
        from strategies._signals import clear_signals, ensure_private_dir

        self._paths = notice_paths(cluster, jobs=("ps",))
        ensure_private_dir()
        clear_signals(list(self._paths.values()))  # notices of an earlier job on the same addresses are stale
        self._next_signal_look = 0.0

    def _ps_notices(self) -> list[str]:
        from strategies._signals import take_signal

        found = super()._ps_notices()
        if time.monotonic() >= self._next_signal_look:
            self._next_signal_look = time.monotonic() + _NOTICE_POLL
            found += [task for task, path in self._paths.items() if take_signal(path) is not None]
        return found


def end_if_preempted(checkpoint_dir: str | None, task: str, cluster: Cluster | None, *, chief: bool) -> None:
    """After the session closed (the chief's checkpoint written): if preempted, the chief's goodbye, then 143.

    The chief tells the ps to exit with 143 (a ps waiting on its notice leaves
    now; any other ps would find its chief gone); a worker only leaves.

    Raises:
        TrainingPreempted: this task got the signal, or (the chief) a ps's notice stopped it.
    """
    w = watcher()
    if not w.requested and not w.stopped_for:
        return
    if chief and cluster is not None and cluster.get("ps"):
        from strategies._shutdown import between_graph_ending, end_job

        end_job(between_graph_ending(cluster), EXIT_PREEMPTED)
    raise_if_preempted(checkpoint_dir, task)


def preemptible_session(original: Any) -> Any:
    """``tf.compat.v1.train.MonitoredTrainingSession`` with the preemption hook, ending with 143 when preempted."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def MonitoredTrainingSession(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - TF1's name
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        chief, directory = bool(bound.arguments["is_chief"]), bound.arguments["checkpoint_dir"]
        cluster = tf2_cluster(_SERVER["cluster"]) if _SERVER else None
        hook = (ClusterPreemptionHook(cluster, directory) if chief and cluster and cluster.get("ps")
                else PreemptionHook(directory if chief else None))
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
