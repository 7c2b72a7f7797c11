"""A graph-mode Estimator job whose chief preempts itself at a chosen step, for the Estimator preemption test.

A TF1 ``model_fn`` (``tf.compat.v1`` layers, losses and optimizer) on
synthetic data, trained with ``toolkit.estimator`` by every task of the
launcher's cluster (ps + chief + workers; the ps serves inside ``train()``).
Checkpoints land only every ``--save-every`` steps, so a checkpoint off that
schedule is the preemption's. On the job's first run the chief's hook sends
SIGTERM to its own process once the global step reaches ``--preempt-at`` and
appends ``chief <step>`` to ``<job dir>/signals.txt``. The worker trains at
``--worker-delay`` s a step and stops 10 steps before the end; the chief
waits for it there, so that no worker step lands after the chief's last. With
``--preempt-ps-at``, on the job's second run the chief sends SIGTERM to ps-0 once the
global step reaches that step (``ps-0 <step>`` in ``signals.txt``; every task writes
``pid-<restart>`` into its task directory first). The chief writes
``<model dir>/../result.json`` when training completes.

Usage (inside ``tfdist launch ... --``):
    python preempt_estimator.py --model-dir DIR [--max-steps 150] [--save-every 50] [--preempt-at 70]
                                [--preempt-ps-at 110]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from pathlib import Path


def _preempter(at: int, ps_at: int = 0):
    import tensorflow as tf

    job_dir = Path(os.environ["TFDIST_JOB_DIR"])
    run = os.environ.get("TFDIST_RESTART_COUNT", "0")
    first = run == "0"

    class Preempter(tf.compat.v1.train.SessionRunHook):
        def __init__(self) -> None:
            self.pending = first and at > 0
            self.ps_pending = run == "1" and ps_at > 0

        def begin(self) -> None:
            self._step = tf.compat.v1.train.get_global_step()

        def before_run(self, run_context):
            return tf.compat.v1.train.SessionRunArgs(self._step)

        def after_run(self, run_context, run_values):
            step = int(run_values.results)
            if self.pending and step >= at:
                self.pending = False
                with open(job_dir / "signals.txt", "a") as fh:
                    fh.write(f"chief {step}\n")
                os.kill(os.getpid(), signal.SIGTERM)
            if self.ps_pending and step >= ps_at:
                self.ps_pending = False
                with open(job_dir / "signals.txt", "a") as fh:
                    fh.write(f"ps-0 {step}\n")
                os.kill(int((job_dir / "tasks" / "ps-0" / f"pid-{run}").read_text()), signal.SIGTERM)

    return Preempter()


def _slow_worker(stop_at: int, delay: float):
    """The worker's pace: ``delay`` s per step; it stops at ``stop_at`` and leaves the last steps to the chief.

    Asynchronous steps race: a worker step landing between the chief's last
    step and its final save would move the final checkpoint past ``max_steps``.
    So the worker writes ``<job dir>/worker-stopped-<run>`` once its last step
    has landed (its session's end), and the chief waits for that file
    (``_await_worker``; a cluster restart starts both tasks again, so their
    ``TFDIST_RESTART_COUNT`` agree).
    """
    import time

    import tensorflow as tf

    run = os.environ.get("TFDIST_RESTART_COUNT", "0")
    job_dir = Path(os.environ["TFDIST_JOB_DIR"])

    class SlowWorker(tf.compat.v1.train.SessionRunHook):
        def begin(self) -> None:
            self._step = tf.compat.v1.train.get_global_step()

        def before_run(self, run_context):
            time.sleep(delay)
            return tf.compat.v1.train.SessionRunArgs(self._step)

        def after_run(self, run_context, run_values):
            if int(run_values.results) + 1 >= stop_at:
                run_context.request_stop()

        def end(self, session) -> None:
            (job_dir / f"worker-stopped-{run}").write_text(str(session.run(self._step)))

    return SlowWorker()


def _await_worker(from_step: int):
    """The chief takes no step past ``from_step`` before the worker has stopped (at most 120 s)."""
    import time

    import tensorflow as tf

    done = Path(os.environ["TFDIST_JOB_DIR"]) / f"worker-stopped-{os.environ.get('TFDIST_RESTART_COUNT', '0')}"

    class AwaitWorker(tf.compat.v1.train.SessionRunHook):
        def begin(self) -> None:
            self._step = tf.compat.v1.train.get_global_step()

        def before_run(self, run_context):
            if run_context.session.run(self._step) >= from_step:
                deadline = time.monotonic() + 120
                while not done.exists() and time.monotonic() < deadline:
                    time.sleep(0.1)

    return AwaitWorker()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--max-steps", type=int, default=150)
    parser.add_argument("--save-every", type=int, default=50)
    parser.add_argument("--preempt-at", type=int, default=0)
    parser.add_argument("--preempt-ps-at", type=int, default=0, help="on the second run, SIGTERM ps-0 here")
    parser.add_argument("--worker-delay", type=float, default=0.1, help="seconds the worker sleeps after a step")
    args = parser.parse_args(argv)
    task_dir = Path(os.environ.get("TFDIST_TASK_DIR", "."))
    (task_dir / f"pid-{os.environ.get('TFDIST_RESTART_COUNT', '0')}").write_text(str(os.getpid()))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    import numpy as np

    import toolkit.compat.v1 as tf

    def model_fn(features, labels, mode, config):
        hidden = tf.layers.dense(features, 16, activation=tf.nn.relu)
        logits = tf.layers.dense(hidden, 2)
        loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
        train_op = tf.train.AdamOptimizer(0.01).minimize(loss, global_step=tf.train.get_global_step())
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

    x = np.random.RandomState(0).normal(size=(512, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    config = tf.estimator.RunConfig(model_dir=args.model_dir, save_checkpoints_steps=args.save_every,
                                    save_checkpoints_secs=None, keep_checkpoint_max=20)
    estimator = tf.estimator.Estimator(model_fn, config=config)
    stop_at = args.max_steps - 10
    chief = [_preempter(args.preempt_at, args.preempt_ps_at), _await_worker(stop_at)]
    hooks = chief if estimator.config.is_chief else [_slow_worker(stop_at, args.worker_delay)]
    estimator.train(lambda: tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32),
                    max_steps=args.max_steps, hooks=hooks)
    if estimator.config.is_chief:
        step = int(estimator.get_variable_value("global_step"))
        (Path(args.model_dir).parent / "result.json").write_text(json.dumps({"global_step": step}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
