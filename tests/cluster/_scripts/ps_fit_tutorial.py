"""Keras ``model.fit`` under parameter servers, written the way TensorFlow's "Parameter server training"
tutorial writes its ``model.fit`` part: a ``Sequential`` model without ``keras.Input``, compiled with
``steps_per_execution``, trained on a shuffled, repeated, batched ``tf.data.Dataset`` with
``steps_per_epoch``, with TensorBoard, ModelCheckpoint and BackupAndRestore callbacks.

Keras 3 forces three changes on the tutorial (no ``keras.optimizers.legacy``, a ``.keras`` checkpoint
path, and labels of the output's shape: Keras 3 no longer expands rank-1 labels against a (batch, 10)
output, in one process either); tfdist adds ``run_role()`` (the ps and workers serve there) and
``enable_distributed_keras()``.

Usage: ps_fit_tutorial.py OUT_DIR
"""
import json
import sys
from pathlib import Path

from strategies import make_strategy, run_role

run_role()

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import toolkit  # noqa: E402
from toolkit.training import TrainingError  # noqa: E402

toolkit.enable_distributed_keras()
out = Path(sys.argv[1])
strategy = make_strategy()

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
