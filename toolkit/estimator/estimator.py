"""``Estimator``: TF1's train / evaluate / predict / export workflow on TF 2 and Keras 3.

Training is the toolkit's engine (``toolkit.training.fit``): the model_fn's
TRAIN-mode model runs under the strategy RunConfig names (parameter servers,
multi-worker mirrored, or one process), with its atomic global step,
checkpoints and summaries. Evaluation, prediction and export happen in one
process on a fresh model of the right mode, restored from the newest
checkpoint, exactly as Estimator rebuilt a graph for each call.

Example:
    >>> est = Estimator(model_fn, model_dir="runs/digits", params={"lr": 0.01})   # doctest: +SKIP
    >>> est.train(train_input_fn, max_steps=500)
    >>> est.evaluate(eval_input_fn)["accuracy"]
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import tensorflow as tf

from toolkit.estimator._graph import (ModeModel, build_mode_model, call_input_fn, element_spec, make_forward,
                                      metric_fns)
from toolkit.estimator.run_config import RunConfig, RunConfigError
from toolkit.estimator.spec import ModeKeys, SpecError

__all__ = ["Estimator", "EstimatorError"]

logger = logging.getLogger(__name__)


class EstimatorError(ValueError):
    """A bad Estimator argument or state; ``.field`` names the argument."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


def _global_step_of(path: str) -> int:
    return int(tf.train.load_variable(path, "global_step/.ATTRIBUTES/VARIABLE_VALUE"))


def _positive(field: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise EstimatorError(field, f"`{field}` is {value!r}; expected a positive int or None, e.g. {field}=100.")


class Estimator:
    """Trains, evaluates, predicts with and exports a ``model_fn``.

    Args:
        model_fn: ``model_fn(features, labels, mode, params[, config])``
            returning an ``EstimatorSpec``; see ``toolkit.estimator.spec``.
        model_dir: overrides ``config.model_dir``.
        config: a ``RunConfig`` (None: ``RunConfig()``, which reads TF_CONFIG).
        params: passed to model_fn unchanged.
    """

    def __init__(self, model_fn: Callable[..., Any], model_dir: str | os.PathLike | None = None,
                 config: RunConfig | None = None, params: Mapping[str, Any] | None = None) -> None:
        if not callable(model_fn):
            raise EstimatorError("model_fn", f"`model_fn` is {type(model_fn).__name__}; expected a function "
                                 "model_fn(features, labels, mode, params) returning an EstimatorSpec.")
        if config is not None and not isinstance(config, RunConfig):
            raise EstimatorError("config", f"`config` is {type(config).__name__}; expected a RunConfig.")
        config = config or RunConfig()
        if model_dir is not None and config.model_dir not in (None, os.fspath(model_dir)):
            raise EstimatorError("model_dir", f"`model_dir` is {os.fspath(model_dir)!r} but config.model_dir is "
                                 f"{config.model_dir!r}; pass one of them, or the same path to both.")
        if model_dir is not None:
            config = config.replace(model_dir=os.fspath(model_dir))
        self.model_fn, self.params = model_fn, dict(params or {})
        self.config = config
        self._features_spec: Any = None

    @property
    def model_dir(self) -> str | None:
        return self.config.model_dir

    # ---- checkpoints ----------------------------------------------------------------
    def latest_checkpoint(self) -> str | None:
        """The newest checkpoint in ``model_dir``, or None."""
        return tf.train.latest_checkpoint(self.model_dir) if self.model_dir else None

    def _checkpoint(self, checkpoint_path: str | None, what: str) -> str:
        path = checkpoint_path or self.latest_checkpoint()
        if path is None:
            raise EstimatorError("model_dir", f"{what} needs a trained model but model_dir={self.model_dir!r} "
                                 "holds no checkpoint. Call train() first, or pass checkpoint_path=.")
        return path

    def _mode_model(self, mode: str, specs: tuple[Any, Any]) -> ModeModel:
        self._features_spec = specs[0]
        return build_mode_model(self.model_fn, mode, specs, params=self.params, config=self.config)

    def _restore(self, mode_model: ModeModel, path: str) -> int:
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        try:
            status = tf.train.Checkpoint(model=mode_model.model, global_step=global_step).restore(path)
            status.assert_existing_objects_matched()
        except (AssertionError, ValueError) as exc:
            raise EstimatorError(
                "model_fn",
                f"checkpoint {path} does not match the {mode_model.spec.mode} model model_fn builds "
                f"({str(exc).splitlines()[0]}). model_fn must create the same layers, in the same order, "
                "in every mode; compute mode-specific heads with keras.ops only.",
            ) from exc
        status.expect_partial()
        return int(global_step.numpy())

    # ---- train ----------------------------------------------------------------------
    def _max_steps(self, steps: int | None, max_steps: int | None) -> int:
        _positive("steps", steps)
        _positive("max_steps", max_steps)
        if (steps is None) == (max_steps is None):
            raise EstimatorError("steps", f"train() needs exactly one of `steps` and `max_steps`; received "
                                 f"steps={steps!r}, max_steps={max_steps!r}. Pass max_steps=1000, for example.")
        if max_steps is not None:
            return max_steps
        path = self.latest_checkpoint()
        return steps + (_global_step_of(path) if path else 0)

    def train(self, input_fn: Callable[..., Any], steps: int | None = None, max_steps: int | None = None) -> Estimator:
        """Trains until the global step reaches ``max_steps`` (or ``steps`` more than now).

        In parameter-server ps and worker tasks this serves and exits the
        process when the chief is done, like ``toolkit.fit``. With
        ``RunConfig(sync_replicas=True)`` each global step averages
        ``replicas_to_aggregate`` worker contributions (parameter servers only).
        """
        from toolkit.training import fit

        target = self._max_steps(steps, max_steps)
        specs = element_spec(input_fn)
        self._features_spec = specs[0]
        probe = build_mode_model(self.model_fn, ModeKeys.TRAIN, specs, params=self.params, config=self.config)
        if self.config.random_seed is not None:
            import keras

            keras.utils.set_random_seed(self.config.random_seed)
        history = fit(
            lambda: build_mode_model(self.model_fn, ModeKeys.TRAIN, specs, params=self.params,
                                     config=self.config).model,
            lambda context: call_input_fn(input_fn, context),
            optimizer=_optimizer_factory(probe.spec.optimizer), forward=make_forward(with_labels=probe.with_labels),
            metrics=metric_fns(probe.spec.eval_metric_ops), epochs=1, steps_per_epoch=target,
            model_dir=self._train_dir(), checkpoint_every_steps=self.config.save_checkpoints_steps,
            keep_checkpoints=self.config.keep_checkpoint_max, log_every_steps=self.config.log_step_count_steps,
            summary_every_steps=self.config.save_summary_steps, strategy=self.config.train_distribute,
            tf_config=self.config.tf_config, export=False, verbose=0,
            sync_replicas=self.config.sync_replicas,
            replicas_to_aggregate=self.config.replicas_to_aggregate if self.config.sync_replicas else None,
            strategy_options={name: value for name in ("chief_start_timeout", "chief_lost_after")
                              if (value := getattr(self.config, name)) is not None},
        )
        if self.config.model_dir is None and history.model_dir:
            self.config = self.config.replace(model_dir=history.model_dir)
        logger.info("trained to global step %d in %s", history.global_step, history.model_dir)
        return self

    def _train_dir(self) -> str | None:
        if self.model_dir is None and not self.config.is_local:
            raise RunConfigError("model_dir", "RunConfig `model_dir` is None but TF_CONFIG describes a cluster; "
                                 "every task must share one directory. Pass model_dir='runs/my-job'.")
        return self.model_dir

    # ---- evaluate -------------------------------------------------------------------
    def evaluate(self, input_fn: Callable[..., Any], steps: int | None = None, checkpoint_path: str | None = None,
                 name: str | None = None) -> dict[str, float]:
        """Evaluates a checkpoint (default: the newest) on ``input_fn``'s batches.

        Returns:
            ``{"loss": ..., <eval_metric_ops means>..., "global_step": ...}``.
        """
        from toolkit.training import Validator

        _positive("steps", steps)
        path = self._checkpoint(checkpoint_path, "evaluate()")
        mode_model = self._mode_model(ModeKeys.EVAL, element_spec(input_fn))
        step = self._restore(mode_model, path)
        validator = Validator(mode_model.model, lambda context: call_input_fn(input_fn, context),
                              forward=make_forward(with_labels=mode_model.with_labels),
                              metrics=dict(zip(mode_model.spec.eval_metric_ops,
                                               metric_fns(mode_model.spec.eval_metric_ops))),
                              steps=steps, prefix="")
        metrics = {**validator(), "global_step": step}
        self._write_eval_summary(metrics, name)
        logger.info("evaluation at step %d: %s", step,
                    " ".join(f"{k}={v:.4f}" for k, v in metrics.items() if k != "global_step"))
        return metrics

    def _write_eval_summary(self, metrics: Mapping[str, float], name: str | None) -> None:
        writer = tf.summary.create_file_writer(os.path.join(self.model_dir, f"eval_{name}" if name else "eval"))
        with writer.as_default(step=int(metrics["global_step"])):
            for key, value in metrics.items():
                if key != "global_step":
                    tf.summary.scalar(key, value)
        writer.close()

    # ---- predict and export ---------------------------------------------------------
    def predict(self, input_fn: Callable[..., Any], predict_keys: list[str] | None = None,
                checkpoint_path: str | None = None, yield_single_examples: bool = True) -> Iterator[Any]:
        """Yields predictions (one example at a time by default) from a trained checkpoint."""
        path = self._checkpoint(checkpoint_path, "predict()")
        mode_model = self._mode_model(ModeKeys.PREDICT, element_spec(input_fn))
        self._restore(mode_model, path)
        run = tf.function(lambda features: mode_model(features))
        for batch in call_input_fn(input_fn):
            features = batch[0] if isinstance(batch, tuple) and len(batch) == 2 else batch
            predictions = tf.nest.map_structure(np.asarray, run(features))
            if isinstance(predictions, dict) and predict_keys is not None:
                predictions = _select(predictions, predict_keys)
            if not yield_single_examples:
                yield predictions
                continue
            size = len(tf.nest.flatten(predictions)[0])
            for i in range(size):
                yield tf.nest.map_structure(lambda value, i=i: value[i], predictions)

    def export_saved_model(self, export_dir_base: str | os.PathLike,
                           serving_input_receiver_fn: Callable[[], Any] | None = None,
                           checkpoint_path: str | None = None) -> str:
        """Exports the PREDICT model as a SavedModel in ``<export_dir_base>/<timestamp>``.

        Args:
            export_dir_base: parent directory of the timestamped exports.
            serving_input_receiver_fn: returns the serving features'
                ``tf.TensorSpec`` (or dict of them), batch dimension first;
                None reuses the features seen by the last train/evaluate/predict.
            checkpoint_path: default the newest checkpoint.

        Returns:
            The export directory.
        """
        path = self._checkpoint(checkpoint_path, "export_saved_model()")
        features_spec = serving_input_receiver_fn() if serving_input_receiver_fn else self._features_spec
        if features_spec is None:
            raise EstimatorError("serving_input_receiver_fn", "export_saved_model() does not know the serving "
                                 "features; pass serving_input_receiver_fn=lambda: tf.TensorSpec([None, 8, 8, 1]).")
        mode_model = self._mode_model(ModeKeys.PREDICT, (features_spec, None))
        self._restore(mode_model, path)
        export_dir = os.path.join(os.fspath(export_dir_base), str(int(time.time())))
        while os.path.exists(export_dir):
            export_dir = os.path.join(os.fspath(export_dir_base), str(int(export_dir.rsplit(os.sep, 1)[1]) + 1))
        mode_model.model.export(export_dir, format="tf_saved_model", verbose=False)
        logger.info("exported %s", export_dir)
        return export_dir


def _optimizer_factory(optimizer: Any) -> Callable[[], Any]:
    """Re-creates ``optimizer`` from its config later, under the strategy's scope.

    The config is read now: once a parameter-server chief connects to its
    cluster, variables made before (the optimizer's learning rate) are unreadable.
    """
    cls, config = type(optimizer), optimizer.get_config()
    return lambda: cls.from_config(config)


def _select(predictions: Mapping[str, Any], keys: list[str]) -> dict[str, Any]:
    missing = [k for k in keys if k not in predictions]
    if missing:
        raise SpecError("predict_keys", f"predict_keys {missing!r} are not among the predictions "
                        f"({', '.join(predictions)}). Pick from those.")
    return {k: predictions[k] for k in keys}
