"""A tuning spec as a Katib ``Experiment``: how ``trainingInput.hyperparameters`` runs on Kubernetes.

Katib is Kubeflow's tuner. Its Experiment names the study (objective, search
algorithm, parameters, early stopping, how metrics are collected) and a trial
template: here the TFJob that ``render_tfjob`` makes of the same spec, with each
parameter passed as ``--name=${trialParameters.name}`` after the job's args, as
on CMLE. What does not map is refused, naming the field, never dropped:

=================================  =============================================
CMLE / tfdist                      Katib
=================================  =============================================
goal, hyperparameterMetricTag      objective.type, objectiveMetricName
                                   (``val_x`` becomes ``validation/x``: Katib's
                                   TensorFlowEvent collector names a scalar by its
                                   run directory and tag)
measurementSelectionType           objective.metricStrategies (BEST: max/min by
                                   goal; LAST: latest)
algorithm                          TPE (the default, as tfdist's), random, grid
maxTrials, maxParallelTrials,      maxTrialCount, parallelTrialCount,
maxFailedTrials                    maxFailedTrialCount
params (DOUBLE, INTEGER,           parameters (double, int, discrete,
DISCRETE, CATEGORICAL; log scale)  categorical; distribution logUniform)
enableTrialEarlyStopping           earlyStopping: medianstop, start_step =
(MEDIAN pruner)                    minMeasurements, min_trials_required =
                                   startupTrials
jobDir                             each trial's ``--job-dir`` is Katib's TensorFlow
                                   event directory (``/var/log/katib/tfevent``, a
                                   volume of the trial's pod that its collector
                                   reads); the spec's jobDir is kept as the
                                   ``tfdist/job-dir`` annotation, with a warning
=================================  =============================================

Refused: UNIT_REVERSE_LOG_SCALE (Katib has no such distribution), a pruner
other than MEDIAN (Katib's early stopping is the median rule),
and ``resumePreviousJobId`` (Katib resumes an Experiment in place, not from another).

The manifest is checked against ``schemas/katib-experiment-v1beta1.json`` (built
from Katib's published API types; see ``tools/extract_katib_schema.py``) and its TFJob
against the TFJob CRD, the way ``kubectl apply`` would.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from toolkit.jobs.engines.kubernetes.tfjob import (
    KubernetesOptions,
    render_tfjob,
    schema_errors,
    to_yaml,
    validate_tfjob,
)
from toolkit.jobs.errors import JobSpecError, Problem, refuse_invalid
from toolkit.jobs.model.hyperparams import HyperparameterSpec, ParameterSpec
from toolkit.jobs.model.spec import JobSpec

__all__ = ["render_experiment", "validate_experiment", "experiment_yaml"]

_FIELD = "trainingInput.hyperparameters"
_ALGORITHMS = {"ALGORITHM_UNSPECIFIED": "tpe", "BAYESIAN_OPTIMIZATION": "tpe", "RANDOM_SEARCH": "random",
               "GRID_SEARCH": "grid"}
_TYPES = {"DOUBLE": "double", "INTEGER": "int", "DISCRETE": "discrete", "CATEGORICAL": "categorical"}
EVENT_DIR = "/var/log/katib/tfevent"  # Katib's default TensorFlowEvent directory


def _number(value: float | None, kind: str) -> str:
    return str(int(value)) if kind == "INTEGER" and value is not None else repr(value)


def _feasible(param: ParameterSpec, index: int) -> dict[str, Any]:
    if param.scale_type == "UNIT_REVERSE_LOG_SCALE":
        raise JobSpecError([Problem("error", f"{_FIELD}.params[{index}].scaleType",
                                    "is UNIT_REVERSE_LOG_SCALE, which Katib has no distribution for. Use "
                                    "UNIT_LOG_SCALE or UNIT_LINEAR_SCALE on kubernetes, or tune on the "
                                    "local or ray backend.")])
    if param.type in ("DISCRETE", "CATEGORICAL"):
        values = param.categorical_values or tuple(_number(v, "INTEGER" if float(v).is_integer() else "DOUBLE")
                                                   for v in param.discrete_values)
        return {"list": list(values)}
    low, high = param.bounds()
    space = {"min": _number(low, param.type), "max": _number(high, param.type)}
    if param.scale_type == "UNIT_LOG_SCALE":
        space["distribution"] = "logUniform"
    return space


def _objective(hp: HyperparameterSpec) -> dict[str, Any]:
    tag = hp.hyperparameter_metric_tag
    name = f"validation/{tag[4:]}" if tag.startswith("val_") else tag
    strategy = "latest" if hp.metric_value == "FINAL" else ("max" if hp.goal == "MAXIMIZE" else "min")
    return {"type": hp.goal.lower(), "objectiveMetricName": name,
            "metricStrategies": [{"name": name, "value": strategy}]}


def _early_stopping(hp: HyperparameterSpec) -> dict[str, Any]:
    stopping = hp.early_stopping
    if stopping.pruner != "MEDIAN":
        raise JobSpecError([Problem("error", f"{_FIELD}.earlyStopping.pruner",
                                    f"is {stopping.pruner}, but Katib stops trials by the median rule only "
                                    "(medianstop). Use MEDIAN on kubernetes, or tune on the local or ray backend.")])
    startup = hp.max_parallel_trials if stopping.startup_trials is None else stopping.startup_trials
    return {"algorithmName": "medianstop", "algorithmSettings": [
        {"name": "min_trials_required", "value": str(max(1, startup))},
        {"name": "start_step", "value": str(stopping.min_measurements)}]}


def _checks(hp: HyperparameterSpec) -> None:
    if hp.resume_previous_job_id:
        raise JobSpecError([Problem("error", f"{_FIELD}.resumePreviousJobId",
                                    f"received {hp.resume_previous_job_id!r}; Katib resumes an Experiment in place "
                                    "(resumePolicy), not from another study. Remove it on kubernetes.")])


def render_experiment(spec: JobSpec, *, options: KubernetesOptions | None = None
                      ) -> tuple[dict[str, Any], list[str]]:
    """The Katib Experiment for a tuning ``spec``, and warnings about what could not be mapped."""
    options = options if options is not None else KubernetesOptions()
    ti = spec.training_input
    hp = ti.hyperparameters
    if hp is None:
        raise JobSpecError([Problem("error", _FIELD, "is missing; only a tuning spec becomes a Katib Experiment.")])
    _checks(hp)
    flags = tuple(f"--{p.parameter_name}=${{trialParameters.{p.parameter_name}}}" for p in hp.params)
    trial_input = replace(ti, hyperparameters=None, job_dir=EVENT_DIR, args=(*ti.args, *flags))
    tfjob, _ = render_tfjob(replace(spec, training_input=trial_input), name="trial", options=options)
    warnings = [w for w in render_tfjob(replace(spec, training_input=replace(ti, hyperparameters=None)),
                                        name="trial", options=options)[1] if not w.startswith("jobDir")]
    annotations = dict(tfjob["metadata"].get("annotations") or {})
    if ti.job_dir:
        annotations["tfdist/job-dir"] = ti.job_dir
        warnings.append(f"jobDir {ti.job_dir!r} is kept as an annotation: on Katib each trial writes its "
                        f"summaries and checkpoints to {EVENT_DIR} in its pod, which Katib's TensorFlowEvent "
                        "collector reads. Copy what you need to keep from the trainer.")
    trial_spec = {k: v for k, v in tfjob.items() if k != "metadata"}  # Katib names and places each trial
    name = spec.required_job_id
    experiment: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment",
        "metadata": {"name": name, "namespace": options.namespace, "labels": tfjob["metadata"]["labels"],
                     "annotations": annotations},
        "spec": {
            "objective": _objective(hp), "algorithm": {"algorithmName": _ALGORITHMS[hp.algorithm]},
            "maxTrialCount": hp.max_trials, "parallelTrialCount": hp.max_parallel_trials,
            "maxFailedTrialCount": hp.max_failed_trials,
            "parameters": [{"name": p.parameter_name, "parameterType": _TYPES[p.type], "feasibleSpace": _feasible(p, i)}
                           for i, p in enumerate(hp.params)],
            "metricsCollectorSpec": {"collector": {"kind": "TensorFlowEvent"},
                                     "source": {"fileSystemPath": {"path": EVENT_DIR, "kind": "Directory"}}},
            "trialTemplate": {"primaryContainerName": "tensorflow", "trialSpec": trial_spec, "trialParameters": [
                {"name": p.parameter_name, "reference": p.parameter_name,
                 "description": f"{p.type} parameter {p.parameter_name}"} for p in hp.params]},
        },
    }
    if hp.enable_trial_early_stopping:
        experiment["spec"]["earlyStopping"] = _early_stopping(hp)
    return experiment, warnings


def validate_experiment(manifest: Any) -> list[str]:
    """Every reason Katib would reject ``manifest`` (its trial TFJob included); empty when it is valid."""
    errors = schema_errors(manifest, "katib-experiment-v1beta1.json", strict=False)
    if errors:
        return errors
    template = manifest["spec"]["trialTemplate"]
    tfjob = {**template["trialSpec"], "metadata": {"name": "trial"}}
    return [f"spec.trialTemplate.trialSpec: {e}" for e in validate_tfjob(tfjob)]


def experiment_yaml(spec: JobSpec, *, options: KubernetesOptions | None = None) -> tuple[str, list[str]]:
    """The validated Experiment as YAML, and mapping warnings (what ``--dry-run`` prints)."""
    manifest, warnings = render_experiment(spec, options=options)
    refuse_invalid("the rendered Katib Experiment does not validate against its schema", validate_experiment(manifest))
    return to_yaml(manifest), warnings
