"""``MultiHead``: several named heads over one network (``tf.estimator.MultiHead``), for multi-task models.

The logits are a dict ``{head name: logits}`` or one tensor split along its
last dimension in the order of ``heads``; the labels a dict by head name.
The loss is the (``head_weights``-weighted) sum of the heads' losses; metrics
are every head's plus ``loss/<head name>``; predictions are keyed
``(head name, key)``. The first head's ``serving_default`` is the default
signature; every head's signatures are also exported as ``<head name>/<key>``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from toolkit.estimator.head import _checks
from toolkit.estimator.head._checks import HeadError
from toolkit.estimator.head.base import (
    DEFAULT_SERVING_KEY,
    PREDICT_SERVING_KEY,
    Head,
    keras_metrics,
)

__all__ = ["MultiHead"]

v1 = tf.compat.v1


class MultiHead(Head):
    """Combines named heads; the first is served by default.

    Args:
        heads: ``Head`` instances, each with a ``name``.
        head_weights: one weight per head for the summed loss (default: all 1).
    """

    _default_scope = "multi_head"

    def _train_summary_key(self, key: str) -> str:
        return key  # TF's MultiHead writes its training loss as plain 'loss'

    def __init__(self, heads: Sequence[Head], head_weights: Sequence[float] | None = None) -> None:
        if not heads:
            raise HeadError(f"Must specify heads. Given: {heads!r}. Pass a list of named heads.", field="heads")
        if head_weights and len(head_weights) != len(heads):
            raise HeadError(f"heads and head_weights must have the same size. Given len(heads): {len(heads)}. Given "
                            f"len(head_weights): {len(head_weights)}.", field="head_weights")
        for head in heads:
            if head.name is None:
                raise HeadError(f"All given heads must have name specified. Given: {head!r}. Pass name='...' to "
                                "each head.", field="heads")
        self._heads = tuple(heads)
        self._head_weights = tuple(head_weights) if head_weights else ()

    @property
    def name(self) -> str:
        return "_".join(str(h.name) for h in self._heads)

    @property
    def logits_dimension(self) -> int:
        return sum(h.logits_dimension for h in self._heads)

    @property
    def loss_reduction(self) -> str:
        reductions = [h.loss_reduction for h in self._heads]
        if len(set(reductions)) > 1:
            raise HeadError(f"The loss_reduction must be the same for different heads. Given: {reductions}.",
                            field="heads")
        return reductions[0]

    def _split(self, logits: Any) -> dict[str, tf.Tensor]:
        names = [str(h.name) for h in self._heads]
        if isinstance(logits, Mapping):
            missing = sorted(set(names) - set(logits))
            if missing:
                raise HeadError(f"logits has missing values for head(s): {missing}. Give logits for every head.",
                                field="logits")
            return dict(logits)
        logits = tf.convert_to_tensor(logits)
        dims = [h.logits_dimension for h in self._heads]
        last = logits.shape[-1] if logits.shape.rank else None
        if last is not None and last != sum(dims):
            raise HeadError(f"Could not split logits of shape {logits.shape.as_list()} among the heads with "
                            f"individual logits dimensions: {dims}. The last dimension of the logits tensor should "
                            f"equal {sum(dims)} but is {last}.", field="logits")
        parts = tf.split(logits, dims, axis=-1)
        return dict(zip(names, parts, strict=True))

    def _labels(self, labels: Any) -> Mapping[str, Any]:
        if not isinstance(labels, Mapping):
            raise HeadError(f"labels must be a dict. Given: {labels!r}. Return labels as {{head name: labels}}.",
                            field="labels")
        missing = sorted({str(h.name) for h in self._heads} - set(labels))
        if missing:
            raise HeadError(f"labels has missing values for head(s): {missing}.", field="labels")
        return labels

    def loss(self, labels: Any, logits: Any, features: Any = None, mode: Any = None,
             regularization_losses: Sequence[Any] | None = None) -> tf.Tensor:
        parts, labels = self._split(logits), self._labels(labels)
        losses = [h.loss(labels=labels[h.name], logits=parts[str(h.name)], features=features, mode=mode)
                  for h in self._heads]
        with v1.name_scope("merge_losses"):
            if self._head_weights:
                losses = [loss * weight for loss, weight in zip(losses, self._head_weights, strict=True)]
            return _checks.regularized(tf.math.add_n(losses), regularization_losses)

    def predictions(self, logits: Any, keys: Sequence[str] | None = None) -> dict[Any, tf.Tensor]:
        parts = self._split(logits)
        out: dict[Any, tf.Tensor] = {}
        with v1.name_scope("merge_pred"):
            for head in self._heads:
                for key, value in head.predictions(parts[str(head.name)]).items():
                    out[(head.name, key)] = value
        return out

    def metrics(self, regularization_losses: Sequence[Any] | None = None) -> dict[str, Any]:
        km = keras_metrics()
        metrics = {f"loss/{h.name}": km.Mean(name=f"loss/{h.name}") for h in self._heads}
        if regularization_losses is not None:
            metrics[self._summary_key("regularization_loss")] = km.Mean(name="regularization_loss")
        return metrics

    def update_metrics(self, eval_metrics: dict[str, Any], features: Any, logits: Any, labels: Any,
                       mode: Any = None, regularization_losses: Sequence[Any] | None = None) -> dict[str, Any]:
        parts, labels = self._split(logits), self._labels(labels)
        self._regularization_metric(eval_metrics, regularization_losses)
        for head in self._heads:
            head_logits, head_labels = parts[str(head.name)], labels[head.name]
            eval_metrics[f"loss/{head.name}"].update_state(
                head.loss(labels=head_labels, logits=head_logits, features=features))
            eval_metrics.update(head.update_metrics(head.metrics(), features, head_logits, head_labels) or {})
        return eval_metrics

    def export_outputs(self, predictions: Mapping[Any, tf.Tensor]) -> dict[str, Any]:
        from toolkit.estimator.export import PredictOutput
        outputs: dict[str, Any] = {}
        for i, head in enumerate(self._heads):
            own = {k: v for (name, k), v in predictions.items() if name == head.name}
            for key, output in head.export_outputs(own).items():
                if i == 0 and key == DEFAULT_SERVING_KEY:
                    outputs[DEFAULT_SERVING_KEY] = output
                outputs[f"{head.name}/{key}"] = output
        outputs[PREDICT_SERVING_KEY] = PredictOutput({f"{name}/{k}": v for (name, k), v in predictions.items()})
        return outputs
