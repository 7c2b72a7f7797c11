"""The Estimator paths of ``bench_ctr.py``, written as TF1 users wrote click-through estimators.

``import toolkit.compat.v1 as tf`` (was ``import tensorflow as tf``), then either

* ``estimator``: ``tf.estimator.DNNLinearCombinedClassifier`` with one ``embedding_column`` per
  categorical feature (deep), the categorical columns themselves (wide), a numeric column for
  the 13 dense features, ``input_layer_partitioner=tf.fixed_size_partitioner(num_ps)``, Adagrad
  for both parts; or
* ``estimator_model_fn``: a custom ``model_fn`` that is the TF1 peer's graph (one offset table
  per part from ``tf.get_variable(..., partitioner=tf.fixed_size_partitioner(num_ps))``,
  ``tf.nn.embedding_lookup``, ``AdagradOptimizer``).

Both train between-graph on the TF_CONFIG cluster (chief and one worker: two training tasks, 2
ps), ``train(max_steps=--steps)`` with batches of 512, each task reading its own examples (the
chief seed 1, the worker seed 2, as the peer's workers 0 and 1). The chief records the time of
each epoch's global step and the held-out log loss, as ``_ctr_paths.py`` does.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from _ctr_paths import ACCUMULATOR, BATCH, EVAL_N, LEARNING_RATE, _examples, heldout_logloss

import toolkit.compat.v1 as tf  # was: import tensorflow as tf
from toolkit.data.ctr import CTR_CATEGORICAL, CTR_DENSE


def _columns(vocab: int):
    fc = tf.feature_column
    categorical = [fc.categorical_column_with_identity(f"C{i + 1}", num_buckets=vocab) for i in range(CTR_CATEGORICAL)]
    deep = [fc.embedding_column(c, 16, initializer=tf.random_normal_initializer(0.0, 0.01)) for c in categorical]
    return categorical, [fc.numeric_column("dense", shape=(CTR_DENSE,)), *deep]


def _by_feature(features, labels=None):
    """The model's two arrays as the named features a TF1 input_fn gave feature columns."""
    categorical = features["categorical"]
    columns = (tf.split(categorical, CTR_CATEGORICAL, axis=1) if tf.is_tensor(categorical)  # one op per batch
               else [categorical[:, i:i + 1] for i in range(CTR_CATEGORICAL)])
    named = {f"C{i + 1}": column for i, column in enumerate(columns)}
    named["dense"] = features["dense"]
    return named if labels is None else (named, labels)


def _peer_model_fn(features, labels, mode, params):
    """The TF1 peer's graph as a model_fn: partitioned get_variable tables, sparse Adagrad updates."""
    vocab, rows = params["vocab"], CTR_CATEGORICAL * params["vocab"]
    part = tf.fixed_size_partitioner(params["num_ps"])
    ids = features["categorical"] + tf.range(CTR_CATEGORICAL, dtype=tf.int64) * vocab
    with tf.variable_scope("ctr"):
        deep_table = tf.get_variable("deep_emb", [rows, 16], partitioner=part,
                                     initializer=tf.random_normal_initializer(0.0, 0.01))
        wide_table = tf.get_variable("wide_emb", [rows, 1], partitioner=part, initializer=tf.zeros_initializer())
        x = tf.concat([tf.reshape(tf.nn.embedding_lookup(deep_table, ids), [-1, CTR_CATEGORICAL * 16]),
                       features["dense"]], axis=1)
        for i, units in enumerate((256, 128)):
            x = tf.layers.dense(x, units, activation=tf.nn.relu, name=f"h{i + 1}")
        bias = tf.get_variable("bias", [1], initializer=tf.zeros_initializer())
        logits = (tf.layers.dense(x, 1, name="out") + tf.reduce_sum(tf.nn.embedding_lookup(wide_table, ids), axis=1)
                  + bias)
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions={"logits": logits})
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    optimizer = tf.train.AdagradOptimizer(LEARNING_RATE, initial_accumulator_value=ACCUMULATOR)
    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def _batches(data_dir: str, index: int, canned: bool):
    """This task's batches: those of ``examples_dataset(...).shuffle(50_000, seed=index).repeat().batch(512)``.

    The same examples in the same order as the peer's pipeline (a shuffle's order depends only on its
    seed and size), as the Keras paths read them: the shuffle draws row numbers and each batch gathers
    its rows (one scalar per example through the shuffle buffer instead of three tensors).
    """
    dense, categorical, labels = _examples(data_dir, index)
    rows = tf.data.Dataset.range(tf.shape(labels, out_type=tf.int64)[0])
    take = rows.shuffle(50_000, seed=index).repeat().batch(BATCH, drop_remainder=True)
    ds = take.map(lambda t: ({"dense": tf.gather(dense, t), "categorical": tf.gather(categorical, t)},
                             tf.gather(labels, t)))
    return (ds.map(_by_feature) if canned else ds).prefetch(4)


class _EpochMarks(tf.train.SessionRunHook):
    """The time each epoch's last global step is seen (the chief's view, as the peer times itself)."""

    def __init__(self, per_epoch: int, marks: list) -> None:
        self.per_epoch, self.marks, self.next = per_epoch, marks, per_epoch

    def begin(self):
        self.step = tf.train.get_global_step()

    def after_create_session(self, session, coord):
        self.marks.append((time.time(), int(session.run(self.step))))

    def before_run(self, run_context):
        return tf.train.SessionRunArgs(self.step)

    def after_run(self, run_context, run_values):
        step = int(run_values.results) + 1
        if step >= self.next:
            self.marks.append((time.time(), step))
            self.next = (step // self.per_epoch + 1) * self.per_epoch

    def end(self, session):  # the other worker may have taken the last steps: the step training ended at
        step = int(session.run(self.step))
        if step > self.marks[-1][1]:
            self.marks.append((time.time(), step))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", choices=("estimator", "estimator_model_fn"), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--data-dir", required=True)
    args = parser.parse_args(argv)
    # one checkpoint at the start and one at the end (the chief predicts from it), none in the timed window
    config = tf.estimator.RunConfig(model_dir=args.model_dir, save_checkpoints_secs=24 * 3600,
                                    save_summary_steps=None, log_step_count_steps=None)
    index = 0 if config.is_chief else 1 + config.task_id
    canned = args.child == "estimator"
    if canned:
        wide, deep = _columns(args.vocab)
        est = tf.estimator.DNNLinearCombinedClassifier(
            linear_feature_columns=wide, dnn_feature_columns=deep, dnn_hidden_units=[256, 128],
            linear_optimizer=tf.train.AdagradOptimizer(LEARNING_RATE, initial_accumulator_value=ACCUMULATOR),
            dnn_optimizer=tf.train.AdagradOptimizer(LEARNING_RATE, initial_accumulator_value=ACCUMULATOR),
            input_layer_partitioner=tf.fixed_size_partitioner(max(1, config.num_ps_replicas)),
            loss_reduction=tf.losses.Reduction.SUM_OVER_BATCH_SIZE, config=config)
    else:
        est = tf.estimator.Estimator(_peer_model_fn, config=config,
                                     params={"vocab": args.vocab, "num_ps": max(1, config.num_ps_replicas)})
    marks: list = []
    per_epoch = args.steps // args.epochs

    def train_input_fn():
        return _batches(args.data_dir, index, canned)

    est.train(train_input_fn, max_steps=per_epoch * args.epochs,
              hooks=[_EpochMarks(per_epoch, marks)] if config.is_chief else None)
    if not config.is_chief:
        return

    def predict_logits(features):
        inputs = tf.estimator.inputs.numpy_input_fn(_by_feature(features) if canned else features,
                                                    batch_size=4096, shuffle=False)
        return [p["logits"] for p in est.predict(inputs, predict_keys=["logits"])]

    logloss, base = heldout_logloss(predict_logits, args.vocab, batch=EVAL_N)
    Path(args.out).write_text(json.dumps({"marks": marks, "logloss": logloss, "base_logloss": base}))


if __name__ == "__main__":
    main(sys.argv[1:])
