"""Runs a signal-handling child twice at once: as a preempted task, and as one the launcher stopped."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def preempted_and_stopped(child: str, task_dir: Path) -> tuple[dict[str, subprocess.Popen], dict[str, str]]:
    """``python -c child`` in ``task_dir`` (a preemption) and in a task dir holding the launcher's stop marker
    (the launcher's own SIGTERM, no preemption), in parallel (one import's time); their processes and stderr."""
    from toolkit.launcher.local._supervisor import STOP_MARKER

    stopped = task_dir / "stopped"
    stopped.mkdir()
    (stopped / STOP_MARKER).write_text("stop")
    procs = {name: subprocess.Popen([sys.executable, "-c", child], env={**os.environ, "TFDIST_TASK_DIR": str(path)},
                                    stderr=subprocess.PIPE, text=True)
             for name, path in (("preempted", task_dir), ("stopped", stopped))}
    return procs, {name: proc.communicate(timeout=120)[1] for name, proc in procs.items()}
