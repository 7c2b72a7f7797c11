"""A digits/MNIST classifier as a classic TF1 Estimator script: feature columns, tf.layers, tf.metrics.

Written the way TF1 Estimator scripts were, with one difference: `import
toolkit.compat.v1 as tf` instead of `import tensorflow as tf`. Run it once
per task, each with its own TF_CONFIG; with no TF_CONFIG it trains and
evaluates in this process.
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
  terminal for an evaluator that reports accuracy on new checkpoints and exports the model.

Between-graph, as TF1 ran it: the chief and each worker are their own clients, each training
on its own shard of the data, with the variables on the ps; the chief initialises them and
writes the checkpoints. When training ends every process exits 0, the ps included.
`tfdist tf-config generate --chief 1 --workers 2 --ps 1 --evaluator 1` prints the exports,
with free ports, ready to paste; `tfdist tf-config validate` checks one.

exit codes: 0 success (every task), 1 training failed or TF_CONFIG invalid, 2 bad flags.
"""


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Train a digits/MNIST classifier with a TF1-style Estimator, locally or on a TF_CONFIG cluster.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", default="estimator_model",
                        help="checkpoints, summaries and exports; every task must see the same directory")
    parser.add_argument("--train_steps", type=int, default=1000, help="global steps to train")
    parser.add_argument("--batch_size", type=int, default=64, help="batch size of each worker")
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
    """TF1's classic model_fn: feature columns, two dense layers, softmax cross-entropy, Adam."""
    import toolkit.compat.v1 as tf

    net = tf.feature_column.input_layer(features, params["feature_columns"])
    net = tf.layers.dense(net, params["hidden_units"], activation=tf.nn.relu, name="hid")
    logits = tf.layers.dense(net, params["num_classes"], name="sm")
    classes = tf.argmax(logits, 1)
    if mode == tf.estimator.ModeKeys.PREDICT:
        predictions = {"classes": classes, "probabilities": tf.nn.softmax(logits)}
        return tf.estimator.EstimatorSpec(mode, predictions=predictions)
    loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    metrics = {"accuracy": tf.metrics.accuracy(labels=labels, predictions=classes)}
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics)
    optimizer = tf.train.AdamOptimizer(params["learning_rate"])
    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def _arrays(args: argparse.Namespace, split: str):
    import numpy as np

    from toolkit import data

    source = data.load(args.dataset, split=split, data_dir=args.data_dir)
    if hasattr(source, "features"):
        images, labels = source.features, source.labels
    else:  # TFDS: materialise the (small) split
        import tensorflow

        batches = list(source.dataset_fn(1000, shuffle=False, repeat=False, drop_remainder=False)(
            tensorflow.distribute.InputContext()))
        images, labels = (np.concatenate([b[i].numpy() for b in batches]) for i in (0, 1))
    return images.reshape(len(images), -1).astype("float32"), labels.astype("int64"), int(source.num_classes)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    import toolkit.compat.v1 as tf
    from tf_config import TFConfigError

    try:
        config = tf.estimator.RunConfig(model_dir=args.model_dir, save_checkpoints_steps=args.save_checkpoints_steps)
    except TFConfigError as exc:
        print(f"estimator.py: {exc}", file=sys.stderr)
        return 1
    train_x, train_y, num_classes = _arrays(args, "train")
    test_x, test_y, _ = _arrays(args, "test")
    columns = [tf.feature_column.numeric_column("pixels", shape=(train_x.shape[1],))]

    def train_input_fn(input_context):
        dataset = tf.data.Dataset.from_tensor_slices(({"pixels": train_x}, train_y))
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return dataset.shuffle(2000, seed=input_context.input_pipeline_id).repeat().batch(args.batch_size)

    def eval_input_fn():
        return tf.data.Dataset.from_tensor_slices(({"pixels": test_x}, test_y)).batch(args.batch_size)

    estimator = tf.estimator.Estimator(model_fn, config=config, params={
        "feature_columns": columns, "hidden_units": 100, "num_classes": num_classes,
        "learning_rate": args.learning_rate})
    serving = tf.estimator.export.build_parsing_serving_input_receiver_fn(
        tf.feature_column.make_parse_example_spec(columns))
    result, exports = tf.estimator.train_and_evaluate(
        estimator, tf.estimator.TrainSpec(train_input_fn, max_steps=args.train_steps),
        tf.estimator.EvalSpec(eval_input_fn, steps=args.eval_steps, start_delay_secs=0,
                              throttle_secs=args.throttle_secs,
                              exporters=[tf.estimator.LatestExporter("exporter", serving)]))
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
