"""Synchronous parameter-server options of ``fit``: validation before any cluster is touched."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from _models import compiled

import models
from toolkit.training import RUNNERS, FitConfig, FitOptions, SyncConfig, SyncParameterServerRunner, TrainingError, fit


@pytest.mark.parametrize(
    ("make", "field", "needles"),
    [
        (lambda: FitOptions(sync="yes"), "FitOptions.sync",
         ["Received: FitOptions.sync='yes'", "Pass e.g. FitOptions(sync=SyncConfig())"]),
        (lambda: SyncConfig(replicas_to_aggregate=0), "SyncConfig.replicas_to_aggregate",
         ["`SyncConfig.replicas_to_aggregate` is 0", "Pass e.g. SyncConfig(replicas_to_aggregate=2)"]),
        (lambda: SyncConfig(replicas_to_aggregate=True), "SyncConfig.replicas_to_aggregate",
         ["`SyncConfig.replicas_to_aggregate` is True"]),
    ],
)
def test_sync_options_errors_name_field_value_and_fix(make, field, needles):
    with pytest.raises(TrainingError) as info:
        make()
    assert info.value.field == field
    for needle in needles:
        assert needle in str(info.value)


def test_sync_options_accepted_and_async_is_the_default():
    assert FitConfig().sync is None and FitOptions().sync is None
    assert SyncConfig().replicas_to_aggregate is None  # one per worker, decided by fit
    assert FitOptions(sync=SyncConfig(replicas_to_aggregate=3)).sync.replicas_to_aggregate == 3
    assert RUNNERS["sync_parameter_server"] is SyncParameterServerRunner


def _data(context=None):
    x = np.zeros((32, 8, 8, 1), np.float32)
    return tf.data.Dataset.from_tensor_slices((x, np.zeros(32, np.int64))).repeat().batch(8)


def test_sync_replicas_outside_parameter_servers_is_refused_before_training(tmp_path):
    with pytest.raises(TrainingError) as info:
        fit(compiled(models.digits_mlp, metrics=()), _data, steps_per_epoch=2, model_dir=str(tmp_path), verbose=0,
            options=FitOptions(sync=SyncConfig()))
    message = str(info.value)
    assert info.value.field == "FitOptions.sync"
    assert "`FitOptions.sync` is a SyncConfig but the strategy is _DefaultDistributionStrategy ('sync')" in message
    assert "only strategy='parameter_server'" in message and "Drop FitOptions.sync" in message
    assert tf.train.latest_checkpoint(str(tmp_path)) is None
