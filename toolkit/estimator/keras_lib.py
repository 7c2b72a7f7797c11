"""``model_to_estimator``: a compiled Keras model as an ``Estimator``, as ``tf.keras.estimator.model_to_estimator``.

What TF did, on this engine: the model's architecture (its config, without the
compiled state) is rebuilt in each Estimator graph and called on the features;
the compiled loss is the spec's loss, the compiled optimizer trains as its
``tf.compat.v1.train`` twin (same hyper-parameters; Keras 3 optimizers cannot
update a TF1 graph), the compiled metrics become ``tf.compat.v1.metrics`` pairs,
and the model's current weights are written to ``model_dir/keras/keras_model.ckpt``
and warm-start the Estimator (once, while ``model_dir`` has no checkpoint of its own).
Both ``checkpoint_format`` values warm-start from that name-based checkpoint.

Example:
    >>> est = model_to_estimator(keras_model=model, model_dir="runs/keras")  # doctest: +SKIP
    >>> est.train(lambda: tf.data.Dataset.from_tensor_slices(({"x": x}, y)).batch(32), steps=100)  # doctest: +SKIP
"""
from __future__ import annotations

import copy
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

from toolkit.estimator._construct import EstimatorError

__all__ = ["model_to_estimator"]

#: compiled metric name -> a builder of its TF1 ``(value, update_op)`` pair from (labels, predictions, loss name)
_METRICS = ("accuracy", "acc", "mae", "mean_absolute_error", "mse", "mean_squared_error", "auc")
_SPARSE = ("sparse_categorical_crossentropy",)
_BINARY = ("binary_crossentropy",)


def _loss_name(loss: Any) -> str:
    if isinstance(loss, str):
        return loss
    name = getattr(loss, "name", None) or getattr(loss, "__name__", None) or type(loss).__name__
    return str(name)


def _loss_fn(loss: Any, field: str = "loss") -> Callable[[Any, Any], Any]:
    """The compiled loss as ``fn(labels, predictions) -> scalar``; refuses what has no single translation."""
    import keras

    if loss is None:
        raise EstimatorError("The given keras model has not been compiled yet: its loss is None. Please compile the "
                             "model with `model.compile(optimizer=..., loss=...)` before calling "
                             "`model_to_estimator()`.", field="keras_model")
    if isinstance(loss, (Mapping, list, tuple)):
        raise EstimatorError(f"The Keras model's compiled `{field}` is {loss!r}, one loss per output, which "
                             "model_to_estimator cannot translate into one Estimator loss. Compile the model with "
                             "a single loss, or write a model_fn that combines the outputs' losses.", field=field)
    try:
        function = keras.losses.get(loss)
    except (ValueError, TypeError) as exc:
        raise EstimatorError(f"The Keras model's compiled `{field}` {_loss_name(loss)!r} cannot be translated into "
                             f"an Estimator loss ({exc}). Compile with a Keras loss name or object, or pass "
                             "custom_objects={name: function}.", field=field) from exc
    if not callable(function):
        raise EstimatorError(f"The Keras model's compiled `{field}` {_loss_name(loss)!r} is not callable; expected a "
                             "Keras loss name, object or function(y_true, y_pred).", field=field)

    def scalar(labels: Any, predictions: Any) -> Any:
        import tensorflow as tf

        return tf.reduce_mean(function(labels, predictions))

    return scalar


def _metric_pairs(names: list[str], loss_name: str, labels: Any, predictions: Any) -> dict[str, Any]:
    import tensorflow as tf

    v1 = tf.compat.v1
    pairs: dict[str, Any] = {}
    for name in names:
        if name in ("accuracy", "acc"):
            if loss_name in _SPARSE or "categorical" in loss_name:
                classes = tf.argmax(predictions, axis=-1)
                truth = tf.reshape(labels, tf.shape(classes)) if loss_name in _SPARSE else tf.argmax(labels, -1)
                pairs[name] = v1.metrics.accuracy(tf.cast(truth, tf.int64), classes)
            else:
                pairs[name] = v1.metrics.accuracy(tf.cast(labels > 0.5, tf.int64) if labels.dtype.is_floating
                                                  else labels, tf.cast(predictions > 0.5, tf.int64))
        elif name in ("mae", "mean_absolute_error"):
            pairs[name] = v1.metrics.mean_absolute_error(tf.cast(labels, predictions.dtype), predictions)
        elif name in ("mse", "mean_squared_error"):
            pairs[name] = v1.metrics.mean_squared_error(tf.cast(labels, predictions.dtype), predictions)
        elif name == "auc":
            pairs[name] = v1.metrics.auc(labels, predictions)
    return pairs


def _metric_names(model: Any) -> list[str]:
    from toolkit._compat.keras import compile_arguments

    metrics = (compile_arguments(model) or {}).get("metrics") or []
    names = []
    for metric in metrics if isinstance(metrics, (list, tuple)) else [metrics]:
        name = metric if isinstance(metric, str) else getattr(metric, "name", None) or type(metric).__name__
        key = str(name).lower()
        if key not in _METRICS:
            raise EstimatorError(f"The Keras model's compiled metric {name!r} has no TF1 graph counterpart here "
                                 f"(translated: {', '.join(_METRICS)}). Compile without it and add it with "
                                 "toolkit.estimator.add_metrics(estimator, metric_fn).", field="metrics")
        names.append(key)
    return names


def _inputs(names: list[str], features: Any) -> Any:
    if isinstance(features, Mapping) and len(names) == 1 and len(features) == 1:
        return next(iter(features.values()))  # one input, one feature: TF 2's `dense_input` keys keep working
    if isinstance(features, Mapping):
        missing = [name for name in names if name not in features]
        if missing:
            raise EstimatorError(f"The Keras model's inputs are named {names}, but input_fn's features have keys "
                                 f"{sorted(features)} (missing {missing}). Name the features after the model's "
                                 "Input layers (keras.Input(..., name=...)).", field="input_fn")
        values = [features[name] for name in names]
        return values[0] if len(values) == 1 else values
    return features


def _seed_states_local(model: Any) -> None:
    """Keras' dropout seed states (named by a process-wide counter, so differently in each graph) are
    local variables: initialised in every session, never checkpointed."""
    import tensorflow as tf

    v1 = tf.compat.v1
    del model  # Keras keeps a layer's SeedGenerator outside its weights: find the states by name
    saved = v1.get_collection_ref(v1.GraphKeys.GLOBAL_VARIABLES)
    seeds = {id(v) for v in saved if "seed_generator" in v.op.name}
    moved = [v for v in saved if id(v) in seeds]
    saved[:] = [v for v in saved if id(v) not in seeds]
    for variable in moved:
        v1.add_to_collection(v1.GraphKeys.LOCAL_VARIABLES, variable)


def _write_warm_start(model_config: dict, cls: Any, weights: list[Any], shapes: list[Any],
                      directory: str, custom_objects: Any) -> tuple[str, list[str]]:
    """The model's current weights as a TF1 checkpoint under the names the Estimator graph gives them."""
    import keras
    import tensorflow as tf

    v1 = tf.compat.v1
    os.makedirs(directory, exist_ok=True)
    with tf.Graph().as_default(), keras.saving.custom_object_scope(custom_objects or {}):
        model = cls.from_config(copy.deepcopy(model_config))
        model([v1.placeholder(tf.float32 if dtype is None else dtype, shape) for shape, dtype in shapes]
              if len(shapes) > 1 else v1.placeholder(shapes[0][1], shapes[0][0]))
        variables = [w.value for w in model.weights]
        names = [v.op.name for v in variables]
        saver = v1.train.Saver(dict(zip(names, variables, strict=True)))
        with v1.Session() as session:
            for variable, value in zip(variables, weights, strict=True):
                variable.load(value, session)
            path = saver.save(session, os.path.join(directory, "keras_model.ckpt"), write_meta_graph=False)
    return path, names


def model_to_estimator(keras_model: Any = None, keras_model_path: str | None = None,
                       custom_objects: Mapping[str, Any] | None = None, model_dir: str | None = None,
                       config: Any = None, checkpoint_format: str = "checkpoint",
                       metric_names_map: Mapping[str, str] | None = None, export_outputs: Any = None) -> Any:
    """An ``Estimator`` training, evaluating, predicting and exporting a compiled Keras model (TF's arguments).

    Raises:
        EstimatorError: neither or both of keras_model / keras_model_path, an uncompiled model, a loss,
            optimizer or metric with no TF1 translation (each named, with what to do instead).
    """
    import keras

    from toolkit.estimator.canned._keras_optimizers import from_keras
    from toolkit.estimator.estimator import Estimator, WarmStartSettings
    from toolkit.estimator.run_config import RunConfig

    if keras_model is None and keras_model_path is None:
        raise EstimatorError("Either `keras_model` or `keras_model_path` needs to be provided.", field="keras_model")
    if keras_model is not None and keras_model_path is not None:
        raise EstimatorError("Please specity either `keras_model` or `keras_model_path`, but not both: got both. "
                             "Pass one of them.", field="keras_model_path")
    if checkpoint_format not in ("checkpoint", "saver"):
        raise EstimatorError(f"`checkpoint_format` is {checkpoint_format!r}; expected 'checkpoint' or 'saver'.",
                             field="checkpoint_format")
    if keras_model is None:
        keras_model = keras.models.load_model(keras_model_path, custom_objects=custom_objects)
    if getattr(keras_model, "optimizer", None) is None or not getattr(keras_model, "compiled", True):
        raise EstimatorError("The given keras model has not been compiled yet. Please compile the model with "
                             "`model.compile()` before calling `model_to_estimator()`.", field="keras_model")
    loss = _loss_fn(keras_model.loss)
    loss_name = _loss_name(keras_model.loss).lower()
    optimizer = from_keras("optimizer", keras_model.optimizer)
    metric_names = _metric_names(keras_model)
    renamed = dict(metric_names_map or {})
    cls, model_config = type(keras_model), keras_model.get_config()
    input_names = [getattr(t, "name", f"input_{i}").split(":")[0] for i, t in enumerate(keras_model.inputs)]
    output_name = keras_model.output_names[0] if getattr(keras_model, "output_names", None) else "output"
    shapes = [(tuple(t.shape), t.dtype) for t in keras_model.inputs]
    weights = keras_model.get_weights()
    config = config if config is not None else RunConfig(model_dir=model_dir)
    if model_dir is not None and config.model_dir is None:
        config = config.replace(model_dir=model_dir)
    target_dir = config.model_dir or tempfile.mkdtemp()
    config = config.replace(model_dir=target_dir) if config.model_dir is None else config
    ckpt, names = _write_warm_start(model_config, cls, weights, shapes, os.path.join(target_dir, "keras"),
                                    custom_objects)

    def model_fn(features: Any, labels: Any, mode: str) -> Any:
        import tensorflow as tf

        from toolkit.estimator.export import PredictOutput
        from toolkit.estimator.spec import EstimatorSpec, ModeKeys

        with keras.saving.custom_object_scope(dict(custom_objects or {})):
            model = cls.from_config(copy.deepcopy(model_config))
        predictions = model(_inputs(input_names, features), training=mode == ModeKeys.TRAIN)
        _seed_states_local(model)
        outputs = {output_name: predictions}
        if mode == ModeKeys.PREDICT:
            return EstimatorSpec(mode, predictions=outputs,
                                 export_outputs=export_outputs or {"serving_default": PredictOutput(outputs)})
        value = loss(labels, predictions)
        if mode == ModeKeys.EVAL:
            metrics = _metric_pairs(metric_names, loss_name, labels, predictions)
            return EstimatorSpec(mode, loss=value, eval_metric_ops={renamed.get(k, k): v for k, v in metrics.items()})
        train_op = optimizer().minimize(value, global_step=tf.compat.v1.train.get_global_step(),
                                        var_list=[w.value for w in model.trainable_weights])
        return EstimatorSpec(mode, loss=value, train_op=train_op, predictions=outputs)

    return Estimator(model_fn, config=config,
                     warm_start_from=WarmStartSettings(ckpt, vars_to_warm_start=[re.escape(n) + ":" for n in names]))
