"""``fit``'s grouped options: each validates itself, reaches the loop's FitConfig, and the old keywords say where
they went."""
from __future__ import annotations

import pytest

import toolkit
from toolkit.training import CheckpointConfig, FitConfig, LogConfig, SyncConfig, TrainingError, ValidationConfig, fit
from toolkit.training.options import fit_config


@pytest.mark.parametrize("make, field, text", [
    (lambda: CheckpointConfig(every=0), "CheckpointConfig.every", "`CheckpointConfig.every` is 0; expected a "
     "positive integer or None. Pass e.g. CheckpointConfig(every=500)."),
    (lambda: CheckpointConfig(keep=None), "CheckpointConfig.keep",
     "`CheckpointConfig.keep` is None; expected a positive integer."),
    (lambda: LogConfig(every=True), "LogConfig.every",
     "`LogConfig.every` is True; expected a positive integer or None."),
    (lambda: LogConfig(summary_every=-1), "LogConfig.summary_every", "Pass e.g. LogConfig(summary_every=100)"),
    (lambda: ValidationConfig(steps=2.5), "ValidationConfig.steps", "`ValidationConfig.steps` is 2.5; expected"),
    (lambda: ValidationConfig(evaluator_timeout=0), "ValidationConfig.evaluator_timeout",
     "`ValidationConfig.evaluator_timeout` is 0; expected a positive number of seconds. "
     "Pass e.g. ValidationConfig(evaluator_timeout=600)."),
    (lambda: SyncConfig(replicas_to_aggregate=0), "SyncConfig.replicas_to_aggregate",
     "Pass e.g. SyncConfig(replicas_to_aggregate=2)"),
])
def test_groups_validate_themselves(make, field, text):
    with pytest.raises(TrainingError) as info:
        make()
    assert info.value.field == field and text in str(info.value)


def test_groups_reach_the_loop_config():
    config = fit_config(epochs=2, steps_per_epoch=10, steps_per_execution=5, global_batch_size=64,
                         checkpoint=CheckpointConfig(every=4, keep=7), logs=LogConfig(every=3, summary_every=9),
                         validation=ValidationConfig(steps=2), sync=SyncConfig(replicas_to_aggregate=2))
    assert config == FitConfig(epochs=2, steps_per_epoch=10, steps_per_execution=5, global_batch_size=64,
                               checkpoint_every_steps=4, keep_checkpoints=7, log_every_steps=3,
                               summary_every_steps=9, validation_steps=2, sync_replicas=True,
                               replicas_to_aggregate=2)
    plain = fit_config(epochs=1, steps_per_epoch=10, steps_per_execution=None, global_batch_size=None,
                        checkpoint=CheckpointConfig(), logs=LogConfig(), validation=ValidationConfig(), sync=None)
    assert plain == FitConfig(epochs=1, steps_per_epoch=10)  # the groups' defaults are the loop's


def test_moved_keywords_name_their_new_home_before_anything_runs():
    def never():
        raise AssertionError("fit must refuse its arguments before building anything")

    with pytest.raises(TypeError) as info:
        fit(never, never, loss="mse", steps_per_epoch=1, checkpoint_every_steps=10, sync_replicas=True)
    message = str(info.value)
    assert "checkpoint_every_steps= is now checkpoint=CheckpointConfig(every=...)" in message
    assert "sync_replicas= is now sync=SyncConfig()" in message
    assert "from toolkit.training import CheckpointConfig, SyncConfig" in message
    with pytest.raises(TypeError, match=r"fit\(\) got unexpected keyword argument\(s\): epoch\."):
        fit(never, never, loss="mse", steps_per_epoch=1, epoch=3)


def test_a_group_of_the_wrong_kind_is_refused():
    with pytest.raises(TrainingError) as info:
        fit(lambda: None, lambda ctx: None, loss="mse", steps_per_epoch=1, checkpoint=LogConfig())
    assert info.value.field == "checkpoint"
    assert "`checkpoint` must be a toolkit.training.CheckpointConfig or None. Received: checkpoint=LogConfig(" in str(
        info.value)


def test_the_groups_are_public_on_toolkit():
    assert (toolkit.CheckpointConfig, toolkit.LogConfig, toolkit.SyncConfig, toolkit.ValidationConfig) == (
        CheckpointConfig, LogConfig, SyncConfig, ValidationConfig)
