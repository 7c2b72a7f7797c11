"""The tfdist side of ``bench_ctr.py``: one training path per child, run in every task of a launched cluster.

Each path trains ``models.ctr`` on ``toolkit.data.criteo_like`` data (worker *i* draws its
200,000 training examples with seed ``1 + i``, the held-out set is seed 999, as the TF1 peer
does) for exactly ``--steps`` global steps of 512 examples, Adagrad(0.05,
initial_accumulator_value=0.1), in ``--epochs`` epochs, with the ``--steps-per-execution``
each path's ``model.compile`` sets (as a Keras user sets it). The chief writes ``--out``: the time of
every epoch end with its global step (the parent times a window from these and reads the CPU
its tasks spent in it) and the held-out log loss after training.
"""
from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path
from typing import Any

BATCH, TRAIN_N, EVAL_N, EVAL_SEED, EVAL_BATCH = 512, 200_000, 20_000, 999, 4096
LEARNING_RATE, ACCUMULATOR = 0.05, 0.1


def write_training_data(data_dir: Path, vocab: int, workers: int) -> None:
    """Worker *i*'s examples (seed 1 + i) as raw files the input pipelines read.

    Under the chief's coordinator a pipeline's index is a tensor when its dataset is traced, so
    the data cannot be drawn in Python there; a file named by the index can be read either way.
    """
    from toolkit.data import criteo_like

    for index in range(workers):
        data = criteo_like(TRAIN_N, vocab=vocab, seed=1 + index)
        for part, array in (("dense", data.dense), ("categorical", data.categorical), ("labels", data.labels)):
            array.tofile(data_dir / f"{part}-{index}.bin")


def _examples(data_dir: str, index):
    """Worker ``index``'s (dense, categorical, labels) arrays as tensors; ``index`` may be a tensor."""
    import tensorflow as tf

    from toolkit.data.ctr import CTR_CATEGORICAL, CTR_DENSE

    def read(part, dtype, width):
        path = tf.strings.join([data_dir, f"/{part}-", tf.strings.as_string(index), ".bin"])
        return tf.reshape(tf.io.decode_raw(tf.io.read_file(path), dtype), [-1, width])

    return read("dense", tf.float32, CTR_DENSE), read("categorical", tf.int64, CTR_CATEGORICAL), \
        read("labels", tf.float32, 1)


def examples_dataset(data_dir: str, index):
    """Worker ``index``'s examples ``({"dense", "categorical"}, labels)``, unbatched; ``index`` may be a tensor."""
    import tensorflow as tf

    def slices(_):
        dense, categorical, labels = _examples(data_dir, index)
        return tf.data.Dataset.from_tensor_slices(({"dense": dense, "categorical": categorical}, labels))

    return tf.data.Dataset.from_tensors(0).flat_map(slices)


def _dataset_fn(data_dir: str):
    """Pipeline *i* reads worker *i*'s examples, shuffled as each TF1 peer worker shuffles its own.

    The shuffle draws the examples' row numbers, and each batch gathers its rows: a shuffle's order
    depends on its seed and size only, so the batches hold exactly the examples, in the order, of
    ``examples_dataset(...).shuffle(50_000, seed=index).repeat().batch(512)`` (the peer's pipeline),
    at less than half its CPU: one scalar per element through the shuffle buffer instead of three
    tensors, and one copy per batch.
    """

    def dataset_fn(input_context=None):
        import tensorflow as tf

        index = input_context.input_pipeline_id if input_context is not None else 0
        dense, categorical, labels = _examples(data_dir, index)
        rows = tf.data.Dataset.range(tf.shape(labels, out_type=tf.int64)[0])
        batches = rows.shuffle(50_000, seed=tf.cast(index, tf.int64)).repeat().batch(BATCH, drop_remainder=True)
        return batches.map(lambda take: ({"dense": tf.gather(dense, take), "categorical": tf.gather(categorical, take)},
                                         tf.gather(labels, take))).prefetch(4)

    return dataset_fn


def heldout_logloss(predict_logits, vocab: int, *, batch: int = EVAL_BATCH) -> tuple[float, float]:
    """(mean sigmoid cross-entropy over the held-out set, the base rate's) for ``predict_logits(features)``."""
    import numpy as np

    from toolkit.data import criteo_like

    heldout = criteo_like(EVAL_N, vocab=vocab, seed=EVAL_SEED)
    total = 0.0
    for start in range(0, EVAL_N, batch):
        part = slice(start, start + batch)
        z = np.asarray(predict_logits({"dense": heldout.dense[part], "categorical": heldout.categorical[part]}),
                       dtype=np.float64).reshape(-1, 1)
        y = heldout.labels[part].astype(np.float64)
        total += float(np.sum(np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))))
    return total / EVAL_N, heldout.base_rate_logloss()


def _marks_callback(marks: list[tuple[float, int]], steps_per_epoch: int):
    import keras

    class EpochMarks(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            marks.append((time.time(), 0))

        def on_epoch_end(self, epoch, logs=None):
            marks.append((time.time(), (epoch + 1) * steps_per_epoch))

    return EpochMarks()


def _compile(model, steps_per_execution: int) -> None:
    import keras

    model.compile(optimizer=keras.optimizers.Adagrad(LEARNING_RATE, initial_accumulator_value=ACCUMULATOR),
                  loss=keras.losses.BinaryCrossentropy(from_logits=True), steps_per_execution=steps_per_execution)


def _toolkit_fit(args, *, sharded: bool) -> dict[str, Any] | None:
    from models import ctr
    from strategies import StrategyOptions
    from toolkit import CheckpointConfig, LogConfig, fit
    from toolkit.training import FitOptions

    built: list = []
    options: dict[str, Any] = {}
    layer: dict[str, Any] = {}
    if sharded:  # the knobs docs/model_parallel.md gives for ShardedEmbedding under parameter servers
        from toolkit.layers import ShardedEmbedding, ShardedTrainStep, SparseAdagrad

        layer = {"embedding": ShardedEmbedding}
        options = {"strategy": StrategyOptions(partitioner="min_size",
                                               partitioner_args={"min_shard_bytes": 1 << 20, "max_shards": 2}),
                   "train_step": functools.partial(ShardedTrainStep, sparse_optimizer=SparseAdagrad(
                       LEARNING_RATE, initial_accumulator_value=ACCUMULATOR))}

    def model_fn():
        model = ctr(args.vocab, seed=0, **layer)
        _compile(model, args.steps_per_execution)
        built.append(model)
        return model

    marks: list[tuple[float, int]] = []
    per_epoch = args.steps // args.epochs
    total = per_epoch * args.epochs
    history = fit(model_fn, _dataset_fn(args.data_dir), epochs=args.epochs, steps_per_epoch=per_epoch,
                  model_dir=args.model_dir, verbose=0, strategy="parameter_server",
                  callbacks=[_marks_callback(marks, per_epoch)],
                  options=FitOptions(export=False, checkpoint=CheckpointConfig(every=total),
                                     logs=LogConfig(every=per_epoch, summary_every=total), **options))
    if history.role != "chief":
        return None
    logloss, base = heldout_logloss(lambda features: built[-1](features, training=False), args.vocab)
    return {"marks": marks, "logloss": logloss, "base_logloss": base}


def _keras_fit(args) -> dict[str, Any] | None:
    """TensorFlow's parameter-server tutorial, Keras 3 ``compile``/``fit``, plus tfdist's two lines."""
    import toolkit
    from models import ctr
    from strategies import make_strategy, run_role

    run_role()  # ps and workers serve here until the chief says goodbye
    toolkit.enable_distributed_keras()
    strategy = make_strategy("parameter_server")
    with strategy.scope():
        model = ctr(args.vocab, seed=0)
        _compile(model, args.steps_per_execution)
    marks: list[tuple[float, int]] = []
    per_epoch = args.steps // args.epochs
    model.fit(_dataset_fn(args.data_dir), epochs=args.epochs, steps_per_epoch=per_epoch, verbose=0,
              callbacks=[_marks_callback(marks, per_epoch)])
    logloss, base = heldout_logloss(lambda features: model(features, training=False), args.vocab)
    return {"marks": marks, "logloss": logloss, "base_logloss": base}


PATHS = {
    "toolkit_fit": functools.partial(_toolkit_fit, sharded=False),
    "keras_fit": _keras_fit,
    "toolkit_fit_sharded": functools.partial(_toolkit_fit, sharded=True),
}


def child(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path", choices=sorted(PATHS))
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--steps-per-execution", type=int, default=1)
    args = parser.parse_args(argv)
    result = PATHS[args.path](args)
    if result is not None:
        Path(args.out).write_text(json.dumps(result))
