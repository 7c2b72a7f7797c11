"""From a model_fn to one Keras functional model per mode.

TF1 called model_fn inside a graph and matched variables between the train,
eval and predict graphs by name through checkpoints. Here model_fn is called
with symbolic ``keras.Input``s shaped like the input_fn's batches; what it
returns becomes a functional model whose outputs are ``loss``, ``predictions``
and ``metrics``. Each mode gets its own model, and state moves between them
through checkpoints, as in Estimator: the layers a model_fn creates (in the
same order in every mode) are matched by their position in the model, and a
mismatch fails loudly at restore time.
"""
from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Callable

import keras
import tensorflow as tf

from toolkit.estimator.spec import EstimatorSpec, ModeKeys, SpecError

__all__ = ["ModeModel", "build_mode_model", "call_input_fn", "element_spec", "make_forward", "metric_fns"]


def call_input_fn(input_fn: Callable[..., Any], context: tf.distribute.InputContext | None = None) -> Any:
    """Calls ``input_fn()``, or ``input_fn(input_context)`` if it takes an argument."""
    try:
        takes_context = bool(inspect.signature(input_fn).parameters)
    except (TypeError, ValueError):
        takes_context = False
    if takes_context:
        return input_fn(context or tf.distribute.InputContext())
    dataset = input_fn()
    if context is not None and context.num_input_pipelines > 1 and isinstance(dataset, tf.data.Dataset):
        dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
    return dataset


def element_spec(input_fn: Callable[..., Any]) -> tuple[Any, Any]:
    """``(features_spec, labels_spec or None)`` of the batches ``input_fn`` yields."""
    dataset = call_input_fn(input_fn)
    if not isinstance(dataset, tf.data.Dataset):
        raise SpecError("input_fn", f"input_fn returned {type(dataset).__name__}; expected a tf.data.Dataset of "
                        "batched (features, labels) pairs, e.g. tf.data.Dataset.from_tensor_slices((x, y)).batch(32).")
    spec = dataset.element_spec
    if isinstance(spec, tuple) and len(spec) == 2:
        return spec
    return spec, None


def _input(spec: tf.TensorSpec, name: str) -> Any:
    return keras.Input(shape=tuple(spec.shape[1:]), dtype=spec.dtype.name, name=name)


def _symbolic(spec: Any, prefix: str) -> tuple[Any, dict[str, Any]]:
    """Symbolic tensors shaped like ``spec`` and the flat ``{name: input}`` dict the model takes."""
    if spec is None:
        return None, {}
    if isinstance(spec, Mapping):
        structure = {key: _input(value, f"{prefix}_{key}") for key, value in spec.items()}
        return structure, {f"{prefix}_{key}": value for key, value in structure.items()}
    symbolic = _input(spec, prefix)
    return symbolic, {prefix: symbolic}


def flat_inputs(features: Any, labels: Any, *, with_labels: bool) -> dict[str, Any]:
    """Real batches in the flat layout the mode's model takes."""
    flat: dict[str, Any] = {}
    for prefix, value in (("features", features), ("labels", labels if with_labels else None)):
        if value is None:
            continue
        if isinstance(value, Mapping):
            flat.update({f"{prefix}_{key}": item for key, item in value.items()})
        else:
            flat[prefix] = value
    return flat


def _call_model_fn(model_fn: Callable[..., Any], features: Any, labels: Any, mode: str, params: Any,
                   config: Any) -> EstimatorSpec:
    names = inspect.signature(model_fn).parameters
    kwargs = {"params": params} if "params" in names else {}
    if "config" in names:
        kwargs["config"] = config
    if "mode" in names:
        kwargs["mode"] = mode
    spec = model_fn(features=features, labels=labels, **kwargs)
    if not isinstance(spec, EstimatorSpec):
        raise SpecError("model_fn", f"model_fn returned {type(spec).__name__}; expected an EstimatorSpec, e.g. "
                        "return EstimatorSpec(mode, loss=loss, optimizer=keras.optimizers.Adam()).")
    if spec.mode != mode:
        raise SpecError("model_fn", f"model_fn was called with mode {mode!r} but returned an EstimatorSpec for "
                        f"mode {spec.mode!r}; pass the `mode` it received.")
    return spec


class ModeModel:
    """One mode's functional model and the spec model_fn returned for it."""

    def __init__(self, model: keras.Model, spec: EstimatorSpec, *, with_labels: bool, bare: bool = False) -> None:
        self.model, self.spec, self.with_labels, self.bare = model, spec, with_labels, bare

    def __call__(self, features: Any, labels: Any = None, *, training: bool = False) -> Any:
        """``{"loss", "predictions", "metrics"}`` in TRAIN/EVAL; the predictions in PREDICT."""
        if self.bare:
            return self.model(features, training=training)
        return self.model(flat_inputs(features, labels, with_labels=self.with_labels), training=training)


def build_mode_model(model_fn: Callable[..., Any], mode: str, specs: tuple[Any, Any], *, params: Any,
                     config: Any) -> ModeModel:
    """Calls model_fn on symbolic inputs and wraps the result in a functional model."""
    features_spec, labels_spec = specs
    with_labels = mode != ModeKeys.PREDICT and labels_spec is not None
    features, feature_inputs = _symbolic(features_spec, "features")
    labels, label_inputs = _symbolic(labels_spec if with_labels else None, "labels")
    spec = _call_model_fn(model_fn, features, labels, mode, params, config)
    outputs: dict[str, Any] = {}
    if spec.loss is not None and mode != ModeKeys.PREDICT:
        outputs["loss"] = spec.loss
    if spec.predictions is not None:
        outputs["predictions"] = spec.predictions
    if spec.eval_metric_ops and mode != ModeKeys.PREDICT:
        outputs["metrics"] = dict(spec.eval_metric_ops)
    inputs: Any = {**feature_inputs, **label_inputs}
    bare = mode == ModeKeys.PREDICT and not isinstance(features_spec, Mapping)
    if mode == ModeKeys.PREDICT:  # predictions from bare features: the model exports as a serving signature
        outputs = spec.predictions
        inputs = features if bare else inputs
    try:
        model = keras.Model(inputs, outputs, name=f"model_fn_{mode}")
    except (TypeError, ValueError) as exc:
        raise SpecError(
            "model_fn",
            f"model_fn's {mode} outputs could not form a Keras model ({str(exc).splitlines()[0]}). Build them "
            "from the features/labels it receives with Keras layers and keras.ops (not tf.* ops).",
        ) from exc
    return ModeModel(model, spec, with_labels=with_labels, bare=bare)


def make_forward(*, with_labels: bool) -> Callable[..., Any]:
    """The engine's ``Forward``: a mode model's per-example loss, and all its outputs as predictions."""

    def forward(model: keras.Model, features: Any, labels: Any, training: bool) -> tuple[Any, Any]:
        outputs = model(flat_inputs(features, labels, with_labels=with_labels), training=training)
        loss = tf.convert_to_tensor(outputs["loss"])
        if loss.shape.rank == 0:
            first = tf.nest.flatten(features)[0]
            loss = tf.fill(tf.shape(first)[:1], loss)
        return loss, outputs

    return forward


def metric_fns(names: Any) -> list[Callable[[Any, Any], Any]]:
    """Engine metric functions reading model_fn's per-example ``eval_metric_ops`` values."""
    fns = []
    for name in names:
        def fn(y_true: Any, outputs: Any, _name: str = name) -> Any:
            return outputs["metrics"][_name]

        fn.__name__ = name
        fns.append(fn)
    return fns
