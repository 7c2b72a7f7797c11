"""The coordinator's loop for TF1-style replicas: async or synchronous (``SyncReplicas``) updates.

TF1's mnist_replica trained until the **global** step reached ``train_steps``.
Here each scheduled closure is one worker step (one TF1 "local step"):

* async: each step applies its gradients and adds 1 to the global step, so
  ``train_steps`` closures are scheduled and the workers share them;
* sync: each step is one contribution; ``replicas_to_aggregate`` fresh
  contributions make one update (global step + 1) and stale ones are dropped,
  so the loop schedules rounds of ``(train_steps - global_step) * N``
  closures until the global step reaches ``train_steps`` exactly (a round can
  never overshoot: at most N-1 contributions carry over).

Per-worker step counts come from ``experimental_get_current_worker_index``.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

import keras
import numpy as np
import tensorflow as tf

from strategies.sync_replicas import SyncReplicas

__all__ = ["ReplicaNet", "ReplicaResult", "train_replicas", "placement"]

logger = logging.getLogger(__name__)


class ReplicaNet(keras.layers.Layer):
    """TF1 mnist_replica's network: one ReLU hidden layer (hid_w, hid_b), softmax logits (sm_w, sm_b)."""

    def __init__(self, pixels: int, hidden_units: int, num_classes: int, **kwargs: Any) -> None:
        super().__init__(name="mnist_replica", **kwargs)
        init = keras.initializers.TruncatedNormal(stddev=1.0 / pixels, seed=1)
        self.hid_w = self.add_weight(shape=(pixels, hidden_units), initializer=init, name="hid_w")
        self.hid_b = self.add_weight(shape=(hidden_units,), initializer="zeros", name="hid_b")
        self.sm_w = self.add_weight(shape=(hidden_units, num_classes),
                                    initializer=keras.initializers.TruncatedNormal(stddev=1.0 / hidden_units, seed=2),
                                    name="sm_w")
        self.sm_b = self.add_weight(shape=(num_classes,), initializer="zeros", name="sm_b")
        self.pixels = pixels

    def call(self, images: Any) -> Any:
        flat = keras.ops.reshape(images, (-1, self.pixels))
        hidden = keras.ops.relu(keras.ops.matmul(flat, self.hid_w) + self.hid_b)
        return keras.ops.matmul(hidden, self.sm_w) + self.sm_b


@dataclasses.dataclass
class ReplicaResult:
    """What the coordinator reports: the TF1 numbers and where the variables lived."""

    global_step: int
    local_steps: list[int]
    stale: int
    pending: int
    aggregate: int | None
    final_loss: float
    accuracy: float
    placement: list[tuple[str, str]]


def placement(variables: list[Any]) -> list[tuple[str, str]]:
    """``(variable path, device)`` for every variable, like TF1's placement log."""
    out = []
    for variable in variables:
        tf_var = variable.value if isinstance(variable, keras.Variable) else variable
        out.append((getattr(variable, "path", tf_var.name), tf_var.device))
    return out


def _build(strategy: Any, net_fn: Callable[[], ReplicaNet], learning_rate: float, workers: int,
           aggregate: int | None) -> tuple[Any, Any, Any, Any, SyncReplicas | None]:
    with strategy.scope():
        net = net_fn()
        optimizer = keras.optimizers.Adam(learning_rate)
        optimizer.build(net.trainable_variables)
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        local_steps = tf.Variable(tf.zeros([workers], tf.int64), trainable=False, name="local_steps")
        sync = None
        if aggregate is not None:
            sync = SyncReplicas(optimizer, net.trainable_variables, replicas_to_aggregate=aggregate,
                                global_step=global_step)
    return net, optimizer, global_step, local_steps, sync


def _step_fn(strategy: Any, net: Any, optimizer: Any, global_step: Any, local_steps: Any,
             sync: SyncReplicas | None) -> Callable[[Any], Any]:
    workers = int(local_steps.shape[0])

    def loss_of(images: Any, labels: Any) -> Any:
        losses = keras.losses.sparse_categorical_crossentropy(labels, net(images), from_logits=True)
        return tf.reduce_mean(losses)

    def replica_fn(images: Any, labels: Any) -> Any:
        if sync is not None:
            return sync.minimize(lambda: loss_of(images, labels))
        with tf.GradientTape() as tape:
            loss = loss_of(images, labels)
        grads = tape.gradient(loss, net.trainable_variables)
        optimizer.apply_gradients(zip(grads, net.trainable_variables))
        global_step.assign_add(1)
        return loss

    @tf.function
    def step(iterator: Any) -> Any:
        images, labels = next(iterator)
        loss = strategy.run(replica_fn, args=(images, labels))
        worker = tf.distribute.coordinator.experimental_get_current_worker_index()
        local_steps.assign_add(tf.one_hot(worker, workers, dtype=tf.int64))
        return loss

    return step


def train_replicas(strategy: Any, *, net_fn: Callable[[], ReplicaNet], dataset_fn: Callable[..., Any],
                   eval_data: tuple[np.ndarray, np.ndarray], train_steps: int, learning_rate: float,
                   workers: int, aggregate: int | None = None) -> ReplicaResult:
    """Trains until the global step reaches ``train_steps``; ``aggregate`` None means async.

    Args:
        strategy: the coordinator's ParameterServerStrategy.
        net_fn: builds the network (called under the strategy's scope).
        dataset_fn: ``dataset_fn(input_context)`` of repeated (images, labels) batches.
        eval_data: test images and labels, evaluated on the coordinator at the end.
        workers: workers in the coordinator's cluster.
        aggregate: ``replicas_to_aggregate`` for synchronous updates.
    """
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    net, optimizer, global_step, local_steps, sync = _build(strategy, net_fn, learning_rate, workers, aggregate)
    placed = placement([*net.weights, *optimizer.variables, global_step])
    iterator = iter(coordinator.create_per_worker_dataset(
        lambda: strategy.distribute_datasets_from_function(dataset_fn)))
    step = _step_fn(strategy, net, optimizer, global_step, local_steps, sync)
    per_update = aggregate or 1
    done, last = 0, None
    while done < train_steps:
        closures = (train_steps - done) * per_update
        last = [coordinator.schedule(step, args=(iterator,)) for _ in range(closures)][-1]
        coordinator.join()
        done = int(global_step.numpy())
        logger.info("global step %d/%d, local steps %s", done, train_steps, local_steps.numpy().tolist())
    images, labels = eval_data
    logits = net(tf.constant(images))
    accuracy = float(np.mean(np.argmax(logits.numpy(), axis=-1) == labels))
    return ReplicaResult(
        global_step=done, local_steps=[int(v) for v in local_steps.numpy()],
        stale=int(sync.stale.numpy()) if sync else 0, pending=int(sync.pending.numpy()) if sync else 0,
        aggregate=aggregate, final_loss=float(last.fetch()), accuracy=accuracy, placement=placed)
