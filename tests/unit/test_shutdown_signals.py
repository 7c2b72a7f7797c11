"""The one serve/goodbye protocol: private signals, typed timeouts, one ending per job, TF1's ``join()``."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import threading
import time

import pytest

from strategies import ServeOptions, StrategyError, _shutdown
from strategies import _roles as roles
from strategies._signals import ensure_private_dir, signal_dir, signal_path, take_signal
from tf_config.ports import pick_port

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second, unprivileged user")


@pytest.fixture
def signals(monkeypatch, tmp_path):
    path = tmp_path / "signals"
    monkeypatch.setenv("TFDIST_SIGNAL_DIR", str(path))
    return path


def test_the_signal_dir_is_created_private_and_defaults_to_one_per_user(signals):
    assert ensure_private_dir() == str(signals)
    assert stat.S_IMODE(signals.stat().st_mode) == 0o700
    assert signal_dir({}).endswith(f"tfdist-{os.getuid()}")
    assert signal_path({"ps": ["h:1"]}, "ps", 0, "exit").startswith(str(signals) + os.sep)


def test_a_readable_signal_dir_of_ours_is_made_private(signals):
    signals.mkdir(mode=0o755)
    os.chmod(signals, 0o755)  # as TensorFlow's write leaves it when a signal arrives first
    ensure_private_dir()
    assert stat.S_IMODE(signals.stat().st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o730, 0o702])
def test_a_signal_dir_others_may_write_is_refused(signals, mode):
    signals.mkdir()
    os.chmod(signals, mode)
    with pytest.raises(StrategyError) as info:
        ensure_private_dir()
    assert info.value.field == "TFDIST_SIGNAL_DIR"
    assert f"has mode {mode:o}, so other users may write to it" in str(info.value)
    assert "Remove it (it is recreated with mode 700)" in str(info.value)


def test_a_symlinked_signal_dir_is_refused(signals, tmp_path):
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    os.symlink(tmp_path / "elsewhere", signals)
    with pytest.raises(StrategyError, match="is not a directory \\(or is a symlink\\)"):
        ensure_private_dir()


@as_root
def test_a_signal_dir_of_another_user_is_refused(signals):
    signals.mkdir(mode=0o700)
    os.chown(signals, NOBODY, NOBODY)
    with pytest.raises(StrategyError, match=f"belongs to uid {NOBODY}, not to this job's user"):
        ensure_private_dir()


def test_a_signal_is_taken_once(signals):
    ensure_private_dir()
    path = signals / "t-ps-0.exit"
    path.write_text("0")
    assert take_signal(str(path)) == "0"
    assert not path.exists() and take_signal(str(path)) is None


def test_a_planted_symlink_is_never_followed(signals, tmp_path, caplog):
    ensure_private_dir()
    target = tmp_path / "precious"
    target.write_text("1")
    path = signals / "t-ps-0.exit"
    os.symlink(target, path)
    assert roles._take_exit_code(str(path)) is None
    assert not os.path.lexists(path) and target.read_text() == "1"
    assert "ignored the signal file" in caplog.text


def test_a_fifo_in_place_of_a_signal_is_ignored_without_blocking(signals):
    ensure_private_dir()
    path = signals / "t-ps-0.exit"
    os.mkfifo(path)
    assert take_signal(str(path)) is None and not os.path.lexists(path)


@as_root
def test_an_exit_file_forged_by_another_user_is_not_acted_on(signals, caplog):
    ensure_private_dir()
    path = signals / "t-ps-0.exit"
    path.write_text("1")
    os.chown(path, NOBODY, NOBODY)
    assert roles._take_exit_code(str(path)) is None and not path.exists()
    assert f"not a regular file owned by uid {os.getuid()}" in caplog.text


@as_root
def test_another_user_can_neither_list_nor_plant_signals(monkeypatch):
    import shutil
    import tempfile

    parent = tempfile.mkdtemp()  # in the shared temp dir, reachable by every user like /tmp/tfdist-<uid>
    os.chmod(parent, 0o755)
    signals = os.path.join(parent, "signals")
    monkeypatch.setenv("TFDIST_SIGNAL_DIR", signals)
    try:
        ensure_private_dir()
        with open(os.path.join(signals, "t-ps-0.hello"), "w") as fh:
            fh.write("hello")
        script = 'ls "$1" && exit 10; echo 1 > "$1/t-ps-0.exit" && exit 11; exit 0'
        done = subprocess.run(["/bin/sh", "-c", script, "sh", signals], user=NOBODY, group=NOBODY,
                              capture_output=True, text=True, timeout=60, cwd="/")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Permission denied" in done.stderr
        assert not os.path.exists(os.path.join(signals, "t-ps-0.exit"))
    finally:
        shutil.rmtree(parent)


def test_every_timeout_is_one_typed_option_with_its_own_variable(monkeypatch):
    names = [field for field in ServeOptions.__dataclass_fields__]
    assert names == ["chief_start_timeout", "chief_lost_after", "goodbye_timeout", "workers_done_timeout",
                     "poll_interval", "work_join_timeout", "preemption_grace", "preemption_signal"]
    environ = {f"TFDIST_{name.upper()}": "7" for name in names}  # 7 is SIGBUS, a signal a process can catch
    assert ServeOptions.from_env(environ, poll_interval=0.25) == ServeOptions(
        **{**dict.fromkeys(names, 7.0), "poll_interval": 0.25, "preemption_signal": 7})
    with pytest.raises(StrategyError, match="unknown serve option `goodbye_secs`; valid: chief_start_timeout"):
        ServeOptions.from_env({}, goodbye_secs=3)
    for bad in (float("inf"), float("nan"), True, -1, "1e999"):
        with pytest.raises(StrategyError, match="expected a positive number of seconds"):
            ServeOptions(workers_done_timeout=bad)


def _ending():
    cluster = {"ps": ["h:1"], "worker": ["h:2", "h:3"]}
    return _shutdown.between_graph_ending(cluster)


def test_without_a_chief_worker_0_waits_for_the_other_workers_and_ends_the_ps():
    ending = _ending()
    assert (ending.servers, ending.trainers) == ((("ps", 0),), (("worker", 1),))
    with_chief = _shutdown.between_graph_ending({"chief": ["h:0"], "ps": ["h:1"], "worker": ["h:2"]})
    assert with_chief.trainers == (("worker", 0),)


@pytest.mark.parametrize("code, waits", [(0, True), (1, False)])
def test_a_job_is_ended_once_and_a_failing_chief_does_not_wait(monkeypatch, code, waits):
    calls = []
    monkeypatch.setattr(_shutdown, "_once", set())
    monkeypatch.setattr(_shutdown, "wait_for_trainers", lambda *a, **k: calls.append(("wait", a[2])) or [])
    monkeypatch.setattr(_shutdown, "say_goodbye", lambda c, tasks, code, **k: calls.append(("bye", code)) or ["ps-0"])
    assert _shutdown.end_job(_ending(), code) == ["ps-0"]
    assert _shutdown.end_job(_ending(), 0) == []  # said once per cluster, whoever asks again
    assert calls == ([("wait", (("worker", 1),))] if waits else []) + [("bye", code)]


def test_one_atexit_hook_whatever_is_armed(monkeypatch):
    registered = []
    monkeypatch.setattr(_shutdown, "_armed", {})
    monkeypatch.setattr(_shutdown.atexit, "register", registered.append)
    _shutdown.arm(_ending())
    _shutdown.arm(_ending())
    _shutdown.arm_report({"ps": ["h:1"], "worker": ["h:2", "h:3"]}, ("worker", 1), ("worker", 0))
    assert registered == [_shutdown._at_exit] and len(_shutdown._armed) == 2


def test_tf1_server_join_ends_the_process_on_the_goodbye_and_ignores_a_forged_one(signals, monkeypatch):
    import toolkit.compat.v1 as tf

    monkeypatch.setenv("TFDIST_POLL_INTERVAL", "0.1")
    cluster = {"ps": [f"127.0.0.1:{pick_port()}"], "worker": [f"127.0.0.1:{pick_port()}"]}
    server = tf.train.Server(tf.train.ClusterSpec(cluster), job_name="ps", task_index=0)
    forged = signal_path(cluster, "ps", 0, "exit")
    with open(forged, "w") as fh:
        fh.write("1")
    if os.geteuid() == 0:
        os.chown(forged, NOBODY, NOBODY)
    else:
        os.remove(forged)
        os.symlink(os.devnull, forged)

    def chief() -> None:
        while os.path.lexists(forged):  # the server drops the forgery before the real goodbye comes
            time.sleep(0.05)
        _shutdown.say_goodbye(cluster, [("ps", 0)], 0)

    threading.Thread(target=chief, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(SystemExit) as ended:  # as TF1's join() never returned: nothing after it runs
        server.join()
    assert ended.value.code == 0
    assert time.monotonic() - started < 60


@pytest.fixture
def keeps_sigterm():
    """Restores SIGTERM's handler: serving arms the server's preemption handler in this process."""
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_every_front_door_hands_its_timeouts_to_the_one_serve_loop(monkeypatch, keeps_sigterm):
    """The Estimator's ps (RunConfig) and a device map's host end in serve_until_goodbye with one ServeOptions."""
    from strategies._placement_cluster import run_in_graph_role
    from tf_config import generate
    from toolkit.estimator import RunConfig
    from toolkit.estimator._roles import serve_if_ps

    seen = []
    monkeypatch.setattr(roles, "serve_until_goodbye", lambda cfg, options, **kwargs: seen.append(options) or 9)
    monkeypatch.setattr("strategies._placement_cluster.serve_until_goodbye",
                        lambda cfg, options, **kwargs: seen.append((kwargs["peer"], options)) or 9)
    monkeypatch.setenv("TFDIST_GOODBYE_TIMEOUT", "7")
    ps = next(c for c in generate(base_port=24200, chief=1, workers=1, ps=1) if str(c.task) == "ps-0")
    with pytest.raises(SystemExit) as exited:
        serve_if_ps(RunConfig(tf_config=ps, chief_start_timeout=1200, chief_lost_after=30))
    assert exited.value.code == 9
    assert seen.pop() == ServeOptions(chief_start_timeout=1200, chief_lost_after=30, goodbye_timeout=7)
    host = next(c for c in generate(base_port=24200, chief=0, workers=2, ps=0) if str(c.task) == "worker-1")
    with pytest.raises(SystemExit):
        run_in_graph_role(host, options=ServeOptions(chief_start_timeout=60))
    assert seen.pop() == ("client", ServeOptions(chief_start_timeout=60))


def test_a_goodbye_nobody_answers_leaves_no_write_inside_tensorflow(signals, caplog):
    """A task that accepts the connection and never answers: ``send`` gives up, and by the time it returns
    its write has ended too (the chief's interpreter must not be torn down under a gRPC call)."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(listener.accept()[0]), daemon=True).start()
    cluster = {"chief": ["127.0.0.1:1"], "worker": [f"127.0.0.1:{listener.getsockname()[1]}"]}
    try:
        with caplog.at_level("WARNING", logger="strategies._shutdown"):
            assert _shutdown.send(cluster, [("worker", 0)], "exit", "0", timeout=1.0) == []
        assert "worker-0 did not answer within 1 s" in caplog.text
        assert "could not reach worker-0" in caplog.text
        assert not [t.name for t in threading.enumerate() if t.name.startswith("tfdist-exit-")]
    finally:
        listener.close()
        for conn in accepted:
            conn.close()
