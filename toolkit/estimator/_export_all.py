"""``Estimator.experimental_export_all_saved_models``: one SavedModel with a graph per mode.

As tf.estimator: for each mode given in ``input_receiver_fn_map`` (TRAIN,
EVAL, PREDICT, in that order) the receiver function builds the inputs (a
``SupervisedInputReceiver`` for TRAIN and EVAL, from
``experimental.build_raw_supervised_input_receiver_fn``; a ``ServingInputReceiver``
for PREDICT), ``model_fn`` builds that mode's graph, and the checkpoint's
variables are restored into it. The first mode's graph writes the variables;
every mode adds its ``MetaGraphDef`` under TF's tags (``train``, ``eval``,
``serve``). TRAIN and EVAL get a signature keyed by their mode with the loss,
predictions and metrics (the TRAIN graph also keeps its ``train_op`` in the
``saved_model_train_op`` collection); PREDICT gets the serving signatures.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from toolkit.estimator._construct import EstimatorError
from toolkit.estimator._export_outputs import EvalOutput, TrainOutput
from toolkit.estimator.spec import ModeKeys

__all__ = ["export_all_saved_models"]

v1 = tf.compat.v1
_TAGS = {ModeKeys.TRAIN: ["train"], ModeKeys.EVAL: ["eval"], ModeKeys.PREDICT: ["serve"]}
_SUPERVISED = {ModeKeys.TRAIN: TrainOutput, ModeKeys.EVAL: EvalOutput}
_TRAIN_OP_KEY = "saved_model_train_op"  # tf.saved_model's collection for the TRAIN graph's train op


def _signatures(mode: str, spec: Any, receiver: Any) -> dict[str, Any]:
    from toolkit.estimator.export import _signatures as serving_signatures

    if mode == ModeKeys.PREDICT:
        return serving_signatures(spec, receiver)
    output = _SUPERVISED[mode](loss=spec.loss, predictions=spec.predictions, metrics=spec.eval_metric_ops)
    return {mode: output.as_signature_def(receiver.receiver_tensors)}


def _receiver(mode: str, fn: Any) -> Any:
    from toolkit.estimator.export import ServingInputReceiver, SupervisedInputReceiver

    expected = ServingInputReceiver if mode == ModeKeys.PREDICT else SupervisedInputReceiver
    made = fn() if callable(fn) else fn
    if not isinstance(made, expected):
        raise EstimatorError(f"input_receiver_fn_map[{mode!r}] returned {type(made).__name__}; expected a "
                             f"{expected.__name__} (TRAIN and EVAL: experimental.build_raw_supervised_input_"
                             "receiver_fn; PREDICT: export.build_raw_serving_input_receiver_fn).",
                             field="input_receiver_fn_map")
    return made


def _add_mode(estimator: Any, builder: Any, mode: str, fn: Callable[[], Any], checkpoint: str, *,
              save_variables: bool, error: Callable[..., Exception]) -> None:
    with estimator._new_graph().as_default():
        v1.train.get_or_create_global_step()
        receiver = _receiver(mode, fn)
        spec = estimator._call(receiver.features, getattr(receiver, "labels", None), mode)
        signatures = _signatures(mode, spec, receiver)
        scaffold = estimator._saver_scaffold(spec)
        saver = scaffold.saver or v1.get_collection(v1.GraphKeys.SAVERS)[0]
        saver.build()
        if mode == ModeKeys.TRAIN and spec.train_op is not None:
            v1.add_to_collection(_TRAIN_OP_KEY, spec.train_op)
        main_op = scaffold.local_init_op or v1.group(v1.local_variables_initializer(), v1.tables_initializer())
        with v1.Session() as session:
            try:
                saver.restore(session, checkpoint)
            except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as exc:
                raise error(checkpoint, exc) from exc
            add = builder.add_meta_graph_and_variables if save_variables else builder.add_meta_graph
            kwargs = {"sess": session} if save_variables else {}
            add(tags=_TAGS[mode], signature_def_map=signatures, main_op=main_op, strip_default_attrs=True,
                saver=saver, **kwargs)


def export_all_saved_models(estimator: Any, export_dir_base: str, input_receiver_fn_map: Mapping[str, Any], *,
                            checkpoint: str, assets_extra: Mapping[str, str] | None, as_text: bool,
                            error: Callable[..., Exception]) -> str:
    """Writes the SavedModel to ``<export_dir_base>/<timestamp>`` (under a temporary name, then renamed)."""
    from toolkit.estimator.export import _fresh_dir, _publish

    if not isinstance(input_receiver_fn_map, Mapping):
        raise EstimatorError(f"`input_receiver_fn_map` is {type(input_receiver_fn_map).__name__}; expected a dict "
                             "{ModeKeys.TRAIN/EVAL/PREDICT: input_receiver_fn}.", field="input_receiver_fn_map")
    modes = [m for m in (ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT) if input_receiver_fn_map.get(m)]
    if not modes:
        raise EstimatorError(f"No valid modes for exporting found. Got {list(input_receiver_fn_map)}. Map "
                             "ModeKeys.TRAIN, EVAL or PREDICT to an input receiver function.",
                             field="input_receiver_fn_map")
    export_dir = _fresh_dir(export_dir_base)
    temp_dir = os.path.join(export_dir_base, f"temp-{os.path.basename(export_dir)}")
    os.makedirs(export_dir_base, exist_ok=True)
    try:
        builder = v1.saved_model.Builder(temp_dir)
        for i, mode in enumerate(modes):
            _add_mode(estimator, builder, mode, input_receiver_fn_map[mode], checkpoint, save_variables=i == 0,
                      error=error)
        builder.save(as_text=as_text)
        _publish(temp_dir, export_dir, assets_extra)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    return export_dir
