"""Server roles: ps and worker tasks that serve, then exit by themselves.

Under ParameterServerStrategy only the chief runs the user's training code; ps
and worker tasks host variables and run the functions the chief schedules. In
plain TensorFlow they call ``server.join()``, which never returns. Here they
serve until one of two signals ends them:

1. **Goodbye** (normal end): the chief writes an exit signal into the
   server's private signal directory through the cluster itself (see
   ``strategies._shutdown`` and ``strategies._signals``); the server exits
   with the code it carries, 0 after a successful job.
2. **Chief lost** (the chief died without a word, e.g. SIGKILL): the server
   probes the chief's port every second; once the chief has been seen and then
   stays unreachable for ``chief_lost_after`` seconds, the server exits with
   ``EXIT_CHIEF_LOST``. If the chief never shows up within
   ``chief_start_timeout``, it exits with ``EXIT_CHIEF_NEVER_STARTED``.
   Both timeouts are ``ServeOptions`` (arguments, or the environment the
   launcher sets).

Both work the same whether the tasks were started by ``tfdist launch`` or by
hand in separate terminals.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from strategies import _native as native
from strategies._cluster import tf2_cluster, tf2_job
from strategies._errors import StrategyError
from strategies._lean import SERVER_UNUSED_MODULES, skip_imports
from strategies._names import check_name
from strategies._net import is_listening
from strategies._serve_options import ServeOptions
from strategies._server_threads import server_config
from strategies._shipped_steps import shipped_steps_work
from strategies._signals import clear_signals, ensure_private_dir, signal_path, take_signal

if TYPE_CHECKING:
    import tensorflow as tf

    from tf_config import TFConfig

logger = logging.getLogger(__name__)

EXIT_CHIEF_LOST = 3
EXIT_CHIEF_NEVER_STARTED = 4
#: a serving task whose own work (``serve(work=...)``) raised
EXIT_WORK_FAILED = 5
_PROBE_INTERVAL = 1.0


def is_server_role(cfg: TFConfig) -> bool:
    """True for tasks that serve instead of training: every ps, and workers under PSS."""
    return bool(cfg.is_ps or (cfg.task is not None and cfg.task_type == "worker" and cfg.num_ps > 0))


class _ChiefWatch:
    """Decides, from TCP probes of the chief's port, whether the chief is gone for good."""

    def __init__(self, address: str, *, start_timeout: float, lost_after: float) -> None:
        self.address = address
        self.start_timeout = start_timeout
        self.lost_after = lost_after
        self.started = self.last_seen = time.monotonic()
        self.seen = False
        self.next_probe = self.started

    def mark_seen(self, now: float, how: str) -> None:
        if not self.seen:
            logger.info("chief at %s is up (%s)", self.address, how)
            self.seen, self.last_seen = True, now

    def verdict(self, *, hello: bool = False) -> int | None:
        """None while the chief is (or may still become) alive, else the exit code.

        Args:
            hello: the chief's hello file has arrived, so it was up even if no
                probe caught it.
        """
        now = time.monotonic()
        if hello:
            self.mark_seen(now, "it said hello")
        if now < self.next_probe:
            return None
        self.next_probe = now + _PROBE_INTERVAL
        if is_listening(self.address, timeout=_PROBE_INTERVAL):
            self.mark_seen(now, "its port answers")
            self.last_seen = now
            return None
        if self.seen and now - self.last_seen >= self.lost_after:
            logger.error("chief at %s unreachable for %.0f s without saying goodbye; exiting with %d",
                         self.address, now - self.last_seen, EXIT_CHIEF_LOST)
            return EXIT_CHIEF_LOST
        if not self.seen and now - self.started >= self.start_timeout:
            logger.error("chief at %s never came up within %.0f s (chief_start_timeout); exiting with %d",
                         self.address, self.start_timeout, EXIT_CHIEF_NEVER_STARTED)
            return EXIT_CHIEF_NEVER_STARTED
        return None


def _take_exit_code(path: str) -> int | None:
    """The exit code of the goodbye signal at ``path`` (removing it), or None if there is none yet."""
    text = take_signal(path)
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() and int(text) <= 255 else 1


def serve(tf_config: TFConfig | None = None, *, options: ServeOptions | None = None,
          work: Callable[[str, threading.Event], object] | None = None, graph_only: bool = False) -> int:
    """Runs this ps/worker task's server until the chief ends the job.

    Args:
        tf_config: this task's ``TFConfig``; None reads TF_CONFIG.
        options: the protocol's timeouts (None: ``ServeOptions.from_env()``,
            the launcher's settings or the defaults). To change one and keep
            the environment's others, pass ``ServeOptions.from_env(chief_lost_after=20)``.
        work: run in a thread beside the server, as ``work(server_target,
            stop)`` (``stop`` is set when the serving ends), e.g. a worker's
            own training loop (``fit``'s between-graph steps). If it
            raises, the task exits with ``EXIT_WORK_FAILED``.
        graph_only: the job sends this server TF1 graph steps only (an
            Estimator's ps): ``strategies._server_threads.server_config``.

    Returns:
        The exit code for this process: the chief's (0 after success), or
        ``EXIT_CHIEF_LOST`` / ``EXIT_CHIEF_NEVER_STARTED`` / ``EXIT_WORK_FAILED``.

    Raises:
        StrategyError: the task is not a server role (chief, evaluator, MWMS
            worker, or no cluster).
    """
    from tf_config import TFConfig

    cfg = TFConfig.from_env() if tf_config is None else tf_config
    if not is_server_role(cfg):
        raise StrategyError(
            f"TF_CONFIG task is {cfg.task_type}-{cfg.task_index}, which trains rather than serves; only ps "
            "tasks, and worker tasks of a cluster with ps, serve. Call run_role(cfg), which returns for "
            "training tasks, instead of serve().", field="tf_config.task"
        )
    if options is not None and not isinstance(options, ServeOptions):
        raise StrategyError(f"`options` must be a strategies.ServeOptions or None. Received: options={options!r}. "
                            "Pass e.g. options=ServeOptions(chief_lost_after=20).", field="options")
    from strategies._server_preemption import arm  # a preempted server tells its chief and serves on

    options = ServeOptions.from_env() if options is None else options
    arm(tf2_cluster(cfg.cluster), tf2_job(cfg.task_type), cfg.task_index, options)
    return serve_until_goodbye(cfg, options, work=work, graph_only=graph_only)


class _Work:
    """``work(target, stop)`` in a daemon thread; remembers whether it failed."""

    def __init__(self, work: Callable[[str, threading.Event], object], target: str, name: str) -> None:
        self.stop, self.failed = threading.Event(), False
        self.thread = threading.Thread(target=self._run, args=(work, target), name=name, daemon=True)
        self.thread.start()

    def _run(self, work: Callable[[str, threading.Event], object], target: str) -> None:
        try:
            work(target, self.stop)
        except Exception:  # the task reports it and exits; the chief sees a worker gone
            logger.exception("%s failed", self.thread.name)
            self.failed = True


def serve_until_goodbye(cfg: TFConfig, options: ServeOptions, *, peer: str = "chief",
                        work: Callable[[str, threading.Event], object] | None = None,
                        server: tf.distribute.Server | None = None, graph_only: bool = False) -> int:
    """The serve/goodbye protocol: runs this task's server until its chief (or client) ends the job.

    The one place that decides when a server exits, for every task that only
    serves: parameter-server ps and workers (``serve``), the hosts of an
    in-graph device map (``strategies.device_map.serve_devices``), and a
    ``server.join()`` in a TF1 script or a hand-built strategy
    (``strategies._hand_built``).

    Args:
        server: a server already started for this task (``join()``); None
            starts one.
        graph_only: the server it starts runs TF1 graph steps only
            (``strategies._server_threads.server_config``).

    Returns:
        The chief's exit code, ``EXIT_CHIEF_LOST``, ``EXIT_CHIEF_NEVER_STARTED``
        or ``EXIT_WORK_FAILED``.
    """
    cluster = tf2_cluster(cfg.cluster)
    job, index = tf2_job(cfg.task_type), cfg.task_index
    chief = cfg.chief_address
    if chief is None:
        raise StrategyError(
            f"TF_CONFIG `cluster` has the jobs {sorted(cfg.cluster)} but no chief, master or worker; {job}-{index} "
            f"serves until its {peer} says goodbye, so the cluster needs one. Add a chief address.",
            field="tf_config.cluster")
    path, hello = signal_path(cluster, job, index, "exit"), signal_path(cluster, job, index, "hello")
    ensure_private_dir()
    native.load()  # the steps a chief or worker sends this task may use tfdist's kernels (they probe first)
    if server is None:  # a server of our own: no signal can have come yet, so older files are stale
        clear_signals([path, hello])
        import tensorflow as tf

        server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=job, task_index=index,
                                      protocol=cfg.rpc_layer or "grpc", start=True,
                                      config=server_config(cluster, cluster[job][index], graph_only=graph_only))
    logger.info("%s-%d serving at %s (%s); exits when the %s at %s says goodbye or is gone for %.0f s",
                job, index, cfg.address, server.target, peer, cfg.chief_address, options.chief_lost_after)
    watch = _ChiefWatch(chief, start_timeout=options.chief_start_timeout,
                        lost_after=options.chief_lost_after)
    running = None if work is None else _Work(work, server.target, f"{job}-{index} work")
    try:
        code = _serve_loop(job, index, peer, path, hello, watch, options, running)
    finally:
        if running is not None:  # let it leave TensorFlow's calls before the interpreter exits
            running.stop.set()
            running.thread.join(timeout=options.work_join_timeout)
        clear_signals([hello])
    if running is not None and running.thread.is_alive():
        # Its thread is still inside a TensorFlow call (e.g. one to a ps that has already exited): an
        # interpreter teardown now would unwind it, or free what it uses, and abort the process
        # ("terminate called after throwing ...", SIGABRT, 134) instead of exiting with ``code``.
        logger.warning("%s-%d: its work did not stop within %g s (work_join_timeout); exiting with %d without "
                       "tearing the interpreter down", job, index, options.work_join_timeout, code)
        leave_process(code)
    return code


def _serve_loop(job: str, index: int, peer: str, path: str, hello: str, watch: _ChiefWatch, options: ServeOptions,
                running: _Work | None) -> int:
    """Polls for the goodbye, the chief's fate and the work's failure; returns the exit code."""
    while True:
        if running is not None and running.failed:
            logger.error("%s-%d: its work failed (above); exiting with %d", job, index, EXIT_WORK_FAILED)
            return EXIT_WORK_FAILED
        code = _take_exit_code(path)
        if code is not None:
            logger.info("%s-%d: the %s said goodbye; exiting with %d", job, index, peer, code)
            return code
        code = watch.verdict(hello=not watch.seen and take_signal(hello) is not None)
        if code is not None:
            return code
        time.sleep(options.poll_interval)


def leave_process(code: int) -> NoReturn:
    """Ends the process with ``code`` from any thread: atexit handlers run, the logs and streams are flushed,
    and the interpreter is not torn down (``os._exit``), so threads still inside TensorFlow cannot abort it."""
    import atexit

    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def run_role(tf_config: TFConfig | None = None, *, strategy: str = "auto", options: ServeOptions | None = None,
             worker_work: Callable[[str, threading.Event], object] | None = None) -> TFConfig:
    """Serves and exits in ps/worker tasks; returns in tasks that train.

    Put it at the top of a training script: under ParameterServerStrategy the
    ps and worker processes serve until the chief ends the job and then leave
    with ``sys.exit(code)``, so they never reach the training code. The chief,
    every MultiWorkerMirrored worker, the evaluator and a local run get the
    ``TFConfig`` back and go on to train.

    Called before anything imports TensorFlow (or Keras), a serving task also
    leaves out Keras, scikit-learn, matplotlib and SciPy, which TensorFlow's
    import would otherwise pull in and a server never runs (``strategies._lean``).

    Example:
        >>> cfg = run_role()                                   # doctest: +SKIP
        >>> strategy = make_strategy(tf_config=cfg)  # doctest: +SKIP

    Args:
        tf_config: this task's ``TFConfig``; None reads TF_CONFIG.
        strategy: the strategy the job uses; ``auto`` derives it from the
            cluster (ps present means parameter_server). Other names are
            checked against the TF_CONFIG first.
        options: see ``serve``.
        worker_work: a parameter-server *worker*'s own work beside its server
            (``serve(work=...)``); ps tasks only serve. None: the worker runs the
            step graphs a chief ships (``strategies._shipped_steps``), if any.

    Returns:
        The ``TFConfig``, for tasks that train. Server tasks do not return.

    Raises:
        tf_config.TFConfigError: the TF_CONFIG cannot serve ``strategy``.
        SystemExit: in server tasks, when the job is over.
    """
    from tf_config import TFConfig

    cfg = TFConfig.from_env() if tf_config is None else tf_config
    check_name(strategy)
    if strategy != "auto":
        cfg.check(strategy=strategy)
    if not is_server_role(cfg):
        return cfg
    cfg.check(strategy="parameter_server")  # fail as fast as the chief will, rather than wait for it
    work = worker_work if cfg.task_type == "worker" else None
    if work is None:  # a worker with its own work (a training loop) may need Keras & co.
        skip_imports(SERVER_UNUSED_MODULES)
        if cfg.task_type == "worker":  # runs the steps a Keras model.fit chief ships (TensorFlow alone)
            work = shipped_steps_work(int(cfg.task_index or 0))
    code = serve(cfg, options=options, work=work)
    sys.exit(code)
