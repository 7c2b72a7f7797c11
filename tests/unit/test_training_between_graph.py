"""``fit(options=FitOptions(between_graph=True))``'s parts that run in one process.

The chief's variables must be named resources another client can open, the
optimizer must be described so a worker rebuilds it, and a step the workers
cannot rebuild must be refused up front when asked for, naming the way out
(``test_between_graph_optimizers.py`` checks every optimizer's updates). The cluster runs are in
``tests/cluster/test_training_cluster.py``.
"""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from _models import compiled

import models
from toolkit import data, fit
from toolkit._compat.tensorflow import named_variable
from toolkit.training import FitOptions, TrainingError, TrainStep, build_state
from toolkit.training.between_graph import NamedVariables, _optimizer_spec, runner_for, unsupported
from toolkit.training.step import make_forward

LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def test_steps_the_workers_cannot_rebuild_are_left_to_the_coordinator_or_refused_when_asked_for():
    state = build_state(tf.distribute.get_strategy(), lambda: models.digits_mlp(seed=0), "adam")

    class MyStep(TrainStep):
        pass

    plain = TrainStep(state, make_forward(LOSS), {})
    assert unsupported(plain) is None
    assert unsupported(MyStep(state, make_forward(LOSS), {})) == "train_step (MyStep)"
    with pytest.raises(TrainingError, match=r"cannot run train_step \(MyStep\)") as info:
        runner_for(state, MyStep(state, make_forward(LOSS), {}), NamedVariables("tfdist_test_refused"), workers=1,
                   steps_per_execution=1, required=True)
    assert info.value.field == "between_graph" and "Drop between_graph" in str(info.value)


def test_any_keras_optimizer_is_described_for_the_workers_and_a_schedule_follows_the_global_step():
    schedule = keras.optimizers.schedules.ExponentialDecay(0.2, 10, 0.5)
    state = build_state(tf.distribute.get_strategy(), lambda: models.digits_mlp(seed=0),
                        lambda: keras.optimizers.RMSprop(schedule, centered=True))
    spec = _optimizer_spec(state.optimizer, None)
    assert spec["follows_global_step"] and spec["serialized"]["class_name"] == "RMSprop"
    assert keras.optimizers.schedules.deserialize(spec["serialized"]["config"]["learning_rate"]).get_config() == \
        schedule.get_config()


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


def test_between_graph_steps_are_a_registered_runner_and_fits_default_under_parameter_servers():
    from toolkit.training.between_graph import BetweenGraphRunner
    from toolkit.training.runners import RUNNERS, make_runner

    assert RUNNERS["between_graph"] is BetweenGraphRunner
    assert FitOptions().between_graph is None  # None: between-graph steps wherever they can run
    state = build_state(tf.distribute.get_strategy(), lambda: models.digits_mlp(seed=0), "adam")
    with pytest.raises(TrainingError, match="No runner for strategy kind 'nonsense'; known kinds: .*between_graph"):
        make_runner(tf.distribute.get_strategy(), TrainStep(state, make_forward(LOSS), {}), state.global_step,
                    kind="nonsense")


def test_fit_checks_between_graph_before_anything_starts(tmp_path):
    train = data.load("digits")
    common = dict(epochs=1, steps_per_epoch=2, model_dir=str(tmp_path), verbose=0)
    with pytest.raises(TrainingError, match="between_graph` must be True or False") as info:
        fit(compiled(models.digits_mlp, loss=LOSS, metrics=()), train.dataset_fn(64),
            options=FitOptions(between_graph="yes"), **common)
    assert info.value.field == "FitOptions.between_graph"


def test_a_stopping_task_ends_its_waiting_loop_and_leaves_the_token_queue_to_the_others():
    """A worker waiting for a token (preempted, or its chief gone) must not keep the task from exiting, nor close
    the queue the other workers and the chief share."""
    import threading
    import time

    from strategies import _shipped_steps

    server = tf.distribute.Server.create_local_server()
    graph = tf.Graph()
    with graph.as_default():
        queue = tf.queue.FIFOQueue(10, [tf.int64], shapes=[[]], shared_name="tfdist_test_stopping")
        token, release = queue.dequeue(), queue.enqueue(tf.constant(3, tf.int64))
    stop, done, outcome = threading.Event(), threading.Event(), []
    session = tf.compat.v1.Session(server.target, graph=graph)

    def loop():
        try:
            session.run(token)
        except tf.errors.CancelledError:
            outcome.append("cancelled")

    waiting = threading.Thread(target=loop, daemon=True)
    waiting.start()
    watcher = threading.Thread(target=_shipped_steps._close_on_stop, args=(session, stop, done), daemon=True)
    watcher.start()
    time.sleep(0.3)
    assert waiting.is_alive() and not outcome  # blocked in the dequeue
    stop.set()
    waiting.join(timeout=10)
    watcher.join(timeout=10)
    assert outcome == ["cancelled"] and not watcher.is_alive()
    with tf.compat.v1.Session(server.target, graph=graph) as other:  # another worker still gets the next token
        other.run(release)
        assert other.run(token) == 3
