"""A TF1 between-graph script in the style of Kubeflow's dist_mnist.py, with one changed import.

ps + workers and no chief (worker 0 is the chief): every task starts a
``tf.train.Server``; the ps calls ``server.join()`` with no ``return`` after it,
as dist_mnist.py does, so the worker code below would run on a ps whose
``join()`` returned (as task 0 it would even be the chief); each
worker trains its own graph under ``replica_device_setter`` with a
``MonitoredTrainingSession``. A linear regression on synthetic data stands in
for MNIST.
"""
import atexit
import json
import os

import numpy as np

import toolkit.compat.v1 as tf  # was: import tensorflow as tf

tf.disable_eager_execution()
flags = tf.app.flags
flags.DEFINE_integer("train_steps", 200, "Number of (global) training steps to perform")
flags.DEFINE_integer("batch_size", 32, "Training batch size")
FLAGS = flags.FLAGS


def main(unused_argv):
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    cluster = tf.train.ClusterSpec(tf_config["cluster"])
    job_name, task_index = tf_config["task"]["type"], tf_config["task"]["index"]
    server = tf.train.Server(cluster, job_name=job_name, task_index=task_index)
    if job_name == "ps":
        atexit.register(print, f"ps {task_index}: atexit ran", flush=True)
        print(f"ps {task_index}: joining", flush=True)
        server.join()
        print(f"ps {task_index}: join returned", flush=True)
    is_chief = task_index == 0
    with tf.device(tf.train.replica_device_setter(worker_device=f"/job:worker/task:{task_index}",
                                                  cluster=cluster)):
        global_step = tf.train.get_or_create_global_step()
        x = tf.placeholder(tf.float32, [None, 8])
        y = tf.placeholder(tf.float32, [None, 1])
        w = tf.Variable(tf.zeros([8, 1]), name="w")
        b = tf.Variable(tf.zeros([1]), name="b")
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
        train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=global_step)
    sess_config = tf.ConfigProto(allow_soft_placement=True, log_device_placement=False,
                                 device_filters=["/job:ps", f"/job:worker/task:{task_index}"])
    rng = np.random.RandomState(task_index)
    true_w = np.arange(8, dtype=np.float32).reshape(8, 1) / 8
    hooks = [tf.train.StopAtStepHook(last_step=FLAGS.train_steps)]
    local_step, step, value = 0, 0, float("nan")
    with tf.train.MonitoredTrainingSession(master=server.target, is_chief=is_chief, hooks=hooks,
                                           config=sess_config) as sess:
        print(f"worker {task_index}: session ready", flush=True)
        while not sess.should_stop():
            batch = rng.rand(FLAGS.batch_size, 8).astype(np.float32)
            _, step, value = sess.run([train_op, global_step, loss], feed_dict={x: batch, y: batch @ true_w})
            local_step += 1
    print(f"worker {task_index}: done after {local_step} local steps, global step {step}, loss {value:g}",
          flush=True)


if __name__ == "__main__":
    tf.app.run(main)
