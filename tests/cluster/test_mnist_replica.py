"""mnist_replica.py, the seed's TF1 experiments, as hand-started processes on 127.0.0.1.

Each test starts the ps and worker tasks with the TF1 flags (free ports instead of the
2222.. defaults) and asserts on exit codes and on what each worker reports: its own shard
of the data, where the variables live (TF's placement format), and the step arithmetic.
"""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from tf_config.ports import pick_port

_ROOT = Path(__file__).resolve().parents[2]
_TIMEOUT = 240
_DONE = re.compile(r"worker (\d): training done \(([^)]*)\): local_steps=(\d+) global_step=(\d+)")


@pytest.fixture
def hand_cluster(forked_hand_cluster):
    """Here every task is forked from a process that imported TensorFlow (tests/cluster/conftest.py)."""
    return forked_hand_cluster


def _hosts(n: int) -> str:
    return ",".join(f"localhost:{pick_port()}" for _ in range(n))


def _run(cluster, *, ps: int, workers: int, extra: list[str]) -> tuple[dict, dict]:
    flags = ["--num_gpus=0", f"--ps_hosts={_hosts(ps)}", f"--worker_hosts={_hosts(workers)}", *extra]
    for job, index in [("ps", i) for i in range(ps)] + [("worker", i) for i in range(workers)]:
        cluster.start(f"{job}-{index}", [str(_ROOT / "mnist_replica.py"), f"--job_name={job}",
                                         f"--task_index={index}", *flags])
    codes = {name: code for name, (code, _) in cluster.wait(_TIMEOUT).items()}
    return codes, {name: cluster.log(name) for name in cluster.procs}


def _tails(codes: dict, logs: dict) -> str:
    """Each task's exit code and log tail, as text (pytest shortens a dict in a message, not a str)."""
    return "\n".join(f"--- {name} exited {code}:\n{logs[name][-3000:]}" for name, code in codes.items())


def _done(logs: dict, workers: int) -> dict[int, tuple[str, int, int]]:
    found = {}
    for i in range(workers):
        match = _DONE.search(logs[f"worker-{i}"])
        assert match, logs[f"worker-{i}"][-3000:]
        found[i] = (match.group(2), int(match.group(3)), int(match.group(4)))
    return found


@pytest.mark.cluster
def test_async_two_ps_own_shards_and_placement(no_orphans, hand_cluster, quiet_tf):
    sys.path.insert(0, str(_ROOT))
    import mnist_replica

    codes, logs = _run(hand_cluster, ps=2, workers=2, extra=["--train_steps=300"])
    assert codes == {"ps-0": 0, "ps-1": 0, "worker-0": 0, "worker-1": 0}, _tails(codes, logs)
    done = _done(logs, 2)
    assert {mode for mode, _, _ in done.values()} == {"async"}
    assert all(local > 0 for _, local, _ in done.values()) and done[0][2] >= 300
    # each worker is its own client with its own shard: disjoint, together the whole training set
    shards = [mnist_replica.shard_indices(1437, 2, i) for i in range(2)]
    assert not set(shards[0]) & set(shards[1]) and sorted(shards[0] + shards[1]) == list(range(1437))
    for i, shard in enumerate(shards):
        assert f"data shard {i} of 2: {len(shard)} examples of 1437 (fingerprint {mnist_replica.fingerprint(shard)})" \
            in logs[f"worker-{i}"]
    # TF's placement format; replica_device_setter spreads the variables over both ps
    placement = dict(re.findall(r"^(\S+): \((?:VariableV2|VarHandleOp)\): (\S+)$", logs["worker-1"], re.MULTILINE))
    assert {"hid_w", "hid_b", "sm_w", "sm_b", "global_step"} <= set(placement), logs["worker-1"][-3000:]
    assert {re.search(r"^/job:ps/replica:0/task:(\d)/device:CPU:0$", d).group(1) for d in placement.values()} == \
        {"0", "1"}
    assert re.search(r"test accuracy 0\.[6-9]", logs["worker-0"])


@pytest.mark.cluster
def test_sync_replicas_step_arithmetic(no_orphans, hand_cluster, quiet_tf):
    codes, logs = _run(hand_cluster, ps=1, workers=2, extra=["--train_steps=100", "--sync_replicas"])
    assert codes == {"ps-0": 0, "worker-0": 0, "worker-1": 0}, _tails(codes, logs)
    done = _done(logs, 2)
    assert {mode for mode, _, _ in done.values()} == {"sync aggregate=2"}
    assert 100 <= done[0][2] <= 101
    total = sum(local for _, local, _ in done.values())
    # two contributions per update; a few more are dropped as stale or left unaggregated at the end
    assert 200 <= total <= 230, done


@pytest.mark.cluster
def test_sync_worker_that_starts_after_the_chief_has_finished_exits_0(no_orphans, hand_cluster, quiet_tf):
    """A slow worker may first connect when the chief has trained alone and closed the token queue."""
    flags = ["--num_gpus=0", f"--ps_hosts={_hosts(1)}", f"--worker_hosts={_hosts(2)}", "--train_steps=100",
             "--sync_replicas"]
    for job, index in (("ps", 0), ("worker", 0)):
        hand_cluster.start(f"{job}-{index}", [str(_ROOT / "mnist_replica.py"), f"--job_name={job}",
                                              f"--task_index={index}", *flags])
    deadline = time.monotonic() + _TIMEOUT
    while "training done" not in hand_cluster.log("worker-0"):
        assert time.monotonic() < deadline and hand_cluster.procs["worker-0"].poll() is None, \
            hand_cluster.log("worker-0")[-3000:]
        time.sleep(0.2)
    hand_cluster.start("worker-1", [str(_ROOT / "mnist_replica.py"), "--job_name=worker", "--task_index=1", *flags])
    codes = {name: code for name, (code, _) in hand_cluster.wait(_TIMEOUT).items()}
    logs = {name: hand_cluster.log(name) for name in hand_cluster.procs}
    assert codes == {"ps-0": 0, "worker-0": 0, "worker-1": 0}, _tails(codes, logs)
    done = _done(logs, 2)
    # the chief took both contributions of every update; the latecomer's one step found the goal reached
    assert done[0][1] >= 200 and done[1][1] >= 1 and done[1][2] >= 100, done
    assert "not done after" not in logs["worker-0"]


@pytest.mark.cluster
def test_preempted_worker_0_checkpoints_at_the_step_reached_and_a_new_run_finishes(tmp_path, no_orphans, hand_cluster,
                                                                                    quiet_tf):
    """--checkpoint_dir: a SIGTERM to worker 0 (TF1's chief) saves at the step reached, exits 143; a rerun resumes."""
    import signal

    import tensorflow as tf

    ckpt = tmp_path / "ckpt"
    flags = ["--num_gpus=0", f"--ps_hosts={_hosts(1)}", f"--worker_hosts={_hosts(1)}", "--train_steps=300",
             f"--checkpoint_dir={ckpt}"]  # worker 0 saves at its start, every 75 steps, and at a preemption
    for job in ("ps", "worker"):
        hand_cluster.start(f"{job}-0", [str(_ROOT / "mnist_replica.py"), f"--job_name={job}", "--task_index=0", *flags])
    deadline = time.monotonic() + _TIMEOUT
    while not (seen := re.search(r"training step 100 done \(global step: (\d+)\)", hand_cluster.log("worker-0"))):
        assert time.monotonic() < deadline and hand_cluster.procs["worker-0"].poll() is None, \
            hand_cluster.log("worker-0")[-3000:]
        time.sleep(0.05)
    hand_cluster.procs["worker-0"].send_signal(signal.SIGTERM)
    code = hand_cluster.procs["worker-0"].wait(timeout=60)  # the grace period is 25 s
    ps_code = hand_cluster.procs["ps-0"].wait(timeout=60)  # worker 0's goodbye carries 143
    hand_cluster.kill_all()
    logs = {name: hand_cluster.log(name) for name in hand_cluster.procs}
    assert code == 143 and ps_code == 143, _tails({"worker-0": code, "ps-0": ps_code}, logs)
    stopped = re.search(r"stopping at global step (\d+), the step in flight when SIGTERM came", logs["worker-0"])
    saved = re.search(r"newest checkpoint \S+-(\d+); exiting with 143", logs["worker-0"])
    assert stopped and saved, logs["worker-0"][-3000:]
    at = int(saved.group(1))
    # the step printed is read alongside the step's update, so it may lag by one
    assert int(seen.group(1)) < at == int(stopped.group(1)) < 150, (seen.group(1), at)  # the schedule: ~76, ~151
    assert tf.train.latest_checkpoint(str(ckpt)) == f"{ckpt}/model.ckpt-{at}" and "training done" not in \
        logs["worker-0"]
    _preempt_the_ps(hand_cluster, tmp_path)
    # a new run on new ports resumes from that checkpoint and finishes
    (tmp_path / "rerun").mkdir()
    rerun = type(hand_cluster)(tmp_path / "rerun", preloader=hand_cluster.preloader)
    try:
        codes, logs = _run(rerun, ps=1, workers=1, extra=["--train_steps=300", f"--checkpoint_dir={ckpt}"])
    finally:
        rerun.kill_all()
    assert codes == {"ps-0": 0, "worker-0": 0}, _tails(codes, logs)
    (_, local, step), = _done(logs, 1).values()
    final = int(tf.train.latest_checkpoint(str(ckpt)).rsplit("-", 1)[1])
    assert 300 <= step <= final <= 301 and local == final - at, (local, step, final, at)  # went on from `at`


def _preempt_the_ps(hand_cluster, tmp_path: Path) -> None:
    """A run whose ps gets SIGTERM: it tells worker 0 and serves on until worker 0 has checkpointed at the step
    reached and said goodbye; both exit 143. (A long run: the notice travels while worker 0 steps on.)"""
    import signal

    import tensorflow as tf

    (tmp_path / "ps-preempted").mkdir()
    ckpt = tmp_path / "ps-preempted" / "ckpt"
    run = type(hand_cluster)(tmp_path / "ps-preempted", preloader=hand_cluster.preloader)
    flags = ["--num_gpus=0", f"--ps_hosts={_hosts(1)}", f"--worker_hosts={_hosts(1)}", "--train_steps=100000",
             f"--checkpoint_dir={ckpt}"]  # saves at its start and at the preemption (the schedule: every 25000)
    try:
        for job in ("ps", "worker"):
            run.start(f"{job}-0", [str(_ROOT / "mnist_replica.py"), f"--job_name={job}", "--task_index=0", *flags])
        deadline = time.monotonic() + _TIMEOUT
        while not (seen := re.search(r"training step 100 done \(global step: (\d+)\)", run.log("worker-0"))):
            assert time.monotonic() < deadline and run.procs["worker-0"].poll() is None, run.log("worker-0")[-3000:]
            time.sleep(0.05)
        run.procs["ps-0"].send_signal(signal.SIGTERM)
        codes = {name: code for name, (code, _) in run.wait(60).items()}  # the grace period is 25 s
    finally:
        run.kill_all()
    logs = {name: run.log(name) for name in run.procs}
    assert codes == {"ps-0": 143, "worker-0": 143}, _tails(codes, logs)
    assert "SIGTERM: ps-0 was preempted; it tells the chief and serves until the chief has checkpointed" \
        in logs["ps-0"] and "no goodbye from the chief" not in logs["ps-0"], logs["ps-0"][-3000:]
    stopped = re.search(r"stopping at global step (\d+), ps-0 was preempted", logs["worker-0"])
    saved = re.search(r"preempted \(ps-0 preempted\).*newest checkpoint \S+-(\d+); exiting with 143", logs["worker-0"])
    assert stopped and saved and "training done" not in logs["worker-0"], logs["worker-0"][-3000:]
    step = int(saved.group(1))
    assert int(seen.group(1)) < step == int(stopped.group(1)) < 100000, (seen.group(1), step)
    assert tf.train.latest_checkpoint(str(ckpt)) == f"{ckpt}/model.ckpt-{step}"
