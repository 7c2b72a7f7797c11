"""``tf.estimator`` for TF 2.21: the graph-mode engine, distributed between-graph by TF_CONFIG.

Real TF1 / TF 2.x Estimator code runs here: ``model_fn`` is called inside a
``tf.Graph`` with graph tensors and builds ``tf.compat.v1`` ops (layers from
``tf_keras``' legacy v1 layers, or ``toolkit.compat.v1``'s ``tf.layers``).
Eager mode is never switched off for the process, so Keras 3 code
(``toolkit.fit``) keeps working beside it.

Public API (names and signatures as in ``tf.estimator``):

* ``Estimator(model_fn, model_dir=None, config=None, params=None, warm_start_from=None)``
  with ``train(input_fn, hooks=None, steps=None, max_steps=None, saving_listeners=None)``,
  ``evaluate(input_fn, steps=None, hooks=None, checkpoint_path=None, name=None)`` -> dict with
  ``loss``, ``global_step`` and each metric, ``predict(input_fn, predict_keys=None, hooks=None,
  checkpoint_path=None, yield_single_examples=True)``, ``export_saved_model(export_dir_base,
  serving_input_receiver_fn, ...)``, ``latest_checkpoint()``, ``get_variable_value(name)``,
  ``get_variable_names()``; ``model_dir``, ``config``, ``params``.
* ``EstimatorSpec(mode, predictions, loss, train_op, eval_metric_ops, export_outputs,
  training_chief_hooks, training_hooks, scaffold, evaluation_hooks, prediction_hooks)``;
  ``ModeKeys`` (TRAIN ``'train'``, EVAL ``'eval'``, PREDICT ``'infer'``).
* ``RunConfig(model_dir, tf_random_seed, save_summary_steps, save_checkpoints_steps,
  save_checkpoints_secs, session_config, keep_checkpoint_max, ..., tf_config=None)`` with
  ``master``, ``evaluation_master``, ``cluster_spec``, ``task_type``, ``task_id``, ``is_chief``,
  ``num_ps_replicas``, ``num_worker_replicas``, ``global_id_in_cluster`` from TF_CONFIG.
* ``TrainSpec``, ``EvalSpec``, ``train_and_evaluate``; ``LatestExporter``, ``BestExporter``,
  ``FinalExporter``; ``WarmStartSettings``.
* ``export``: ``ServingInputReceiver``, ``build_parsing_serving_input_receiver_fn``,
  ``build_raw_serving_input_receiver_fn``, ``PredictOutput``, ``ClassificationOutput``,
  ``RegressionOutput`` (also at the top level).
* Canned estimators (``DNNClassifier``, ``DNNRegressor``, ``LinearClassifier``,
  ``LinearRegressor``, ``DNNLinearCombinedClassifier``, ``DNNLinearCombinedRegressor``)
  from ``toolkit.estimator.canned``.

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

_MODULES = ("export", "experimental", "inputs", "tpu")

__all__ = sorted([*_EXPORTS, *_MODULES])

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, modules=_MODULES)
