"""``Exporter`` and ``LatestExporter``, ``BestExporter``, ``FinalExporter``: what ``train_and_evaluate`` exports.

Arguments, defaults and positions as ``tf.estimator``'s: ``assets_extra``
(``{destination in assets.extra: source file}``) and ``as_text`` go to every
export; ``BestExporter`` recovers the best evaluation so far from the eval event
files (``event_file_pattern`` under model_dir), so a restarted job does not export
a worse model.
"""
from __future__ import annotations

import abc
import glob
import inspect
import logging
import os
import shutil
from collections.abc import Callable, Mapping
from typing import Any

from toolkit.estimator._spec_base import SpecError

__all__ = ["BestExporter", "Exporter", "FinalExporter", "LatestExporter"]

logger = logging.getLogger(__name__)


class Exporter(abc.ABC):
    """A way to export an Estimator after an evaluation (``tf.estimator.Exporter``)."""

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """Directory name under ``model_dir/export``; unique within an ``EvalSpec``."""

    @abc.abstractmethod
    def export(self, estimator: Any, export_path: str, checkpoint_path: str, eval_result: Mapping[str, Any],
               is_the_final_export: bool) -> str | None:
        """Exports ``checkpoint_path`` under ``export_path``; returns the export's directory (or None)."""


def _check(name: Any, fn: Any, exports_to_keep: Any) -> None:
    if not isinstance(name, str) or not name or not name.replace("_", "").replace("-", "").isalnum():
        raise SpecError(f"exporter `name` is {name!r}; expected letters, digits, '-' and '_' "
                        "(it becomes a directory under model_dir/export).", field="name")
    if not callable(fn):
        raise SpecError(f"exporter `serving_input_receiver_fn` is {fn!r}; expected a function such as "
                        "build_parsing_serving_input_receiver_fn(feature_spec).", field="serving_input_receiver_fn")
    if exports_to_keep is not None and (isinstance(exports_to_keep, bool) or not isinstance(exports_to_keep, int)
                                        or exports_to_keep <= 0):
        raise SpecError(f"`exports_to_keep`, if provided, must be a positive number. Got {exports_to_keep!r}; pass "
                        "e.g. 5, or None to keep every export.", field="exports_to_keep")


class _SavedModelExporter(Exporter):
    def __init__(self, name: str, serving_input_receiver_fn: Callable[[], Any] | None,
                 assets_extra: Mapping[str, str] | None = None, as_text: bool = False,
                 exports_to_keep: int | None = 5) -> None:
        _check(name, serving_input_receiver_fn, exports_to_keep)
        self._name, self._receiver_fn, self._keep = name, serving_input_receiver_fn, exports_to_keep
        self._assets_extra, self._as_text = assets_extra, as_text

    @property
    def name(self) -> str:
        return self._name

    def _export(self, estimator: Any, export_path: str, checkpoint_path: str) -> str:
        path = estimator.export_saved_model(export_path, self._receiver_fn, assets_extra=self._assets_extra,
                                            as_text=self._as_text, checkpoint_path=checkpoint_path)
        if self._keep:
            olds = sorted((d for d in os.listdir(export_path) if d.isdigit()), key=int)
            for old in olds[:-self._keep]:
                shutil.rmtree(os.path.join(export_path, old), ignore_errors=True)
        logger.info("exporter %s: exported %s", self.name, path)
        return path


class LatestExporter(_SavedModelExporter):
    """Exports after every evaluation, keeping the newest ``exports_to_keep``."""

    def export(self, estimator: Any, export_path: str, checkpoint_path: str, eval_result: Mapping[str, Any],
               is_the_final_export: bool) -> str | None:
        return self._export(estimator, export_path, checkpoint_path)


class FinalExporter(_SavedModelExporter):
    """Exports once, after the final evaluation."""

    def __init__(self, name: str, serving_input_receiver_fn: Callable[[], Any],
                 assets_extra: Mapping[str, str] | None = None, as_text: bool = False) -> None:
        super().__init__(name, serving_input_receiver_fn, assets_extra, as_text, exports_to_keep=None)

    def export(self, estimator: Any, export_path: str, checkpoint_path: str, eval_result: Mapping[str, Any],
               is_the_final_export: bool) -> str | None:
        return self._export(estimator, export_path, checkpoint_path) if is_the_final_export else None


def _loss_smaller(best_eval_result: Mapping[str, Any], current_eval_result: Mapping[str, Any]) -> bool:
    for result, which in ((best_eval_result, "best_eval_result"), (current_eval_result, "current_eval_result")):
        if not result or "loss" not in result:
            raise SpecError(f"{which} cannot be empty or no loss is found in it: got {result!r}. Evaluate with a "
                            "model_fn that reports a loss, or pass compare_fn=.", field=which)
    return bool(best_eval_result["loss"] > current_eval_result["loss"])


def _check_compare_fn(compare_fn: Any) -> None:
    if compare_fn is None:
        raise SpecError("`compare_fn` must not be None: BestExporter needs compare_fn(best_eval_result, "
                        "current_eval_result) -> bool.", field="compare_fn")
    try:
        args = set(inspect.signature(compare_fn).parameters)
    except (TypeError, ValueError):
        return
    for required in ("best_eval_result", "current_eval_result"):
        if required not in args:
            raise SpecError(f"compare_fn ({compare_fn!r}) must include {required} argument.", field="compare_fn")
    extra = sorted(args - {"best_eval_result", "current_eval_result"})
    if extra:
        raise SpecError(f"compare_fn ({compare_fn!r}) has following not expected args: {extra}.", field="compare_fn")


class BestExporter(_SavedModelExporter):
    """Exports when ``compare_fn(best_eval_result, current_eval_result)`` says the evaluation improved."""

    def __init__(self, name: str = "best_exporter", serving_input_receiver_fn: Callable[[], Any] | None = None,
                 event_file_pattern: str = "eval/*.tfevents.*",
                 compare_fn: Callable[..., bool] = _loss_smaller, assets_extra: Mapping[str, str] | None = None,
                 as_text: bool = False, exports_to_keep: int | None = 5) -> None:
        _check_compare_fn(compare_fn)
        super().__init__(name, serving_input_receiver_fn, assets_extra, as_text, exports_to_keep)
        self._compare = compare_fn
        self._event_file_pattern = event_file_pattern
        self._best: Mapping[str, Any] | None = None
        self._model_dir: str | None = None

    def export(self, estimator: Any, export_path: str, checkpoint_path: str, eval_result: Mapping[str, Any],
               is_the_final_export: bool) -> str | None:
        if self._model_dir != estimator.model_dir and self._event_file_pattern:
            self._model_dir = estimator.model_dir
            self._best = self._best_from_events(os.path.join(estimator.model_dir, self._event_file_pattern),
                                                before=eval_result.get("global_step"))
        if self._best is not None and not self._compare(best_eval_result=self._best,
                                                        current_eval_result=eval_result):
            return None
        self._best = dict(eval_result)
        return self._export(estimator, export_path, checkpoint_path)

    def _best_from_events(self, pattern: str, before: Any) -> Mapping[str, Any] | None:
        """The best evaluation of an earlier step in the eval event files (a restarted job's history)."""
        import tensorflow as tf

        best = None
        for path in sorted(glob.glob(pattern)):
            for event in tf.compat.v1.train.summary_iterator(path):
                values = {v.tag: v.simple_value for v in event.summary.value if v.HasField("simple_value")}
                if before is not None and event.step >= before:
                    continue
                improved = best is None or self._compare(best_eval_result=best, current_eval_result=values)
                if "loss" in values and improved:
                    best = values
        return best
