"""Every public name of tensorflow-estimator 2.15 resolves in ``toolkit.estimator`` and in ``toolkit.compat.v1``.

The lists are the names tensorflow-estimator 2.15 exported with ``@estimator_export`` (its API
as ``tf.estimator`` and ``tf.compat.v1.estimator`` served it), written out here as data.
"""
from __future__ import annotations

import importlib

import pytest

# tf.estimator.* in TF 2.15 (v2 API)
V2_NAMES = (
    "BaselineClassifier", "BaselineEstimator", "BaselineRegressor", "BestExporter", "BinaryClassHead",
    "CheckpointSaverHook", "CheckpointSaverListener", "DNNClassifier", "DNNEstimator", "DNNLinearCombinedClassifier",
    "DNNLinearCombinedEstimator", "DNNLinearCombinedRegressor", "DNNRegressor", "Estimator", "EstimatorSpec",
    "EvalSpec", "Exporter", "FeedFnHook", "FinalExporter", "FinalOpsHook", "GlobalStepWaiterHook", "Head",
    "LatestExporter", "LinearClassifier", "LinearEstimator", "LinearRegressor", "LoggingTensorHook",
    "LogisticRegressionHead", "ModeKeys", "MultiClassHead", "MultiHead", "MultiLabelHead",
    "NanLossDuringTrainingError", "NanTensorHook", "PoissonRegressionHead", "ProfilerHook", "RegressionHead",
    "RunConfig", "SecondOrStepTimer", "SessionRunArgs", "SessionRunContext", "SessionRunHook", "SessionRunValues",
    "StepCounterHook", "StopAtStepHook", "SummarySaverHook", "TrainSpec", "VocabInfo", "WarmStartSettings",
    "add_metrics", "classifier_parse_example_spec", "regressor_parse_example_spec", "train_and_evaluate",
    "experimental.InMemoryEvaluatorHook", "experimental.LinearSDCA", "experimental.RNNClassifier",
    "experimental.RNNEstimator", "experimental.build_raw_supervised_input_receiver_fn",
    "experimental.call_logit_fn", "experimental.make_early_stopping_hook",
    "experimental.make_stop_at_checkpoint_step_hook", "experimental.stop_if_higher_hook",
    "experimental.stop_if_lower_hook", "experimental.stop_if_no_decrease_hook",
    "experimental.stop_if_no_increase_hook", "export.ClassificationOutput", "export.EvalOutput",
    "export.ExportOutput", "export.PredictOutput", "export.RegressionOutput", "export.ServingInputReceiver",
    "export.TensorServingInputReceiver", "export.build_parsing_serving_input_receiver_fn",
    "export.build_raw_serving_input_receiver_fn",
)

# tf.compat.v1.estimator.* in TF 2.15: the v2 names except the RNN estimators, plus these
V1_ONLY_NAMES = (
    "experimental.KMeans", "experimental.dnn_logit_fn_builder", "experimental.linear_logit_fn_builder",
    "inputs.numpy_input_fn", "inputs.pandas_input_fn", "tpu.InputPipelineConfig", "tpu.RunConfig",
    "tpu.TPUConfig", "tpu.TPUEstimator", "tpu.TPUEstimatorSpec", "tpu.experimental.EmbeddingConfigSpec",
)
V1_NAMES = tuple(n for n in V2_NAMES if not n.startswith("experimental.RNN")) + V1_ONLY_NAMES

SESSION_RUN_HOOKS = (
    "SessionRunHook", "SessionRunArgs", "SessionRunContext", "SessionRunValues", "StopAtStepHook",
    "LoggingTensorHook", "CheckpointSaverHook", "CheckpointSaverListener", "StepCounterHook", "SummarySaverHook",
    "NanTensorHook", "NanLossDuringTrainingError", "GlobalStepWaiterHook", "FinalOpsHook", "FeedFnHook",
    "ProfilerHook", "SecondOrStepTimer",
)


def _resolve(root, dotted: str):
    value = root
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _missing(root, names) -> list[str]:
    missing = []
    for name in names:
        try:
            _resolve(root, name)
        except AttributeError:
            missing.append(name)
    return missing


def test_every_tf_estimator_2_15_name_resolves_in_toolkit_estimator():
    import toolkit.estimator as estimator

    assert _missing(estimator, V2_NAMES) == []


def test_every_tf_compat_v1_estimator_2_15_name_resolves_in_toolkit_compat_v1():
    v1 = importlib.import_module("toolkit.compat.v1")
    assert _missing(v1.estimator, V1_NAMES) == []


@pytest.mark.parametrize("name", SESSION_RUN_HOOKS)
def test_the_session_run_hooks_are_tf_compat_v1_train_classes(name):
    import tensorflow as tf

    import toolkit.estimator as estimator

    v1 = importlib.import_module("toolkit.compat.v1")
    assert getattr(estimator, name) is getattr(tf.compat.v1.train, name)
    assert getattr(v1.estimator, name) is getattr(tf.compat.v1.train, name)
    assert name in estimator.__all__
