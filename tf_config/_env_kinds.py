"""Where a task is, read from the environment its launcher gave it: Slurm, Kubernetes, Trainer v2, MPI.

Each reader returns a ``Placement`` (this task's rank, the host of every rank,
the variables it read) or None when the environment is not its kind. Readers
are tried in ``KINDS`` order; the first that recognises the environment wins.

Example:
    >>> env = {"SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "3", "SLURM_STEP_NODELIST": "h[1-3]",
    ...        "SLURM_STEP_TASKS_PER_NODE": "1(x3)", "SLURM_JOB_ID": "7"}
    >>> p = detect(env)
    >>> p.kind, p.rank, p.hosts
    ('slurm', 2, ('h1', 'h2', 'h3'))
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ._errors import Problem, TFConfigError
from ._hostlist import expand_counts, expand_hostlist

__all__ = ["KINDS", "Placement", "detect"]

ENV_HOSTS = "TFDIST_HOSTS"          # a host list for engines that give none (MPI), or to override one
ENV_NUM_TASKS = "TFDIST_NUM_TASKS"  # the task count where the engine does not say it (Indexed Job)
ENV_SUBDOMAIN = "TFDIST_SUBDOMAIN"  # the headless Service of an Indexed Job's pods
K8S_PORT = 2222                     # TFJob's port: every pod has its own address


@dataclass(frozen=True)
class Placement:
    """Where this task is: its rank among ``len(hosts)`` tasks and every rank's host."""

    kind: str
    rank: int
    hosts: tuple[str, ...]
    read: tuple[tuple[str, str], ...]
    port_base: int
    notes: tuple[str, ...] = field(default=())


def _error(variable: str, message: str) -> TFConfigError:
    return TFConfigError([Problem("error", variable, message)])


class _Env:
    """The environment, remembering every variable read (for ``explain``)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.read: dict[str, str] = {}

    def has(self, name: str) -> bool:
        return name in self.environ

    def get(self, name: str, *, why: str = "") -> str:
        if name not in self.environ:
            raise _error(name, f"is not set{why}; expected it in this task's environment.")
        self.read[name] = self.environ[name]
        return self.environ[name]

    def get_int(self, name: str, *, minimum: int = 0, why: str = "") -> int:
        text = self.get(name, why=why)
        if not text.strip().isdigit() or int(text) < minimum:
            raise _error(name, f"is {text!r}; expected an integer >= {minimum}.")
        return int(text)

    def placement(self, kind: str, rank: int, hosts: list[str], port_base: int, *, size_var: str,
                  rank_var: str) -> Placement:
        if len(hosts) == 0:
            raise _error(size_var, "is 0; expected at least one task.")
        if rank >= len(hosts):
            raise _error(rank_var, f"is {rank} but there are {len(hosts)} tasks ({size_var}); "
                         f"expected 0..{len(hosts) - 1}. The environment is inconsistent.")
        return Placement(kind, rank, tuple(hosts), tuple(self.read.items()), port_base)


def _per_slot(entries: list[str], variable: str) -> list[str]:
    """``h1:2,h2`` -> ``[h1, h1, h2]``: mpirun's host:slots, ranks filled host by host."""
    hosts = []
    for entry in entries:
        name, _, slots = entry.partition(":")
        if slots and not slots.isdigit():
            raise _error(variable, f"has {entry!r}; expected HOST or HOST:SLOTS, e.g. 'node1:2'.")
        hosts += [name] * int(slots or 1)
    return hosts


def _explicit_hosts(env: _Env, size: int, size_var: str) -> list[str]:
    hosts = _per_slot(expand_hostlist(env.get(ENV_HOSTS), field=ENV_HOSTS), ENV_HOSTS)
    if len(hosts) != size:
        raise _error(ENV_HOSTS, f"lists {len(hosts)} task slots but {size_var} is {size}; expected one slot "
                     "per task. Give every host (with :SLOTS for several tasks on one host).")
    return hosts


def _slurm(environ: Mapping[str, str]) -> Placement | None:
    env = _Env(environ)
    if not (env.has("SLURM_STEP_NODELIST") or env.has("SLURM_STEP_ID")):
        if env.has("SLURM_JOB_ID") and env.has("SLURM_PROCID") and not env.has(ENV_HOSTS):
            raise _error("SLURM_STEP_NODELIST", "is not set, but SLURM_JOB_ID is: this is Slurm's batch script, "
                         "not a task started by srun. Start the command with srun.")
        return None
    rank = env.get_int("SLURM_PROCID")
    size_var = "SLURM_STEP_NUM_TASKS" if env.has("SLURM_STEP_NUM_TASKS") else "SLURM_NTASKS"
    size = env.get_int(size_var, minimum=1)
    nodes = expand_hostlist(env.get("SLURM_STEP_NODELIST"))
    counts = expand_counts(env.get("SLURM_STEP_TASKS_PER_NODE"))
    if len(counts) != len(nodes):
        raise _error("SLURM_STEP_TASKS_PER_NODE", f"is {environ['SLURM_STEP_TASKS_PER_NODE']!r}, counts for "
                     f"{len(counts)} nodes, but SLURM_STEP_NODELIST {environ['SLURM_STEP_NODELIST']!r} names "
                     f"{len(nodes)}; expected one count per node. The environment is inconsistent.")
    if sum(counts) != size:
        raise _error("SLURM_STEP_TASKS_PER_NODE", f"is {environ['SLURM_STEP_TASKS_PER_NODE']!r}, "
                     f"{sum(counts)} tasks, but {size_var} is {size}; expected the counts to add up to the "
                     "task count. The environment is inconsistent.")
    method = environ.get("SLURM_DISTRIBUTION", "block").split(":")[0].split(",")[0]
    if env.has("SLURM_DISTRIBUTION"):
        env.get("SLURM_DISTRIBUTION")
    if method not in ("block", "cyclic"):
        raise _error("SLURM_DISTRIBUTION", f"is {environ['SLURM_DISTRIBUTION']!r}; expected block or cyclic "
                     "task distribution (srun -m block). Other distributions do not say which node a rank is on.")
    if method == "block":
        hosts = [node for node, n in zip(nodes, counts, strict=True) for _ in range(n)]
    else:
        left, hosts = list(counts), []
        while len(hosts) < size:
            for i, node in enumerate(nodes):
                if left[i]:
                    hosts.append(node)
                    left[i] -= 1
    job = env.get_int("SLURM_JOB_ID") if env.has("SLURM_JOB_ID") else 0
    # a rank out of range is refused by env.placement, with the same message as the other engines'
    if rank < len(hosts) and env.has("SLURMD_NODENAME") and env.get("SLURMD_NODENAME") != hosts[rank]:
        raise _error("SLURMD_NODENAME", f"is {environ['SLURMD_NODENAME']!r}, but SLURM_PROCID {rank} belongs on "
                     f"{hosts[rank]!r} by SLURM_STEP_NODELIST and SLURM_STEP_TASKS_PER_NODE ({method} "
                     "distribution). The environment is inconsistent.")
    # one port block per job, so that two jobs sharing a node do not collide: 32 ports per node and job
    return env.placement("slurm", rank, hosts, 15000 + 32 * (job % 1000), size_var=size_var,
                         rank_var="SLURM_PROCID")


def _trainer(environ: Mapping[str, str]) -> Placement | None:
    env = _Env(environ)
    if not env.has("PET_NNODES"):
        return None
    size = env.get_int("PET_NNODES", minimum=1)
    rank = env.get_int("PET_NODE_RANK")
    if env.has("PET_NPROC_PER_NODE") and env.get("PET_NPROC_PER_NODE") != "1":
        raise _error("PET_NPROC_PER_NODE", f"is {environ['PET_NPROC_PER_NODE']!r}; expected 1: each TensorFlow "
                     "task is its own pod. Set numProcPerNode: 1 in the runtime's mlPolicy.")
    master = env.get("PET_MASTER_ADDR")
    name, dot, domain = master.partition(".")
    if not name.endswith("-0"):
        raise _error("PET_MASTER_ADDR", f"is {master!r}; expected the first pod's DNS name, "
                     "'<trainjob>-node-0-0.<trainjob>', from which every pod's name follows.")
    hosts = [f"{name[:-2]}-{i}{dot}{domain}" for i in range(size)]
    return env.placement("trainer", rank, hosts, K8S_PORT, size_var="PET_NNODES", rank_var="PET_NODE_RANK")


def _kubernetes(environ: Mapping[str, str]) -> Placement | None:
    env = _Env(environ)
    if not env.has("JOB_COMPLETION_INDEX"):
        return None
    rank = env.get_int("JOB_COMPLETION_INDEX")
    size = env.get_int(ENV_NUM_TASKS, minimum=1, why=" (an Indexed Job does not tell its pods its completions)")
    if env.has(ENV_HOSTS):
        hosts = _explicit_hosts(env, size, ENV_NUM_TASKS)
    else:
        hostname = env.get("HOSTNAME", why=" (an Indexed Job's pod is named '<job>-<index>')")
        if not hostname.endswith(f"-{rank}"):
            raise _error("HOSTNAME", f"is {hostname!r} but JOB_COMPLETION_INDEX is {rank}; expected "
                         f"'<job>-{rank}'. Set {ENV_HOSTS} to the pods' DNS names instead.")
        suffix = f".{env.get(ENV_SUBDOMAIN)}" if env.has(ENV_SUBDOMAIN) else ""
        prefix = hostname[:-len(str(rank))]
        hosts = [f"{prefix}{i}{suffix}" for i in range(size)]
    return env.placement("kubernetes", rank, hosts, K8S_PORT, size_var=ENV_NUM_TASKS,
                         rank_var="JOB_COMPLETION_INDEX")


_MPI_RANKS = (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
              ("PMIX_RANK", ENV_NUM_TASKS))


def _mpi(environ: Mapping[str, str]) -> Placement | None:
    env = _Env(environ)
    pair = next((p for p in _MPI_RANKS if env.has(p[0])), None)
    if pair is None:
        return None
    rank_var, size_var = pair
    rank = env.get_int(rank_var)
    size = env.get_int(size_var, minimum=1)
    if not env.has(ENV_HOSTS):
        raise _error(ENV_HOSTS, f"is not set; {rank_var} gives this task's rank but MPI does not tell a task "
                     "where the others run. Pass the hosts in rank order, e.g. "
                     f"{ENV_HOSTS}=node1:2,node2:2 (mpirun -x {ENV_HOSTS}=...).")
    hosts = _explicit_hosts(env, size, size_var)
    return env.placement("mpi", rank, hosts, K8S_PORT, size_var=size_var, rank_var=rank_var)


KINDS: dict[str, Callable[[Mapping[str, str]], Placement | None]] = {
    "slurm": _slurm, "trainer": _trainer, "kubernetes": _kubernetes, "mpi": _mpi,
}
_SIGNS = {"slurm": "SLURM_STEP_NODELIST", "trainer": "PET_NNODES", "kubernetes": "JOB_COMPLETION_INDEX",
          "mpi": "OMPI_COMM_WORLD_RANK, PMI_RANK or PMIX_RANK"}


def detect(environ: Mapping[str, str], *, kind: str | None = None) -> Placement:
    """The placement read by the first reader (or the ``kind`` named) that knows this environment."""
    if kind is not None and kind not in KINDS:
        raise _error("kind", f"is {kind!r}; expected one of {', '.join(KINDS)}.")
    for name, reader in KINDS.items():
        if kind not in (None, name):
            continue
        placement = reader(environ)
        if placement is not None:
            return placement
    wanted = [kind] if kind else list(KINDS)
    signs = "; ".join(f"{k}: {_SIGNS[k]}" for k in wanted)
    raise _error(_SIGNS[wanted[0]].split(",")[0], f"is not set, so this environment is not one a launcher "
                 f"prepared (looked for {signs}). Start the task with srun, mpirun, an Indexed Job or a Trainer "
                 "v2 runtime, or write TF_CONFIG yourself.")
