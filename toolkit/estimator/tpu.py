"""``tf.estimator.tpu`` on CPU: ``TPUEstimator(use_tpu=False)`` as TF ran it, and a clear refusal of TPU-only options.

Code written for TPUs (BERT's ``run_classifier.py``, ...) builds a
``TPUEstimator`` with ``use_tpu=False`` to run on CPU/GPU. TF then trained,
evaluated and predicted like an ``Estimator``: ``params["batch_size"]`` is the
batch size of the mode (``train_batch_size``, ``eval_batch_size``,
``predict_batch_size``) for input_fn and model_fn, and a ``TPUEstimatorSpec``
becomes an ``EstimatorSpec`` (``eval_metrics=(metric_fn, tensors)`` called for
the metrics, ``scaffold_fn`` for the scaffold, ``host_call`` run every step).
This host has no TPU: ``use_tpu=True``, TPU embeddings and a TPU cluster are
refused by name.

Example:
    >>> config = RunConfig(model_dir="runs/bert", tpu_config=TPUConfig(iterations_per_loop=100))  # doctest: +SKIP
    >>> est = TPUEstimator(model_fn, config=config, use_tpu=False, train_batch_size=32)  # doctest: +SKIP
"""
from __future__ import annotations

import collections
import copy
import enum
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from toolkit.estimator._construct import EstimatorError
from toolkit.estimator.estimator import Estimator
from toolkit.estimator.run_config import RunConfig as _RunConfig
from toolkit.estimator.spec import EstimatorSpec, ModeKeys

__all__ = ["InputPipelineConfig", "RunConfig", "TPUConfig", "TPUEstimator", "TPUEstimatorSpec", "experimental"]

v1 = tf.compat.v1
_RESERVED_PARAMS_KEYS = ("batch_size", "use_tpu", "context")


class TPUError(EstimatorError):
    """A TPU-only option on this TPU-less host, or a bad TPUEstimator argument; ``.field`` names it."""


def _no_tpu(field: str, value: Any, fix: str) -> TPUError:
    return TPUError(f"`{field}` is {value!r}, which needs a TPU; this host has none (TPUEstimator runs here as TF "
                    f"ran it with use_tpu=False). {fix}", field=field)


class InputPipelineConfig(enum.IntEnum):
    """How a TPU host fed its cores (kept for TF's signature; CPU runs ignore it)."""

    PER_SHARD_V1 = 1
    PER_HOST_V1 = 2
    PER_HOST_V2 = 3
    BROADCAST = 4
    SLICED = 5


class TPUConfig(collections.namedtuple("TPUConfig", [
        "iterations_per_loop", "num_shards", "num_cores_per_replica", "per_host_input_for_training",
        "tpu_job_name", "initial_infeed_sleep_secs", "input_partition_dims", "eval_training_input_configuration",
        "experimental_host_call_every_n_steps", "experimental_allow_per_host_v2_parallel_get_next",
        "experimental_feed_hook"])):
    """``tf.estimator.tpu.TPUConfig``: TPU loop settings, accepted and checked; a CPU run trains step by step."""

    def __new__(cls, iterations_per_loop: int = 2, num_shards: int | None = None,
                num_cores_per_replica: int | None = None, per_host_input_for_training: Any = True,
                tpu_job_name: str | None = None, initial_infeed_sleep_secs: int | None = None,
                input_partition_dims: Any = None,
                eval_training_input_configuration: Any = InputPipelineConfig.PER_HOST_V1,
                experimental_host_call_every_n_steps: int = 1,
                experimental_allow_per_host_v2_parallel_get_next: bool = False,
                experimental_feed_hook: Any = None) -> TPUConfig:
        for field, value in (("iterations_per_loop", iterations_per_loop), ("num_shards", num_shards),
                             ("experimental_host_call_every_n_steps", experimental_host_call_every_n_steps)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise TPUError(f"TPUConfig `{field}` is {value!r}; expected a positive integer.", field=field)
        return super().__new__(cls, iterations_per_loop, num_shards, num_cores_per_replica,
                               per_host_input_for_training, tpu_job_name, initial_infeed_sleep_secs,
                               input_partition_dims, eval_training_input_configuration,
                               experimental_host_call_every_n_steps,
                               experimental_allow_per_host_v2_parallel_get_next, experimental_feed_hook)


class RunConfig(_RunConfig):
    """``tf.estimator.tpu.RunConfig``: a ``RunConfig`` with a ``tpu_config``; ``master``/``cluster`` name no TPU here.

    Args:
        tpu_config: a ``TPUConfig`` (None: ``TPUConfig()``).
        evaluation_master, master: TPU session targets; refused unless empty (no TPU here).
        cluster: a ``TPUClusterResolver``; refused (no TPU here).
        **kwargs: ``RunConfig``'s arguments.
    """

    def __init__(self, tpu_config: TPUConfig | None = None, evaluation_master: str | None = None,
                 master: str | None = None, cluster: Any = None, **kwargs: Any) -> None:
        for field, value in (("master", master), ("evaluation_master", evaluation_master)):
            if value:
                raise _no_tpu(field, value, "Leave it None (or '') and pass use_tpu=False to TPUEstimator.")
        if cluster is not None:
            raise _no_tpu("cluster", cluster, "Leave cluster=None; TF_CONFIG describes a CPU cluster.")
        if tpu_config is not None and not isinstance(tpu_config, TPUConfig):
            raise TPUError(f"tpu.RunConfig `tpu_config` is {type(tpu_config).__name__}; expected a "
                           "tpu.TPUConfig(...).", field="tpu_config")
        object.__setattr__(self, "_tpu_config", tpu_config or TPUConfig())
        super().__init__(**kwargs)

    @property
    def tpu_config(self) -> TPUConfig:
        tpu_config: TPUConfig = self.__dict__["_tpu_config"]
        return tpu_config

    @property
    def cluster(self) -> Any:
        return None

    def replace(self, **changes: Any) -> RunConfig:
        tpu_config = changes.pop("tpu_config", self.tpu_config)
        copied = super().replace(**changes)
        object.__setattr__(copied, "_tpu_config", tpu_config)
        return copied  # type: ignore[return-value]


class TPUEstimatorSpec(collections.namedtuple("TPUEstimatorSpec", [
        "mode", "predictions", "loss", "train_op", "eval_metrics", "export_outputs", "scaffold_fn", "host_call",
        "training_hooks", "evaluation_hooks", "prediction_hooks"])):
    """What a TPUEstimator model_fn returns; on CPU it becomes an ``EstimatorSpec`` (``as_estimator_spec``)."""

    def __new__(cls, mode: str, predictions: Any = None, loss: Any = None, train_op: Any = None,
                eval_metrics: Any = None, export_outputs: Any = None, scaffold_fn: Callable[[], Any] | None = None,
                host_call: Any = None, training_hooks: Any = None, evaluation_hooks: Any = None,
                prediction_hooks: Any = None) -> TPUEstimatorSpec:
        for field, value in (("eval_metrics", eval_metrics), ("host_call", host_call)):
            if value is not None and (not isinstance(value, (tuple, list)) or len(value) != 2
                                      or not callable(value[0])):
                raise TPUError(f"TPUEstimatorSpec `{field}` is {value!r:.80}; expected (fn, tensors): a function "
                               "and the list or dict of tensors it takes.", field=field)
        if scaffold_fn is not None and not callable(scaffold_fn):
            raise TPUError(f"TPUEstimatorSpec `scaffold_fn` is {scaffold_fn!r}; expected a function returning a "
                           "Scaffold.", field="scaffold_fn")
        return super().__new__(cls, mode, predictions, loss, train_op, eval_metrics, export_outputs, scaffold_fn,
                               host_call, training_hooks, evaluation_hooks, prediction_hooks)

    def as_estimator_spec(self) -> EstimatorSpec:
        """The equivalent ``EstimatorSpec`` for a CPU run, as TF made it."""
        metrics = _call_with(*self.eval_metrics) if self.eval_metrics else None
        hooks = list(self.training_hooks or ())
        if self.host_call is not None and self.mode == ModeKeys.TRAIN:
            hooks.append(_RunEveryStepHook(_call_with(*self.host_call)))
        return EstimatorSpec(mode=self.mode, predictions=self.predictions, loss=self.loss, train_op=self.train_op,
                             eval_metric_ops=metrics, export_outputs=self.export_outputs,
                             scaffold=self.scaffold_fn() if self.scaffold_fn else None, training_hooks=hooks,
                             evaluation_hooks=self.evaluation_hooks, prediction_hooks=self.prediction_hooks)


def _call_with(fn: Callable[..., Any], tensors: Any) -> Any:
    return fn(**tensors) if isinstance(tensors, Mapping) else fn(*tensors)


class _RunEveryStepHook(tf.compat.v1.train.SessionRunHook):
    """Runs the host_call's ops (usually summaries) with every training step, as TF's CPU path did."""

    def __init__(self, fetches: Any) -> None:
        self._fetches = [f for f in tf.nest.flatten(fetches) if f is not None]

    def before_run(self, run_context: Any) -> Any:
        return v1.train.SessionRunArgs(self._fetches)


class TPUEstimator(Estimator):
    """``tf.estimator.tpu.TPUEstimator`` on CPU (``use_tpu=False``); see the module docstring.

    Args:
        model_fn: returns a ``TPUEstimatorSpec`` or an ``EstimatorSpec``.
        config: a ``tpu.RunConfig``.
        params: a dict; ``batch_size`` and ``use_tpu`` are set by TPUEstimator (reserved).
        use_tpu: must be False here (no TPU).
        train_batch_size, eval_batch_size, predict_batch_size: ``params["batch_size"]`` per mode.
        batch_axis, eval_on_tpu, export_to_tpu, export_to_cpu, export_saved_model_api_version:
            accepted for TF's signature (CPU runs and exports do not use them).
        warm_start_from: as ``Estimator``.
        embedding_config_spec: TPU embeddings; must be None here.
    """

    def __init__(self, model_fn: Callable[..., Any] | None = None, model_dir: Any = None,
                 config: RunConfig | None = None, params: Mapping[str, Any] | None = None, use_tpu: bool = True,
                 train_batch_size: int | None = None, eval_batch_size: int | None = None,
                 predict_batch_size: int | None = None, batch_axis: Any = None, eval_on_tpu: bool = True,
                 export_to_tpu: bool = True, export_to_cpu: bool = True, warm_start_from: Any = None,
                 embedding_config_spec: Any = None, export_saved_model_api_version: Any = None) -> None:
        if use_tpu:
            raise _no_tpu("use_tpu", use_tpu, "Pass use_tpu=False to train, evaluate and predict on CPU/GPU.")
        if embedding_config_spec is not None:
            raise _no_tpu("embedding_config_spec", embedding_config_spec,
                          "Leave it None and look the embeddings up in model_fn.")
        if config is None or not isinstance(config, RunConfig):
            raise TPUError(f"`config` must be provided with type `tpu_config.RunConfig`: got {config!r:.80}. Pass "
                           "toolkit.estimator.tpu.RunConfig(...).", field="config")
        reserved = sorted(set(params or {}) & set(_RESERVED_PARAMS_KEYS))
        if reserved:
            raise TPUError(f"{list(_RESERVED_PARAMS_KEYS)} are reserved keys but existed in params {params}: "
                           f"TPUEstimator sets {reserved} itself. Rename them.", field="params")
        for field, value in (("train_batch_size", train_batch_size), ("eval_batch_size", eval_batch_size),
                             ("predict_batch_size", predict_batch_size)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise TPUError(f"TPUEstimator `{field}` is {value!r}; expected a positive integer.", field=field)
        super().__init__(model_fn=model_fn, model_dir=model_dir, config=config, params=params,  # type: ignore[arg-type]
                         warm_start_from=warm_start_from)
        self._batch_sizes = {ModeKeys.TRAIN: train_batch_size, ModeKeys.EVAL: eval_batch_size,
                             ModeKeys.PREDICT: predict_batch_size}

    def _params_for(self, mode: str) -> dict[str, Any]:
        params = copy.deepcopy(self._params)
        params["use_tpu"] = False
        if self._batch_sizes.get(mode) is not None:
            params["batch_size"] = self._batch_sizes[mode]
        return params

    def _inputs(self, input_fn: Callable[..., Any], mode: str) -> tuple[Any, Any]:
        from toolkit.estimator._graph import call_input_fn

        return call_input_fn(input_fn, mode, params=self._params_for(mode), config=self._config)

    def _call_model_fn(self, features: Any, labels: Any, mode: str, config: Any) -> EstimatorSpec:
        from toolkit.estimator._construct import model_fn_args
        from toolkit.estimator.spec import SpecError

        names = set(model_fn_args(self._model_fn))
        if "labels" not in names and labels is not None:
            raise SpecError("model_fn does not take labels, but input_fn returns labels. Add `labels` to "
                            "model_fn's arguments, or return features alone from input_fn.", field="input_fn")
        offered = {"labels": labels, "mode": mode, "params": self._params_for(mode), "config": config}
        spec = self._model_fn(features=features, **{k: v for k, v in offered.items() if k in names})
        if isinstance(spec, TPUEstimatorSpec):
            spec = spec.as_estimator_spec()
        if not isinstance(spec, EstimatorSpec):
            raise SpecError(f"model_fn should return an EstimatorSpec (or a TPUEstimatorSpec): model_fn returned "
                            f"{type(spec).__name__} {spec!r:.80}.", field="model_fn")
        return spec


class _Experimental:
    """``tf.estimator.tpu.experimental``: TPU embedding configuration, refused here (no TPU)."""

    @staticmethod
    def EmbeddingConfigSpec(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 (TF's public name)
        raise _no_tpu("EmbeddingConfigSpec", "...", "Look the embeddings up in model_fn instead.")


experimental = _Experimental()
