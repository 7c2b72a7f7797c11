"""The Estimator guide's distribution section (MirroredStrategy under RunConfig), on 2 logical CPUs.

Trains the same custom model_fn from the same initial weights: under MirroredStrategy and under
CentralStorageStrategy (variables on the CPU, compute on both logical CPUs), each with per-replica
batch B (as TF's Estimator took it), and on one device with the global batch 2B. Prints the weight
vectors as JSON (one line each) for the test to compare, with how many replicas ran model_fn in TRAIN
and where the variables lived.
argv: out_dir
"""
import json
import os
import sys

import numpy as np
import tensorflow as tf

tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
                                           [tf.config.LogicalDeviceConfiguration()] * 2)

from toolkit import estimator as tf_estimator  # noqa: E402

OUT = sys.argv[1]
X = np.random.RandomState(0).randn(256, 5).astype("float32")
Y = (X @ np.arange(1, 6, dtype="float32")[:, None] + 0.5).astype("float32")
STEPS, PER_REPLICA = 20, 16


def model_fn(features, labels, mode):
    if mode == tf_estimator.ModeKeys.TRAIN:
        replicas.append(tf.distribute.get_replica_context() is not None and tf.distribute.has_strategy())
    hidden = tf.compat.v1.get_variable("hidden", [5, 8], initializer=tf.compat.v1.glorot_uniform_initializer(seed=1))
    out = tf.compat.v1.get_variable("out", [8, 1], initializer=tf.compat.v1.glorot_uniform_initializer(seed=2))
    predictions = tf.matmul(tf.nn.relu(tf.matmul(features["x"], hidden)), out)
    if mode == tf_estimator.ModeKeys.PREDICT:
        return tf_estimator.EstimatorSpec(mode, predictions=predictions)
    loss = tf.compat.v1.losses.mean_squared_error(labels, predictions)
    if mode == tf_estimator.ModeKeys.EVAL:
        return tf_estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops={
            "mae": tf.compat.v1.metrics.mean_absolute_error(labels, predictions)})
    train_op = tf.compat.v1.train.AdamOptimizer(0.05).minimize(
        loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    devices.update(getattr(v, "device", "") for v in tf.nest.flatten(getattr(hidden, "values", hidden)))
    return tf_estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def input_fn(batch):
    def fn(input_context=None):
        contexts.append(None if input_context is None else
                        (input_context.num_input_pipelines, input_context.num_replicas_in_sync))
        return tf.data.Dataset.from_tensor_slices(({"x": X}, Y)).repeat().batch(batch)
    return fn


contexts, replicas, devices = [], [], set()
mirrored_strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
config = tf_estimator.RunConfig(train_distribute=mirrored_strategy, eval_distribute=mirrored_strategy,
                                model_dir=os.path.join(OUT, "mirrored"))
mirrored = tf_estimator.Estimator(model_fn, config=config)
mirrored.train(input_fn(PER_REPLICA), steps=STEPS)
runs = {"mirrored": (mirrored, len(replicas), sorted(devices))}
replicas.clear(), devices.clear()
central = tf_estimator.Estimator(model_fn, config=tf_estimator.RunConfig(
    train_distribute=tf.distribute.experimental.CentralStorageStrategy(["/cpu:0", "/cpu:1"]),
    model_dir=os.path.join(OUT, "central")))
central.train(input_fn(PER_REPLICA), steps=STEPS)
runs["central"] = (central, len(replicas), sorted(devices))
replicas.clear(), devices.clear()
single = tf_estimator.Estimator(model_fn, model_dir=os.path.join(OUT, "single"))
single.train(input_fn(2 * PER_REPLICA), steps=STEPS)
runs["single"] = (single, len(replicas), sorted(devices))
for name, (est, replica_calls, variable_devices) in runs.items():
    weights = np.concatenate([est.get_variable_value(v).ravel() for v in ("hidden", "out")])
    print(json.dumps({"name": name, "step": int(est.get_variable_value("global_step")), "replicas": replica_calls,
                      "devices": variable_devices, "weights": weights.tolist()}), flush=True)
metrics = mirrored.evaluate(lambda: tf.data.Dataset.from_tensor_slices(({"x": X}, Y)).batch(32))
print(json.dumps({"eval": {k: float(v) for k, v in metrics.items()}, "contexts": contexts}), flush=True)

# model_to_estimator under the same strategy: the Keras model's weights warm-start the mirrored variables
import keras  # noqa: E402

keras.utils.set_random_seed(0)
inputs = keras.Input((5,), name="x")
model = keras.Model(inputs, keras.layers.Dense(1, name="out")(keras.layers.Dense(8, activation="relu")(inputs)))
model.compile(optimizer=keras.optimizers.SGD(1e-6), loss="mse", metrics=["mae"])  # a step moves it little
kernel, name = model.layers[1].kernel.numpy(), f"{model.layers[1].name}/kernel"
converted = tf_estimator.model_to_estimator(keras_model=model, config=tf_estimator.RunConfig(
    train_distribute=mirrored_strategy, model_dir=os.path.join(OUT, "keras")))
converted.train(input_fn(PER_REPLICA), steps=1)
print(json.dumps({"keras": {"step": int(converted.get_variable_value("global_step")),
                            "moved": float(np.abs(converted.get_variable_value(name) - kernel).max()),
                            "eval": float(converted.evaluate(input_fn(32), steps=2)["mae"])}}), flush=True)
