"""The chaos benchmark's vocabulary: the job it disturbs, its scenarios, and what one run records."""
from __future__ import annotations

import dataclasses
import signal

__all__ = ["BASELINES", "DEFAULT_SCENARIOS", "PREEMPTION_SCENARIOS", "SCENARIOS", "JobShape", "RunResult", "Scenario",
           "job_of"]


@dataclasses.dataclass(frozen=True)
class JobShape:
    """How long the disturbed job trains."""

    epochs: int = 2
    steps_per_epoch: int = 80
    checkpoint_every: int = 20
    evaluator: bool = True
    grace_period: float = 15.0  # the launcher's: how long tasks may outlive the chief
    preload: bool = False  # fork the tasks from one TensorFlow import (tfdist launch --preload): faster restarts

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch


@dataclasses.dataclass(frozen=True)
class Scenario:
    """What to kill, when, and how."""

    target: str            # task name ("worker-0", "ps-0", "chief-0", "evaluator-0") or "launcher"
    moment: str            # "startup", "step" or "checkpoint"
    sig: int = signal.SIGKILL
    kills: int = 1         # kills in one run (each after the job recovered from the previous one)
    layout: str = "ps"     # "ps": chief, 2 workers, 1 ps; "mwms": 2 MultiWorkerMirrored workers (worker-0 the chief)
    job: str = "fit"       # the front door that trains: "fit" (toolkit.fit), "keras" (model.fit), "estimator"

    @property
    def undisturbed(self) -> bool:
        """A run that kills nothing: the one the job's accuracy is compared with."""
        return self.kills == 0

    @property
    def preemption(self) -> bool:
        """A SIGTERM mid-step: the job must checkpoint at the step reached (docs/preemption.md)."""
        return self.sig == signal.SIGTERM and self.moment == "step" and self.kills > 0


SCENARIOS: dict[str, Scenario | None] = {
    "none": None,  # the undisturbed run every accuracy is compared with
    "worker-kill-step": Scenario("worker-0", "step"),
    "worker-term-checkpoint": Scenario("worker-1", "checkpoint", signal.SIGTERM),
    "worker-kill-twice": Scenario("worker-0", "step", kills=2),
    "ps-kill-step": Scenario("ps-0", "step"),
    "ps-term-checkpoint": Scenario("ps-0", "checkpoint", signal.SIGTERM),
    "chief-kill-step": Scenario("chief-0", "step"),
    "chief-kill-checkpoint": Scenario("chief-0", "checkpoint"),
    "chief-term-startup": Scenario("chief-0", "startup", signal.SIGTERM),
    "evaluator-kill-step": Scenario("evaluator-0", "step"),
    "launcher-kill-step": Scenario("launcher", "step"),
    # preemptions: SIGTERM at a random step; the job checkpoints there and resumes from it
    "chief-preempt-step": Scenario("chief-0", "step", signal.SIGTERM),
    "worker-preempt-step": Scenario("worker-0", "step", signal.SIGTERM),
    "ps-preempt-step": Scenario("ps-0", "step", signal.SIGTERM),
    "evaluator-preempt-step": Scenario("evaluator-0", "step", signal.SIGTERM),
    "mwms-chief-preempt-step": Scenario("worker-0", "step", signal.SIGTERM, layout="mwms"),
    "mwms-worker-preempt-step": Scenario("worker-1", "step", signal.SIGTERM, layout="mwms"),
    # the other front doors: Keras' model.fit (enable_distributed_keras) and the graph-mode Estimator
    "keras-chief-preempt-step": Scenario("chief-0", "step", signal.SIGTERM, job="keras"),
    "keras-worker-preempt-step": Scenario("worker-0", "step", signal.SIGTERM, job="keras"),
    "keras-ps-preempt-step": Scenario("ps-0", "step", signal.SIGTERM, job="keras"),
    "keras-mwms-chief-preempt-step": Scenario("worker-0", "step", signal.SIGTERM, layout="mwms", job="keras"),
    "keras-mwms-worker-preempt-step": Scenario("worker-1", "step", signal.SIGTERM, layout="mwms", job="keras"),
    "estimator-chief-preempt-step": Scenario("chief-0", "step", signal.SIGTERM, job="estimator"),
    "estimator-worker-preempt-step": Scenario("worker-0", "step", signal.SIGTERM, job="estimator"),
    "estimator-ps-preempt-step": Scenario("ps-0", "step", signal.SIGTERM, job="estimator"),
}
#: the undisturbed run of each front door (``none`` is toolkit.fit's)
BASELINES = {"fit": "none", "keras": "none-keras", "estimator": "none-estimator"}
SCENARIOS.update({name: Scenario("", "", kills=0, job=job) for job, name in BASELINES.items() if job != "fit"})
PREEMPTION_SCENARIOS = [name for name, s in SCENARIOS.items() if s is not None and s.preemption]
DEFAULT_SCENARIOS = [name for name, s in SCENARIOS.items() if s is not None and not s.undisturbed]


def job_of(name: str) -> str:
    """The front door scenario ``name`` trains with."""
    scenario = SCENARIOS[name]
    return "fit" if scenario is None else scenario.job


@dataclasses.dataclass
class RunResult:
    scenario: str
    completed: bool = False
    hung: bool = False
    exact: bool = False
    readable: bool = False
    accuracy: float | None = None
    orphans: int = 0
    recover_seconds: list[float] = dataclasses.field(default_factory=list)
    kills: list[str] = dataclasses.field(default_factory=list)
    duration: float = 0.0
    note: str = ""
    # preemptions only
    steps_redone: int | None = None          # the step the job stopped at minus the step it resumed from
    signal_to_checkpoint: float | None = None  # seconds from the SIGTERM to the checkpoint it caused
    exit_codes: list[int] = dataclasses.field(default_factory=list)  # of the preempted tasks, as the launcher saw them
    counted: str = ""                          # "preemption" or "failure": how the launcher counted the restart
