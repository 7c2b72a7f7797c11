"""``fit(options=FitOptions(between_graph=True))``'s parts that run in one process.

The fused updates must be Keras' own updates (the workers apply them to the
variables a Keras optimizer checkpoints); the chief's variables must be named
resources another client can open; and what the between-graph step cannot run
must be refused up front, naming the way out. The cluster runs are in
``tests/cluster/test_training_cluster.py``.
"""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import models
from toolkit import data, fit
from toolkit._compat.tensorflow import named_variable
from toolkit.training import FitOptions, TrainingError, TrainStep, build_state
from toolkit.training.between_graph import NamedVariables, check_supported, hyperparameters, slots_of
from toolkit.training.between_graph_worker import fused_update
from toolkit.training.step import make_forward

LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@pytest.mark.parametrize("make", [
    lambda: keras.optimizers.Adam(1e-2),
    lambda: keras.optimizers.Adam(3e-3, beta_1=0.8, beta_2=0.99, epsilon=1e-6),
    lambda: keras.optimizers.SGD(0.1),
    lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    lambda: keras.optimizers.SGD(0.05, momentum=0.8, nesterov=True),
], ids=["adam", "adam-tuned", "sgd", "sgd-momentum", "sgd-nesterov"])
def test_fused_updates_are_keras_updates(make):
    rng = np.random.default_rng(0)
    start = rng.normal(size=(5, 3)).astype(np.float32)
    kind = check_supported_kind(make())
    optimizer = make()
    keras_variable = keras.Variable(start)
    optimizer.build([keras_variable])
    fused_variable = tf.Variable(start)
    slots = [tf.Variable(tf.zeros_like(slot.value)) for slot in slots_of(optimizer, kind, 0)]
    spec = hyperparameters(optimizer, kind)
    for step in range(4):
        gradient = tf.constant(rng.normal(size=(5, 3)).astype(np.float32))
        fused_update(spec, fused_variable.handle, [slot.handle for slot in slots], gradient,
                     tf.constant(float(optimizer.learning_rate), tf.float32), tf.constant(step + 1.0))
        optimizer.apply_gradients([(gradient, keras_variable)])
    np.testing.assert_allclose(fused_variable.numpy(), keras_variable.numpy(), rtol=1e-5, atol=1e-6)
    for fused, kept in zip(slots, slots_of(optimizer, kind, 0), strict=True):
        np.testing.assert_allclose(fused.numpy(), kept.numpy(), rtol=1e-5, atol=1e-7)


def check_supported_kind(optimizer):
    state = build_state(tf.distribute.get_strategy(), lambda: models.digits_mlp(seed=0), lambda: optimizer)
    return check_supported(state, TrainStep(state, make_forward(LOSS), {}), sync=False, custom_step=False)


@pytest.mark.parametrize(("make", "named"), [
    (lambda: keras.optimizers.RMSprop(1e-3), "RMSprop"),
    (lambda: keras.optimizers.Adam(1e-3, amsgrad=True), "amsgrad"),
    (lambda: keras.optimizers.Adam(1e-3, clipnorm=1.0), "clipnorm"),
    (lambda: keras.optimizers.SGD(0.1, weight_decay=1e-4), "weight_decay"),
])
def test_optimizers_the_fused_ops_cannot_reproduce_are_refused(make, named):
    with pytest.raises(TrainingError, match=named) as info:
        check_supported_kind(make())
    assert info.value.field == "between_graph" and "drop between_graph" in str(info.value)


def test_steps_the_workers_cannot_rebuild_are_refused():
    state = build_state(tf.distribute.get_strategy(), lambda: models.digits_mlp(seed=0), "adam")

    class MyStep(TrainStep):
        pass

    with pytest.raises(TrainingError, match="train_step"):
        check_supported(state, MyStep(state, make_forward(LOSS), {}), sync=False, custom_step=True)
    with pytest.raises(TrainingError, match="sync="):
        check_supported(state, TrainStep(state, make_forward(LOSS), {}), sync=True, custom_step=False)


def test_the_chiefs_variables_are_named_resources_another_handle_opens():
    strategy = tf.distribute.get_strategy()
    plain = build_state(strategy, lambda: models.digits_mlp(seed=3), "adam")
    named = NamedVariables("tfdist_test_named")
    with tf.variable_creator_scope(named):
        state = build_state(strategy, lambda: models.digits_mlp(seed=3), "adam")
    names = [named.name_of(v) for v in [*state.model.variables, *state.optimizer.variables, state.global_step]]
    assert len(set(names)) == len(names) and all(name.startswith("tfdist_test_named/") for name in names)
    for got, want in zip(state.model.get_weights(), plain.model.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)  # the same initial values as unnamed variables
    kernel = state.model.trainable_variables[0]
    other = named_variable(named.name_of(kernel), kernel.dtype, kernel.shape, trainable=False)
    kernel.assign(tf.ones(kernel.shape))  # a write through one handle is seen through the other
    np.testing.assert_array_equal(other.numpy(), np.ones(kernel.shape))
    with pytest.raises(TrainingError, match="was not created by the training state"):
        named.name_of(tf.Variable(1.0))


def test_fit_checks_between_graph_before_anything_starts(tmp_path):
    train = data.load("digits")
    common = dict(loss=LOSS, epochs=1, steps_per_epoch=2, model_dir=str(tmp_path), verbose=0)
    with pytest.raises(TrainingError, match="between_graph` must be True or False") as info:
        fit(models.digits_mlp, train.dataset_fn(64), options=FitOptions(between_graph="yes"), **common)
    assert info.value.field == "FitOptions.between_graph"
    with pytest.raises(TrainingError, match="steps_per_execution=4") as info:
        fit(models.digits_mlp, train.dataset_fn(64), steps_per_execution=4,
            options=FitOptions(between_graph=True, export=False), **common)
    assert info.value.field == "steps_per_execution"


def test_a_stopping_task_closes_the_token_queue_so_a_waiting_loop_ends():
    """A worker waiting for a token (its chief gone) must not keep the task from exiting."""
    import threading
    import time

    from toolkit.training.between_graph_worker import _close_on_stop

    graph = tf.Graph()
    with graph.as_default():
        queue = tf.queue.FIFOQueue(10, [tf.int64], shapes=[[]])
        token, close = queue.dequeue(), queue.close(cancel_pending_enqueues=True)
    stop, done, outcome = threading.Event(), threading.Event(), []
    with tf.compat.v1.Session(graph=graph) as session:
        def loop():
            try:
                session.run(token)
            except tf.errors.OutOfRangeError:
                outcome.append("closed")

        waiting = threading.Thread(target=loop, daemon=True)
        waiting.start()
        watcher = threading.Thread(target=_close_on_stop, args=(session, close, stop, done), daemon=True)
        watcher.start()
        time.sleep(0.3)
        assert waiting.is_alive() and not outcome  # blocked in the dequeue
        stop.set()
        waiting.join(timeout=10)
        watcher.join(timeout=10)
    assert outcome == ["closed"] and not watcher.is_alive()
