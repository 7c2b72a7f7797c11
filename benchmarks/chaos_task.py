"""The job ``benchmarks/chaos.py`` disturbs: digits under ``toolkit.fit``, one script for every task.

Each start writes ``pid-<restart>`` into its task directory *before* importing
TensorFlow, so the harness can find (and kill) a task even during start-up.
The chief writes ``<model_dir>/../result.json`` (its final global step and
validation accuracy) when training completes. ``--job keras`` and ``--job
estimator`` train the same digits with Keras' own ``model.fit`` or the
graph-mode Estimator instead (``_chaos_jobs.py``).

Usage (inside ``tfdist launch ... --``):
    python benchmarks/chaos_task.py --model-dir DIR [--epochs 3] [--steps-per-epoch 100] [--checkpoint-every 25]
                                    [--job fit|keras|estimator]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

BATCH = 64


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps-per-epoch", type=int, default=100)
    parser.add_argument("--checkpoint-every", type=int, default=25)
    parser.add_argument("--job", choices=("fit", "keras", "estimator"), default="fit")
    args = parser.parse_args(argv)
    task_dir = Path(os.environ.get("TFDIST_TASK_DIR", "."))
    (task_dir / f"pid-{os.environ.get('TFDIST_RESTART_COUNT', '0')}").write_text(str(os.getpid()))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.job != "fit":
        from _chaos_jobs import JOBS

        return JOBS[args.job](args)
    import keras

    import models
    from strategies import StrategyOptions
    from toolkit import CheckpointConfig, LogConfig, ValidationConfig, data, fit
    from toolkit.training import FitOptions

    def model_fn():
        model = models.digits_mlp(seed=0)
        model.compile(optimizer=keras.optimizers.Adam(3e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
        return model

    train, test = data.load("digits"), data.load("digits", split="test")
    history = fit(model_fn, train.dataset_fn(BATCH, seed=1), epochs=args.epochs, steps_per_epoch=args.steps_per_epoch,
                  validation_fn=test.dataset_fn(BATCH, shuffle=False, repeat=False, drop_remainder=False),
                  model_dir=args.model_dir, verbose=0,
                  options=FitOptions(logs=LogConfig(every=5),
                                     checkpoint=CheckpointConfig(every=args.checkpoint_every, keep=2), export=False,
                                     validation=ValidationConfig(evaluator_timeout=180),
                                     strategy=StrategyOptions(connect_timeout=120)))
    if history.role == "chief":
        result = {"global_step": history.global_step, "val_accuracy": history.history["val_accuracy"][-1]}
        (Path(args.model_dir).parent / "result.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
