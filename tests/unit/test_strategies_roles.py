"""Server roles without TensorFlow servers: who serves, the chief watch, the signal files."""
from __future__ import annotations

import socket
import time

import pytest

import strategies._roles as roles
from strategies import (
    EXIT_CHIEF_LOST,
    EXIT_CHIEF_NEVER_STARTED,
    StrategyError,
    chief_session,
    is_server_role,
    run_role,
    serve,
    shutdown_cluster,
)
from strategies._cluster import cluster_token, tf2_cluster
from strategies._signals import signal_path
from tf_config import TFConfig, TFConfigError, generate
from tf_config.ports import pick_port


def _cfg(name: str, **counts) -> TFConfig:
    return next(c for c in generate(base_port=24000, **counts) if str(c.task) == name)


PSS = dict(chief=1, workers=2, ps=1, evaluator=1)
MWMS = dict(chief=0, workers=2, ps=0)


@pytest.mark.parametrize("task, counts, serves", [
    ("ps-0", PSS, True), ("worker-0", PSS, True), ("worker-1", PSS, True),
    ("chief-0", PSS, False), ("evaluator-0", PSS, False),
    ("worker-0", MWMS, False), ("worker-1", MWMS, False),
])
def test_only_ps_and_pss_workers_serve(task, counts, serves):
    assert is_server_role(_cfg(task, **counts)) is serves


def test_local_run_does_not_serve():
    assert not is_server_role(TFConfig.from_env({}))


@pytest.mark.parametrize("task, counts", [("chief-0", PSS), ("evaluator-0", PSS), ("worker-1", MWMS)])
def test_run_role_returns_the_config_to_tasks_that_train(task, counts):
    cfg = _cfg(task, **counts)
    assert run_role(cfg) is cfg


def test_run_role_reads_tf_config_from_the_environment(monkeypatch):
    cfg = _cfg("chief-0", **PSS)
    monkeypatch.setenv("TF_CONFIG", cfg.to_json())
    assert run_role().to_dict() == cfg.to_dict()


def test_run_role_checks_the_strategy_before_serving():
    with pytest.raises(TFConfigError, match="multi_worker_mirrored must have no `ps` task"):
        run_role(_cfg("ps-0", **PSS), strategy="multi_worker_mirrored")
    with pytest.raises(StrategyError, match="Strategy name is 'pss'"):
        run_role(_cfg("ps-0", **PSS), strategy="pss")


def test_servers_of_a_cluster_pss_cannot_run_fail_at_once():
    cfg = TFConfig.from_dict({"cluster": {"master": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"],
                                          "ps": ["127.0.0.1:3"]}, "task": {"type": "ps", "index": 0}})
    with pytest.raises(TFConfigError, match="parameter_server does not accept a `master` job"):
        run_role(cfg)


def test_serve_refuses_a_training_task():
    with pytest.raises(StrategyError) as info:
        serve(_cfg("chief-0", **PSS))
    assert "TF_CONFIG task is chief-0, which trains rather than serves" in str(info.value)


def test_a_server_with_no_chief_to_wait_for_is_refused_before_it_serves():
    cfg = TFConfig.from_dict({"cluster": {"ps": ["127.0.0.1:1"]}, "task": {"type": "ps", "index": 0}})
    with pytest.raises(StrategyError, match=r"has the jobs \['ps'\] but no chief, master or worker; ps-0 serves "
                                            r"until its chief says goodbye"):
        serve(cfg)


def test_tf2_cluster_renames_master_and_leaves_out_the_evaluator():
    cluster = {"master": ("h:1",), "worker": ("h:2",), "ps": ("h:3",), "evaluator": ("h:4",)}
    assert tf2_cluster(cluster) == {"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]}


def test_signal_files_are_per_cluster_and_task():
    cluster = tf2_cluster(_cfg("ps-0", **PSS).cluster)
    other = {**cluster, "ps": ["127.0.0.1:1"]}
    assert cluster_token(cluster) == cluster_token(dict(reversed(list(cluster.items()))))
    assert cluster_token(cluster) != cluster_token(other)
    assert signal_path(cluster, "ps", 0, "exit") != signal_path(other, "ps", 0, "exit")
    assert signal_path(cluster, "ps", 0, "exit") != signal_path(cluster, "worker", 0, "exit")
    assert signal_path(cluster, "ps", 0, "exit").endswith("-ps-0.exit")
    assert signal_path(cluster, "ps", 0, "hello").endswith("-ps-0.hello")


@pytest.mark.parametrize("text, code", [("0", 0), ("1\n", 1), ("137", 137), ("junk", 1), ("999", 1), ("\u00b2", 1)])
def test_exit_signal_gives_its_code_once(tmp_path, text, code):
    path = tmp_path / "x.exit"
    path.write_text(text)
    assert roles._take_exit_code(str(path)) == code
    assert not path.exists()
    assert roles._take_exit_code(str(path)) is None


def test_goodbye_is_a_no_op_outside_a_pss_chief():
    assert shutdown_cluster(_cfg("worker-0", **MWMS), 0) == []
    assert shutdown_cluster(_cfg("ps-0", **PSS), 0) == []
    assert shutdown_cluster(TFConfig.from_env({}), 1) == []
    with pytest.raises(RuntimeError, match="boom"), chief_session(_cfg("worker-1", **MWMS)):
        raise RuntimeError("boom")


@pytest.fixture
def fast_probes(monkeypatch):
    monkeypatch.setattr(roles, "_PROBE_INTERVAL", 0.05)


def _watch_until_verdict(watch, limit=10.0, **kwargs):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        verdict = watch.verdict(**kwargs)
        if verdict is not None:
            return verdict
        time.sleep(0.02)
    return None


def test_chief_that_never_starts_ends_the_server(fast_probes):
    address = f"127.0.0.1:{pick_port()}"
    watch = roles._ChiefWatch(address, start_timeout=0.3, lost_after=0.2)
    assert _watch_until_verdict(watch) == EXIT_CHIEF_NEVER_STARTED
    assert not watch.seen


def test_chief_seen_then_gone_ends_the_server(fast_probes):
    port = pick_port()
    listener = socket.create_server(("127.0.0.1", port))
    watch = roles._ChiefWatch(f"127.0.0.1:{port}", start_timeout=0.3, lost_after=0.3)
    time.sleep(0.5)  # past start_timeout: the chief is up, so that must not matter
    assert watch.verdict() is None and watch.seen
    listener.close()
    started = time.monotonic()
    assert _watch_until_verdict(watch) == EXIT_CHIEF_LOST
    assert time.monotonic() - started >= 0.3


def test_chief_hello_counts_as_seen_even_if_no_probe_caught_it(fast_probes):
    address = f"127.0.0.1:{pick_port()}"
    watch = roles._ChiefWatch(address, start_timeout=60, lost_after=0.2)
    assert watch.verdict(hello=True) is None and watch.seen
    assert _watch_until_verdict(watch) == EXIT_CHIEF_LOST


def test_a_job_nonce_keeps_two_jobs_on_the_same_ports_apart(monkeypatch):
    cluster = tf2_cluster(_cfg("ps-0", **PSS).cluster)
    monkeypatch.setenv("TFDIST_JOB_NONCE", "job-a")
    first = signal_path(cluster, "ps", 0, "exit")
    monkeypatch.setenv("TFDIST_JOB_NONCE", "job-b")
    assert signal_path(cluster, "ps", 0, "exit") != first
    assert cluster_token(cluster, "job-a") == cluster_token(cluster, "job-a") != cluster_token(cluster, "")


def test_serve_timeouts_are_options_with_patient_defaults(monkeypatch):
    from strategies._serve_options import ServeOptions

    assert ServeOptions().chief_start_timeout >= 600  # a slow image pull on Kubernetes
    monkeypatch.setenv("TFDIST_CHIEF_LOST_AFTER", "20")
    options = ServeOptions.from_env(chief_start_timeout=60)
    assert (options.chief_start_timeout, options.chief_lost_after) == (60.0, 20.0)
    monkeypatch.setenv("TFDIST_CHIEF_START_TIMEOUT", "soon")
    with pytest.raises(StrategyError) as info:
        ServeOptions.from_env()
    assert info.value.field == "chief_start_timeout" and "TFDIST_CHIEF_START_TIMEOUT" in str(info.value)
    assert "'soon'" in str(info.value) and "positive number of seconds" in str(info.value)


def test_goodbyes_go_out_in_parallel_and_a_hung_server_cannot_hold_them(monkeypatch, tmp_path):
    """One server that never answers: the others still get their goodbye, and the chief is free in time."""
    import threading

    from strategies import _shutdown

    hung = threading.Event()

    def write(cluster, task, kind, text, timeout):
        if task == ("ps", 0):
            hung.wait(60)  # a server whose RPC never returns
        (tmp_path / f"{task[0]}-{task[1]}.{kind}").write_text(text)

    monkeypatch.setattr(_shutdown, "_write", write)
    monkeypatch.setattr(_shutdown, "is_listening", lambda address, timeout: address != "h:5")
    cluster = {"chief": ["h:1"], "worker": ["h:2", "h:3", "h:5"], "ps": ["h:4"]}
    result = {}
    caller = threading.Thread(target=lambda: result.update(reached=_shutdown.say_goodbye(
        cluster, [("worker", 0), ("worker", 1), ("worker", 2), ("ps", 0)], 0, timeout=2.0)), daemon=True)
    caller.start()
    caller.join(30)
    hung.set()
    assert not caller.is_alive() and result["reached"] == ["worker-0", "worker-1"]
    assert (tmp_path / "worker-1.exit").read_text() == "0"
    assert not (tmp_path / "worker-2.exit").exists()  # its port was closed: skipped, not waited for


_STUCK_WORK = """
import atexit, sys, time
import tensorflow as tf
from strategies._roles import serve_until_goodbye
from strategies._serve_options import ServeOptions
from tf_config import TFConfig

chief, worker, ps = sys.argv[1:4]
cfg = TFConfig.from_dict({"cluster": {"chief": [chief], "worker": [worker], "ps": [ps]},
                          "task": {"type": "worker", "index": 0}})
atexit.register(lambda: print("atexit ran", flush=True))

def work(target, stop):
    queue = tf.queue.FIFOQueue(1, tf.int32)
    queue.dequeue()  # blocks inside TensorFlow for ever, whatever ``stop`` says

options = ServeOptions(chief_start_timeout=1, work_join_timeout=1, poll_interval=0.1)
sys.exit(serve_until_goodbye(cfg, options, work=work))
"""


def test_a_server_whose_work_is_stuck_in_tensorflow_exits_with_its_code_without_a_teardown(tmp_path):
    """Its work still inside a TensorFlow call after ``work_join_timeout``: the task leaves with ``os._exit`` (atexit
    handlers run) and the protocol's code, instead of an interpreter teardown under that call, which can abort
    ("terminate called after throwing ...", 134)."""
    import os
    import subprocess
    import sys

    addresses = [f"127.0.0.1:{pick_port()}" for _ in range(3)]
    env = {**os.environ, "TFDIST_SIGNAL_DIR": str(tmp_path / "signals"), "TF_CPP_MIN_LOG_LEVEL": "2"}
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _STUCK_WORK, *addresses], env=env, capture_output=True, text=True,
                          timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == roles.EXIT_CHIEF_NEVER_STARTED, output  # the chief never came: code 4
    assert "did not stop within 1 s (work_join_timeout); exiting with 4 without tearing the interpreter down" in output
    assert "atexit ran" in done.stdout and "terminate called" not in output, output
    assert time.monotonic() - began < 60
