"""TF 2.x Estimator code with the v1 ``ParameterServerStrategy`` under ``RunConfig(train_distribute=...)``.

As TF 2.x users wrote it (tf.compat.v1's strategy, a custom model_fn, train_and_evaluate) with only
``tf.estimator`` -> ``toolkit.estimator``. Run in every task of a ps/chief/worker cluster: the ps serves,
the chief and the worker train against it. Each training task prints where its variables live and
how many steps it ran. argv: model_dir max_steps
"""
import sys

import numpy as np
import tensorflow as tf

from toolkit import estimator as tf_estimator

MODEL_DIR, MAX_STEPS = sys.argv[1], int(sys.argv[2])
X = np.random.RandomState(0).randn(512, 4).astype("float32")
Y = (X[:, 0] - X[:, 1] > 0).astype("int64")


def model_fn(features, labels, mode):
    hidden = tf.compat.v1.get_variable("hidden", [4, 16])
    out = tf.compat.v1.get_variable("out", [16, 2])
    logits = tf.matmul(tf.nn.relu(tf.matmul(features["x"], hidden)), out)
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
    if mode == tf_estimator.ModeKeys.EVAL:
        return tf_estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops={
            "accuracy": tf.compat.v1.metrics.accuracy(labels, tf.argmax(logits, 1))})
    print("variables on", sorted({hidden.device, out.device}), flush=True)
    train_op = tf.compat.v1.train.AdagradOptimizer(0.5).minimize(
        loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    return tf_estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def input_fn(input_context=None):
    dataset = tf.data.Dataset.from_tensor_slices(({"x": X}, Y))
    if input_context:
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return dataset.repeat().batch(32)


strategy = tf.compat.v1.distribute.experimental.ParameterServerStrategy()
config = tf_estimator.RunConfig(train_distribute=strategy, save_checkpoints_steps=MAX_STEPS)
estimator = tf_estimator.Estimator(model_fn, model_dir=MODEL_DIR, config=config)
tf_estimator.train_and_evaluate(estimator, tf_estimator.TrainSpec(input_fn, max_steps=MAX_STEPS),
                                tf_estimator.EvalSpec(input_fn, steps=10))
print("local steps", estimator.last_local_steps, flush=True)
