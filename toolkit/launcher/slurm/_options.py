"""What a Slurm launch asks of the cluster: partition, time limit, nodes, per-task resources.

Validated here, before ``sbatch`` runs, so a typo is an error naming the field;
what only Slurm can judge (a partition that does not exist, a time limit over
the partition's) comes back as Slurm's own message with the field it came from.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from toolkit.launcher._spec import LaunchError

__all__ = ["DEFAULT_GRACE", "SIGNAL_MARGIN", "SlurmOptions"]

#: The tasks' preemption grace by default (docs/preemption.md's ``TFDIST_PREEMPTION_GRACE``).
DEFAULT_GRACE = 25
#: Seconds between the end of the grace and Slurm's time limit: the tasks' exit and the job's end.
SIGNAL_MARGIN = 5

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# Slurm's --time: MIN, MIN:SEC, H:M:S, D-H, D-H:M, D-H:M:S, or UNLIMITED
_TIME = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(:\d{1,2}(:\d{1,2})?)?|UNLIMITED|INFINITE)$")


def _count(name: str, value: object, *, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise LaunchError(f"`{name}` is {value!r}; expected an integer >= {minimum}.", field=name)


@dataclass(frozen=True)
class SlurmOptions:
    """How a job is asked of Slurm (``sbatch``'s flags in brackets).

    Attributes:
        partition: [``--partition``] None: the cluster's default.
        time_limit: [``--time``] Slurm's syntax (``30``, ``1:00:00``, ``1-12``);
            None: the launch's timeout rounded up, else the partition's limit.
        nodes: [``--nodes``] None: as many as Slurm picks for the tasks.
        cpus_per_task: [``--cpus-per-task``].
        mem_per_cpu_mib: [``--mem-per-cpu``] None: the partition's default.
        gpus_per_node: [``--gres=gpu:N``].
        shared_dirs: the user asserts that the job's directories are on storage
            mounted at the same path on every node (a multi-node job refuses a
            local disk otherwise).
        port: the base port of the tasks' TF_CONFIG (``tf_config.from_env``'s rule).
        preemption_grace: seconds a task has from the preemption signal to its exit
            (``TFDIST_PREEMPTION_GRACE`` in the tasks, docs/preemption.md); Slurm
            signals the tasks ``preemption_grace + SIGNAL_MARGIN`` seconds before the
            time limit [``--signal=TERM@N``]. 0: no early signal. The job is never
            requeued by Slurm [``--no-requeue``]: the launcher submits a preempted job
            again itself, on the ``max_preemptions`` budget.
        sbatch_args: more ``sbatch`` flags, passed as given; a ``--signal`` or
            ``--requeue`` here replaces the one above.
    """

    partition: str | None = None
    time_limit: str | None = None
    nodes: int | None = None
    cpus_per_task: int = 1
    mem_per_cpu_mib: int | None = None
    gpus_per_node: int = 0
    shared_dirs: bool = False
    port: int | None = None
    preemption_grace: int = DEFAULT_GRACE
    sbatch_args: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.partition is not None and not (isinstance(self.partition, str) and _NAME.match(self.partition)):
            raise LaunchError(f"`partition` is {self.partition!r}; expected a Slurm partition name "
                              "(letters, digits, '_', '.', '-').", field="partition")
        if self.time_limit is not None:
            object.__setattr__(self, "time_limit", str(self.time_limit))
            if not _TIME.match(str(self.time_limit)):
                raise LaunchError(f"`time_limit` is {self.time_limit!r}; expected Slurm's time syntax: "
                                  "MINUTES, H:MM:SS or D-HH:MM.", field="time_limit")
        if self.nodes is not None:
            _count("nodes", self.nodes, minimum=1)
        _count("cpus_per_task", self.cpus_per_task, minimum=1)
        if self.mem_per_cpu_mib is not None:
            _count("mem_per_cpu_mib", self.mem_per_cpu_mib, minimum=1)
        _count("gpus_per_node", self.gpus_per_node, minimum=0)
        if self.port is not None and not (isinstance(self.port, int) and 1 <= self.port <= 65535):
            raise LaunchError(f"`port` is {self.port!r}; expected a port number 1..65535.", field="port")
        _count("preemption_grace", self.preemption_grace, minimum=0)
        object.__setattr__(self, "sbatch_args", tuple(str(a) for a in self.sbatch_args))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "sbatch_args": list(self.sbatch_args)}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> SlurmOptions:
        return cls(**{**doc, "sbatch_args": tuple(doc.get("sbatch_args", ()))})

    def sbatch_flags(self, *, timeout: float | None) -> list[str]:
        """The resource flags, in the order ``sbatch --help`` lists them."""
        flags = [f"--cpus-per-task={self.cpus_per_task}"]
        if self.partition:
            flags.append(f"--partition={self.partition}")
        time_limit = self.time_limit or (str(int(-(-timeout // 60)) + 1) if timeout else None)
        if time_limit:
            flags.append(f"--time={time_limit}")
        if self.nodes:
            flags.append(f"--nodes={self.nodes}")
        if self.mem_per_cpu_mib:
            flags.append(f"--mem-per-cpu={self.mem_per_cpu_mib}")
        if self.gpus_per_node:
            flags.append(f"--gres=gpu:{self.gpus_per_node}")
        return flags + self.preemption_flags() + list(self.sbatch_args)

    def preemption_flags(self) -> list[str]:
        """``--signal=TERM@N`` (to the tasks, not the batch shell) and ``--no-requeue``, unless ``sbatch_args``
        has its own."""
        given = {a.split("=", 1)[0] for a in self.sbatch_args}
        flags = []
        if self.preemption_grace and "--signal" not in given:
            flags.append(f"--signal=TERM@{self.preemption_grace + SIGNAL_MARGIN}")
        if not given & {"--requeue", "--no-requeue"}:
            flags.append("--no-requeue")
        return flags
