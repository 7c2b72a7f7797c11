"""A digits/MNIST classifier written against toolkit.estimator: one script for every task.

Run it the way Estimator scripts always ran: once per task, each with its own
TF_CONFIG. With no TF_CONFIG it trains and evaluates in this process.
"""
from __future__ import annotations

import argparse
import logging
import sys

_EPILOG = """\
distributed run (one terminal per task, same directory, same flags):

  export TF_CONFIG='{"cluster": {"ps": ["localhost:2221"], "chief": ["localhost:2222"],
                                 "worker": ["localhost:2223", "localhost:2224"]},
                     "task": {"type": "ps", "index": 0}}'
  python estimator.py

  ...then the same with "task": {"type": "chief", "index": 0}, {"type": "worker", "index": 0}
  and {"type": "worker", "index": 1}. Add "task": {"type": "evaluator", "index": 0} in a fifth
  terminal for an evaluator that reports accuracy on every new checkpoint.

The ps and worker tasks serve the chief and exit 0 when it is done; the chief trains
(parameter-server strategy when the cluster has ps, multi-worker mirrored when it has
several workers and no ps), evaluates the final checkpoint and exports a SavedModel.
`tfdist tf-config generate --chief 1 --workers 2 --ps 1` prints the four exports, with
free ports, ready to paste; `tfdist tf-config validate` checks one.

exit codes: 0 success (every task), 1 training failed or TF_CONFIG invalid, 2 bad flags.
"""


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Train a digits/MNIST classifier with toolkit.estimator, locally or on a TF_CONFIG cluster.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", default="estimator_model",
                        help="checkpoints, summaries and exports; every task must see the same directory")
    parser.add_argument("--train_steps", type=int, default=1000, help="global steps to train")
    parser.add_argument("--batch_size", type=int, default=64, help="global batch size")
    parser.add_argument("--learning_rate", type=float, default=0.01)
    parser.add_argument("--eval_steps", type=int, default=None, help="evaluation batches (default: whole test set)")
    parser.add_argument("--save_checkpoints_steps", type=int, default=100)
    parser.add_argument("--throttle_secs", type=float, default=0.0, help="evaluator: seconds between evaluations")
    parser.add_argument("--dataset", default="digits",
                        help="'digits' (embedded, offline) or 'tfds:mnist' prepared in --data_dir")
    parser.add_argument("--data_dir", default=None, help="TFDS data directory for --dataset tfds:...")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    return parser.parse_args(argv)


def model_fn(features, labels, mode, params):
    """TF1's classic model_fn, in Keras layers: hidden layer, logits, softmax head."""
    import keras

    from toolkit.estimator import EstimatorSpec, ModeKeys

    x = keras.layers.Flatten(name="flatten")(features)
    x = keras.layers.Dense(params["hidden_units"], activation="relu", name="hid")(x)
    logits = keras.layers.Dense(params["num_classes"], name="sm")(x)
    predictions = {"classes": keras.ops.argmax(logits, axis=-1), "probabilities": keras.ops.softmax(logits)}
    if mode == ModeKeys.PREDICT:
        return EstimatorSpec(mode, predictions=predictions)
    loss = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    metrics = {"accuracy": keras.metrics.sparse_categorical_accuracy(labels, logits)}
    return EstimatorSpec(mode, predictions=predictions, loss=loss, eval_metric_ops=metrics,
                         optimizer=keras.optimizers.Adam(params["learning_rate"]))


def _input_fns(args: argparse.Namespace):
    import tensorflow as tf

    from toolkit import data

    train = data.load(args.dataset, split="train", data_dir=args.data_dir)
    test = data.load(args.dataset, split="test", data_dir=args.data_dir)
    train_fn = train.dataset_fn(args.batch_size, seed=0)

    def train_input_fn(input_context):
        return train_fn(input_context)

    def eval_input_fn():
        return test.dataset_fn(args.batch_size, shuffle=False, repeat=False, drop_remainder=False)(
            tf.distribute.InputContext())

    return train_input_fn, eval_input_fn, train.num_classes


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from tf_config import TFConfigError

    from toolkit.estimator import Estimator, EvalSpec, RunConfig, TrainSpec, train_and_evaluate

    try:
        config = RunConfig(model_dir=args.model_dir, save_checkpoints_steps=args.save_checkpoints_steps)
    except TFConfigError as exc:
        print(f"estimator.py: {exc}", file=sys.stderr)
        return 1
    train_input_fn, eval_input_fn, num_classes = _input_fns(args)
    estimator = Estimator(model_fn, config=config, params={
        "hidden_units": 100, "num_classes": num_classes, "learning_rate": args.learning_rate})
    result, exports = train_and_evaluate(
        estimator, TrainSpec(train_input_fn, max_steps=args.train_steps),
        EvalSpec(eval_input_fn, steps=args.eval_steps, throttle_secs=args.throttle_secs))
    task = "local" if config.is_local else f"{config.task_type}-{config.task_id}"
    if result is not None:
        print(f"[{task}] global_step={result['global_step']} accuracy={result['accuracy']:.4f} "
              f"loss={result['loss']:.4f}", flush=True)
    for path in exports:
        print(f"[{task}] exported {path}", flush=True)
    if result is None:
        print(f"[{task}] done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
