"""TF_CONFIG derived from the environment a launcher started the task in, never hand-written.

``srun``, a Kubernetes Indexed Job or JobSet, a Kubeflow Trainer v2 runtime and
``mpirun`` start one process per task and tell each its rank and where the
others are (``tf_config._env_kinds``). A ``Layout`` turns ranks into roles and
a port rule gives each task its port; the result is this task's TF_CONFIG, the
same one on every engine.

Roles by rank: the chief (if the layout has one) is rank 0, then the workers,
then the ps, then the evaluator (last). Default layout per strategy:

=======================  =========================================
strategy                 layout
=======================  =========================================
parameter_server         chief + 1 ps + the rest workers
multi_worker_mirrored    every task a worker (worker 0 leads)
(none given)             as multi_worker_mirrored
=======================  =========================================

Port rule: a task's port is ``base + i`` where ``i`` counts the tasks before
it on the same host. ``base`` is ``port`` if given, else ``TFDIST_PORT``, else
the engine's: 2222 on Kubernetes, Trainer v2 and MPI (every pod or host its
own address), and ``15000 + 32 * (SLURM_JOB_ID % 1000)`` under Slurm, so that
two jobs sharing a node use different ports.

Example:
    >>> env = {"SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NODELIST": "h[1-3]",
    ...        "SLURM_STEP_TASKS_PER_NODE": "2,1(x2)", "SLURM_JOB_ID": "5"}
    >>> cfg = from_env(env, layout=Layout(ps=1, chief=True))
    >>> cfg.tf_config.task.type, cfg.tf_config.cluster["ps"], cfg.tf_config.cluster["chief"]
    ('ps', ('h3:15160',), ('h1:15160',))
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ._env_kinds import Placement, detect
from ._errors import Problem, TFConfigError
from ._model import TFConfig

__all__ = ["ENV_PORT", "EnvTFConfig", "Layout", "from_env"]

ENV_PORT = "TFDIST_PORT"
_DEFAULTS = {"parameter_server": (1, True, False), "multi_worker_mirrored": (0, False, False)}


def _error(field: str, message: str) -> TFConfigError:
    return TFConfigError([Problem("error", field, message)])


@dataclass(frozen=True)
class Layout:
    """How many ps, whether there is a chief and an evaluator; every other task is a worker."""

    ps: int = 0
    chief: bool = False
    evaluator: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.ps, int) or isinstance(self.ps, bool) or self.ps < 0:
            raise _error("layout.ps", f"is {self.ps!r}; expected an integer >= 0.")
        for name in ("chief", "evaluator"):
            if not isinstance(getattr(self, name), bool):
                raise _error(f"layout.{name}", f"is {getattr(self, name)!r}; expected True or False.")

    @classmethod
    def for_strategy(cls, strategy: str | None) -> Layout:
        """The documented default layout of ``strategy`` (see the module's table)."""
        if strategy is None:
            strategy = "multi_worker_mirrored"
        if strategy not in _DEFAULTS:
            raise _error("strategy", f"is {strategy!r}; expected one of {', '.join(_DEFAULTS)} "
                         "(one-process strategies need no TF_CONFIG).")
        ps, chief, evaluator = _DEFAULTS[strategy]
        return cls(ps=ps, chief=chief, evaluator=evaluator)

    @classmethod
    def parse(cls, text: str) -> Layout:
        """``"ps=1,chief=1,evaluator=0"`` or a strategy name (``parameter_server``)."""
        if "=" not in text:
            return cls.for_strategy(text.strip())
        values: dict[str, int] = {}
        for part in text.split(","):
            key, _, value = part.partition("=")
            key = key.strip()
            if key not in ("ps", "chief", "evaluator") or not value.strip().isdigit():
                raise _error("layout", f"is {text!r}; expected KEY=N pairs with keys ps, chief and evaluator, "
                             "e.g. 'ps=1,chief=1', or a strategy name.")
            values[key] = int(value)
        for key in ("chief", "evaluator"):
            if values.get(key, 0) > 1:
                raise _error(f"layout.{key}", f"is {values[key]}; expected 0 or 1.")
        return cls(ps=values.get("ps", 0), chief=bool(values.get("chief", 0)),
                   evaluator=bool(values.get("evaluator", 0)))

    def roles(self, size: int, *, size_field: str = "size") -> list[tuple[str, int]]:
        """The role of each rank: chief, workers, ps, evaluator."""
        fixed = int(self.chief) + self.ps + int(self.evaluator)
        workers = size - fixed
        least = 1 if self.ps or not self.chief else 0  # a chief alone is a one-task cluster; ps need a worker
        if workers < least:
            parts = ["a chief"] * self.chief + [f"{self.ps} ps"] * bool(self.ps) + ["an evaluator"] * self.evaluator
            parts += ["at least 1 worker"] * least
            raise _error(size_field, f"is {size} but the layout ({', '.join(parts)}) needs {fixed + least} "
                         "tasks. Start more tasks or change the layout.")
        return ([("chief", 0)] * self.chief + [("worker", i) for i in range(workers)]
                + [("ps", i) for i in range(self.ps)] + [("evaluator", 0)] * self.evaluator)

    def describe(self) -> str:
        return f"ps={self.ps},chief={int(self.chief)},evaluator={int(self.evaluator)}"


@dataclass(frozen=True)
class EnvTFConfig:
    """This task's TF_CONFIG and how it was derived (``explain()`` names every variable read)."""

    tf_config: TFConfig
    placement: Placement
    layout: Layout
    port_base: int
    port_source: str

    def to_json(self, indent: int | None = None) -> str:
        return self.tf_config.to_json(indent=indent)

    def explain(self) -> str:
        task = self.tf_config.task
        assert task is not None  # from_env always sets the task
        p = self.placement
        lines = [f"engine: {p.kind} (rank {p.rank} of {len(p.hosts)})", "variables read:"]
        lines += [f"  {name}={value}" for name, value in p.read]
        lines += [f"layout: {self.layout.describe()} -> rank {p.rank} is {task.type} {task.index}",
                  f"port: base {self.port_base} ({self.port_source}) + this task's slot on {p.hosts[p.rank]}"]
        lines += [f"{job}: {', '.join(addrs)}" for job, addrs in self.tf_config.cluster.items()]
        return "\n".join(lines)


def _port_base(placement: Placement, port: int | None, environ: Mapping[str, str]) -> tuple[int, str]:
    if port is not None:
        return port, "port argument"
    if ENV_PORT in environ:
        text = environ[ENV_PORT]
        if not text.isdigit() or not 1 <= int(text) <= 65535:
            raise _error(ENV_PORT, f"is {text!r}; expected a port number 1..65535.")
        return int(text), ENV_PORT
    return placement.port_base, f"the {placement.kind} default"


def from_env(environ: Mapping[str, str] | None = None, *, layout: Layout | str | None = None,
             strategy: str | None = None, port: int | None = None, kind: str | None = None) -> EnvTFConfig:
    """This task's TF_CONFIG from its launcher's environment (see the module's doc for the rules).

    Args:
        environ: the environment; default ``os.environ``.
        layout: a ``Layout`` or its text (``"ps=1,chief=1"``); default: the strategy's.
        strategy: picks the default layout (``parameter_server``, ``multi_worker_mirrored``).
        port: the port rule's base; default ``TFDIST_PORT``, else the engine's.
        kind: read only this engine's variables (``slurm``, ``trainer``, ``kubernetes``, ``mpi``).

    Raises:
        TFConfigError: an unknown or inconsistent environment, or a layout needing more
            tasks than were started; ``.field`` names the variable at fault.
    """
    environ = os.environ if environ is None else environ
    placement = detect(environ, kind=kind)
    if isinstance(layout, str):
        layout = Layout.parse(layout)
    layout = layout if layout is not None else Layout.for_strategy(strategy)
    size_field = next((name for name, _ in placement.read if name.endswith(("NTASKS", "NUM_TASKS", "SIZE",
                                                                            "NNODES"))), "size")
    roles = layout.roles(len(placement.hosts), size_field=size_field)
    base, source = _port_base(placement, port, environ)
    seen: dict[str, int] = {}
    addresses = []
    for host in placement.hosts:
        slot = seen.get(host, 0)
        seen[host] = slot + 1
        if base + slot > 65535:
            raise _error("port", f"is {base}; with {slot + 1} tasks on {host} the ports run past 65535. "
                         "Pick a lower base port.")
        addresses.append(f"{host}:{base + slot}")
    cluster: dict[str, list[str]] = {}
    for (job, _), address in zip(roles, addresses, strict=True):
        cluster.setdefault(job, []).append(address)
    job, index = roles[placement.rank]
    cfg = TFConfig.from_dict({"cluster": cluster, "task": {"type": job, "index": index}})
    return EnvTFConfig(cfg, placement, layout, base, source)
