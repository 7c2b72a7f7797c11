"""A local cluster in a private network namespace: its ports are unreachable from the host's namespace.

TensorFlow's servers listen on every interface (tensorflow#11689), so without
isolation any host that can reach this machine can reach them. The same probe
runs against an isolated cluster of real ``tf.distribute.Server``s (nothing
may answer) and against a non-isolated one (everything must answer), so the
probe itself is known to work. The isolated run also checks the console: no
TensorFlow C++ start-up noise, which the task logs keep.
"""
from __future__ import annotations

import io
import json
import socket
import threading
import time
from pathlib import Path

import pytest

from toolkit.launcher import launch
from toolkit.launcher.local._isolation import unavailable_reason

pytestmark = pytest.mark.cluster
SCRIPT = Path(__file__).parent / "_scripts" / "listen_and_wait.py"
_DEADLINE = 240


def _accepts(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError:
        return False
    return True


def _run_and_probe(job_dir: Path, *, isolate: bool, tf: bool) -> tuple[dict, dict, str, object]:
    """Launches chief + worker, waits until the chief reached every task, probes every port from here."""
    console = io.StringIO()
    out: dict = {}
    cmd = ["python", str(SCRIPT), *(["--tf"] if tf else [])]
    thread = threading.Thread(target=lambda: out.setdefault("result", launch(
        cmd, chief=1, workers=1, job_dir=job_dir, stream=console, isolate=isolate, timeout=_DEADLINE,
        grace_period=30)))
    thread.start()
    try:
        deadline = time.monotonic() + _DEADLINE
        while not (job_dir / "reached.json").exists() and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        cluster = json.loads((job_dir / "cluster.json").read_text())["cluster"]
        reached = json.loads((job_dir / "reached.json").read_text())
        probed = {address: _accepts(address) for job in cluster.values() for address in job}
    finally:
        (job_dir / "release").write_text("")
        thread.join(_DEADLINE)
    return probed, {"reached": reached, "cluster": cluster}, console.getvalue(), out["result"]


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"no network isolation here: {unavailable_reason()}")
def test_isolated_cluster_ports_are_unreachable_from_the_host_and_the_console_is_quiet(
        tmp_path, monkeypatch, no_orphans):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    probed, seen, console, result = _run_and_probe(tmp_path / "isolated", isolate=True, tf=True)
    addresses = [a for job in seen["cluster"].values() for a in job]
    assert seen["reached"] == sorted(addresses)  # inside the namespace the cluster reaches itself...
    assert probed == dict.fromkeys(addresses, False)  # ...and from the host, no port answers
    assert result.exit_code == 0 and [t.exit_code for t in result.tasks] == [0, 0]
    # Quiet console, complete logs: TensorFlow's start-up lines are only in the files.
    assert "[chief-0] listening for chief-0" in console
    for noise in ("absl::InitializeLog", "oneDNN custom operations", "cuInit", "cuda"):
        assert noise not in console
    log = (result.job_dir / "logs" / "chief-0.log").read_text()
    assert "absl::InitializeLog" in log and "oneDNN custom operations" in log and "Started server" in log

    # The same probe against a cluster that is not isolated: every port answers.
    probed, seen, _, result = _run_and_probe(tmp_path / "open", isolate=False, tf=False)
    assert probed == dict.fromkeys([a for job in seen["cluster"].values() for a in job], True)
    assert result.exit_code == 0
