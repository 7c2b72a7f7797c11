"""``fit``'s typed options: each group validates itself once and reaches the engine's FitConfig as it is."""
from __future__ import annotations

import pytest

import toolkit
from strategies import ServeOptions
from toolkit.training import (
    CheckpointConfig,
    FitConfig,
    FitOptions,
    LogConfig,
    SyncConfig,
    TrainingError,
    ValidationConfig,
    fit,
)


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


def test_groups_reach_the_engine_as_they_are():
    checkpoint, logs = CheckpointConfig(every=4, keep=7), LogConfig(every=3, summary_every=9)
    validation, sync = ValidationConfig(steps=2), SyncConfig(replicas_to_aggregate=2)
    options = FitOptions(checkpoint=checkpoint, logs=logs, validation=validation, sync=sync, global_batch_size=64)
    config = options.run_config(epochs=2, steps_per_epoch=10, steps_per_execution=5)
    assert config == FitConfig(epochs=2, steps_per_epoch=10, steps_per_execution=5, global_batch_size=64,
                               checkpoint=checkpoint, logs=logs, validation=validation, sync=sync)
    assert config.checkpoint is checkpoint and config.sync is sync  # read directly, never flattened
    assert (config.checkpoint_interval, config.log_interval) == (4, 3)
    plain = FitOptions().run_config(epochs=1, steps_per_epoch=10)
    assert plain == FitConfig(epochs=1, steps_per_epoch=10) and plain.sync is None  # asynchronous by default


def test_flat_keywords_of_the_old_signature_are_plain_type_errors():
    def never():
        raise AssertionError("fit must refuse its arguments before building anything")

    for name in ("checkpoint_every_steps", "sync_replicas", "checkpoint", "export", "strategy_options"):
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'"):
            fit(never, never, steps_per_epoch=1, **{name: 10})


def test_a_group_of_the_wrong_kind_is_refused():
    with pytest.raises(TrainingError) as info:
        fit(lambda: None, lambda ctx: None, steps_per_epoch=1, options=FitOptions(checkpoint=LogConfig()))
    assert info.value.field == "FitOptions.checkpoint"
    assert ("`FitOptions.checkpoint` must be a toolkit.training.CheckpointConfig. Received: "
            "FitOptions.checkpoint=LogConfig(") in str(info.value)
    with pytest.raises(TrainingError) as info:
        fit(lambda: None, lambda ctx: None, steps_per_epoch=1, options={"export": False})
    assert info.value.field == "options" and "Pass e.g. options=FitOptions(" in str(info.value)


@pytest.mark.parametrize("make, field, text", [
    (lambda: FitOptions(strategy={"connect_timeout": 120}), "FitOptions.strategy",
     "`FitOptions.strategy` must be a strategies.StrategyOptions or None. Received: strategy={'connect_timeout'"),
    (lambda: FitOptions(serve={"chief_lost_after": 20}), "FitOptions.serve", "strategies.ServeOptions or None"),
    (lambda: FitOptions(serve=ServeOptions(goodbye_timeout=5)), "FitOptions.serve.goodbye_timeout",
     "`FitOptions.serve` sets goodbye_timeout=5.0, which fit does not pass to its servers. Set TFDIST_GOODBYE_TIMEOUT"),
    (lambda: FitOptions(export="no"), "FitOptions.export", "`FitOptions.export` must be True or False"),
    (lambda: FitOptions(sync=True), "FitOptions.sync", "Pass e.g. FitOptions(sync=SyncConfig())"),
])
def test_fit_options_are_typed(make, field, text):
    with pytest.raises(TrainingError) as info:
        make()
    assert info.value.field == field and text in str(info.value)


def test_typed_strategy_options_reach_make_strategy(tmp_path):
    """An option the chosen strategy does not use is refused by make_strategy, so it got there, typed."""
    from strategies import StrategyError, StrategyOptions

    with pytest.raises(StrategyError) as info:
        fit(lambda: None, lambda ctx: None, steps_per_epoch=1, strategy="default",
            model_dir=str(tmp_path), options=FitOptions(strategy=StrategyOptions(communication="ring")))
    assert info.value.field == "communication" and "default does not use it" in str(info.value)


def test_the_groups_are_public_on_toolkit():
    assert (toolkit.CheckpointConfig, toolkit.LogConfig, toolkit.SyncConfig, toolkit.ValidationConfig,
            toolkit.FitOptions) == (CheckpointConfig, LogConfig, SyncConfig, ValidationConfig, FitOptions)


def test_serve_options_reach_the_server_loop_as_one_object(monkeypatch, tmp_path):
    """In a ps task, fit hands FitOptions.serve to the one serve loop as it is (every server-side timeout)."""
    import strategies._roles as roles
    from tf_config import generate

    cfg = next(c for c in generate(base_port=24100, chief=1, workers=1, ps=1) if str(c.task) == "ps-0")
    given = ServeOptions(chief_start_timeout=30, chief_lost_after=9, poll_interval=0.1, work_join_timeout=2)
    seen = []
    monkeypatch.setattr(roles, "serve_until_goodbye", lambda cfg, options, **kwargs: seen.append(options) or 7)
    with pytest.raises(SystemExit) as exited:
        fit(lambda: None, lambda ctx: None, steps_per_epoch=1, model_dir=str(tmp_path),
            options=FitOptions(serve=given, tf_config=cfg))
    assert exited.value.code == 7 and seen == [given] and seen[0] is given


def test_serve_refuses_timeouts_that_are_not_serve_options():
    from strategies import StrategyError, serve
    from tf_config import generate

    cfg = next(c for c in generate(base_port=24100, chief=1, workers=1, ps=1) if str(c.task) == "ps-0")
    with pytest.raises(StrategyError) as info:
        serve(cfg, options={"chief_lost_after": 20})
    assert info.value.field == "options" and "Pass e.g. options=ServeOptions(chief_lost_after=20)" in str(info.value)
