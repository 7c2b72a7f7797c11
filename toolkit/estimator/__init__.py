"""``tf.estimator`` for TF 2.21: the graph-mode engine, distributed between-graph by TF_CONFIG.

Real TF1 / TF 2.x Estimator code runs here: ``model_fn`` is called inside a
``tf.Graph`` with graph tensors and builds ``tf.compat.v1`` ops (layers from
``tf_keras``' legacy v1 layers, or ``toolkit.compat.v1``'s ``tf.layers``).
Eager mode is never switched off for the process, so Keras 3 code
(``toolkit.fit``) keeps working beside it.

The public names and signatures are ``tf.estimator``'s (``docs/estimator.md`` lists them);
``export``, ``experimental``, ``inputs`` and ``tpu`` are its submodules.

Errors: ``EstimatorError``, ``SpecError``, ``RunConfigError`` (each ``ValueError`` with
``.field``); an invalid TF_CONFIG raises ``tf_config.TFConfigError``.

Example:
    >>> from toolkit.estimator import Estimator, RunConfig, TrainSpec, EvalSpec, train_and_evaluate  # doctest: +SKIP
    >>> est = Estimator(model_fn, config=RunConfig(model_dir="runs/iris"))  # doctest: +SKIP
    >>> train_and_evaluate(est, TrainSpec(train_fn, max_steps=500), EvalSpec(eval_fn))  # doctest: +SKIP
"""
from __future__ import annotations

from tf_config.lazy import lazy_exports

# public name -> module; loaded lazily so RunConfig and the specs never import TensorFlow
_EXPORTS: dict[str, str] = {
    "EstimatorSpec": "toolkit.estimator.spec",
    "EvalSpec": "toolkit.estimator.spec",
    "ModeKeys": "toolkit.estimator.spec",
    "SpecError": "toolkit.estimator.spec",
    "TrainSpec": "toolkit.estimator.spec",
    "RunConfig": "toolkit.estimator.run_config",
    "RunConfigError": "toolkit.estimator.run_config",
    "Estimator": "toolkit.estimator.estimator",
    "EstimatorError": "toolkit.estimator.estimator",
    "WarmStartSettings": "toolkit.estimator.estimator",
    "train_and_evaluate": "toolkit.estimator.training",
    "LatestExporter": "toolkit.estimator.exporters",
    "BestExporter": "toolkit.estimator.exporters",
    "FinalExporter": "toolkit.estimator.exporters",
    "ServingInputReceiver": "toolkit.estimator.export",
    "PredictOutput": "toolkit.estimator.export",
    "ClassificationOutput": "toolkit.estimator.export",
    "RegressionOutput": "toolkit.estimator.export",
    "build_parsing_serving_input_receiver_fn": "toolkit.estimator.export",
    "build_raw_serving_input_receiver_fn": "toolkit.estimator.export",
    "DNNClassifier": "toolkit.estimator.canned",
    "DNNRegressor": "toolkit.estimator.canned",
    "LinearClassifier": "toolkit.estimator.canned",
    "LinearRegressor": "toolkit.estimator.canned",
    "DNNLinearCombinedClassifier": "toolkit.estimator.canned",
    "DNNLinearCombinedRegressor": "toolkit.estimator.canned",
    "Exporter": "toolkit.estimator.exporters",
    "add_metrics": "toolkit.estimator.extenders",
    "EstimatorTypeError": "toolkit.estimator.estimator",
    "SpecTypeError": "toolkit.estimator.spec",
    "Head": "toolkit.estimator.head",
    "BinaryClassHead": "toolkit.estimator.head",
    "MultiClassHead": "toolkit.estimator.head",
    "RegressionHead": "toolkit.estimator.head",
    "PoissonRegressionHead": "toolkit.estimator.head",
    "LogisticRegressionHead": "toolkit.estimator.head",
    "MultiLabelHead": "toolkit.estimator.head",
    "MultiHead": "toolkit.estimator.head",
    "VocabInfo": "toolkit.estimator.canned.helpers",
    "classifier_parse_example_spec": "toolkit.estimator.canned.helpers",
    "regressor_parse_example_spec": "toolkit.estimator.canned.helpers",
    "DNNEstimator": "toolkit.estimator.canned",
    "LinearEstimator": "toolkit.estimator.canned",
    "DNNLinearCombinedEstimator": "toolkit.estimator.canned",
    "BaselineClassifier": "toolkit.estimator.canned",
    "BaselineRegressor": "toolkit.estimator.canned",
    "BaselineEstimator": "toolkit.estimator.canned",
}
_EXPORTS["model_to_estimator"] = "toolkit.estimator.keras_lib"  # issue 40: Keras model -> Estimator

# the session-run hooks tf.estimator re-exported from tf.compat.v1.train
_EXPORTS.update({name: "toolkit.estimator.hooks.session_run" for name in (
    "SessionRunHook",
    "SessionRunArgs",
    "SessionRunContext",
    "SessionRunValues",
    "StopAtStepHook",
    "LoggingTensorHook",
    "CheckpointSaverHook",
    "CheckpointSaverListener",
    "StepCounterHook",
    "SummarySaverHook",
    "NanTensorHook",
    "NanLossDuringTrainingError",
    "GlobalStepWaiterHook",
    "FinalOpsHook",
    "FeedFnHook",
    "ProfilerHook",
    "SecondOrStepTimer",
)})

# the boosted-trees canned estimators (TF's BoostedTrees* kernels)
_EXPORTS.update({name: "toolkit.estimator.canned.boosted_trees" for name in (
    "BoostedTreesClassifier",
    "BoostedTreesRegressor",
    "BoostedTreesEstimator",
)})

_MODULES = ("export", "experimental", "inputs", "tpu")

__all__ = sorted([*_EXPORTS, *_MODULES])

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, modules=_MODULES)
