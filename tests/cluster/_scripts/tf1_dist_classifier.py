"""A TF1 between-graph training script in the style Kubeflow's TFJob examples and TF1's tutorials used.

Every task runs this file. It reads its role from TF_CONFIG (as a TFJob pod
does), starts a ``tf.train.Server``; the ps calls ``server.join()``, the
workers build the graph under ``tf.device(tf.train.replica_device_setter(...))``
and train with a ``tf.train.Supervisor``; worker 0 is the chief (there is no
chief task). The one change from a TF1 script: ``import toolkit.compat.v1 as
tf`` instead of ``import tensorflow as tf``.
"""
import json
import os

import numpy as np

import toolkit.compat.v1 as tf

flags = tf.app.flags
flags.DEFINE_integer("train_steps", 60, "global steps to train")
flags.DEFINE_integer("batch_size", 32, "batch size of each worker")
flags.DEFINE_float("learning_rate", 0.05, "Adam's learning rate")
flags.DEFINE_integer("hidden_units", 16, "units of the hidden layer")
flags.DEFINE_string("train_dir", None, "where the chief writes its checkpoint")
FLAGS = flags.FLAGS


def synthetic(seed, count=512):
    """Two Gaussian blobs in 8 dimensions: class 1 is shifted by +1 in every feature."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 2, size=count)
    features = rng.normal(size=(count, 8)).astype(np.float32) + labels[:, None].astype(np.float32)
    return features, labels.astype(np.int64)


def main(_):
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    cluster_def = tf_config["cluster"]
    job_name, task_index = tf_config["task"]["type"], int(tf_config["task"]["index"])
    print(f"role {job_name}:{task_index} environment {tf_config.get('environment', 'none')}", flush=True)
    cluster = tf.train.ClusterSpec(cluster_def)
    server = tf.train.Server(cluster, job_name=job_name, task_index=task_index)
    if job_name == "ps":
        server.join()  # ends the process, as TF1's never returned
        print("ps done", flush=True)
        return

    is_chief = task_index == 0
    with tf.device(tf.train.replica_device_setter(worker_device=f"/job:worker/task:{task_index}",
                                                  ps_device="/job:ps/cpu:0", cluster=cluster)):
        global_step = tf.Variable(0, name="global_step", trainable=False, dtype=tf.int64)
        x = tf.placeholder(tf.float32, [None, 8])
        y = tf.placeholder(tf.int64, [None])
        hidden = tf.layers.dense(x, FLAGS.hidden_units, activation=tf.nn.relu, name="hidden")
        logits = tf.layers.dense(hidden, 2, name="logits")
        loss = tf.losses.sparse_softmax_cross_entropy(labels=y, logits=logits)
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
        train_op = tf.train.AdamOptimizer(FLAGS.learning_rate).minimize(loss, global_step=global_step)
        print(f"variables on {sorted({v.device for v in tf.global_variables()})}", flush=True)
        supervisor = tf.train.Supervisor(is_chief=is_chief, logdir=FLAGS.train_dir if is_chief else None,
                                         init_op=tf.global_variables_initializer(), recovery_wait_secs=1,
                                         global_step=global_step, save_model_secs=0, save_summaries_secs=0)

    features, labels = synthetic(seed=task_index)
    config = tf.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{task_index}"])
    session = supervisor.prepare_or_wait_for_session(server.target, config=config)
    local_steps, step = 0, 0
    while step < FLAGS.train_steps:
        start = (local_steps * FLAGS.batch_size) % (len(features) - FLAGS.batch_size)
        batch = {x: features[start:start + FLAGS.batch_size], y: labels[start:start + FLAGS.batch_size]}
        _, step = session.run([train_op, global_step], batch)
        local_steps += 1
    final_accuracy = session.run(accuracy, {x: features, y: labels})
    if is_chief:
        supervisor.saver.save(session, os.path.join(FLAGS.train_dir, "model.ckpt"), global_step=global_step)
    print(f"worker {task_index} done: local steps {local_steps}, global step {step}, "
          f"accuracy {final_accuracy:.3f}", flush=True)
    supervisor.stop()


if __name__ == "__main__":
    tf.app.run()
