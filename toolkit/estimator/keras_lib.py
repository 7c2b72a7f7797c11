"""``model_to_estimator``: a compiled Keras model as an ``Estimator``, as ``tf.keras.estimator.model_to_estimator``.

What TF did, on this engine, for Keras 3 models and ``tf_keras`` (Keras 2) models alike:
the model's architecture (its config, without the compiled state) is rebuilt in
each Estimator graph and called on the features (a tensor, a list in input order,
or a dict keyed by input names); the compiled losses (one per output, with
``loss_weights`` and sample weights) sum to the spec's loss, the compiled
optimizer trains as its ``tf.compat.v1.train`` twin (a ``tf.compat.v1.train``
optimizer given to a tf_keras ``compile`` trains as it is), the compiled metrics
become ``tf_keras`` metric objects under Keras' names, and the model's current
weights are written to ``model_dir/keras/keras_model.ckpt`` and warm-start the
Estimator on the chief (once, while ``model_dir`` has no checkpoint of its own).
Predictions are ``{output name: tensor}``; ``export_outputs`` adds a signature
per output. Both ``checkpoint_format`` values write name-based checkpoints (the
ones the Estimator reads back); TF's ``'checkpoint'`` wrote object-based ones.

Example:
    >>> est = model_to_estimator(keras_model=model, model_dir="runs/keras")  # doctest: +SKIP
    >>> est.train(lambda: tf.data.Dataset.from_tensor_slices(({"x": x}, y)).batch(32), steps=100)  # doctest: +SKIP
"""
from __future__ import annotations

import logging
import os
import re
import tempfile
from collections.abc import Mapping
from typing import Any

from toolkit.estimator._construct import EstimatorError
from toolkit.estimator._keras_io import (
    KerasIOError,
    missed_keys_error,
    per_output_weights,
    split_sample_weights,
    to_inputs,
    to_targets,
)
from toolkit.estimator._keras_model import KerasModel

__all__ = ["FormattedKeyError", "KerasIOError", "model_to_estimator", "model_to_estimator_v1"]

logger = logging.getLogger(__name__)
#: the ops by which a layer updates its own variables during its call (moving averages, seed states)
_STATE_UPDATES = frozenset({"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"})


def _seed_states_local() -> None:
    """Keras 3's dropout seed states (named by a process-wide counter, so differently in each graph) are
    local variables: initialised in every session, never checkpointed."""
    import tensorflow as tf

    v1 = tf.compat.v1
    saved = v1.get_collection_ref(v1.GraphKeys.GLOBAL_VARIABLES)
    moved = [v for v in saved if "seed_generator" in v.op.name]
    saved[:] = [v for v in saved if "seed_generator" not in v.op.name]
    for variable in moved:
        v1.add_to_collection(v1.GraphKeys.LOCAL_VARIABLES, variable)


def _state_updates(graph: Any, known: int) -> list[Any]:
    """The variable updates a model's call added to ``graph`` after its first ``known`` ops, without the
    initializers of the variables the call created (a model that builds its weights on its first call, as a
    subclassed one does, would otherwise re-initialize them with every training step)."""
    import tensorflow as tf

    v1 = tf.compat.v1
    variables = v1.get_collection(v1.GraphKeys.GLOBAL_VARIABLES) + v1.get_collection(v1.GraphKeys.LOCAL_VARIABLES)
    initializers = {v.initializer for v in variables}
    return [op for op in graph.get_operations()[known:] if op.type in _STATE_UPDATES and op not in initializers]


def _placeholders(structure: Any) -> Any:
    import tensorflow as tf

    return tf.nest.map_structure(lambda t: tf.compat.v1.placeholder(tf.as_dtype(t.dtype), t.shape), structure)


def _write_warm_start(km: KerasModel, directory: str) -> tuple[str, list[str]]:
    """The model's current weights as a TF1 checkpoint under the names the Estimator graph gives them."""
    os.makedirs(directory, exist_ok=True)
    weights = km.model.get_weights()
    try:
        return _save_in_graph(km, weights, directory)
    finally:
        km.eager_again()


def _save_in_graph(km: KerasModel, weights: list[Any], directory: str) -> tuple[str, list[str]]:
    import tensorflow as tf

    v1 = tf.compat.v1
    with tf.Graph().as_default():
        model = km.rebuild()
        model(_placeholders(km.input_structure()))
        variables = km.variables(model)
        names = [v.op.name for v in variables]
        step = v1.train.get_or_create_global_step()  # so that an export before training can read this checkpoint
        saver = v1.train.Saver({**dict(zip(names, variables, strict=True)), step.op.name: step})
        with v1.Session() as session:
            session.run(step.initializer)
            for variable, value in zip(variables, weights, strict=True):
                variable.load(value, session)
            path = saver.save(session, os.path.join(directory, "keras_model.ckpt"), write_meta_graph=False)
    return path, names


def _load(path: str, custom_objects: Mapping[str, Any] | None) -> Any:
    """A saved Keras model: Keras 3's loader first, then tf_keras' (an HDF5 file or SavedModel of Keras 2)."""
    import keras

    try:
        return keras.models.load_model(path, custom_objects=custom_objects)
    except (ValueError, OSError, TypeError) as keras3_error:
        try:
            import tf_keras

            return tf_keras.models.load_model(path, custom_objects=custom_objects)
        except (ValueError, OSError, TypeError, ImportError) as exc:
            raise EstimatorError(f"`keras_model_path` {path!r} is not a Keras model Keras 3 or tf_keras can load "
                                 f"({keras3_error}; {exc}). Save it with model.save(...) first.",
                                 field="keras_model_path") from exc


def _config(config: Any, model_dir: str | None) -> Any:
    from toolkit.estimator.run_config import RunConfig

    if config is None:
        config = RunConfig(model_dir=model_dir)
    elif model_dir is not None:
        if config.model_dir is not None and os.path.abspath(config.model_dir) != os.path.abspath(model_dir):
            raise EstimatorError(f"`model_dir` are set both in constructor and `RunConfig`, but with different "
                                 f"values. In constructor: '{model_dir}', in `RunConfig`: '{config.model_dir}'. "
                                 "Pass one of them.", field="model_dir")
        config = config.replace(model_dir=model_dir)
    return config if config.model_dir is not None else config.replace(model_dir=tempfile.mkdtemp())


def _optimizer(model: Any) -> Any:
    from toolkit.estimator.canned._errors import CannedError
    from toolkit.estimator.canned.optimizers import check_optimizer

    optimizer = model.optimizer
    optimizer = getattr(optimizer, "optimizer", optimizer) if type(optimizer).__name__ == "TFOptimizer" else optimizer
    try:
        return check_optimizer("optimizer", optimizer)
    except CannedError as exc:
        raise EstimatorError(f"The Keras model's compiled optimizer cannot train an Estimator graph: {exc}",
                             field="optimizer") from exc


def _check_args(keras_model: Any, keras_model_path: Any, checkpoint_format: str | None) -> None:
    if keras_model is None and keras_model_path is None:
        raise EstimatorError("Either `keras_model` or `keras_model_path` needs to be provided.", field="keras_model")
    if keras_model is not None and keras_model_path is not None:
        raise EstimatorError("Please specity either `keras_model` or `keras_model_path`, but not both: got both. "
                             "Pass one of them.", field="keras_model_path")
    if checkpoint_format not in (None, "checkpoint", "saver"):
        raise EstimatorError(f'Checkpoint format must be one of "checkpoint" or "saver". Got {checkpoint_format!r}.',
                             field="checkpoint_format")


def model_to_estimator(keras_model: Any = None, keras_model_path: str | None = None,
                       custom_objects: Mapping[str, Any] | None = None, model_dir: str | None = None,
                       config: Any = None, checkpoint_format: str | None = "checkpoint",
                       metric_names_map: Mapping[str, str] | None = None, export_outputs: Any = None) -> Any:
    """An ``Estimator`` training, evaluating, predicting and exporting a compiled Keras model (TF's arguments).

    Raises:
        EstimatorError: neither or both of keras_model / keras_model_path, an uncompiled model, a loss,
            optimizer or metric with no TF1 translation, a bad ``metric_names_map`` (each named, with what
            to do instead); ``KerasIOError`` (a ``KeyError``) for ``export_outputs`` keys that are no output.
    """
    from toolkit.estimator.estimator import Estimator

    return _convert(Estimator, keras_model, keras_model_path, custom_objects, model_dir, config, checkpoint_format,
                    metric_names_map, export_outputs)


def model_to_estimator_v1(keras_model: Any = None, keras_model_path: str | None = None,
                          custom_objects: Mapping[str, Any] | None = None, model_dir: str | None = None,
                          config: Any = None, checkpoint_format: str | None = "saver",
                          metric_names_map: Mapping[str, str] | None = None, export_outputs: Any = None,
                          use_v2_estimator: bool = False) -> Any:
    """``tf.compat.v1.keras.estimator.model_to_estimator``: the same, as a ``tf.compat.v1.estimator.Estimator``
    (which still has ``export_savedmodel``), with TF1's default ``checkpoint_format='saver'``;
    ``use_v2_estimator=True`` gives the TF 2 ``Estimator`` instead, as TF's ``keras_lib`` did."""
    from toolkit.estimator.estimator import Estimator, EstimatorV1

    if not isinstance(use_v2_estimator, bool):
        raise EstimatorError(f"`use_v2_estimator` is {use_v2_estimator!r}; expected True or False.",
                             field="use_v2_estimator")
    return _convert(Estimator if use_v2_estimator else EstimatorV1, keras_model, keras_model_path, custom_objects,
                    model_dir, config, checkpoint_format, metric_names_map, export_outputs)


def _convert(estimator_class: Any, keras_model: Any, keras_model_path: str | None,
             custom_objects: Mapping[str, Any] | None, model_dir: str | None, config: Any,
             checkpoint_format: str | None, metric_names_map: Mapping[str, str] | None, export_outputs: Any) -> Any:
    from toolkit.estimator._keras_compiled import CompiledLoss, CompiledMetrics
    from toolkit.estimator.estimator import WarmStartSettings

    _check_args(keras_model, keras_model_path, checkpoint_format)
    if keras_model is None:
        keras_model = _load(str(keras_model_path), custom_objects)
    if getattr(keras_model, "optimizer", None) is None:
        raise EstimatorError("The given keras model has not been compiled yet. Please compile the model with "
                             "`model.compile()` before calling `model_to_estimator()`.", field="keras_model")
    km = KerasModel.of(keras_model, custom_objects)
    compiled = km.compile_arguments()
    output_names = km.output_names()
    loss = CompiledLoss(km.keras, compiled.get("loss", getattr(keras_model, "loss", None)),
                        compiled.get("loss_weights"), output_names)
    metrics = CompiledMetrics(compiled.get("metrics"), output_names, metric_names_map)
    optimizer = _optimizer(keras_model)
    if export_outputs is not None and set(export_outputs) - set(output_names):
        raise missed_keys_error("export_outputs", "outputs", output_names, list(export_outputs),
                                "Key export_outputs by the model's output names.")
    config = _config(config, model_dir)
    warm_start = None
    if km.is_subclassed:
        logger.warning("model_to_estimator: a subclassed Keras model starts from fresh weights (as in TF); its "
                       "current weights are not carried over.")
    elif config.is_chief:
        ckpt, names = _write_warm_start(km, os.path.join(config.model_dir, "keras"))
        warm_start = WarmStartSettings(ckpt, vars_to_warm_start=[re.escape(n) + ":" for n in names])
    model_fn = _model_fn(km, output_names, loss, metrics, optimizer, export_outputs)
    return estimator_class(model_fn, config=config, warm_start_from=warm_start)


def _model_fn(km: KerasModel, output_names: list[str], loss: Any, metrics: Any, optimizer: Any,
              export_outputs: Any) -> Any:
    input_names, structure = ([], None) if km.is_subclassed else (km.input_names(), km.input_structure())

    def model_fn(features: Any, labels: Any, mode: str) -> Any:
        import tensorflow as tf

        from toolkit.estimator.canned.optimizers import get_optimizer
        from toolkit.estimator.export import PredictOutput
        from toolkit.estimator.spec import EstimatorSpec, ModeKeys

        features, sample_weights = split_sample_weights(features)
        model = km.rebuild()
        if km.is_subclassed:
            inputs = list(features.values()) if isinstance(features, Mapping) else features
            inputs = inputs[0] if isinstance(inputs, list) and len(inputs) == 1 else inputs
        else:
            inputs = to_inputs(features, input_names, structure)
        graph = tf.compat.v1.get_default_graph()
        known = len(graph.get_operations())
        outputs = model(inputs, training=mode == ModeKeys.TRAIN)
        updates = _state_updates(graph, known)
        _seed_states_local()
        flat = ([outputs[name] for name in output_names] if isinstance(outputs, Mapping)
                else list(outputs) if isinstance(outputs, (list, tuple)) else [outputs])
        predictions = dict(zip(output_names, flat, strict=True))
        exports = {"serving_default": PredictOutput(predictions)}
        exports.update({key: cls(predictions[key]) for key, cls in (export_outputs or {}).items()})
        if mode == ModeKeys.PREDICT:
            return EstimatorSpec(mode, predictions=predictions, export_outputs=exports)
        targets = to_targets(labels, output_names)
        weights = per_output_weights(sample_weights, output_names)
        value = loss(targets, flat, weights)
        regularization = [tf.cast(r, value.dtype) for r in model.losses]
        value = tf.add_n([value, *regularization]) if regularization else value
        if mode == ModeKeys.EVAL:
            return EstimatorSpec(mode, loss=value, predictions=predictions,
                                 eval_metric_ops=metrics.eval_metric_ops(targets, flat, weights))
        step = tf.compat.v1.train.get_global_step()
        train_op = get_optimizer("optimizer", optimizer, learning_rate=None).minimize(
            value, global_step=step, var_list=km.variables(model, trainable=True))
        # the layers' own state updates (batch-norm moving statistics, dropout seeds) run with each step,
        # as Keras' updates did in TF's model_to_estimator
        return EstimatorSpec(mode, loss=value, train_op=tf.group(train_op, *updates), predictions=predictions)

    return model_fn


#: TF's name for the error ``KerasIOError`` is (``keras_lib.FormattedKeyError``)
FormattedKeyError = KerasIOError
