"""TensorFlow's "Parameter server training" tutorial, custom training loop, as published.

No tfdist call: the strategy is built by hand from ``TFConfigClusterResolver``,
ps and worker tasks end in ``server.join()``, and nothing says goodbye. The
model is a small regression on synthetic data instead of the tutorial's
feature preprocessing. ``--out`` records the chief's steps and losses.
"""
import argparse
import json
import os

import keras
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps-per-epoch", type=int, default=20)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--out")
args = parser.parse_args()

cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
if cluster_resolver.task_type in ("worker", "ps"):
    # Set the environment variable to allow reporting worker and ps failure to the
    # coordinator. This is a workaround and won't be necessary in the future.
    os.environ["GRPC_FAIL_FAST"] = "use_caller"
    server = tf.distribute.Server(
        cluster_resolver.cluster_spec(),
        job_name=cluster_resolver.task_type,
        task_index=cluster_resolver.task_id,
        protocol=cluster_resolver.rpc_layer or "grpc",
        start=True)
    server.join()
else:
    NUM_PS = len(cluster_resolver.cluster_spec().as_dict().get("ps", []))
    variable_partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=(256 << 10), max_shards=NUM_PS)
    strategy = tf.distribute.ParameterServerStrategy(cluster_resolver, variable_partitioner=variable_partitioner)

    def dataset_fn(_):
        x = tf.random.stateless_uniform((256, 8), seed=(1, 2))
        y = tf.reduce_sum(x, axis=1, keepdims=True)
        return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).batch(16).repeat()

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(learning_rate=0.05)

    @tf.function
    def step_fn(iterator):
        def replica_fn(batch_data):
            x, y = batch_data
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        losses = strategy.run(replica_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    per_worker_dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
    per_worker_iterator = iter(per_worker_dataset)
    losses = []
    for epoch in range(args.epochs):
        for _ in range(args.steps_per_epoch):
            loss = coordinator.schedule(step_fn, args=(per_worker_iterator,))
        coordinator.join()
        losses.append(float(loss.fetch()))
        print(f"Finished epoch {epoch}, loss is {losses[-1]:.4f}", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"epochs": args.epochs, "losses": losses}, fh)
