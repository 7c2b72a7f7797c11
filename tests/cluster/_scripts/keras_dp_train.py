"""Keras' guide, DataParallel part, on a cluster: list_devices, DataParallel, fit; writes what it saw."""
import json
import sys
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

import toolkit

toolkit.enable_keras_distribution()
out = Path(sys.argv[1])
devices = keras.distribution.list_devices()
keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
keras.utils.set_random_seed(3)
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
history = model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(32), epochs=3, verbose=0)
pid = toolkit.keras_distribution._cluster.process_id()
(out / f"process{pid}.json").write_text(json.dumps({
    "devices": devices, "processes": keras.distribution.distribution().num_processes,
    "strategy": type(model.distribute_strategy).__name__, "replicas": model.distribute_strategy.num_replicas_in_sync,
    "loss": history.history["loss"], "weights": [w.tolist() for w in model.get_weights()]}))
