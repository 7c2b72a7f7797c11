"""A ``toolkit.fit`` job whose chief preempts tasks at chosen steps, for the preemption cluster tests.

Every task writes ``pid-<restart>`` into its task directory before importing
TensorFlow. On its first run the chief's callback sends SIGTERM to each
``--preempt TASK@STEP`` target once the global step reaches STEP (``chief``
means itself; before signalling, it waits until every task preempted earlier
has been restarted), and appends ``TASK STEP`` to ``<job dir>/signals.txt``;
``TASK@STEP@RUN`` signals in the job's run RUN (its restart count) instead.
The chief writes ``<model dir>/../result.json`` when training completes.
With ``--keras`` the job is Keras' own ``model.fit`` (through
``toolkit.enable_distributed_keras()``) with ``BackupAndRestore(<model dir>)``
instead of ``toolkit.fit``.

Usage (inside ``tfdist launch ... --``):
    python preempt_fit.py --model-dir DIR [--epochs 3] [--steps-per-epoch 50] [--preempt worker-0@30 ...]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path


def _pid(job_dir: Path, task: str, run: int) -> int | None:
    path = job_dir / "tasks" / task / f"pid-{run}"
    return int(path.read_text()) if path.exists() else None


def _preempter(targets: list[tuple[str, int, int]], steps_per_epoch: int):
    import keras

    job_dir = Path(os.environ["TFDIST_JOB_DIR"])
    run = int(os.environ.get("TFDIST_RESTART_COUNT", "0"))

    class Preempter(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.pending = [(task, step) for task, step, in_run in targets if in_run == run]
            self.epoch, self.sent = 0, []

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            step = self.epoch * steps_per_epoch + batch + 1
            while self.pending and step >= self.pending[0][1]:
                task, _ = self.pending.pop(0)
                for earlier in self.sent:  # the job must have taken it back first: its server is up again
                    log, deadline = job_dir / "logs" / f"{earlier}.log", time.monotonic() + 90
                    while log.read_text().count(" serving at ") < 2 and time.monotonic() < deadline:
                        time.sleep(0.2)
                    time.sleep(2.0)
                with open(job_dir / "signals.txt", "a") as fh:
                    fh.write(f"{task} {step}\n")
                name = os.environ["TFDIST_TASK_NAME"] if task == "chief" else task
                pid = os.getpid() if task == "chief" else _pid(job_dir, name, run)
                assert pid is not None, f"no pid file for {task}"
                os.kill(pid, signal.SIGTERM)
                self.sent.append(name)

    return Preempter()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps-per-epoch", type=int, default=50)
    parser.add_argument("--preempt", action="append", default=[], help="TASK@STEP")
    parser.add_argument("--keras", action="store_true")
    args = parser.parse_args(argv)
    task_dir = Path(os.environ.get("TFDIST_TASK_DIR", "."))
    (task_dir / f"pid-{os.environ.get('TFDIST_RESTART_COUNT', '0')}").write_text(str(os.getpid()))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    targets = [(t.split("@")[0], int(t.split("@")[1]), int((t.split("@") + ["0"])[2])) for t in args.preempt]
    if args.keras:
        return _keras_fit(args, targets)
    import keras

    import models
    from strategies import StrategyOptions
    from toolkit import CheckpointConfig, LogConfig, data, fit
    from toolkit.training import FitOptions

    def model_fn() -> keras.Model:
        model = models.digits_mlp(seed=0)
        model.compile(optimizer=keras.optimizers.Adam(3e-3), metrics=["accuracy"],
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    train = data.load("digits")
    history = fit(model_fn, train.dataset_fn(64, seed=1), epochs=args.epochs,
                  steps_per_epoch=args.steps_per_epoch, model_dir=args.model_dir, verbose=0,
                  callbacks=[_preempter(targets, args.steps_per_epoch)],
                  options=FitOptions(logs=LogConfig(every=5), checkpoint=CheckpointConfig(keep=10), export=False,
                                     strategy=StrategyOptions(connect_timeout=120)))
    if history.role == "chief":
        (Path(args.model_dir).parent / "result.json").write_text(json.dumps({"global_step": history.global_step}))
    return 0


def _keras_fit(args: argparse.Namespace, targets: list[tuple[str, int, int]]) -> int:
    from strategies import make_strategy, run_role

    cfg = run_role()  # parameter-server ps and workers serve here
    import keras

    import models
    import toolkit
    from toolkit import data

    toolkit.enable_distributed_keras()
    train = data.load("digits")
    with make_strategy(tf_config=cfg).scope():
        model = models.digits_mlp(seed=0)
        model.compile(optimizer=keras.optimizers.Adam(3e-3), steps_per_execution=1,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    backup = keras.callbacks.BackupAndRestore(args.model_dir, delete_checkpoint=False)
    history = model.fit(train.dataset_fn(64, seed=1), epochs=args.epochs, steps_per_epoch=args.steps_per_epoch,
                        verbose=0, callbacks=[backup, _preempter(targets, args.steps_per_epoch)])
    if cfg.is_chief:
        steps = len(history.epoch) and args.epochs * args.steps_per_epoch
        (Path(args.model_dir).parent / "result.json").write_text(json.dumps({"global_step": steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
