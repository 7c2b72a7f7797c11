"""Every Keras 3 optimizer on the between-graph worker takes the same steps as one process.

The worker's real loop (``run_worker``) runs against two in-process servers (a ps and a worker);
the test plays the chief: it puts the named variables on the ps with the reference's initial
values, publishes the manifest, releases the step tokens and closes the queue. The reference is
the same ``TrainStep`` run eagerly in this process on the same batches.
"""
from __future__ import annotations

import json
import threading
import uuid

import keras
import numpy as np
import pytest
import tensorflow as tf
from _inprocess import ps_and_worker_target
from _models import compiled

from toolkit._compat.tensorflow import named_variable
from toolkit._graph_packing import pack_transfers
from toolkit.training import TrainStep, build_state
from toolkit.training.between_graph import MANIFEST, QUEUE_CAPACITY, _optimizer_spec
from toolkit.training.between_graph_worker import build_worker_step, run_worker
from toolkit.training.step import make_forward

v1 = tf.compat.v1
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
PS, WORKER = "/job:ps/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0"
OPTIMIZERS = {
    "sgd": lambda: keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
    "adam": lambda: keras.optimizers.Adam(1e-2, amsgrad=True),
    "adamw": lambda: keras.optimizers.AdamW(1e-2, weight_decay=0.01),
    "rmsprop": lambda: keras.optimizers.RMSprop(1e-2, momentum=0.5, centered=True),
    "adagrad": lambda: keras.optimizers.Adagrad(0.1),
    "adadelta": lambda: keras.optimizers.Adadelta(1.0),
    "adamax": lambda: keras.optimizers.Adamax(1e-2, clipnorm=1.0),
    "nadam": lambda: keras.optimizers.Nadam(1e-2),
    "ftrl": lambda: keras.optimizers.Ftrl(0.1, l1_regularization_strength=0.01),
    "lion": lambda: keras.optimizers.Lion(1e-3),
    "lamb": lambda: keras.optimizers.Lamb(1e-2),
    "sgd-schedule": lambda: keras.optimizers.SGD(keras.optimizers.schedules.ExponentialDecay(0.2, 2, 0.5)),
}


@pytest.fixture(scope="module")
def cluster():
    return ps_and_worker_target()


def _model():
    init = keras.initializers.GlorotUniform(seed=5)
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(6, activation="relu", kernel_initializer=init),
                             keras.layers.Dropout(0.1, seed=5), keras.layers.Dense(3, kernel_initializer=init)])


def _dataset_fn(context):
    rng = np.random.default_rng(context.input_pipeline_id)
    features, labels = rng.normal(size=(64, 8)).astype(np.float32), rng.integers(0, 3, size=64)
    return tf.data.Dataset.from_tensor_slices((features, labels)).batch(16).repeat()


def _reference(make_optimizer, dataset_fn, steps):
    """The eager ``TrainStep`` on the batches of one pipeline: (initial state, final state)."""
    state = build_state(tf.distribute.get_strategy(), _model, make_optimizer)
    initial = [v.numpy() for v in [*state.model.variables, *state.optimizer.variables]]
    step = TrainStep(state, make_forward(LOSS), {})  # eagerly: tracing costs more than these few steps
    batches = iter(dataset_fn(tf.distribute.InputContext()))
    for _ in range(steps):
        step(*next(batches))
        state.global_step.assign_add(1)
    return state, initial


def _chief(session_target, state, initial, *, steps_per_execution):
    """Named copies of the reference's initial variables on the ps, and the manifest that names them."""
    prefix = f"test_{uuid.uuid4().hex[:8]}"
    variables = [*state.model.variables, *state.optimizer.variables]
    specs = [{"name": f"{prefix}/{i}", "dtype": tf.as_dtype(v.dtype).name, "shape": list(v.shape), "device": PS}
             for i, v in enumerate(variables)]
    extra = {name: {"name": f"{prefix}/{name}", "dtype": dtype, "shape": shape, "device": PS}
             for name, dtype, shape in (("global_step", "int64", []), ("totals", "float64", [2]),
                                        ("ready", "int64", []))}
    optimizer = _optimizer_spec(state.optimizer, None)
    optimizer["variables"] = specs[len(state.model.variables):]
    graph = tf.Graph()
    with graph.as_default(), v1.device(PS):
        writes = [tf.raw_ops.AssignVariableOp(resource=named_variable(s["name"], s["dtype"], s["shape"],
                                                                      trainable=False).handle, value=value)
                  for s, value in zip([*specs, *extra.values()], [*initial, np.int64(0), np.zeros(2), np.int64(0)],
                                      strict=True)]
        queue = tf.queue.FIFOQueue(QUEUE_CAPACITY, [tf.int64], shapes=[[]], shared_name=f"{prefix}/tokens")
        tokens = v1.placeholder(tf.int64, [None])
        release, close = queue.enqueue_many([tokens]), queue.close()
        manifest = {"mode": "between_graph", "optimizer": optimizer, "model": specs[:len(state.model.variables)],
                    **extra, "width": 2, "start": 0, "steps_per_execution": steps_per_execution,
                    "queue": {"name": f"{prefix}/tokens", "device": PS}}
        publish = tf.raw_ops.AssignVariableOp(resource=named_variable(MANIFEST, tf.string, [], trainable=False).handle,
                                              value=tf.constant(json.dumps(manifest)))
        reads = [named_variable(s["name"], s["dtype"], s["shape"], trainable=False).read_value()
                 for s in [*specs, *extra.values()]]
    return graph, writes, publish, release, tokens, close, reads, manifest


@pytest.mark.parametrize(("name", "steps_per_execution", "tokens"), [
    *[(name, 1, [1] * 3) for name in OPTIMIZERS],
    ("adam", 3, [3, 1, 3]),  # several steps per session.run, and a short execution
    ("sgd-schedule", 4, [4, 2]),
], ids=lambda value: str(value))
def test_the_workers_steps_equal_one_processs(cluster, name, steps_per_execution, tokens):
    dataset_fn = _dataset_fn
    steps = sum(tokens)
    state, initial = _reference(OPTIMIZERS[name], dataset_fn, steps)
    graph, writes, publish, release, placeholder, close, reads, _ = _chief(
        cluster, state, initial, steps_per_execution=steps_per_execution)
    with v1.Session(cluster, graph=graph) as session:
        session.run(writes)
        session.run(publish)  # before the worker starts: it must not read an earlier test's manifest
        stop, ran = threading.Event(), []
        worker = threading.Thread(target=lambda: ran.append(run_worker(
            cluster, num_workers=1, index=0, stop=stop, dataset_fn=dataset_fn, forward=None, global_batch_size=None,
            model_fn=compiled(_model, optimizer=OPTIMIZERS[name], loss=LOSS, metrics=()))), daemon=True)
        worker.start()
        session.run(release, {placeholder: tokens})
        for _ in range(600):
            got = session.run(reads)
            if got[-3] == steps or not worker.is_alive():
                break
            stop.wait(0.1)
        session.run(close)
        worker.join(timeout=60)
    assert ran == [steps] and not worker.is_alive()
    *weights, global_step, totals, ready = got
    assert (global_step, ready, totals[0]) == (steps, 1, 16 * steps)
    want = [v.numpy() for v in [*state.model.variables, *state.optimizer.variables]]
    for got_value, want_value, variable in zip(weights, want, [*state.model.variables, *state.optimizer.variables],
                                               strict=True):
        np.testing.assert_allclose(got_value, want_value, rtol=2e-5, atol=2e-6, err_msg=variable.path)
    assert int(want[len(state.model.variables)]) == steps  # the optimizer's own iteration count


@pytest.mark.parametrize("steps_per_execution", [1, 3])
def test_a_step_makes_three_transfers_between_the_worker_and_the_ps(cluster, steps_per_execution):
    """The token travels with the variables' values in one tensor, the gradients with the stats in another, and
    the worker's wait for its token is one control edge; each further step of an execution adds its gate."""
    def mlp():
        return keras.Sequential([keras.Input((8,)), keras.layers.Dense(6, activation="relu"), keras.layers.Dense(3)])

    adam = lambda: keras.optimizers.Adam(1e-2)  # noqa: E731
    state = build_state(tf.distribute.get_strategy(), mlp, adam)
    initial = [v.numpy() for v in [*state.model.variables, *state.optimizer.variables]]
    graph, writes, _, release, placeholder, _, _, manifest = _chief(cluster, state, initial,
                                                                    steps_per_execution=steps_per_execution)
    step_graph, metadata = tf.Graph(), v1.RunMetadata()
    with step_graph.as_default():
        train, token, initializer, _ = build_worker_step(
            manifest, model_fn=compiled(mlp, optimizer=adam, loss=LOSS, metrics=()), dataset_fn=_dataset_fn,
            forward=None, global_batch_size=None, num_workers=1, index=0, worker_device=WORKER)
    assert pack_transfers(step_graph, [*train, token]) > 0
    with v1.Session(cluster, graph=graph) as chief, v1.Session(cluster, graph=step_graph) as worker:
        chief.run(writes)
        chief.run(release, {placeholder: [steps_per_execution]})
        worker.run(initializer)
        ran = worker.run([token, *train], options=v1.RunOptions(output_partition_graphs=True),
                         run_metadata=metadata)[0]
    received = [node.attr["tensor_name"].s.decode() for graph_def in metadata.partition_graphs
                for node in graph_def.node if node.op == "_Recv" and not node.attr["client_terminated"].b]
    assert ran == steps_per_execution
    assert len(received) == 3 * steps_per_execution, received
