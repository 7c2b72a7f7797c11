"""The chief's side of the one serve/goodbye protocol: hello, done, goodbye.

``tf.distribute.Server.join()`` never returns, so in plain TensorFlow parameter
servers outlive their job (tensorflow#25858). Here the chief ends the job
explicitly, the same way whatever trained (``toolkit.fit``, Keras'
``model.fit``, the Estimator, a between-graph script, a strategy built by
hand): for each server it opens a session on that server's own address and
runs, all servers at once and with a deadline (``goodbye_timeout``)::

    with tf.device("/job:ps/replica:0/task:0/device:CPU:0"):
        tf.io.write_file(<exit signal>, "<exit code>")

The op executes *inside the server's process*, which polls for that file in
its private signal directory (``strategies._signals``) and exits with the code
it carries (``strategies._roles``). The same write carries the chief's
*hello* (so that a chief that connects and dies between two of the servers'
port probes is still noticed) and, in between-graph training, each worker's
*done* to the chief, which ends the ps tasks only once its workers are done.

What a chief does at the end is one ``Ending`` (which servers to tell, which
workers to wait for); ``end_job`` carries it out once per cluster, and one
``atexit`` hook carries out the armed ones a script did not end itself.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from strategies._cluster import cluster_token, device, tf2_cluster
from strategies._net import is_listening
from strategies._serve_options import ServeOptions
from strategies._signals import clear_signals, ensure_private_dir, signal_path, take_signal

if TYPE_CHECKING:  # TensorFlow is imported only where a signal is written
    import tensorflow as tf

    from strategies._types import GoodbyeTarget

logger = logging.getLogger(__name__)

Task = tuple[str, int]
_SERVER_JOBS = ("worker", "ps")
_armed: dict[str, Callable[[bool], object]] = {}  # run at exit (told whether it failed), by ending or report
_once: set[str] = set()  # goodbyes said and dones reported, by cluster token (and task)
#: how long ``send`` still waits, after its deadline, for a late write's own deadline to end it
_LATE_WRITE_GRACE_SECS = 5.0


@dataclasses.dataclass(frozen=True)
class Ending:
    """How one chief ends its job.

    Attributes:
        cluster: the TF2 cluster (``master`` named ``chief``).
        servers: the tasks told to exit (every ps, and the workers that serve).
        trainers: between-graph workers that train on their own; on success
            the chief waits until each has said it is done (or its port has
            closed), up to ``workers_done_timeout``.
        strategy: a ParameterServerStrategy whose coordinator's threads stop
            before the goodbye (see ``strategies._compat.stop_coordinator_threads``).
    """

    cluster: Mapping[str, Sequence[str]]
    servers: tuple[Task, ...]
    trainers: tuple[Task, ...] = ()
    strategy: Any = dataclasses.field(default=None, compare=False)  # tf.distribute.Strategy

    @property
    def token(self) -> str:
        return cluster_token(self.cluster)


def exit_code_of(code: object) -> int:
    """A process exit code from a ``SystemExit.code``-like value: 0..255, else 1 (None is 0)."""
    if isinstance(code, bool) or not isinstance(code, int):
        return 0 if code is None else 1
    return code if 0 <= code <= 255 else 1


def _write(cluster: Mapping[str, Sequence[str]], task: Task, kind: str, text: str, timeout: float) -> None:
    """Writes signal ``kind`` inside ``task``'s process, through a session on that task's own address."""
    import tensorflow as tf

    v1 = tf.compat.v1
    job, index = task
    with tf.Graph().as_default():
        with tf.device(device(job, index)):
            op = tf.io.write_file(signal_path(cluster, job, index, kind), text)
        config = v1.ConfigProto(device_filters=[f"/job:{job}/task:{index}"],
                                operation_timeout_in_ms=max(int(timeout * 1000), 1))
        with v1.Session(f"grpc://{cluster[job][index]}", config=config) as session:
            session.run(op)


def send(cluster: Mapping[str, Sequence[str]], tasks: Sequence[Task], kind: str, text: str, *,
         timeout: float | None = None) -> list[str]:
    """Sends one signal to ``tasks`` in parallel; returns the tasks reached, e.g. ``["worker-0", "ps-0"]``.

    One dead or hung task must not hold up the others, nor the chief for
    ever: a task whose port is closed is skipped, each write runs in its own
    daemon thread, and after ``timeout`` seconds (None: ``goodbye_timeout``)
    the ones still running are abandoned with a warning. Those servers still
    exit by themselves once the chief's port closes.
    """
    import tensorflow as tf

    timeout = ServeOptions.from_env().goodbye_timeout if timeout is None else timeout
    reached: dict[Task, bool] = {}

    def write(task: Task) -> None:
        if not is_listening(cluster[task[0]][task[1]], timeout=min(timeout, 1.0)):
            logger.info("%s-%d is already gone; no %s signal for it", task[0], task[1], kind)
            return
        try:
            _write(cluster, task, kind, text, timeout)
        except (tf.errors.OpError, ValueError, RuntimeError) as exc:
            logger.warning("could not reach %s-%d (%s)", task[0], task[1], str(exc).splitlines()[0])
            return
        reached[task] = True

    threads = [threading.Thread(target=write, args=(task,), name=f"tfdist-{kind}-{task[0]}-{task[1]}", daemon=True)
               for task in tasks]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0.0))
    late = [(f"{job}-{index}", thread) for (job, index), thread in zip(tasks, threads, strict=True)
            if thread.is_alive()]
    if late:
        logger.warning("%s did not answer within %g s (goodbye_timeout); they exit when the chief's port "
                       "closes", ", ".join(name for name, _ in late), timeout)
        # Each late write ends soon after with its own deadline (the same timeout, counted from its
        # session's start). Waiting for that keeps every write out of TensorFlow by the time this
        # process exits: an interpreter torn down under a thread still inside a gRPC call can abort
        # (SIGABRT) although the job is over.
        grace = time.monotonic() + _LATE_WRITE_GRACE_SECS
        for _, thread in late:
            thread.join(max(grace - time.monotonic(), 0.0))
    return [f"{job}-{index}" for job, index in tasks if reached.get((job, index))]


def say_goodbye(cluster: Mapping[str, Sequence[str]], tasks: Sequence[Task], exit_code: int, *,
                timeout: float | None = None) -> list[str]:
    """Tells ``tasks`` (servers in ``serve_until_goodbye``) to exit with ``exit_code``; returns those reached."""
    return send(cluster, tasks, "exit", str(exit_code_of(exit_code)), timeout=timeout)


def report_done(cluster: Mapping[str, Sequence[str]], task: Task, chief: Task) -> bool:
    """On a between-graph worker whose training is over: tells the chief (once), so it need not wait."""
    key = f"done:{cluster_token(cluster)}:{task[0]}:{task[1]}"
    if key in _once:
        return True
    _once.add(key)
    return bool(send(cluster, [chief], f"done-{task[0]}-{task[1]}", "done"))


def expect_trainers(cluster: Mapping[str, Sequence[str]], chief: Task, trainers: Sequence[Task]) -> None:
    """On a between-graph chief, before training: a private signal directory, and no stale done reports."""
    ensure_private_dir()
    clear_signals([signal_path(cluster, *chief, f"done-{job}-{index}") for job, index in trainers])


def wait_for_trainers(cluster: Mapping[str, Sequence[str]], chief: Task, trainers: Sequence[Task], *,
                      timeout: float) -> list[str]:
    """On the chief: waits until each trainer is done; returns those still pending at the deadline.

    A worker is done when its done signal arrives, or when its port, once seen
    open, has closed (it ended without a word). A worker not yet started is
    waited for: it may still be importing TensorFlow, and would find its ps gone.
    """
    pending = {task: cluster[task[0]][task[1]] for task in trainers}
    seen: set[Task] = set()
    deadline = time.monotonic() + timeout
    while pending:
        for task, address in list(pending.items()):
            if take_signal(signal_path(cluster, *chief, f"done-{task[0]}-{task[1]}")) is not None:
                del pending[task]
            elif is_listening(address, timeout=0.5):
                seen.add(task)
            elif task in seen:
                logger.warning("%s-%d ended without reporting done", *task)
                del pending[task]
        if pending and time.monotonic() > deadline:
            late = [f"{job}-{index}" for job, index in pending]
            logger.warning("not done after %.0f s (workers_done_timeout): %s; ending the job anyway",
                           timeout, ", ".join(late))
            return late
        time.sleep(0.2)
    return []


def end_job(ending: Ending, exit_code: object = 0, *, options: ServeOptions | None = None) -> list[str]:
    """Ends ``ending``'s job once: on success lets the coordinator and the trainers finish, then says goodbye.

    A failing chief says its goodbye at once: nothing it could still wait for
    would save the job. Later calls for the same cluster are no-ops.

    Returns:
        The servers that received the goodbye.
    """
    key = f"end:{ending.token}"
    if key in _once:
        return []
    _once.add(key)
    code = exit_code_of(exit_code)
    options = ServeOptions.from_env() if options is None else options
    # A worker recovery still in flight when the interpreter exits aborts the chief, a preempted one
    # (128 + SIGTERM, the launcher's EXIT_PREEMPTED) too: stopping the coordinator's threads now, while
    # the servers still serve, lets it end against live servers.
    if code in (0, 128 + signal.SIGTERM) and ending.strategy is not None:
        from strategies._compat import stop_coordinator_threads

        late = stop_coordinator_threads(ending.strategy, options.goodbye_timeout)
        if late:
            logger.warning("the coordinator's %s did not stop within %g s (goodbye_timeout)", ", ".join(late),
                           options.goodbye_timeout)
    if code == 0 and ending.trainers:
        chief = chief_of(ending.cluster)
        wait_for_trainers(ending.cluster, chief, ending.trainers, timeout=options.workers_done_timeout)
    reached = say_goodbye(ending.cluster, ending.servers, code, timeout=options.goodbye_timeout)
    logger.info("told %s to exit with code %d", ", ".join(reached) or "no server", code)
    return reached


def _at_exit() -> None:
    """The one atexit hook: a worker's done report, a chief's ending (0, or 1 after an uncaught exception)."""
    failed = getattr(sys, "last_value", None) is not None  # set by an uncaught exception
    for action in list(_armed.values()):
        action(failed)


def _arm(key: str, action: Callable[[bool], object]) -> None:
    if not _armed:
        atexit.register(_at_exit)
    _armed.setdefault(key, action)


def arm(ending: Ending) -> None:
    """Makes sure ``ending`` is carried out at interpreter exit if the script never ends the job itself.

    The servers are told 0, or 1 after an uncaught exception. A script that
    ends with ``sys.exit(3)`` is reported as 0: use ``chief_session`` or
    ``shutdown_cluster`` to pass a real failure code.
    """
    _arm(ending.token, lambda failed: end_job(ending, 1 if failed else 0))


def arm_report(cluster: Mapping[str, Sequence[str]], task: Task, chief: Task) -> None:
    """Makes sure a between-graph worker reports done to its chief at interpreter exit, at the latest."""
    cluster = dict(cluster)
    _arm(f"done:{cluster_token(cluster)}:{task[0]}:{task[1]}", lambda failed: report_done(cluster, task, chief))


def chief_of(cluster: Mapping[str, Sequence[str]]) -> Task:
    """The task that ends the job: the ``chief``, or worker 0 in TF1's layout without one."""
    return ("chief", 0) if cluster.get("chief") else ("worker", 0)


def pss_ending(target: GoodbyeTarget) -> Ending | None:
    """The ``Ending`` of a ParameterServerStrategy chief (every ps and worker serves), or None elsewhere."""
    if target is None:
        from tf_config import TFConfig

        target = TFConfig.from_env()
    if hasattr(target, "extended"):  # a tf.distribute strategy
        from strategies._compat import pss_cluster

        cluster = pss_cluster(target)
        strategy = target
    elif target.is_chief and target.num_ps > 0:
        cluster, strategy = tf2_cluster(target.cluster), None
    else:
        return None
    if cluster is None or not cluster.get("chief"):
        return None
    servers = tuple((job, index) for job in _SERVER_JOBS for index in range(len(cluster.get(job, []))))
    return Ending(cluster, servers, strategy=strategy)


def between_graph_ending(cluster: Mapping[str, Sequence[str]]) -> Ending:
    """The ``Ending`` of a between-graph chief: wait for the other workers, then end every ps."""
    chief = chief_of(cluster)
    trainers = tuple(("worker", i) for i in range(len(cluster.get("worker", []))) if ("worker", i) != chief)
    return Ending(dict(cluster), tuple(("ps", i) for i in range(len(cluster.get("ps", [])))), trainers)


def greet(strategy: tf.distribute.Strategy) -> None:
    """On a ParameterServerStrategy chief just connected: says hello to every server and arms the goodbye."""
    ending = pss_ending(strategy)
    if ending is None or ending.token in _armed:
        return
    arm(ending)
    send(ending.cluster, ending.servers, "hello", "hello")


def shutdown_cluster(target: GoodbyeTarget = None, exit_code: int = 0) -> list[str]:
    """Tells every ps and worker of a ParameterServerStrategy cluster to exit.

    Call it on the chief when training is over (``chief_session`` does it for
    you). Elsewhere (MultiWorkerMirrored, a worker, a local run) it does
    nothing, so scripts may call it unconditionally. It is sent once per
    cluster; later calls are no-ops.

    Args:
        target: the ParameterServerStrategy (built by ``make_strategy`` or by
            hand), or a ``TFConfig`` (the chief must already be connected);
            None reads TF_CONFIG.
        exit_code: the code the servers exit with, 0 after a successful job.

    Returns:
        The tasks that received the goodbye, e.g. ``["worker-0", "ps-0"]``.
        Tasks that are already gone are skipped with a log line; if the
        goodbye cannot reach a server at all, that server still exits once it
        sees the chief's port close.
    """
    ending = pss_ending(target)
    return [] if ending is None else end_job(ending, exit_code)


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
        shutdown_cluster(target, exit_code_of(exc.code))
        raise
    except BaseException:
        shutdown_cluster(target, 1)
        raise
    shutdown_cluster(target, 0)
