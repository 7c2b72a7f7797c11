"""Preemption in one process: the signal checkpoints at the step reached, and a new run resumes exactly there."""
from __future__ import annotations

import logging
import os
import signal
import textwrap

import keras
import pytest
import tensorflow as tf
from _children import preempted_and_stopped

import models
from toolkit import data, fit
from toolkit.training import CheckpointConfig, FitOptions, TrainingError
from toolkit.training.preemption import (
    EXIT_PREEMPTED,
    PreemptionOptions,
    TrainingPreempted,
    check_grace,
    install,
    record_save_seconds,
    take_notices,
    watcher,
    write_notice,
)
from toolkit.training.runners import SyncRunner

STEPS_PER_EPOCH = 20


@pytest.fixture
def clean_watcher():
    """Restores SIGTERM's handler and the watcher afterwards (and keeps its watchdog from firing)."""
    previous, task = signal.getsignal(signal.SIGTERM), watcher().task
    yield watcher()
    watcher().done.set()
    watcher().reset()
    watcher().role, watcher().installed, watcher().task = "train", False, task
    signal.signal(signal.SIGTERM, previous)


class _SignalAt(keras.callbacks.Callback):
    """Sends this process SIGTERM ``times`` times once the step reaches ``step`` (one step per chunk)."""

    def __init__(self, step: int, times: int = 1) -> None:
        super().__init__()
        self.step, self.times, self.epoch, self.sent_at = step, times, 0, None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        step = self.epoch * STEPS_PER_EPOCH + batch + 1
        if self.sent_at is None and step >= self.step:
            self.sent_at = step
            for _ in range(self.times):
                os.kill(os.getpid(), signal.SIGTERM)


def _fit(model_dir, callbacks=()):
    train = data.load("digits")
    return fit(lambda: models.digits_mlp(seed=0), train.dataset_fn(32, seed=1),
               loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), epochs=2,
               steps_per_epoch=STEPS_PER_EPOCH, steps_per_execution=1, model_dir=str(model_dir), verbose=0,
               callbacks=list(callbacks), options=FitOptions(checkpoint=CheckpointConfig(every=1000), export=False))


def test_a_signal_checkpoints_at_its_step_and_the_next_run_ends_exactly(tmp_path, clean_watcher, caplog):
    caplog.set_level(logging.INFO)
    signaller = _SignalAt(13, times=2)  # twice in a row: the second one only says so
    with pytest.raises(TrainingPreempted) as info:
        _fit(tmp_path, [signaller])
    assert info.value.code == EXIT_PREEMPTED == 143 and info.value.step == signaller.sent_at == 13
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-13")  # off the checkpoint schedule
    assert "SIGTERM again" in caplog.text and "already preempting" in caplog.text
    assert "preempted (SIGTERM" in caplog.text and "checkpoint at step 13 written" in caplog.text
    clean_watcher.reset()
    history = _fit(tmp_path)
    assert "restored" in caplog.text and "at global step 13" in caplog.text
    assert history.global_step == 2 * STEPS_PER_EPOCH
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith(f"ckpt-{2 * STEPS_PER_EPOCH}")


def test_a_signal_before_the_first_step_stops_there(tmp_path, clean_watcher):
    install(PreemptionOptions(), role="train")
    os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(TrainingPreempted) as info:
        _fit(tmp_path)
    assert info.value.step == 0 and tf.train.latest_checkpoint(str(tmp_path)) is None  # nothing done, nothing lost


class _CountedAgreements(SyncRunner):
    """A runner of two workers in one process (it votes as theirs do) that counts its separate agreements."""

    agreements = 0

    def agree(self, flag):
        self.agreements += 1
        return super().agree(flag)


@pytest.mark.parametrize("per_execution", [1, 9])  # a straight execution and a looped one
def test_workers_vote_inside_their_executions_and_stop_after_the_one_that_carried_the_signal(clean_watcher,
                                                                                            per_execution):
    from toolkit.training import FitConfig, TrainStep, build_state, make_forward, run_loop
    from toolkit.training.preemption_loop import LoopPreemption

    strategy = tf.distribute.get_strategy()
    state = build_state(strategy, lambda: models.digits_mlp(seed=0), "sgd")
    step = TrainStep(state, make_forward("sparse_categorical_crossentropy"), {}, global_batch_size=4)
    dataset_fn = lambda context: tf.data.Dataset.from_tensors(  # noqa: E731
        (tf.zeros([4, 8, 8, 1]), tf.zeros([4], tf.int64))).repeat()
    runner = _CountedAgreements(strategy, step, state.global_step, dataset_fn=dataset_fn, num_workers=2)
    ends, signal_at = [], 3 * per_execution

    def signal_then(event):
        if event.kind == "steps_end":
            ends.append(event.step)
            # the stats came back without the vote: examples per step is the batch
            assert event.rates["examples_per_sec"] == pytest.approx(4 * event.rates["steps_per_sec"])
            if event.step == signal_at:
                os.kill(os.getpid(), signal.SIGTERM)

    config = FitConfig(epochs=1, steps_per_epoch=10 * per_execution, steps_per_execution=per_execution)
    with pytest.raises(TrainingPreempted):
        run_loop(runner, config=config, layout=step.layout, start_step=0, hooks=[signal_then],
                 check_preemption=LoopPreemption(runner, [signal_then]).check)
    # the execution after the signal carried the flag; its vote, read with its stats, stopped the loop
    assert ends[-1] == int(state.global_step.numpy()) == signal_at + per_execution
    assert runner.agreements == 1  # only the check before the first step asked the other workers
    traced = runner._unrolled.get(per_execution, runner._looped)
    assert traced.experimental_get_tracing_count() == 1  # flag down, then up: the same trace


def test_the_evaluator_leaves_at_once(clean_watcher):
    install(PreemptionOptions(), role="evaluator", task="evaluator-0")
    with pytest.raises(TrainingPreempted) as info:
        os.kill(os.getpid(), signal.SIGTERM)
        signal.sigtimedwait([], 0.1)  # let the handler run
    assert info.value.code == EXIT_PREEMPTED and info.value.step is None


def test_options_validate_and_read_the_environment():
    assert PreemptionOptions().grace_period < 30  # below Kubernetes' default kill deadline
    env = {"TFDIST_PREEMPTION_GRACE": "12.5", "TFDIST_PREEMPTION_SIGNAL": "usr1"}
    options = PreemptionOptions.from_env(env)
    assert (options.grace_period, options.signal) == (12.5, signal.SIGUSR1)
    assert PreemptionOptions.from_env(env, grace_period=3.0).grace_period == 3.0
    with pytest.raises(TrainingError, match=r"TFDIST_PREEMPTION_GRACE is 'soon'; expected a float") as info:
        PreemptionOptions.from_env({"TFDIST_PREEMPTION_GRACE": "soon"})
    assert info.value.field == "grace_period"
    with pytest.raises(TrainingError, match=r"`signal` is 'SIGKILL'.*cannot be caught"):
        PreemptionOptions(signal="SIGKILL")
    with pytest.raises(TrainingError, match=r"`signal` is 'SIGNOPE', which is no signal name"):
        PreemptionOptions(signal="SIGNOPE")
    with pytest.raises(TrainingError, match=r"`grace_period` is 0; expected seconds"):
        PreemptionOptions(grace_period=0)


def test_notices_reach_the_chief_once_and_stale_ones_are_dropped(tmp_path):
    write_notice(str(tmp_path), "worker-1", 15, wall=100.0)
    write_notice(str(tmp_path), "ps-0", 15, wall=200.0)
    record_save_seconds(str(tmp_path), 0.5, grace=25.0)  # lives beside the notices; never taken for one
    assert [n["task"] for n in take_notices(str(tmp_path), since=150.0)] == ["ps-0"]
    assert take_notices(str(tmp_path), since=0.0) == []


def test_a_checkpoint_slower_than_the_grace_is_reported_when_written_and_at_start_up(tmp_path, caplog):
    record_save_seconds(str(tmp_path), 1.0, grace=25.0)
    check_grace(str(tmp_path), 25.0)
    assert "grace" not in caplog.text
    record_save_seconds(str(tmp_path), 40.0, grace=25.0)
    assert "a checkpoint took 40.0 s to write, longer than the preemption grace period (25 s)" in caplog.text
    caplog.clear()
    record_save_seconds(str(tmp_path), 2.0, grace=25.0)  # the longest one is kept
    check_grace(str(tmp_path), 25.0)
    assert "the grace period for a preemption is 25 s, but a checkpoint of this job took 40.0 s" in caplog.text


_CHILD = textwrap.dedent("""
    import logging, os, signal, sys, time
    logging.basicConfig(level=logging.INFO)
    from toolkit.training.preemption import PreemptionOptions, install
    install(PreemptionOptions(grace_period=1.0), role="train", task="worker-0")
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)  # a loop that never reaches its next check
""")


def test_the_grace_ends_a_task_and_the_launcher_s_own_sigterm_is_no_preemption(tmp_path):
    procs, out = preempted_and_stopped(_CHILD, tmp_path)
    assert procs["stopped"].returncode == -signal.SIGTERM and "preempted" not in out["stopped"]
    assert procs["preempted"].returncode == EXIT_PREEMPTED, out["preempted"]
    assert "worker-0 was preempted" in out["preempted"]
    assert "the grace period of 1 s ran out before the checkpoint was written; exiting with 143" in out["preempted"]


def _estimator_model_fn(features, labels, mode):
    from toolkit.estimator import EstimatorSpec

    v1 = tf.compat.v1
    weights = v1.get_variable("w", [4, 2], initializer=v1.zeros_initializer())
    loss = v1.losses.sparse_softmax_cross_entropy(labels, tf.matmul(features, weights))
    train_op = v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=v1.train.get_global_step())
    return EstimatorSpec(mode, loss=loss, train_op=train_op)


class _AtLocalStep(tf.compat.v1.train.SessionRunHook):
    """Calls ``act()`` after the session's ``step``-th run."""

    def __init__(self, step, act):
        self.local, self.step, self.act = 0, step, act

    def after_run(self, run_context, run_values):
        self.local += 1
        if self.local == self.step:
            self.act()


def _input_fn():
    import numpy as np

    x = np.random.RandomState(0).normal(size=(64, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    return tf.compat.v1.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8)


def test_the_estimator_stops_after_the_step_checkpointed_and_resumes_to_max_steps(tmp_path, clean_watcher):
    from toolkit.estimator import Estimator, RunConfig

    estimator = Estimator(_estimator_model_fn, model_dir=str(tmp_path), config=RunConfig(tf_config={}))
    with pytest.raises(TrainingPreempted) as info:
        estimator.train(_input_fn, max_steps=40,
                        hooks=[_AtLocalStep(7, lambda: os.kill(os.getpid(), signal.SIGTERM))])
    stopped = info.value.step
    assert stopped in (7, 8)  # signalled after step 7; at most the step in flight more
    assert estimator.latest_checkpoint().endswith(f"-{stopped}")  # the session's end saved it, off schedule
    clean_watcher.reset()
    estimator.train(_input_fn, max_steps=40)
    assert estimator.latest_checkpoint().endswith("-40") and estimator.last_local_steps == 40 - stopped


def test_a_preempted_ps_s_notice_stops_the_estimator_chief_at_a_checkpoint(tmp_path, clean_watcher):
    import time

    from toolkit.estimator import Estimator, RunConfig

    def ps_signalled():  # what a ps's handler leaves (toolkit.estimator._preemption.arm_ps)
        write_notice(str(tmp_path), "ps-0", int(signal.SIGTERM), time.time())
        time.sleep(0.6)  # past the chief's next look into the model directory

    estimator = Estimator(_estimator_model_fn, model_dir=str(tmp_path), config=RunConfig(tf_config={}))
    with pytest.raises(TrainingPreempted) as info:
        estimator.train(_input_fn, max_steps=40, hooks=[_AtLocalStep(7, ps_signalled)])
    assert info.value.code == EXIT_PREEMPTED and info.value.step in (8, 9)  # the notice was seen after step 8
    assert estimator.latest_checkpoint().endswith(f"-{info.value.step}")  # the chief's checkpoint the ps waits for
    assert clean_watcher.stopped_for == ["ps-0"] and not clean_watcher.requested
    assert take_notices(str(tmp_path), since=0.0) == []  # taken once
