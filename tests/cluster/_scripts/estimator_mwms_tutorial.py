"""TensorFlow's "Multi-worker training with Estimator" tutorial, as published, with two changes:
``tf.estimator`` -> ``toolkit.estimator``, and scikit-learn's digits (8x8) instead of the MNIST download.

argv: model_dir out_dir max_steps [evaluator start delay]. Each worker saves its final weights to
``out_dir/<type>-<index>.npy``; each task prints what ``train_and_evaluate`` returned (an evaluator task:
its last evaluation).
"""
import json
import os
import sys

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

from toolkit import estimator as tf_estimator

MODEL_DIR, OUT_DIR, MAX_STEPS = sys.argv[1], sys.argv[2], int(sys.argv[3])
# an evaluator task waits start_delay_secs (120 s by default) before it looks for checkpoints: a test shortens it
EVAL_DELAY = {"start_delay_secs": int(sys.argv[4]), "throttle_secs": 0} if len(sys.argv) > 4 else {}
BUFFER_SIZE = 10000
BATCH_SIZE = 64
_DIGITS = load_digits()
_IMAGES = (_DIGITS.images[..., None] * 16).astype("uint8")  # MNIST-like uint8 pixels
_LABELS = _DIGITS.target.astype("int64")


def input_fn(mode, input_context=None):
    mnist_dataset = tf.data.Dataset.from_tensor_slices((_IMAGES[:1536], _LABELS[:1536]) if
                                                       mode == tf_estimator.ModeKeys.TRAIN else
                                                       (_IMAGES[1536:], _LABELS[1536:]))

    def scale(image, label):
        image = tf.cast(image, tf.float32)
        image /= 255
        return image, label

    if input_context:
        mnist_dataset = mnist_dataset.shard(input_context.num_input_pipelines,
                                            input_context.input_pipeline_id)
    return mnist_dataset.map(scale).cache().shuffle(BUFFER_SIZE, seed=1).repeat().batch(BATCH_SIZE)


LEARNING_RATE = 1e-1


class FinalWeights(tf.compat.v1.train.SessionRunHook):
    """Saves this worker's variables when training ends (the test compares the workers)."""

    def end(self, session):
        task = json.loads(os.environ["TF_CONFIG"])["task"]
        names = sorted(v.name for v in tf.compat.v1.trainable_variables())
        values = session.run({v.name: v for v in tf.compat.v1.trainable_variables()})
        np.save(os.path.join(OUT_DIR, f"{task['type']}-{task['index']}.npy"),
                np.concatenate([np.ravel(values[n]) for n in names]))


def model_fn(features, labels, mode):
    model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(8, 3, activation='relu', input_shape=(8, 8, 1)),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(32, activation='relu'),
        tf.keras.layers.Dense(10)
    ])
    logits = model(features, training=False)

    if mode == tf_estimator.ModeKeys.PREDICT:
        predictions = {'logits': logits}
        return tf_estimator.EstimatorSpec(labels=labels, predictions=predictions)

    optimizer = tf.compat.v1.train.GradientDescentOptimizer(learning_rate=LEARNING_RATE)
    loss = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE)(labels, logits)
    loss = tf.reduce_sum(loss) * (1. / BATCH_SIZE)
    if mode == tf_estimator.ModeKeys.EVAL:
        return tf_estimator.EstimatorSpec(mode, loss=loss)

    return tf_estimator.EstimatorSpec(
        mode=mode,
        loss=loss,
        train_op=optimizer.minimize(
            loss, tf.compat.v1.train.get_or_create_global_step()),
        training_hooks=[FinalWeights()])


strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
config = tf_estimator.RunConfig(train_distribute=strategy, save_checkpoints_steps=MAX_STEPS)
classifier = tf_estimator.Estimator(model_fn=model_fn, model_dir=MODEL_DIR, config=config)
result, exports = tf_estimator.train_and_evaluate(
    classifier,
    train_spec=tf_estimator.TrainSpec(input_fn=input_fn, max_steps=MAX_STEPS),
    eval_spec=tf_estimator.EvalSpec(input_fn=input_fn, **EVAL_DELAY)
)
print("RESULT", json.dumps({k: float(v) for k, v in (result or {}).items()}), flush=True)
print("replicas in sync:", strategy.num_replicas_in_sync, "steps run:", classifier.last_local_steps, flush=True)
