"""``server.join()`` and hand-built strategies in the one serve/goodbye protocol.

TensorFlow's published examples end their ps (and idle worker) tasks with
``server.join()``, which never returns, and build ``ParameterServerStrategy``
from ``TFConfigClusterResolver`` without any shutdown call. Two entry points
bring such scripts into the protocol without a tfdist call in them:

* ``toolkit.compat.v1``'s ``train.Server`` (a TF1 script's one changed import)
  is ``server_class()``: ``join()`` serves until the chief's goodbye, and in a
  training task the server arms the between-graph ending (the chief, or
  worker 0 without one, waits for the other workers and then ends the ps
  tasks; every other worker reports done when its process exits).
* Under ``tfdist launch`` each Python task loads the launcher's
  ``sitecustomize``, which calls ``install()`` once the script has imported
  TensorFlow (a task forked from a preload process calls
  ``install_if_imported()``): TensorFlow's own ``Server.join()`` serves until the
  goodbye, and a ``ParameterServerStrategy`` built by hand greets its servers
  and says goodbye at exit, as one from ``make_strategy`` does.

``join()`` never returns, as TF1's did: once the chief says goodbye it ends the
process with the goodbye's code (0, the chief's failure, ``EXIT_CHIEF_LOST``,
...), atexit handlers run. TF1 scripts such as Kubeflow's ``dist_mnist.py`` put
the worker code right after ``if job_name == "ps": server.join()`` with no
``return``: a ``join()`` that returned would run it on the ps.
"""
from __future__ import annotations

import functools
import logging
import sys
import threading
from typing import TYPE_CHECKING, Any, NoReturn

from strategies._cluster import tf2_cluster, tf2_job

if TYPE_CHECKING:
    import tensorflow as tf

    from tf_config import TFConfig

__all__ = ["ENV_HAND_BUILT", "arm_trainer", "install", "install_if_imported", "join", "prepare", "server_class"]

logger = logging.getLogger(__name__)

#: set by the launcher in every task it starts: TensorFlow's own servers and strategies join the protocol
ENV_HAND_BUILT = "TFDIST_HAND_BUILT"
_PATCHED = "_tfdist_patched"


def task_config(server: tf.distribute.Server) -> TFConfig:
    """This server's cluster and task, as a ``TFConfig`` (from its ``ServerDef``)."""
    import tensorflow as tf

    from tf_config import TFConfig

    definition = server.server_def
    spec = tf.train.ClusterSpec(definition.cluster)
    cluster = tf2_cluster({job: tuple(spec.job_tasks(job)) for job in spec.jobs})
    # the cluster is TF2's (``master`` renamed ``chief``), so is the task's job: a TF1 script's own
    # ``Server(cluster, job_name="master")`` under CMLE's TF_CONFIG is the chief
    return TFConfig.from_dict({"cluster": cluster, "task": {"type": tf2_job(definition.job_name),
                                                             "index": definition.task_index}})


def prepare(server: tf.distribute.Server) -> None:
    """Right after a server starts: its private signal directory, and no signal an earlier job left."""
    from strategies._signals import clear_signals, ensure_private_dir, signal_path

    cfg = task_config(server)
    cluster, job = tf2_cluster(cfg.cluster), tf2_job(cfg.task_type)
    ensure_private_dir()
    clear_signals([signal_path(cluster, job, cfg.task_index, kind) for kind in ("exit", "hello")])


def join(server: tf.distribute.Server) -> NoReturn:
    """``server.join()`` in a tfdist job: serves until the chief's goodbye, then ends the process with its code.

    A worker of a cluster with ps also runs the step graphs a Keras ``model.fit`` chief ships
    (``strategies._shipped_steps``), as one that serves in ``run_role()`` does.
    """
    from strategies._roles import serve_until_goodbye
    from strategies._serve_options import ServeOptions
    from strategies._shipped_steps import shipped_steps_work

    cfg = task_config(server)
    work = shipped_steps_work(int(cfg.task_index or 0)) if cfg.task_type == "worker" and cfg.num_ps > 0 else None
    code = serve_until_goodbye(cfg, ServeOptions.from_env(), server=server, work=work)
    end_process(code)


def end_process(code: int) -> NoReturn:
    """Exits with ``code`` as ``sys.exit`` does (atexit handlers run), from any thread: TF1's ``join()`` never
    returned, so nothing after it may run, whichever thread called it."""
    if threading.current_thread() is threading.main_thread():
        sys.exit(code)
    from strategies._roles import leave_process

    leave_process(code)


def arm_trainer(server: tf.distribute.Server) -> None:
    """In a between-graph task that trains (chief or worker of a cluster with ps): arms its end of the job."""
    from strategies import _shutdown

    cfg = task_config(server)
    cluster = tf2_cluster(cfg.cluster)
    job = tf2_job(cfg.task_type)
    if job not in ("chief", "worker") or not cluster.get("ps"):
        return
    ending, chief = _shutdown.between_graph_ending(cluster), _shutdown.chief_of(cluster)
    if (job, cfg.task_index) == chief:
        _shutdown.expect_trainers(cluster, chief, ending.trainers)
        _shutdown.arm(ending)
    else:
        _shutdown.arm_report(cluster, (job, cfg.task_index), chief)


def install() -> None:
    """Makes TensorFlow's ``Server.join()`` and ``ParameterServerStrategy`` speak the protocol (once)."""
    import tensorflow as tf

    server_class, strategy_class = tf.distribute.Server, tf.distribute.ParameterServerStrategy
    if getattr(server_class, _PATCHED, False):
        return
    server_init, strategy_init = server_class.__init__, strategy_class.__init__

    def init_server(self: Any, *args: Any, **kwargs: Any) -> None:
        server_init(self, *args, **kwargs)
        prepare(self)

    def init_strategy(self: Any, *args: Any, **kwargs: Any) -> None:
        from strategies._shutdown import greet

        strategy_init(self, *args, **kwargs)
        greet(self)

    server_class.__init__ = init_server
    server_class.join = join
    strategy_class.__init__ = init_strategy
    setattr(server_class, _PATCHED, True)
    logger.info("tf.distribute.Server.join() and ParameterServerStrategy end with the chief's goodbye")


def install_if_imported() -> None:
    """``install()`` if TensorFlow is already imported (a task forked from a preload process)."""
    if "tensorflow" in sys.modules:
        install()


@functools.cache
def server_class() -> type:
    """``tf.distribute.Server`` whose ``join()`` ends with the job and whose training tasks arm its end."""
    import tensorflow as tf

    class TF1Server(tf.distribute.Server):  # type: ignore[misc, name-defined]
        """``tf.train.Server`` for TF1 scripts: ``join()`` ends the process when the job's training is done."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            from strategies import _native

            _native.load()  # a worker's join() may run Keras steps a chief built with tfdist's kernels
            super().__init__(*args, **kwargs)
            prepare(self)
            arm_trainer(self)

        def join(self) -> NoReturn:
            join(self)

    TF1Server.__name__ = TF1Server.__qualname__ = "Server"
    TF1Server.__module__ = "toolkit.compat.v1"
    return TF1Server
