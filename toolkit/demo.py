"""The demo's training script: digits on whatever cluster TF_CONFIG describes.

``tfdist demo`` runs it in every task of a local cluster (1 chief, 2 workers,
1 ps); it is also an ordinary script, e.g. one process without TF_CONFIG::

    python -m toolkit.demo --model-dir runs/digits

The chief prints the progress bar, then the final test accuracy, and writes
``demo_result.json`` next to the model for the CLI to report.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["main", "MODELS", "RESULT_FILE"]

RESULT_FILE = "demo_result.json"
_BATCH = 64


def _mlp():
    from models import digits_mlp

    return digits_mlp(seed=0)


def _cnn():
    from models import digits_cnn

    return digits_cnn(seed=0)


MODELS: Mapping[str, Callable] = {"mlp": _mlp, "cnn": _cnn}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m toolkit.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True, help="checkpoints, summaries and exports")
    parser.add_argument("--model", choices=sorted(MODELS), default="mlp")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--steps-per-execution", type=int, default=2)
    parser.add_argument("--learning-rate", type=float, default=5e-3)
    parser.add_argument("--between-graph", action="store_true",
                        help="each worker runs its own graph-mode step loop (one step per execution)")
    return parser


def main(argv: Sequence[str] | None = None, *, callbacks: Sequence[Any] = ()) -> int:
    """Runs the demo in this task; ``callbacks`` are Keras callbacks for the chief (e.g. a benchmark's)."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.between_graph:  # a worker says when its own step loop is ready, and how many steps it ran
        logging.getLogger("toolkit.training.between_graph_worker").setLevel(logging.INFO)
    from strategies import TRAINER_UNUSED_MODULES, run_role, skip_imports
    from tf_config import TFConfig

    # ps (and, through the coordinator, workers) serve here and exit; first, so that they never import Keras or
    # scikit-learn. Between-graph workers train with Keras: fit gives them their role.
    if not args.between_graph or TFConfig.from_env().is_ps:
        run_role()
    # The chief trains with Keras but none of Keras' optional companions (scikit-learn, SciPy,
    # matplotlib, ...): leaving them out saves it about 100 MiB and 2 s of start-up.
    skip_imports(TRAINER_UNUSED_MODULES)
    import keras

    from toolkit import data, fit
    from toolkit.training import FitOptions

    def model_fn():
        model = MODELS[args.model]()
        model.compile(optimizer=keras.optimizers.Adam(args.learning_rate),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"],
                      steps_per_execution=1 if args.between_graph else args.steps_per_execution)
        return model

    train, test = data.load("digits", split="train"), data.load("digits", split="test")
    history = fit(
        model_fn, train.dataset_fn(_BATCH, seed=0),
        epochs=args.epochs, steps_per_epoch=train.steps_per_epoch(_BATCH),
        validation_fn=test.dataset_fn(_BATCH, shuffle=False, repeat=False, drop_remainder=False),
        model_dir=args.model_dir, callbacks=callbacks, options=FitOptions(between_graph=args.between_graph),
    )
    if history.role != "chief":
        return 0
    accuracy = history.final("val_accuracy")
    print(f"final test accuracy: {accuracy:.4f} on {test.num_examples} held-out digits "
          f"after {history.global_step} steps", flush=True)
    result = {"test_accuracy": accuracy, "global_step": history.global_step, "model_dir": args.model_dir,
              "exports": history.exports, "steps_per_sec": history.rates[-1]["steps_per_sec"] if history.rates else 0}
    tmp = os.path.join(args.model_dir, f".{RESULT_FILE}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    os.replace(tmp, os.path.join(args.model_dir, RESULT_FILE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
