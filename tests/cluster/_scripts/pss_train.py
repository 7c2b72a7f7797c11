"""A tiny ParameterServerStrategy custom loop, run by the cluster tests.

Every task runs this same file; ``run_role`` turns ps and worker processes into
servers that exit when the chief says goodbye. The chief trains a small Keras
model on synthetic data through ``ClusterCoordinator.schedule`` and writes
``result.json`` into its task directory.

Test knobs: ``--kill-worker NAME`` makes the chief SIGKILL that worker (by the
pid file it wrote) after ``--kill-at-step`` steps, on the first attempt only,
wait until the restarted worker serves again and train the remaining steps; ``--await-kill NAME``
does the same but leaves the killing to someone else (it writes ``<job dir>/paused`` and waits);
``--chief-dies-at-step``
makes the chief SIGKILL itself; ``--fail`` makes it raise after training.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

_PRELOADED = "tensorflow" in sys.modules  # only in a task forked from a preload process (`--preload`)


def _parse(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--kill-worker", default=None)
    parser.add_argument("--await-kill", default=None, help="at --kill-at-step, wait for this task to be killed "
                        "from outside and restarted")
    parser.add_argument("--kill-at-step", type=int, default=20)
    parser.add_argument("--chief-dies-at-step", type=int, default=None)
    parser.add_argument("--fail", action="store_true")
    return parser.parse_args(argv)


def _task_dir() -> Path:
    return Path(os.environ.get("TFDIST_TASK_DIR", "."))


def _pid_file(task: str) -> Path:
    return Path(os.environ["TFDIST_JOB_DIR"]) / "tasks" / task / "pid"


def _first_attempt() -> bool:
    return os.environ.get("TFDIST_RESTART_COUNT", "0") == "0"


def _listening(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def _kill_and_wait_for_restart(cfg, task: str) -> None:
    """Kills ``task`` and returns once its replacement serves again at the same address."""
    old_pid = int(_pid_file(task).read_text())
    os.kill(old_pid, signal.SIGKILL)
    print(f"killed {task} (pid {old_pid})", flush=True)
    _wait_for_restart(cfg, task, old_pid)


def _pause_for_a_kill(cfg, task: str) -> None:
    """Writes ``<job dir>/paused`` and waits until someone else killed ``task`` and it serves again."""
    old_pid = int(_pid_file(task).read_text())
    (Path(os.environ["TFDIST_JOB_DIR"]) / "paused").write_text(task)
    print(f"paused for a kill of {task} (pid {old_pid})", flush=True)
    _wait_for_restart(cfg, task, old_pid)


def _wait_for_restart(cfg, task: str, old_pid: int) -> None:
    task_type, _, index = task.rpartition("-")
    address = cfg.cluster[task_type][int(index)]
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        text = _pid_file(task).read_text() if _pid_file(task).exists() else ""
        if text and int(text) != old_pid and _listening(address):
            print(f"{task} restarted as pid {text} and serves again", flush=True)
            return
        time.sleep(0.2)
    raise RuntimeError(f"{task} was not back within 180 s")


def _train(args, cfg) -> dict:
    import keras
    import tensorflow as tf

    from strategies import chief_session, make_coordinator, make_strategy

    strategy = make_strategy(tf_config=cfg)
    coordinator = make_coordinator(strategy)
    with chief_session(strategy):
        with strategy.scope():
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
            optimizer = keras.optimizers.SGD(0.05)
            steps_done = tf.Variable(0, dtype=tf.int64)  # a plain variable: assign_add is atomic on the ps

        x_all = tf.random.stateless_normal((512, 4), seed=(1, 2))
        y_all = tf.reduce_sum(x_all, axis=1, keepdims=True)

        def mse() -> float:  # on the chief, with the weights as they are on the ps
            return float(tf.reduce_mean((model(x_all) - y_all) ** 2))

        def dataset_fn(context):
            return tf.data.Dataset.from_tensor_slices((x_all, y_all)).repeat().batch(16)

        per_worker = coordinator.create_per_worker_dataset(
            lambda: strategy.distribute_datasets_from_function(dataset_fn))
        iterator = iter(per_worker)

        @tf.function
        def step(it):
            def replica_fn(x, y):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean((model(x) - y) ** 2)
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=False))
                steps_done.assign_add(1)
                return loss

            x, y = next(it)
            return strategy.run(replica_fn, args=(x, y))

        loss_before = mse()
        for i in range(args.steps):
            coordinator.schedule(step, args=(iterator,))
            if i + 1 == args.chief_dies_at_step:
                coordinator.join()
                os.kill(os.getpid(), signal.SIGKILL)
            if i + 1 == args.kill_at_step and args.kill_worker and _first_attempt():
                coordinator.join()
                _kill_and_wait_for_restart(cfg, args.kill_worker)
            if i + 1 == args.kill_at_step and args.await_kill and _first_attempt():
                coordinator.join()
                _pause_for_a_kill(cfg, args.await_kill)
        coordinator.join()
        result = {"steps": int(steps_done.numpy()), "loss_before": loss_before, "loss_after": mse()}
        if args.fail:
            raise RuntimeError("planned failure after training")
    # after the goodbye no coordinator thread may be left to die inside TensorFlow when the interpreter exits
    result["coordinator_threads"] = sorted(thread.name for thread in threading.enumerate() if thread.name.startswith(
        ("WorkerClosureProcessingLoop", "WorkerPreemptionHandler")))
    return result


def main(argv=None) -> int:
    args = _parse(argv)
    if "TFDIST_JOB_DIR" in os.environ:
        _task_dir().mkdir(parents=True, exist_ok=True)
        (_task_dir() / "pid").write_text(str(os.getpid()))
        (_task_dir() / "preloaded").write_text(json.dumps(_PRELOADED))
    from strategies import run_role

    cfg = run_role()
    result = _train(args, cfg)
    out = args.out or _task_dir() / "result.json"
    out.write_text(json.dumps(result))
    print(f"trained {result['steps']} steps, loss {result['loss_before']:.4f} -> {result['loss_after']:.4f}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
