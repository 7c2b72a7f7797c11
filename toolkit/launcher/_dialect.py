"""How a launch names its chief and what else its TF_CONFIGs carry: the launcher's dialects.

TF2 strategies call the coordinating task ``chief``; Cloud ML Engine (and
scripts written for it) call it ``master`` and expect ``"environment": "cloud"``
and the job's ``trainingInput`` as ``"job"``. Kubeflow's TFJob operator
writes the TF2 task names with ``"environment": "cloud"``, its addresses being
the replicas' service names (``<job>-worker-0.<namespace>.svc:2222``); run
locally, each service name is this machine's loopback address, so the
``tfjob`` dialect's TF_CONFIG is the operator's with ``127.0.0.1:<port>`` in
place of each service name. A dialect renames the chief everywhere the
launcher shows it: in each TF_CONFIG, the task's name (``master-0``), its log
file (``logs/master-0.log``), its task directory and the launcher's own
messages.

Example:
    >>> DIALECTS["cmle"].chief
    'master'
    >>> dict(DIALECTS["tfjob"].extras)
    {'environment': 'cloud'}
    >>> cmle_dialect(job={"scaleTier": "BASIC"}, trial=3).task_extras
    {'trial': '3'}
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tf_config import TFConfig

__all__ = ["DIALECTS", "Dialect", "cmle_dialect"]


@dataclass(frozen=True)
class Dialect:
    """A TF_CONFIG dialect for the launcher's tasks.

    Attributes:
        name: ``tf``, ``cmle`` or ``tfjob`` (for messages).
        chief: the chief's task type (``chief`` or ``master``).
        extras: top-level TF_CONFIG keys every task gets, e.g.
            ``{"environment": "cloud", "job": {...}}``.
        task_extras: keys added to every task's ``task`` entry, e.g.
            ``{"trial": "3"}`` in a tuning trial (as CMLE sets it).
    """

    name: str
    chief: str = "chief"
    extras: Mapping[str, object] = field(default_factory=dict, hash=False)  # hashed by name and chief only
    task_extras: Mapping[str, str] = field(default_factory=dict, hash=False)

    def task_name(self, name: str) -> str:
        """A TF2 task name (``chief-0``) as this dialect names it (``master-0``)."""
        kind, _, index = name.rpartition("-")
        return f"{self.chief}-{index}" if kind == "chief" else name

    def apply(self, cfg: TFConfig) -> TFConfig:
        """``cfg`` (a TF2 TF_CONFIG from ``tf_config.generate``) in this dialect."""
        if self.chief == "chief" and not self.extras and not self.task_extras:
            return cfg
        from tf_config import TFConfig

        doc = cfg.to_dict()
        doc["cluster"] = {(self.chief if job == "chief" else job): addrs for job, addrs in doc["cluster"].items()}
        task = dict(doc["task"])
        if task["type"] == "chief":
            task["type"] = self.chief
        doc["task"] = {**task, **self.task_extras}
        return TFConfig.from_dict({**doc, **self.extras})


DIALECTS: dict[str, Dialect] = {
    "tf": Dialect("tf"),
    "cmle": Dialect("cmle", chief="master", extras={"environment": "cloud"}),
    "tfjob": Dialect("tfjob", extras={"environment": "cloud"}),
}


def cmle_dialect(*, job: Mapping[str, object] | None = None, trial: int | str | None = None,
                 use_chief: bool = False) -> Dialect:
    """CMLE's dialect for one job: its ``trainingInput`` as ``job``, the tuning ``trial``, and
    ``chief`` instead of ``master`` when the job sets ``useChiefInTfConfig``."""
    extras: dict[str, object] = {"environment": "cloud"}
    if job is not None:
        extras["job"] = dict(job)
    return Dialect("cmle", chief="chief" if use_chief else "master", extras=extras,
                   task_extras={} if trial is None else {"trial": str(trial)})

