"""mnist_replica.py, the seed's TF1 experiments, as hand-started processes on 127.0.0.1.

Each test starts the ps and worker tasks with the TF1 flags (free ports instead of
the 2222.. defaults) and asserts on exit codes and on the coordinator's report: the
global-step arithmetic of async and synchronous training, and where variables live.
"""
from __future__ import annotations

import re
from pathlib import Path

import portpicker
import pytest

_ROOT = Path(__file__).resolve().parents[2]
_TIMEOUT = 240
_DONE = re.compile(r"training done \((?P<mode>[^)]*)\): global_step=(?P<global>\d+) local_steps: (?P<local>[^\n]*?) "
                   r"total_local_steps=(?P<total>\d+) stale=(?P<stale>\d+) pending=(?P<pending>\d+)")


def _hosts(n: int) -> str:
    return ",".join(f"localhost:{portpicker.pick_unused_port()}" for _ in range(n))


def _run(cluster, *, ps: int, workers_started: int, extra: list[str]) -> tuple[dict, dict]:
    """Starts ps tasks, workers 1.., then worker 0; returns exit codes and logs by task name."""
    flags = ["--num_gpus=0", f"--ps_hosts={_hosts(ps)}", f"--worker_hosts={_hosts(2)}", *extra]
    tasks = [("ps", i) for i in range(ps)] + [("worker", i) for i in range(workers_started - 1, -1, -1)]
    for job, index in tasks:
        cluster.start(f"{job}-{index}", [str(_ROOT / "mnist_replica.py"), f"--job_name={job}",
                                         f"--task_index={index}", *flags,
                                         *(["-v"] if (job, index) == ("worker", 0) else [])])
    codes = {name: code for name, (code, _) in cluster.wait(_TIMEOUT).items()}
    return codes, {name: cluster.log(name) for name in cluster.procs}


def _report(logs: dict) -> dict:
    match = _DONE.search(logs["worker-0"])
    assert match, logs["worker-0"][-3000:]
    local = [int(n) for n in re.findall(r"worker-\d+=(\d+)", match["local"])]
    return {"global": int(match["global"]), "local": local, "total": int(match["total"]),
            "stale": int(match["stale"]), "pending": int(match["pending"]), "mode": match["mode"]}


@pytest.mark.cluster
def test_async_two_ps_shares_global_steps_and_spreads_variables(no_orphans, hand_cluster):
    codes, logs = _run(hand_cluster, ps=2, workers_started=2, extra=["--train_steps=200"])
    assert codes == {"ps-0": 0, "ps-1": 0, "worker-1": 0, "worker-0": 0}, {n: logs[n][-2000:] for n in codes}
    report = _report(logs)
    assert report["mode"] == "async" and report["global"] == 200
    assert report["total"] == 200 and len(report["local"]) == 2 and all(n > 0 for n in report["local"])
    devices = dict(re.findall(r"placement: (\S+): (\S+)", logs["worker-0"]))
    assert {"mnist_replica/hid_w", "mnist_replica/sm_w"} <= set(devices)
    tasks = {re.search(r"/job:ps/replica:0/task:(\d)", d).group(1) for d in devices.values()}
    assert tasks == {"0", "1"}, devices
    assert re.search(r"placement: adam/\S+: /job:ps/replica:0/task:1/device:CPU:0", logs["worker-0"])
    assert re.search(r"test accuracy 0\.[5-9]", logs["worker-0"])


@pytest.mark.cluster
def test_sync_two_workers_aggregate_contributions_into_global_steps(no_orphans, hand_cluster):
    codes, logs = _run(hand_cluster, ps=1, workers_started=2, extra=["--train_steps=100", "--sync_replicas"])
    assert codes == {"ps-0": 0, "worker-1": 0, "worker-0": 0}, {n: logs[n][-2000:] for n in codes}
    report = _report(logs)
    assert report["mode"] == "sync aggregate=2" and report["global"] == 100
    # every worker step is one contribution: 2 per update, the rest stale or carried over
    assert report["total"] == sum(report["local"]) == 2 * 100 + report["stale"] + report["pending"]
    assert report["pending"] < 2 and all(n > 0 for n in report["local"])


@pytest.mark.cluster
def test_sync_with_only_the_chief_worker_takes_two_steps_per_global_step(no_orphans, hand_cluster):
    codes, logs = _run(hand_cluster, ps=1, workers_started=1,
                       extra=["--train_steps=60", "--sync_replicas", "--worker_wait_secs=2"])
    assert codes == {"ps-0": 0, "worker-0": 0}, {n: logs[n][-2000:] for n in codes}
    report = _report(logs)
    assert report["global"] == 60 and report["local"] == [120] and report["stale"] == 0
    assert "training without them" in logs["worker-0"]
