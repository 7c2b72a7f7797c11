"""How big a job may be: every limit is checked at submit, naming the field that is over it.

A spec is untrusted input: ``workerCount: 100000`` would make the local
backend start 100,000 processes and the Kubernetes renderer write 100,000 pod
templates. These limits sit far above what one machine or a test cluster
runs; the file and YAML limits are :mod:`tf_config.limits`' (docs/security.md
lists them all).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tf_config.limits import MAX_TASKS
from toolkit.jobs.model._fields import FieldReader

__all__ = ["MAX_PARALLEL_TRIALS", "MAX_PARAMS", "MAX_PARAM_VALUES", "MAX_REPLICAS", "MAX_TRIALS", "check_limits"]

MAX_REPLICAS = MAX_TASKS  # workerCount, parameterServerCount (Vertex: replicaCount of a pool)
MAX_TRIALS = 1_000        # hyperparameters.maxTrials
MAX_PARALLEL_TRIALS = 64  # hyperparameters.maxParallelTrials
MAX_PARAMS = 100          # hyperparameters.params
MAX_PARAM_VALUES = 1_000  # categoricalValues / discreteValues of one parameter

_COUNT_FIELDS = {"worker": "trainingInput.workerCount",
                 "parameter_server": "trainingInput.parameterServerCount"}
_VERTEX_COUNT_FIELDS = {"worker": "workerPoolSpecs[1].replicaCount",
                        "parameter_server": "workerPoolSpecs[2].replicaCount"}


def check_limits(reader: FieldReader, kwargs: Mapping[str, Any], *, vertex: bool = False) -> None:
    """Adds an error to ``reader`` for every read value over its limit."""
    path = "trainingInput"
    for role, field in (_VERTEX_COUNT_FIELDS if vertex else _COUNT_FIELDS).items():
        replica = kwargs.get(role)
        if replica is not None and replica.count > MAX_REPLICAS:
            reader.error(field, replica.count, f"at most {MAX_REPLICAS:,} tasks",
                         "Run fewer, larger tasks; tfdist renders and starts every task.")
    study = kwargs.get("hyperparameters")
    if study is None:
        return
    where = f"{path}.hyperparameters"
    if study.max_trials > MAX_TRIALS:
        reader.error(f"{where}.maxTrials", study.max_trials, f"at most {MAX_TRIALS:,} trials",
                     "Split the search into several tuning jobs.")
    if study.max_parallel_trials > MAX_PARALLEL_TRIALS:
        reader.error(f"{where}.maxParallelTrials", study.max_parallel_trials,
                     f"at most {MAX_PARALLEL_TRIALS} trials at a time", "Run fewer trials at once.")
    if len(study.params) > MAX_PARAMS:
        reader.error(f"{where}.params", f"{len(study.params)} parameters", f"at most {MAX_PARAMS} parameters",
                     "Tune fewer parameters per study.")
    for i, param in enumerate(study.params):
        for key, values in (("categoricalValues", param.categorical_values),
                            ("discreteValues", param.discrete_values)):
            if len(values) > MAX_PARAM_VALUES:
                reader.error(f"{where}.params[{i}].{key}", f"{len(values)} values",
                             f"at most {MAX_PARAM_VALUES:,} values", "Search a coarser set.")
