"""Keras ``model.fit`` under parameter servers, written the way TensorFlow's "Parameter server training"
tutorial writes its ``model.fit`` part: a ``Sequential`` model without ``keras.Input``, compiled with
``steps_per_execution``, trained on a shuffled, repeated, batched ``tf.data.Dataset`` with
``steps_per_epoch``, with TensorBoard, ModelCheckpoint and BackupAndRestore callbacks.

The strategy is built by hand, as the tutorial does, from ``TFConfigClusterResolver``; the ps and
worker tasks start a ``tf.distribute.Server`` and ``join()`` it (under ``tfdist launch`` they return
when the chief's script ends). Keras 3 forces three changes on the tutorial (no
``keras.optimizers.legacy``, a ``.keras`` checkpoint path, and labels of the output's shape: Keras 3
no longer expands rank-1 labels against a (batch, 10) output, in one process either); tfdist adds
``enable_distributed_keras()``.

Usage: ps_fit_tutorial.py OUT_DIR
"""
import json
import sys
from pathlib import Path

import keras
import tensorflow as tf

import toolkit
from toolkit.training import TrainingError

cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
if cluster_resolver.task_type in ("worker", "ps"):
    server = tf.distribute.Server(cluster_resolver.cluster_spec(), job_name=cluster_resolver.task_type,
                                  task_index=cluster_resolver.task_id,
                                  protocol=cluster_resolver.rpc_layer or "grpc", start=True)
    server.join()
    sys.exit(0)

toolkit.enable_distributed_keras()
out = Path(sys.argv[1])
variable_partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
    min_shard_bytes=(256 << 10), max_shards=cluster_resolver.cluster_spec().num_tasks("ps"))
strategy = tf.distribute.ParameterServerStrategy(cluster_resolver, variable_partitioner=variable_partitioner)

with strategy.scope():
    model = keras.models.Sequential([keras.layers.Dense(10)])
    model.compile(keras.optimizers.SGD(), loss="mse", steps_per_execution=10)

x = tf.random.uniform((10, 10), seed=1)
y = tf.random.uniform((10, 10), seed=2)
train_dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(10).repeat()
train_dataset = train_dataset.batch(2).prefetch(2)

callbacks = [keras.callbacks.TensorBoard(log_dir=str(out / "logs")),
             keras.callbacks.ModelCheckpoint(filepath=str(out / "ckpt.keras")),
             keras.callbacks.BackupAndRestore(backup_dir=str(out / "backup"))]
history = model.fit(train_dataset, epochs=5, steps_per_epoch=20, callbacks=callbacks)

try:
    model.fit(train_dataset, epochs=1)
    refusal = None
except TrainingError as exc:
    refusal = str(exc)
(out / "result.json").write_text(json.dumps({
    "history": history.history, "epochs": history.epoch, "model_history_is_fit_result": model.history is history,
    "kernel_shape": list(model.layers[0].kernel.shape), "refusal": refusal}))
