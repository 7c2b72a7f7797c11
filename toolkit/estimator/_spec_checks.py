"""``EstimatorSpec``'s checks that need TensorFlow, made at construction as ``tf.estimator`` made them.

Each check raises the exception type TF raised (``SpecTypeError`` where TF
raised ``TypeError``, ``SpecError`` where it raised ``ValueError``) with TF's key
phrase first ("loss must be Tensor", "Loss must be scalar", "must be from the
default graph", ...) and then the house-style explanation.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from toolkit.estimator._export_outputs import ExportOutput, PredictOutput
from toolkit.estimator._spec_base import ModeKeys, SpecError, SpecTypeError, is_metric_object

__all__ = ["check_export_outputs", "check_hooks", "check_loss", "check_metrics", "check_predictions",
           "check_scaffold", "check_train_op"]

v1 = tf.compat.v1
DEFAULT_SERVING_SIGNATURE = "serving_default"


def _is_dense(value: Any) -> bool:
    return isinstance(value, (tf.Tensor, tf.Variable)) and not isinstance(value, tf.SparseTensor)


def _graph_error(what: str, name: str, field: str) -> SpecError:
    return SpecError(f'{what} with "{name}" must be from the default graph: it was built in another graph '
                     "(outside this model_fn call, or in an earlier one). Build it inside model_fn from the "
                     "features it received.", field=field)


def _same_graph(value: Any, what: str, field: str) -> None:
    graph = getattr(value, "graph", None)
    if graph is not None and graph is not v1.get_default_graph():
        raise _graph_error(what, getattr(value, "name", repr(value)), field)


def _tensor(value: Any, field: str, example: str) -> Any:
    if not _is_dense(value):
        raise SpecTypeError(f"{field} must be Tensor, given: {value!r:.120}. EstimatorSpec `{field}` is "
                            f"{type(value).__name__}; expected a dense tf.Tensor, e.g. {example}.", field=field)
    return value


def check_loss(loss: Any) -> Any:
    """A tensor of one element, reshaped to a scalar (TF accepted shape ``[1]``)."""
    _tensor(loss, "loss", "tf.reduce_mean(per_example_loss)")
    shape = loss.shape
    if shape.num_elements() not in (None, 1):
        raise SpecError(f"Loss must be scalar, given: {loss!r:.120}. EstimatorSpec `loss` has shape {shape}; "
                        "expected a scalar tensor, e.g. tf.reduce_mean(per_example_loss).", field="loss")
    _same_graph(loss, "loss", "loss")
    if not shape.is_compatible_with([]):
        loss = tf.reshape(loss, [])
    return loss


def check_train_op(train_op: Any) -> Any:
    if not isinstance(train_op, tf.Operation) and not _is_dense(train_op):
        raise SpecTypeError(f"train_op must be Operation or Tensor, given: {train_op!r:.120}. EstimatorSpec "
                            f"`train_op` is {type(train_op).__name__}; expected the op of one training step, e.g. "
                            "optimizer.minimize(loss, global_step=tf.train.get_global_step()).", field="train_op")
    _same_graph(train_op, "train_op", "train_op")
    return train_op


def check_predictions(predictions: Any) -> Any:
    if predictions is None:
        return {}
    if isinstance(predictions, Mapping):
        predictions = {k: _tensor(v, f"predictions[{k}]", "{'class_ids': tf.argmax(logits, 1)}")
                       for k, v in predictions.items()}
        for key, value in predictions.items():
            _same_graph(value, "prediction values", f"predictions.{key}")
        return predictions
    _tensor(predictions, "predictions", "tf.argmax(logits, 1) or a dict of tensors")
    _same_graph(predictions, "prediction values", "predictions")
    return predictions


def check_hooks(field: str, hooks: Any) -> tuple[Any, ...]:
    hooks = (hooks,) if isinstance(hooks, v1.train.SessionRunHook) else tuple(hooks or ())
    for hook in hooks:
        if not isinstance(hook, v1.train.SessionRunHook):
            raise SpecTypeError(f"All hooks must be SessionRunHook instances, given: {hook!r}. EstimatorSpec "
                                f"`{field}` holds {type(hook).__name__}; subclass "
                                "tf.compat.v1.train.SessionRunHook.", field=field)
    return hooks


def check_scaffold(scaffold: Any) -> Any:
    scaffold = scaffold or v1.train.Scaffold()
    if not isinstance(scaffold, v1.train.Scaffold):
        raise SpecTypeError(f"scaffold must be tf.train.Scaffold. Given: {scaffold!r}. EstimatorSpec `scaffold` "
                            f"is {type(scaffold).__name__}; pass tf.compat.v1.train.Scaffold(...) or None.",
                            field="scaffold")
    return scaffold


def _check_op(value: Any, field: str) -> None:
    if not isinstance(value, tf.Operation) and not _is_dense(value):
        raise SpecTypeError(f"{field} must be Operation or Tensor, given: {value!r:.120}.", field=field)


def check_metrics(metrics: Any) -> dict[str, Any]:
    """``{name: (value, update_op)}``; a tf_keras metric becomes its (result, first update) pair."""
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise SpecTypeError(f"eval_metric_ops must be a dict, given: {metrics!r:.120}. EstimatorSpec "
                            f"`eval_metric_ops` is {type(metrics).__name__}; expected {{name: (value, update_op)}}, "
                            "e.g. {'accuracy': tf.metrics.accuracy(labels, predicted)}.", field="eval_metric_ops")
    result: dict[str, Any] = {}
    added: list[Any] = []
    for name, value in metrics.items():
        field = f"eval_metric_ops.{name}"
        if is_metric_object(value):
            updates = list(getattr(value, "updates", ()) or ())
            if not updates:
                raise SpecError(f'Please call update_state(...) on the "{getattr(value, "name", name)}" metric: '
                                f"EstimatorSpec `eval_metric_ops[{name!r}]` is a metric object that was never "
                                "updated in this graph; call it (metric(labels, predictions)) or "
                                "metric.update_state(...) in model_fn before returning it.", field=field)
            for member in [*updates, value.result()]:
                _same_graph(member, "eval_metric_ops", field)
            result[name] = (value.result(), updates[0])
            added.extend(getattr(value, "variables", ()))
            continue
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            raise SpecTypeError(f"Values of eval_metric_ops must be (metric_value, update_op) tuples, given: "
                                f"{value!r:.120} for key: {name}. EstimatorSpec `eval_metric_ops[{name!r}]` is "
                                f"{type(value).__name__}; expected a (value, update_op) pair such as "
                                "tf.metrics.accuracy(labels, predicted), or a tf_keras metric object updated "
                                "in model_fn.", field=field)
        metric_value, update = value
        for member in [*tf.nest.flatten(metric_value), update]:
            _check_op(member, f"eval_metric_ops[{name}]")
            _same_graph(member, "eval_metric_ops", field)
        result[name] = tuple(value)
    _as_local_variables(added)
    return result


def _as_local_variables(variables: list[Any]) -> None:
    """A Keras metric's variables join LOCAL_VARIABLES and METRIC_VARIABLES, initialised like tf.metrics' own."""
    for key in (v1.GraphKeys.LOCAL_VARIABLES, v1.GraphKeys.METRIC_VARIABLES):
        known = {id(v) for v in v1.get_collection(key)}
        for variable in variables:
            if id(variable) not in known:
                v1.add_to_collection(key, variable)
                known.add(id(variable))


def check_export_outputs(export_outputs: Any, predictions: Any, mode: Any) -> Any:
    """In PREDICT: a dict of ExportOutputs with a ``serving_default`` entry (added for a single one)."""
    if mode != ModeKeys.PREDICT:
        return export_outputs
    if export_outputs is None:
        export_outputs = {DEFAULT_SERVING_SIGNATURE: PredictOutput(predictions)}
    if not isinstance(export_outputs, Mapping):
        raise SpecTypeError(f"export_outputs must be dict, given: {export_outputs!r:.120}. EstimatorSpec "
                            f"`export_outputs` is {type(export_outputs).__name__}; expected "
                            "{signature name: PredictOutput(...)}.", field="export_outputs")
    for name, output in export_outputs.items():
        # TF's own ExportOutput classes (what tf.estimator.export's were) build their SignatureDef alike
        if not isinstance(output, ExportOutput) and not callable(getattr(output, "as_signature_def", None)):
            raise SpecTypeError(f"Values in export_outputs must be ExportOutput objects. Given: "
                                f"{export_outputs!r:.120}. EstimatorSpec `export_outputs[{name!r}]` is "
                                f"{type(output).__name__}; expected PredictOutput, ClassificationOutput or "
                                "RegressionOutput.", field=f"export_outputs.{name}")
    export_outputs = dict(export_outputs)
    if len(export_outputs) == 1:
        export_outputs.setdefault(DEFAULT_SERVING_SIGNATURE, next(iter(export_outputs.values())))
    elif DEFAULT_SERVING_SIGNATURE not in export_outputs:
        raise SpecError(f"Multiple export_outputs were provided, but none of them is specified as the default: "
                        f"EstimatorSpec `export_outputs` has {sorted(export_outputs)}; name one of them "
                        f"'{DEFAULT_SERVING_SIGNATURE}' (signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY).",
                        field="export_outputs")
    return export_outputs
