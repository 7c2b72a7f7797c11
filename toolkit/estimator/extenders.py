"""``add_metrics``: an Estimator with more evaluation metrics, as ``tf.estimator.add_metrics`` made it."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["add_metrics"]

_VALID_METRIC_FN_ARGS = frozenset(("features", "labels", "predictions", "config"))


def add_metrics(estimator: Any, metric_fn: Callable[..., Any]) -> Any:
    """A new Estimator on the same model_dir whose evaluation also reports ``metric_fn``'s metrics.

    Args:
        estimator: a ``toolkit.estimator.Estimator``.
        metric_fn: takes any of ``features``, ``labels``, ``predictions``, ``config`` and
            returns ``{name: (value, update_op)}`` or ``{name: tf_keras metric}``.

    Example:
        >>> def my_auc(labels, predictions):  # doctest: +SKIP
        ...     metric = tf_keras.metrics.AUC()
        ...     metric.update_state(labels, predictions["logistic"])
        ...     return {"auc": metric}
        >>> estimator = add_metrics(estimator, my_auc)  # doctest: +SKIP
    """
    from toolkit.estimator._construct import EstimatorError, model_fn_args
    from toolkit.estimator.estimator import Estimator
    from toolkit.estimator.spec import ModeKeys

    if not callable(metric_fn):
        raise EstimatorError(f"`metric_fn` is {metric_fn!r}; expected a function (labels, predictions) -> "
                             "{name: metric}.", field="metric_fn")
    args = set(model_fn_args(metric_fn))
    invalid = sorted(args - _VALID_METRIC_FN_ARGS)
    if invalid:
        raise EstimatorError(f"metric_fn ({metric_fn!r}) has following not expected args: {invalid}. It may take "
                             f"{sorted(_VALID_METRIC_FN_ARGS)}.", field="metric_fn")

    def new_model_fn(features: Any, labels: Any, mode: str, config: Any) -> Any:
        spec = estimator.model_fn(features, labels, mode, config)
        if mode != ModeKeys.EVAL:
            return spec
        offered = {"features": features, "labels": labels, "predictions": spec.predictions, "config": config}
        new_metrics = metric_fn(**{k: v for k, v in offered.items() if k in args})
        return spec._replace(eval_metric_ops={**(spec.eval_metric_ops or {}), **dict(new_metrics)})

    return Estimator(model_fn=new_model_fn, model_dir=estimator.model_dir, config=estimator.config,
                     warm_start_from=estimator._warm_start)
