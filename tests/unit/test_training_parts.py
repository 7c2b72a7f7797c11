"""The engine's parts: config validation, losses, metrics, schedules, the loop's chunking."""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import models
from toolkit.training import (
    CheckpointConfig,
    FitConfig,
    LogConfig,
    LoopEvent,
    TrainingError,
    TrainStep,
    build_state,
    make_forward,
    resolve_metrics,
    run_loop,
)
from toolkit.training.runners import Runner


@pytest.mark.parametrize(
    ("kwargs", "field", "needle"),
    [
        ({"epochs": 0}, "epochs", "`epochs` is 0; expected a positive integer. Pass e.g. epochs=5."),
        ({"steps_per_epoch": 2.5}, "steps_per_epoch", "`steps_per_epoch` is 2.5"),
        ({"steps_per_execution": True}, "steps_per_execution", "`steps_per_execution` is True"),
        ({"global_batch_size": "64"}, "global_batch_size", "`global_batch_size` is '64'"),
    ],
)
def test_config_errors_name_field_value_and_fix(kwargs, field, needle):
    with pytest.raises(TrainingError) as info:
        FitConfig(**kwargs)
    assert info.value.field == field
    assert needle in str(info.value) and "Pass e.g." in str(info.value)


def test_config_intervals():
    config = FitConfig(epochs=3, steps_per_epoch=40)
    assert (config.total_steps, config.checkpoint_interval, config.log_interval) == (120, 40, 4)
    assert FitConfig(steps_per_epoch=40, checkpoint=CheckpointConfig(every=15)).checkpoint_interval == 15
    assert FitConfig(steps_per_epoch=40, logs=LogConfig(every=7)).log_interval == 7


def test_keras_loss_object_is_used_per_example():
    forward = make_forward(keras.losses.SparseCategoricalCrossentropy(from_logits=True))  # reduction on
    model = models.digits_mlp(seed=0)
    per_example, predictions = forward(model, np.zeros((5, 8, 8, 1), np.float32), np.arange(5), True)
    assert per_example.shape == (5,) and predictions.shape == (5, 10)


def test_reducing_loss_function_is_rejected():
    forward = make_forward(lambda y, p: tf.reduce_mean(p))
    with pytest.raises(TrainingError, match="one value per example") as info:
        forward(models.digits_mlp(seed=0), np.zeros((2, 8, 8, 1), np.float32), np.arange(2), True)
    assert info.value.field == "loss"


def test_metrics_resolve_to_per_example_functions():
    resolved = resolve_metrics(["accuracy", "sparse_categorical_accuracy",
                                keras.metrics.SparseCategoricalAccuracy(name="sca")])
    assert list(resolved) == ["accuracy", "sparse_categorical_accuracy", "sca"]
    y_true, y_pred = tf.constant([1, 2]), tf.constant([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    for fn in resolved.values():
        np.testing.assert_array_equal(fn(y_true, y_pred), [1.0, 0.0])


@pytest.mark.parametrize(
    ("metrics", "needle"),
    [
        (["no_such_metric"], "'no_such_metric', which is not a per-example Keras metric"),
        ([keras.metrics.AUC()], "stateful metric 'auc'"),
        ("accuracy", "must be a list"),
        ([lambda y, p: y], None),
    ],
)
def test_metric_errors(metrics, needle):
    if needle is None:
        assert list(resolve_metrics(metrics)) == ["<lambda>"]
        return
    with pytest.raises(TrainingError, match="metrics") as info:
        resolve_metrics(metrics)
    assert needle in str(info.value)


def test_schedule_follows_the_global_step_not_optimizer_iterations():
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    state = build_state(tf.distribute.get_strategy(), lambda: models.digits_mlp(seed=0),
                        keras.optimizers.SGD(schedule))
    state.global_step.assign(20)
    assert float(state.optimizer.learning_rate) == pytest.approx(0.025)
    assert int(state.optimizer.iterations.numpy()) == 0
    assert state.optimizer.built  # slots exist before any step, so a restore can match them


def test_model_fn_must_return_a_built_model():
    with pytest.raises(TrainingError, match="must return a keras.Model. Received: str"):
        build_state(tf.distribute.get_strategy(), lambda: "model", "adam")
    with pytest.raises(TrainingError, match="no built trainable weights"):
        build_state(tf.distribute.get_strategy(), lambda: keras.Sequential([keras.layers.Dense(2)]), "adam")
    with pytest.raises(TrainingError, match="'not-an-optimizer', which Keras does not know"):
        build_state(tf.distribute.get_strategy(), lambda: models.digits_mlp(seed=0), "not-an-optimizer")


def test_train_step_stats_are_sums_and_the_gradient_uses_the_global_batch():
    state = build_state(tf.distribute.get_strategy(), lambda: models.digits_mlp(seed=0),
                        lambda: keras.optimizers.SGD(1.0))
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    step = TrainStep(state, make_forward(loss), resolve_metrics(["accuracy"]), global_batch_size=8)
    x, y = np.random.RandomState(0).rand(4, 8, 8, 1).astype(np.float32), np.arange(4)
    before = [w.copy() for w in state.model.get_weights()]
    with tf.GradientTape() as tape:
        per_example = keras.losses.sparse_categorical_crossentropy(y, state.model(x), from_logits=True)
        expected = tf.reduce_sum(per_example) / 8.0  # half of the global batch is on this replica
    grads = tape.gradient(expected, state.model.trainable_variables)
    stats = step(x, y).numpy()
    assert stats[0] == 4 and stats[1] == pytest.approx(float(expected) * 8, rel=1e-5)
    np.testing.assert_allclose(state.model.get_weights()[0], before[0] - grads[0].numpy(), atol=1e-6)


class _CountingRunner(Runner):
    """Records how the loop splits work; no TensorFlow."""

    def __init__(self, sync_every=None, width=3, start=0, extra=None):
        self.sync_every, self.single_controller, self.calls, self.waits = sync_every, True, [], 0
        self.width, self.step, self.extra = width, start, dict(extra or {})

    def run(self, num_steps):
        self.calls.append(num_steps)
        self.step += num_steps

    def current_step(self):
        # ``extra``: after the wait with this index, the variable differs from the plan by this much
        self.step += self.extra.pop(self.waits, 0)
        return self.step

    def wait(self):
        self.waits += 1
        return np.array([2.0 * sum(self.calls[-1:]), 1.0, 0.0][: self.width])

    def agree(self, flag):
        return flag


def test_loop_chunks_end_on_checkpoint_steps_and_epoch_ends_and_resume_mid_epoch():
    from toolkit.training.step import StatLayout

    config = FitConfig(epochs=2, steps_per_epoch=10, steps_per_execution=4, checkpoint=CheckpointConfig(every=6))
    runner, events = _CountingRunner(start=3), []
    record = run_loop(runner, config=config, layout=StatLayout(("m",)), start_step=3, hooks=[events.append])
    ends = [e.step for e in events if e.kind == "steps_end"]
    assert ends == [6, 10, 12, 16, 18, 20]  # checkpoint multiples of 6 and epoch ends at 10, 20
    assert sum(runner.calls) == 17 and max(runner.calls) <= 4
    assert record.epochs == [0, 1] and record.final_step == 20
    kinds = [e.kind for e in events]
    assert kinds[0] == "train_begin" and kinds[-1] == "train_end" and kinds.count("epoch_end") == 2
    assert all(isinstance(e, LoopEvent) for e in events)


def test_loop_with_a_sync_interval_hands_over_whole_executions():
    config = FitConfig(epochs=1, steps_per_epoch=50, steps_per_execution=5, logs=LogConfig(every=7))
    runner = _CountingRunner(sync_every=7, width=2)
    from toolkit.training.step import StatLayout

    run_loop(runner, config=config, layout=StatLayout(()), start_step=0, hooks=[])
    assert set(runner.calls) == {5} and runner.waits == 5  # 10 executions, a wait every 2


def test_long_executions_still_end_on_checkpoints_and_epoch_ends():
    """Keras' default is one step per execution; a longer one is cut at checkpoint steps and epoch ends."""
    from toolkit.training.step import StatLayout

    assert FitConfig().steps_per_execution == 1
    ps = FitConfig(epochs=2, steps_per_epoch=100, steps_per_execution=32, checkpoint=CheckpointConfig(every=25))
    runner, events = _CountingRunner(sync_every=4 * 2 * 32, width=2), []
    record = run_loop(runner, config=ps, layout=StatLayout(()), start_step=0, hooks=[events.append])
    assert [e.step for e in events if e.kind == "steps_end"] == [25, 50, 75, 100, 125, 150, 175, 200]
    assert set(runner.calls) == {25} and record.final_step == 200


def test_loop_follows_the_global_step_variable_not_its_own_count():
    """A re-run closure counts twice (at-least-once): checkpoints and epochs follow the variable.

    Steps that went missing are scheduled again until the target is reached.
    """
    from toolkit.training.step import StatLayout

    config = FitConfig(epochs=2, steps_per_epoch=10, steps_per_execution=4, checkpoint=CheckpointConfig(every=6))
    runner, events = _CountingRunner(extra={1: 2, 3: -3}), []
    record = run_loop(runner, config=config, layout=StatLayout(("m",)), start_step=0, hooks=[events.append])
    ends = [e.step for e in events if e.kind == "steps_end"]
    assert ends[:3] == [6, 10, 9]  # 4 handed over and 2 counted twice; later 3 lost
    saved = [e.step for e in events if e.kind == "steps_end"]
    assert 9 in saved and 12 in saved  # the lost steps were run again: the target 12 was reached
    assert ends[-1] == record.final_step == runner.step == 20
    assert sum(runner.calls) == 21  # 20 - 2 double-counted + 3 lost and re-scheduled


def _ancestors(op):
    seen, stack = set(), [op]
    while stack:
        current = stack.pop()
        for parent in [t.op for t in current.inputs] + list(current.control_inputs):
            if parent not in seen:
                seen.add(parent)
                stack.append(parent)
    return seen


def test_the_global_step_is_counted_after_the_updates_it_counts():
    """Ops on different variables are unordered in a tf.function: the increment needs explicit edges."""
    from toolkit.training.runners import SyncRunner

    strategy = tf.distribute.get_strategy()
    state = build_state(strategy, lambda: models.digits_mlp(seed=0), "sgd")
    step = TrainStep(state, make_forward("sparse_categorical_crossentropy"), {}, global_batch_size=4)
    dataset_fn = lambda context: tf.data.Dataset.from_tensors(  # noqa: E731
        (tf.zeros([4, 8, 8, 1]), tf.zeros([4], tf.int64))).repeat()
    runner = SyncRunner(strategy, step, state.global_step, dataset_fn=dataset_fn)
    function, args = runner._call(2)
    graph = function.get_concrete_function(*args).graph
    handle = [inner for outer, inner in graph.captures if outer is state.global_step.handle]
    increments = [op for op in graph.get_operations()
                  if op.type == "AssignAddVariableOp" and op.inputs[0] is handle[0]]
    updates = [op for op in graph.get_operations() if op.type in ("AssignSubVariableOp", "AssignVariableOp")
               and op.inputs[1].dtype == tf.float32]
    assert increments and len(updates) >= 2 * len(state.model.trainable_variables)
    for increment in increments:
        assert set(updates) <= _ancestors(increment)


def test_a_sync_runner_counts_the_global_step_from_the_restored_one_without_reading_it():
    from toolkit.training.runners import SyncRunner

    strategy = tf.distribute.get_strategy()
    state = build_state(strategy, lambda: models.digits_mlp(seed=0), "sgd")
    state.global_step.assign(5)  # as restored from a checkpoint
    step = TrainStep(state, make_forward("sparse_categorical_crossentropy"), {}, global_batch_size=4)
    dataset_fn = lambda context: tf.data.Dataset.from_tensors(  # noqa: E731
        (tf.zeros([4, 8, 8, 1]), tf.zeros([4], tf.int64))).repeat()
    runner = SyncRunner(strategy, step, state.global_step, dataset_fn=dataset_fn)
    for count in (2, 3, 1):
        runner.run(count)
    runner.wait()
    assert runner.current_step() == int(state.global_step.numpy()) == 11


def test_a_traced_write_checkpoint_saves_current_values_and_retraces_only_for_new_objects(tmp_path):
    from toolkit.training.state import TracedWriteCheckpoint

    module = tf.Module()
    module.v = tf.Variable(1.0)
    checkpoint = TracedWriteCheckpoint(m=module)
    tmp_path = tmp_path / "not-made-yet"  # as with a string prefix, the write creates the directory
    manager = tf.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=2, checkpoint_name="ckpt")
    first = manager.save(checkpoint_number=1)
    module.v.assign(2.0)
    second = manager.save(checkpoint_number=2)
    assert checkpoint.traces == 1  # the second write ran the same function
    key = "m/v/.ATTRIBUTES/VARIABLE_VALUE"
    assert (tf.train.load_variable(first, key), tf.train.load_variable(second, key)) == (1.0, 2.0)
    assert tf.train.latest_checkpoint(str(tmp_path)) == second  # the manager's index and numbering still run

    module.w = tf.Variable(5.0)  # a new object: the write is traced again, so w is not left out
    third = manager.save(checkpoint_number=3)
    assert checkpoint.traces == 2
    assert tf.train.load_variable(third, "m/w/.ATTRIBUTES/VARIABLE_VALUE") == 5.0
    assert not list(tmp_path.glob("ckpt-1.*"))  # pruned to the newest two

    restored = tf.Module()
    restored.v, restored.w = tf.Variable(0.0), tf.Variable(0.0)
    tf.train.Checkpoint(m=restored).restore(third).assert_consumed()
    assert (restored.v.numpy(), restored.w.numpy()) == (2.0, 5.0)
