"""A throwaway real Slurm cluster on this machine: 1 node, or N nodes in network namespaces.

slurmctld and slurmd run as root with ``auth/none`` (no munge), private state in
a temporary directory and free ports. With ``netns=True`` each slurmd runs in its
own network and UTS namespace (``nsenter --net`` plus ``unshare -u``; not ``ip
netns exec``, which remounts /sys and breaks slurmd's cgroup probe) with its own
address on a private bridge and its own hostname; the node names are added to
/etc/hosts (every namespace shares the filesystem) and removed at ``stop``.

Used by the Slurm cluster tests and ``benchmarks/bench_backends.py``.
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["SlurmCluster", "unavailable_reason"]

_BINARIES = ("slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo", "nsenter", "unshare",
             "ip")
_HOSTS = Path("/etc/hosts")


def unavailable_reason(*, netns: bool) -> str | None:
    """Why a cluster cannot start here (None: it can)."""
    if os.geteuid() != 0:
        return "Slurm's daemons need root (run the tests as root to include the Slurm cluster tests)"
    missing = [b for b in _BINARIES if shutil.which(b) is None]
    if missing:
        return f"{', '.join(missing)} not installed (`make slurm` installs Debian's slurm-wlm)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _run(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True, timeout=30)


class SlurmCluster:
    """Start with ``start()``, stop with ``stop()``; ``env`` holds ``SLURM_CONF`` for clients."""

    def __init__(self, nodes: int = 1, *, netns: bool = False, cpus: int = 8, memory_mib: int = 64000) -> None:
        self.netns, self.cpus, self.memory_mib = netns, cpus, memory_mib
        self.token = secrets.token_hex(2)
        self.root = Path(tempfile.mkdtemp(prefix="tfdist-slurm-"))
        self.names = [f"s{self.token}n{i + 1}" for i in range(nodes)] if netns else [socket.gethostname()]
        self.subnet = f"10.{100 + secrets.randbelow(100)}.{secrets.randbelow(250)}"
        self.bridge = f"brs{self.token}"
        self.procs: list[subprocess.Popen] = []
        self.conf = self.root / "slurm.conf"
        self.env = {"SLURM_CONF": str(self.conf)}
        self._hosts_line = ""

    @property
    def addresses(self) -> dict[str, str]:
        return {n: f"{self.subnet}.{11 + i}" for i, n in enumerate(self.names)} if self.netns else {}

    def _config(self) -> str:
        me = socket.gethostname()
        head = f"SlurmctldHost={me}({self.subnet}.1)" if self.netns else f"SlurmctldHost={me}"
        for sub in ("state", "spool", "log"):
            (self.root / sub).mkdir(exist_ok=True)
        lines = [
            "ClusterName=tfdist", head, f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
            "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/none", "CredType=cred/none",
            f"StateSaveLocation={self.root}/state", f"SlurmdSpoolDir={self.root}/spool/%n",
            f"SlurmctldPidFile={self.root}/slurmctld.pid", f"SlurmdPidFile={self.root}/slurmd-%n.pid",
            f"SlurmctldLogFile={self.root}/log/slurmctld.log", f"SlurmdLogFile={self.root}/log/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core", "MpiDefault=none", "SwitchType=switch/none",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/filetxt", f"JobCompLoc={self.root}/log/jobcomp.txt", "ReturnToService=2",
            "SchedulerType=sched/backfill", "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0",
            "SlurmdParameters=config_overrides", "SlurmctldTimeout=30", "SlurmdTimeout=30", "InactiveLimit=0",
            "KillWait=5", "MinJobAge=300", "SlurmctldDebug=info", "SlurmdDebug=info",
        ]
        if self.netns:
            lines += [f"NodeName={n} NodeAddr={a} CPUs={self.cpus} RealMemory={self.memory_mib} State=UNKNOWN"
                      for n, a in self.addresses.items()]
        else:
            lines.append(f"NodeName={me} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={self.memory_mib} "
                         "State=UNKNOWN")
        lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"

    def _network(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for i, (name, address) in enumerate(self.addresses.items()):
            ns, veth = f"{name}", f"v{self.token}{i}"
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _run("ip", "link", "set", veth, "master", self.bridge, "up")
            _run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        self._hosts_line = "".join(f"{a} {n}  # tfdist test cluster {self.token}\n" for n, a in self.addresses.items())
        with open(_HOSTS, "a") as fh:
            fh.write(self._hosts_line)

    def _daemon(self, argv: list[str], log: str) -> None:
        out = open(self.root / "log" / log, "wb")  # noqa: SIM115 - kept open for the daemon's life
        self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           start_new_session=True, env={**os.environ, **self.env}))

    def start(self, timeout: float = 30.0) -> SlurmCluster:
        try:
            self.conf.write_text(self._config())
            if self.netns:
                self._network()
            self._daemon(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld.out")
            for name in self.names:
                if self.netns:
                    self._daemon(["nsenter", f"--net=/run/netns/{name}", "unshare", "-u", "sh", "-c",
                                  'hostname "$0"; exec slurmd -D -N "$0" -f "$1"', name, str(self.conf)],
                                 f"slurmd-{name}.out")
                else:
                    self._daemon(["slurmd", "-D", "-f", str(self.conf)], f"slurmd-{name}.out")
            self._wait_idle(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = subprocess.run(["sinfo", "-h", "-t", "idle", "-o", "%D"], capture_output=True, text=True,
                                 env={**os.environ, **self.env}, timeout=30)
            if out.stdout.strip() == str(len(self.names)):
                return
            time.sleep(0.1)
        raise RuntimeError(f"Slurm nodes not idle after {timeout:g} s; logs in {self.root / 'log'}")

    def stop(self) -> None:
        env = {**os.environ, **self.env}
        if self.procs:
            subprocess.run(["scancel", "--user", "root"], env=env, capture_output=True, timeout=30)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)
        if self.netns:
            for name in self.names:
                subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)
            if self._hosts_line:
                text = _HOSTS.read_text()
                _HOSTS.write_text(text.replace(self._hosts_line, ""))
        shutil.rmtree(self.root, ignore_errors=True)
