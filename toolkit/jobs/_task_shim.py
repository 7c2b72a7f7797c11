"""Runs first in every task of a job: puts TF_CONFIG into CMLE's dialect, then becomes the trainer.

The launcher writes TF2 TF_CONFIGs (the primary task is ``chief``). A CMLE job
names it ``master`` unless ``useChiefInTfConfig`` is set, and adds
``"environment": "cloud"`` and the job's ``trainingInput`` as ``"job"``. This
shim makes that change and then ``exec``s the trainer, so the trainer's pid
is the task's pid and nothing else stays in between.

    python -m toolkit.jobs._task_shim -- python -m trainer.task --steps 10

Reads ``TFDIST_PRIMARY_TASK`` (``master`` or ``chief``), ``TFDIST_CMLE_JOB`` (the
trainingInput as JSON), ``TFDIST_TASK_CWD`` (where the trainer runs: gcloud
runs it in the package's parent) and, in a tuning trial, ``TFDIST_TRIAL`` (the
trial number, which becomes ``task.trial`` as on CMLE) from the environment,
and removes them.
"""
from __future__ import annotations

import json
import os
import sys

from tf_config import TFConfig

ENV_PRIMARY = "TFDIST_PRIMARY_TASK"
ENV_JOB = "TFDIST_CMLE_JOB"
ENV_CWD = "TFDIST_TASK_CWD"
ENV_TRIAL = "TFDIST_TRIAL"


def cmle_tf_config(cfg: TFConfig, *, primary: str, job: dict, trial: str | None = None) -> TFConfig:
    """``cfg`` with the chief renamed to ``primary``, CMLE's ``environment`` and ``job`` keys,
    and ``task.trial`` when the task belongs to a tuning trial."""
    doc = cfg.to_dict()
    if primary == "master":
        doc["cluster"] = {("master" if k == "chief" else k): v for k, v in doc.get("cluster", {}).items()}
        if doc.get("task", {}).get("type") == "chief":
            doc["task"] = {**doc["task"], "type": "master"}
    if trial is not None and "task" in doc:
        doc["task"] = {**doc["task"], "trial": trial}
    return TFConfig.from_dict({**doc, "environment": "cloud", "job": job})


def main(argv: list[str]) -> None:
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        sys.exit("usage: python -m toolkit.jobs._task_shim -- PROGRAM [ARGS...]")
    cmd = argv[argv.index("--") + 1:]
    primary = os.environ.pop(ENV_PRIMARY, "master")
    job = json.loads(os.environ.pop(ENV_JOB, "{}"))
    trial = os.environ.pop(ENV_TRIAL, None)
    cfg = cmle_tf_config(TFConfig.from_env(), primary=primary, job=job, trial=trial)
    os.environ["TF_CONFIG"] = cfg.to_json()
    os.chdir(os.environ.pop(ENV_CWD, os.getcwd()))
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
