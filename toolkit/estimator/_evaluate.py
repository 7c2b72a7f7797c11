"""Running an EVAL or PREDICT graph against one checkpoint, as ``tf.estimator`` did."""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from toolkit.estimator._graph import metric_ops
from toolkit.estimator.spec import EstimatorSpec, SpecError

__all__ = ["run_evaluation", "run_prediction", "write_eval_summary"]

v1 = tf.compat.v1
logger = logging.getLogger(__name__)


class _StopAfterHook(tf.compat.v1.train.SessionRunHook):
    """Stops after ``steps`` evaluation batches (None: when the input ends)."""

    def __init__(self, steps: int | None) -> None:
        self._steps, self._done = steps, 0

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self._done += 1
        if self._steps is not None and self._done >= self._steps:
            run_context.request_stop()


def _session(scaffold: Any, path: str | None, hooks: Sequence[Any], master: str, error: Callable[..., Exception],
             config: Any) -> Any:
    creator = v1.train.ChiefSessionCreator(scaffold=scaffold, checkpoint_filename_with_path=path, master=master,
                                           config=config)
    try:
        return v1.train.MonitoredSession(session_creator=creator, hooks=list(hooks))
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as exc:
        raise error(path, exc) from exc


def run_evaluation(spec: EstimatorSpec, scaffold: Any, path: str | None, *, steps: int | None, hooks: Sequence[Any],
                   master: str, error: Callable[..., Exception], config: Any = None) -> dict[str, Any]:
    """Runs the metric update ops over the input; returns the metrics and the checkpoint's global step."""
    values, updates = metric_ops(spec)
    final = v1.train.FinalOpsHook({**values, "global_step": v1.train.get_global_step()})
    with _session(scaffold, path, [*hooks, _StopAfterHook(steps), final], master, error, config) as session:
        while not session.should_stop():
            session.run(updates)
    results = final.final_ops_values
    if results is None:
        raise SpecError("evaluation ended before its first batch; the eval input_fn yielded nothing.", field="input_fn")
    return {key: (value.item() if isinstance(value, np.generic) else value) for key, value in results.items()}


def run_prediction(spec: EstimatorSpec, scaffold: Any, path: str | None, *, predict_keys: Sequence[str] | None,
                   hooks: Sequence[Any], single: bool, error: Callable[..., Exception],
                   config: Any = None) -> Iterator[Any]:
    predictions = _selected(spec.predictions, predict_keys)
    with _session(scaffold, path, hooks, "", error, config) as session:
        while not session.should_stop():
            batch = session.run(predictions)
            if not single:
                yield batch
                continue
            size = _batch_length(batch)
            for i in range(size):
                yield tf.nest.map_structure(lambda value, i=i: value[i], batch)


def _selected(predictions: Any, predict_keys: Sequence[str] | None) -> Any:
    """The predictions named by ``predict_keys`` (TF ignored unknown keys while at least one matched)."""
    if predict_keys is None:
        return predictions
    if not isinstance(predictions, dict):
        raise SpecError("predict_keys argument is not valid in case of non-dict predictions: model_fn's "
                        "`predictions` is one tensor. Drop predict_keys, or return a dict of predictions.",
                        field="predict_keys")
    chosen = {k: v for k, v in predictions.items() if k in predict_keys}
    if not chosen:
        raise SpecError(f"Expected to run at least one output from {sorted(predictions)}, provided "
                        f"{list(predict_keys)}. Pick predict_keys from those.", field="predict_keys")
    return chosen


def _batch_length(batch: Any) -> int:
    """The batch size every prediction shares (TF refused scalars and differing first dimensions)."""
    items = batch.items() if isinstance(batch, dict) else [("predictions", batch)]
    length = None
    for key, value in items:
        if np.ndim(value) == 0:
            raise SpecError(f"Prediction {key!r} is a scalar; with yield_single_examples=True every prediction "
                            "needs a batch dimension. Return [batch, ...] tensors, or pass "
                            "yield_single_examples=False.", field=f"predictions.{key}")
        length = length if length is not None else len(value)
        if len(value) != length:
            raise SpecError(f"Batch length of predictions should be same. {key} has different batch length "
                            f"({len(value)}) than others ({length}). Give every prediction the batch "
                            "dimension, or pass yield_single_examples=False.", field=f"predictions.{key}")
    return length or 0


def _summary_values(key: str, value: Any) -> list[Any]:
    """The Summary values TF wrote for one metric: a number, a serialized Summary, or an array as a tensor."""
    if isinstance(value, (bool, int, float, np.number, np.bool_)):
        return [v1.Summary.Value(tag=key, simple_value=float(value))]
    if isinstance(value, bytes):
        try:
            parsed = v1.Summary.FromString(value)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError is not public; any bytes that do not parse
            logger.warning("Skipping summary for %s: bytes that are not a serialized Summary.", key)
            return []
        out = []
        for i, item in enumerate(parsed.value):
            item.tag = f"{key}/{i}"
            out.append(item)
        return out
    if isinstance(value, np.ndarray):
        return [v1.Summary.Value(tag=key, tensor=tf.make_tensor_proto(value))]
    logger.warning("Skipping summary for %s, must be a float, np.float32, np.int64, np.int32 or int or a serialized "
                   "string of Summary.", key)
    return []


def write_eval_summary(directory: str, metrics: dict[str, Any], checkpoint_path: str | None = None) -> None:
    """The metrics as TensorBoard events in ``directory`` (``model_dir/eval`` by default), as TF wrote them."""
    os.makedirs(directory, exist_ok=True)
    values = [item for key, value in metrics.items() if key != "global_step" for item in _summary_values(key, value)]
    if checkpoint_path:
        values.append(v1.Summary.Value(tag="checkpoint_path",
                                       tensor=tf.make_tensor_proto(checkpoint_path, dtype=tf.string)))
    summary = v1.Summary(value=values)
    with tf.Graph().as_default():  # FileWriter refuses eager mode
        # one writer per directory for the process (TF's FileWriterCache): writers opened in the same
        # second would share an event file name, and the later one would replace the earlier's events
        writer = v1.summary.FileWriterCache.get(directory)
        writer.add_summary(summary, int(metrics["global_step"]))
        writer.flush()
