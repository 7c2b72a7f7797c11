"""The chief's goodbye: how ps and worker servers learn that the job is over.

``tf.distribute.Server.join()`` never returns, so in plain TensorFlow parameter
servers outlive their job (tensorflow#25858). Here the chief ends the job
explicitly. Under ParameterServerStrategy the chief is connected to every
server and can run ops on their devices, so for each ps and worker (all at
once, with a deadline: ``goodbye_timeout``) it runs::

    with tf.device("/job:ps/replica:0/task:0/device:CPU:0"):
        tf.io.write_file(<exit file>, "<exit code>")

The op executes *inside the server's process*, which polls for that file
(``strategies.serve``) and exits with the code it carries. The exit file is
``<temp dir>/tfdist-<cluster token>-<job>-<index>.exit``: the cluster token is
a hash of the cluster's addresses, which chief and servers both know from
TF_CONFIG, and of the job's nonce (``TFDIST_JOB_NONCE``, set by the launcher,
so two jobs on the same ports sharing a temp dir do not collide); the temp dir
is ``tempfile.gettempdir()`` (normally ``/tmp``; chief and servers must agree
on ``TMPDIR``). A chief that dies without saying
goodbye is caught by the servers' second signal: they watch the chief's port. So that a chief that connects and dies
between two probes is still noticed, the chief also says hello (a ``.hello``
file, written the same way) as soon as it has connected.
"""
from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from strategies._cluster import cluster_token, device, tf2_cluster
from strategies._serve_options import ServeOptions

if TYPE_CHECKING:  # TensorFlow is imported only where a goodbye is written
    import tensorflow as tf

    from strategies._types import GoodbyeTarget

logger = logging.getLogger(__name__)

_SERVER_JOBS = ("worker", "ps")
_said_goodbye: set[str] = set()
_armed: set[str] = set()
_pss_clusters: weakref.WeakKeyDictionary[tf.distribute.Strategy, dict[str, list[str]]] = weakref.WeakKeyDictionary()


def remember_cluster(strategy: tf.distribute.Strategy, cluster: Mapping[str, Sequence[str]]) -> None:
    """Records the cluster of a ParameterServerStrategy built by ``make_strategy``.

    TensorFlow's ParameterServerStrategy does not expose its cluster resolver
    (``strategy.cluster_resolver`` is None), so the factory remembers it here.
    """
    _pss_clusters[strategy] = {job: list(addrs) for job, addrs in cluster.items()}


def exit_file(cluster: Mapping[str, Sequence[str]], job: str, index: int) -> str:
    """Where the chief's goodbye for task ``job:index`` lands, on that task's machine."""
    return os.path.join(tempfile.gettempdir(), f"tfdist-{cluster_token(cluster)}-{job}-{index}.exit")


def hello_file(cluster: Mapping[str, Sequence[str]], job: str, index: int) -> str:
    """Where the chief's hello for task ``job:index`` lands: proof the chief was up.

    Without it a chief that connects and dies between two port probes would
    look like a chief that never started.
    """
    return os.path.join(tempfile.gettempdir(), f"tfdist-{cluster_token(cluster)}-{job}-{index}.hello")


def _write_on_servers(cluster: Mapping[str, Sequence[str]],
                      path_of: Callable[[Mapping[str, Sequence[str]], str, int], str],
                      text: str, *,
                      timeout: float | None = None, tasks: list[tuple[str, int]] | None = None) -> list[str]:
    """Writes ``text`` to ``path_of(cluster, job, index)`` inside every ps/worker (or ``tasks``), in parallel.

    One dead or hung server must not hold up the others, nor the chief for
    ever: each write runs in its own daemon thread, and after ``timeout``
    seconds (None: ``ServeOptions``' ``goodbye_timeout``) the ones still
    running are abandoned with a warning. Those servers still exit by
    themselves once the chief's port closes.

    Returns:
        The tasks that received the text, e.g. ``["worker-0", "ps-0"]``.
    """
    import tensorflow as tf

    if timeout is None:
        timeout = ServeOptions.from_env().goodbye_timeout
    if tasks is None:
        tasks = [(job, index) for job in _SERVER_JOBS for index in range(len(cluster.get(job, [])))]
    reached: dict[str, bool] = {}

    def write(job: str, index: int) -> None:
        try:
            with tf.device(device(job, index)):
                tf.io.write_file(path_of(cluster, job, index), text)
        except (tf.errors.OpError, ValueError, RuntimeError) as exc:
            logger.warning("could not reach %s-%d (%s)", job, index, str(exc).splitlines()[0])
            return
        reached[f"{job}-{index}"] = True

    threads = [threading.Thread(target=write, args=task, name=f"tfdist-goodbye-{task[0]}-{task[1]}", daemon=True)
               for task in tasks]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0.0))
    late = [f"{job}-{index}" for (job, index), thread in zip(tasks, threads, strict=False) if thread.is_alive()]
    if late:
        logger.warning("%s did not answer within %g s (goodbye_timeout); they exit when the chief's port "
                       "closes", ", ".join(late), timeout)
    return [f"{job}-{index}" for job, index in tasks if reached.get(f"{job}-{index}")]


def say_goodbye(cluster: Mapping[str, Sequence[str]], tasks: list[tuple[str, int]], exit_code: int) -> list[str]:
    """Tells ``tasks`` (``(job, index)`` pairs serving ``serve_until_goodbye``) to exit with ``exit_code``."""
    return _write_on_servers(cluster, exit_file, str(_exit_code(exit_code)), tasks=tasks)


def say_hello(strategy: tf.distribute.Strategy) -> None:
    """Tells every server that the chief is connected (see ``hello_file``)."""
    cluster = _pss_cluster(strategy)
    if cluster is not None:
        _write_on_servers(cluster, hello_file, "hello")


def _pss_cluster(target: GoodbyeTarget) -> dict[str, list[str]] | None:
    """The TF2 cluster of a ParameterServerStrategy chief, or None if ``target`` is not one."""
    if target is None:
        from tf_config import TFConfig

        target = TFConfig.from_env()
    if hasattr(target, "extended"):  # a tf.distribute strategy
        return _pss_clusters.get(target)
    if not target.is_chief or target.num_ps == 0:
        return None
    return tf2_cluster(target.cluster)


def _exit_code(code: object) -> int:
    if isinstance(code, bool) or not isinstance(code, int):
        return 0 if code is None else 1
    return code if 0 <= code <= 255 else 1


def shutdown_cluster(target: GoodbyeTarget = None, exit_code: int = 0) -> list[str]:
    """Tells every ps and worker of a ParameterServerStrategy cluster to exit.

    Call it on the chief when training is over (``chief_session`` does it for
    you). Elsewhere (MultiWorkerMirrored, a worker, a local run) it does
    nothing, so scripts may call it unconditionally. It is sent once per
    cluster; later calls are no-ops.

    Args:
        target: the ParameterServerStrategy built by ``make_strategy``, or a
            ``TFConfig`` (the chief must already be connected, i.e. have built
            the strategy); None reads TF_CONFIG.
        exit_code: the code the servers exit with, 0 after a successful job.

    Returns:
        The tasks that received the goodbye, e.g. ``["worker-0", "ps-0"]``.
        Tasks that are already gone are skipped with a log line; if the
        goodbye cannot reach a server at all, that server still exits once it
        sees the chief's port close.
    """
    cluster = _pss_cluster(target)
    if cluster is None:
        return []
    token = cluster_token(cluster)
    if token in _said_goodbye:
        return []
    _said_goodbye.add(token)
    code = _exit_code(exit_code)
    if code == 0:  # a failing chief exits at once: nothing it could still wait for would save the job
        _stop_coordinators(token)
    reached = _write_on_servers(cluster, exit_file, str(code))
    logger.info("told %s to exit with code %d", ", ".join(reached) or "no server", code)
    return reached


def _stop_coordinators(token: str) -> None:
    """Stops the coordinator threads of this cluster's strategies while the servers still serve.

    A worker recovery still in flight when the interpreter exits aborts the
    chief (``strategies._compat.stop_coordinator_threads``); waiting for it
    here, before the goodbye, lets it end against live servers.
    """
    from strategies._compat import stop_coordinator_threads

    timeout = ServeOptions.from_env().goodbye_timeout
    for strategy, cluster in list(_pss_clusters.items()):
        if cluster_token(cluster) == token:
            late = stop_coordinator_threads(strategy, timeout)
            if late:
                logger.warning("the coordinator's %s did not stop within %g s (goodbye_timeout)",
                               ", ".join(late), timeout)


def _goodbye_at_exit(strategy: tf.distribute.Strategy) -> None:
    failed = getattr(sys, "last_value", None) is not None  # set by an uncaught exception
    shutdown_cluster(strategy, 1 if failed else 0)


def arm_goodbye_at_exit(strategy: tf.distribute.Strategy) -> None:
    """Makes sure the chief says goodbye even if the script never calls ``shutdown_cluster``.

    At interpreter exit the servers are told 0, or 1 after an uncaught
    exception. A script that ends with ``sys.exit(3)`` is reported as 0: use
    ``chief_session`` or ``shutdown_cluster`` to pass a real failure code.
    """
    cluster = _pss_cluster(strategy)
    if cluster is None or cluster_token(cluster) in _armed:
        return
    _armed.add(cluster_token(cluster))
    atexit.register(_goodbye_at_exit, strategy)


@contextlib.contextmanager
def chief_session(target: GoodbyeTarget = None) -> Iterator[None]:
    """Runs the chief's work and then ends the cluster, with 0 or 1.

    Example:
        >>> strategy = make_strategy(tf_config=cfg)     # doctest: +SKIP
        >>> with chief_session(strategy):  # doctest: +SKIP
        ...     train(strategy)

    Args:
        target: as for ``shutdown_cluster``.
    """
    try:
        yield
    except SystemExit as exc:
        shutdown_cluster(target, _exit_code(exc.code))
        raise
    except BaseException:
        shutdown_cluster(target, 1)
        raise
    shutdown_cluster(target, 0)
