"""Peak RSS and CPU time of a job's task processes, sampled from ``/proc`` while the job runs."""
from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable

from _proc import cpu_seconds, descendants

__all__ = ["TaskSampler", "peer_task_name"]


def _peak_rss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            return next((int(line.split()[1]) for line in fh if line.startswith("VmHWM")), None)
    except OSError:
        return None


def peer_task_name(pid: int) -> str | None:
    """``ps-0``, ``worker-1``... for a process of the TF1 peer (its children run ``--child JOB INDEX``)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().decode(errors="replace").split("\0")
    except OSError:
        return None
    if "--child" not in argv:
        return None
    at = argv.index("--child")
    return "-".join(argv[at + 1:at + 3]) if len(argv) > at + 2 else None


class TaskSampler:
    """Samples every named process below ``root`` each ``interval`` seconds, in a thread, while in its block.

    Keeps each task's last ``VmHWM`` (its peak RSS so far: the last read is the peak up to a sample
    before the exit) and a timeline of the CPU seconds all the tasks have used, a process that has
    exited counting with its last reading.
    """

    def __init__(self, root: int, name_of: Callable[[int], str | None], *, interval: float = 0.5) -> None:
        self.root, self.name_of, self.interval = root, name_of, interval
        self.names: dict[int, str] = {}
        self.peak_kib: dict[int, int] = {}
        self.cpu: dict[int, float] = {}
        self.times: list[float] = []
        self.totals: list[float] = []
        self.by_task: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TaskSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        for pid in descendants(self.root):
            if pid not in self.names:
                name = self.name_of(pid)
                if name is None:
                    continue
                self.names[pid] = name
            peak, cpu = _peak_rss_kib(pid), cpu_seconds(pid)
            if peak is not None:
                self.peak_kib[pid] = max(peak, self.peak_kib.get(pid, 0))
            if cpu is not None:
                self.cpu[pid] = cpu
        self.times.append(time.time())
        self.totals.append(sum(self.cpu.values()))
        by_task: dict[str, float] = {}
        for pid, seconds in self.cpu.items():
            by_task[self.names[pid]] = by_task.get(self.names[pid], 0.0) + seconds
        self.by_task.append(by_task)

    def cpu_at(self, when: float) -> float | None:
        """All tasks' CPU seconds at ``when``, interpolated between samples; None outside the samples."""
        if not self.times or when < self.times[0] or when > self.times[-1]:
            return None
        i = bisect.bisect_left(self.times, when)
        if self.times[i] == when or i == 0:
            return self.totals[i]
        t0, t1 = self.times[i - 1], self.times[i]
        return self.totals[i - 1] + (self.totals[i] - self.totals[i - 1]) * (when - t0) / (t1 - t0)

    def cpu_between(self, start: float, end: float) -> float | None:
        a, b = self.cpu_at(start), self.cpu_at(end)
        return None if a is None or b is None else b - a

    def cpu_between_by_task(self, start: float, end: float) -> dict[str, float]:
        """Each task's CPU seconds between the samples nearest ``start`` and ``end`` (empty outside the samples)."""
        if not self.times or start < self.times[0] or end > self.times[-1]:
            return {}
        a = self.by_task[bisect.bisect_left(self.times, start)]
        b = self.by_task[min(bisect.bisect_left(self.times, end), len(self.times) - 1)]
        return {name: b[name] - a.get(name, 0.0) for name in sorted(b)}

    def busy_since(self, name: str, until: float, *, cores: float = 0.25, span: float = 2.0) -> float | None:
        """When task ``name``'s last busy stretch before ``until`` began: its training, after any idle wait.

        Busy means at least ``cores`` of a core over each ``span`` seconds. A training task that waited
        (TF1's SessionManager polls a non-chief every 30 s until the chief has initialised the model)
        shows its start-up, the idle wait, then training to the end. None if it was not busy at ``until``.
        """
        end = bisect.bisect_right(self.times, until) - 1

        def busy(i: int) -> bool:  # only for samples whose span ends by ``end``
            j = bisect.bisect_left(self.times, self.times[i] + span)
            used = self.by_task[j].get(name, 0.0) - self.by_task[i].get(name, 0.0)
            return used >= cores * (self.times[j] - self.times[i])

        back = next((i for i in range(end, -1, -1) if bisect.bisect_left(self.times, self.times[i] + span) <= end),
                    None)
        if back is None or name not in self.by_task[end] or not busy(back):
            return None
        while back > 0 and busy(back - 1):
            back -= 1
        return self.times[back]

    def peak_rss_mib(self) -> dict[str, float]:
        """Each task's peak RSS in MiB (a name seen on several processes: the largest)."""
        peaks: dict[str, float] = {}
        for pid, kib in self.peak_kib.items():
            name = self.names[pid]
            peaks[name] = max(peaks.get(name, 0.0), kib / 1024)
        return peaks
