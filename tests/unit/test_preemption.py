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
from _models import compiled

import models
from strategies import ServeOptions, StrategyError
from toolkit import data, fit
from toolkit.training import CheckpointConfig, FitOptions
from toolkit.training.preemption import (
    EXIT_PREEMPTED,
    TrainingPreempted,
    check_grace,
    install,
    record_save_seconds,
    watcher,
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
    return fit(compiled(models.digits_mlp, seed=0, metrics=()), train.dataset_fn(32, seed=1), epochs=2,
               steps_per_epoch=STEPS_PER_EPOCH, model_dir=str(model_dir), verbose=0,
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
    install(ServeOptions(), role="train")
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
    install(ServeOptions(), role="evaluator", task="evaluator-0")
    with pytest.raises(TrainingPreempted) as info:
        os.kill(os.getpid(), signal.SIGTERM)
        signal.sigtimedwait([], 0.1)  # let the handler run
    assert info.value.code == EXIT_PREEMPTED and info.value.step is None


def test_the_signal_and_the_grace_are_serve_options_from_arguments_or_the_environment():
    defaults = ServeOptions()
    assert defaults.preemption_grace < 30 and defaults.preemption_signal == signal.SIGTERM  # below Kubernetes' 30 s
    env = {"TFDIST_PREEMPTION_GRACE": "12.5", "TFDIST_PREEMPTION_SIGNAL": "usr1"}
    options = ServeOptions.from_env(env)
    assert (options.preemption_grace, options.preemption_signal) == (12.5, signal.SIGUSR1)
    assert type(options.preemption_signal) is int  # stored as its number, whatever it was given as
    assert ServeOptions.from_env(env, preemption_grace=3.0, preemption_signal="SIGUSR2") == ServeOptions(
        preemption_grace=3.0, preemption_signal=int(signal.SIGUSR2))
    assert ServeOptions.from_env({"TFDIST_PREEMPTION_SIGNAL": str(int(signal.SIGINT))}).preemption_signal == \
        signal.SIGINT
    assert ServeOptions(preemption_signal="sigterm").preemption_signal == ServeOptions(preemption_signal=15)\
        .preemption_signal == signal.SIGTERM


@pytest.mark.parametrize("env, field, text", [
    ({"TFDIST_PREEMPTION_GRACE": "soon"}, "preemption_grace",
     "`preemption_grace` (environment variable TFDIST_PREEMPTION_GRACE) is 'soon'; expected seconds between 0 and "
     "3600, e.g. TFDIST_PREEMPTION_GRACE=25."),
    ({"TFDIST_PREEMPTION_GRACE": "3600"}, "preemption_grace", "is '3600'; expected seconds between 0 and 3600"),
    ({"TFDIST_PREEMPTION_SIGNAL": "SIGNOPE"}, "preemption_signal",
     "`preemption_signal` (environment variable TFDIST_PREEMPTION_SIGNAL) is 'SIGNOPE', which is no signal; "
     "expected a name or a number, e.g. TFDIST_PREEMPTION_SIGNAL=SIGUSR1"),
    ({"TFDIST_PREEMPTION_SIGNAL": "kill"}, "preemption_signal",
     "is 'kill'; expected a signal a process can catch (SIGKILL and SIGSTOP cannot be caught), "
     "e.g. TFDIST_PREEMPTION_SIGNAL=SIGTERM."),
    ({"TFDIST_PREEMPTION_SIGNAL": "19"}, "preemption_signal", "is '19'; expected a signal a process can catch"),
    ({"TFDIST_PREEMPTION_SIGNAL": "999"}, "preemption_signal", "is '999', which is no signal"),
])
def test_a_bad_signal_or_grace_in_the_environment_is_an_error_naming_the_variable(env, field, text):
    with pytest.raises(StrategyError) as info:
        ServeOptions.from_env(env)
    assert info.value.field == field and text in str(info.value)


@pytest.mark.parametrize("given, text", [
    ({"preemption_grace": 0}, "`preemption_grace` (argument) is 0; expected seconds between 0 and 3600, "
                              "e.g. preemption_grace=25."),
    ({"preemption_grace": True}, "`preemption_grace` (argument) is True; expected seconds"),
    ({"preemption_signal": "SIGSTOP"}, "`preemption_signal` (argument) is 'SIGSTOP'; expected a signal a process "
                                       "can catch"),
    ({"preemption_signal": 2.5}, "`preemption_signal` (argument) is 2.5, which is no signal"),
    ({"preemption_signal": True}, "`preemption_signal` (argument) is True, which is no signal"),
])
def test_a_bad_signal_or_grace_argument_is_an_error_naming_the_field(given, text):
    with pytest.raises(StrategyError) as info:
        ServeOptions(**given)
    assert info.value.field == next(iter(given)) and text in str(info.value)


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
    from strategies import ServeOptions
    from toolkit.training.preemption import install
    install(ServeOptions(preemption_grace=1.0), role="train", task="worker-0")
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


def test_a_preempted_ps_s_notice_stops_the_estimator_chief_at_a_checkpoint(tmp_path, clean_watcher, monkeypatch):
    import time

    from strategies._server_preemption import notice_paths
    from strategies._signals import ensure_private_dir
    from toolkit.estimator import Estimator, RunConfig
    from toolkit.estimator._preemption import PreemptionHook

    monkeypatch.setenv("TFDIST_SIGNAL_DIR", str(tmp_path / "signals"))
    # the hook the Estimator's chief of this cluster carries (its ps address is closed: no goodbye can land)
    cluster = {"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}
    notice = notice_paths(cluster, jobs=("ps",))["ps-0"]

    def ps_signalled():  # what a preempted ps's handler writes into the chief's process through the cluster
        ensure_private_dir()
        with open(notice, "w") as out:
            out.write(f"{time.time():.3f}")
        time.sleep(0.6)  # past the chief's next look for notices

    estimator = Estimator(_estimator_model_fn, model_dir=str(tmp_path / "model"), config=RunConfig(tf_config={}))
    with pytest.raises(TrainingPreempted) as info:
        estimator.train(_input_fn, max_steps=40, hooks=[PreemptionHook(cluster), _AtLocalStep(7, ps_signalled)])
    assert info.value.code == EXIT_PREEMPTED and info.value.step in (8, 9)  # the notice was seen after step 8
    assert estimator.latest_checkpoint().endswith(f"-{info.value.step}")  # the chief's checkpoint, then the goodbye
    assert clean_watcher.stopped_for == ["ps-0"] and not clean_watcher.requested
    assert not os.path.exists(notice)  # taken once
