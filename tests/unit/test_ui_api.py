"""The dashboard's JSON API, through Werkzeug's test client on stores built with the store's own API."""
from __future__ import annotations

import contextlib
import io
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _ui_store import HOSTILE, add_raw_job, delete_job, make_study, write_log
from werkzeug.test import Client

from toolkit import report_metric
from toolkit.cli import main
from toolkit.jobs import JobSpec, JobState, JobStore, api
from toolkit.jobs.engines.local._procs import start_ticks
from toolkit.ui._app import UIApp, UIOptions
from toolkit.ui._auth import Auth
from toolkit.ui._stacks import py_spy

TRAINER = Path(__file__).resolve().parents[1] / "fixtures" / "jobs" / "trainer"
PORT = 6123
HOST = f"127.0.0.1:{PORT}"


def _client(home, *, allow_cancel=False) -> tuple[Client, str]:
    auth = Auth.for_address("127.0.0.1", PORT, "secret-token")
    app = UIApp(UIOptions(home=home, allow_cancel=allow_cancel, port=PORT, auth=auth))
    return Client(app), auth.token


def _get(client, path, token="secret-token", **kw):
    headers = {"Host": HOST, **({"Authorization": f"token {token}"} if token else {}), **kw.pop("headers", {})}
    return client.get(path, headers=headers, **kw)


def _job(store: JobStore, name: str, *, state=JobState.SUCCEEDED, tasks=("master-0", "worker-0"), **details):
    store.create(name, backend="local", spec={"trainingInput": {"pythonModule": "trainer.task"}}, details=details)
    if state is JobState.QUEUED:
        return
    store.transition(name, JobState.PREPARING)
    store.transition(name, JobState.RUNNING)
    for task in tasks:
        store.update_task(name, task, state="RUNNING", pid=None, restarts=1 if task == "worker-0" else 0)
    if state is not JobState.RUNNING:
        for task in tasks:
            store.update_task(name, task, state="SUCCEEDED", exit_code=0)
        store.transition(name, state, exit_code=0)


@pytest.fixture
def store(tmp_path):
    return JobStore(tmp_path / "home")


def test_every_request_needs_the_token_and_this_servers_host(store):
    client, token = _client(store.home)
    assert _get(client, "/api/jobs", token=None).status_code == 401
    assert _get(client, "/api/jobs", token="wrong").status_code == 401
    assert _get(client, "/api/jobs").status_code == 200
    rebound = client.get("/api/jobs", headers={"Host": f"evil.example:{PORT}", "Authorization": f"token {token}"})
    assert rebound.status_code == 403 and "this server answers to" in rebound.get_json()["error"]
    page = client.get("/", headers={"Host": HOST})
    assert page.status_code == 401 and b"A token is needed" in page.data
    assert client.get("/static/ui.js", headers={"Host": HOST}).status_code == 200  # code, no data


def test_a_wildcard_bind_answers_to_any_host_name_but_still_wants_the_token():
    auth = Auth.for_address("0.0.0.0", PORT, "t")
    assert auth.host_ok(f"gpu-box.example:{PORT}") and auth.token_ok("t") and not auth.token_ok("T")
    loopback = Auth.for_address("127.0.0.1", PORT, "t")
    assert loopback.host_ok(f"localhost:{PORT}") and loopback.host_ok(f"[::1]:{PORT}")
    assert not loopback.host_ok(f"localhost:{PORT + 1}") and not loopback.host_ok(None)


def test_the_token_in_the_url_becomes_a_strict_cookie_and_leaves_the_url(store):
    client, token = _client(store.home)
    first = client.get(f"/jobs/x?token={token}", headers={"Host": HOST})
    assert first.status_code == 303 and first.headers["Location"] == "/jobs/x"
    elsewhere = client.get(f"//evil.example/jobs/x?token={token}", headers={"Host": HOST})
    assert elsewhere.headers["Location"] == "/jobs/x"  # never a redirect to another site
    cookie = first.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and token in cookie
    assert client.get("/api/jobs", headers={"Host": HOST}).status_code == 200  # the cookie alone now
    page = client.get("/jobs/x", headers={"Host": HOST})
    assert page.status_code == 200 and "script-src 'self'" in page.headers["Content-Security-Policy"]


def test_list_counts_task_states_and_filters(store):
    _job(store, "done-1")
    _job(store, "live-1", state=JobState.RUNNING)
    client, _ = _client(store.home)
    body = _get(client, "/api/jobs").get_json()
    rows = {r["jobId"]: r for r in body["jobs"]}
    assert body["count"] == 2 and [r["jobId"] for r in body["jobs"]] == ["live-1", "done-1"]  # newest first
    assert rows["done-1"]["taskStates"] == {"SUCCEEDED": 2} and rows["live-1"]["taskStates"] == {"RUNNING": 2}
    assert rows["done-1"]["durationSeconds"] >= 0 and rows["done-1"]["backend"] == "local"
    assert [r["jobId"] for r in _get(client, "/api/jobs?state=RUNNING").get_json()["jobs"]] == ["live-1"]


def test_the_job_document_is_describes_json_plus_the_view(store, monkeypatch, capsys):
    _job(store, "done-1", restarts={"preemptions": 1, "failures": 0, "preemptedTasks": {"worker-0": 1}},
         nodes={"worker-0": {"node_id": "abcdef0123456789", "address": "10.0.0.2:2222"}})
    client, _ = _client(store.home)
    doc = _get(client, "/api/jobs/done-1").get_json()
    monkeypatch.setenv("TFDIST_HOME", str(store.home))
    assert main(["jobs", "describe", "done-1", "--format", "json"]) == 0
    described = json.loads(capsys.readouterr().out)
    view = doc.pop("view")
    assert doc == described  # one reader: the CLI and the dashboard cannot disagree
    worker = next(t for t in view["tasks"] if t["name"] == "worker-0")
    assert worker == {**worker, "role": "worker", "index": 0, "node": "abcdef012345", "address": "10.0.0.2:2222",
                      "restarts": 1, "preemptions": 1, "state": "SUCCEEDED", "exitCode": 0}


def test_path_like_names_read_nothing_outside_the_store(store, tmp_path):
    _job(store, "done-1")
    secret = tmp_path / "secret.log"
    secret.write_text("do not show\n")
    logs = store.job_dir("done-1") / "logs"
    logs.mkdir(parents=True)
    (logs / "evil.log").symlink_to(secret)
    write_log(store, "done-1", "master-0", "hello\n")
    client, _ = _client(store.home)
    for path in ("/api/jobs/..", "/api/jobs/%2E%2E%2Fjobs", "/api/jobs/done-1%2F..", "/api/jobs/.tfdist"):
        answer = _get(client, path)
        assert answer.status_code in (400, 404), path
    assert _get(client, "/api/jobs/..").get_json()["kind"] == "invalid-name"
    assert [entry["task"] for entry in _get(client, "/api/jobs/done-1/logs").get_json()["logs"]] == ["master-0"]
    for task in ("evil", "..%2F..%2Fjobs.db", "..", "%2Fetc%2Fpasswd"):
        assert _get(client, f"/api/jobs/done-1/logs/{task}").status_code == 404, task
    assert _get(client, "/static/..%2F_app.py").status_code == 404
    with sqlite3.connect(store.path) as conn:  # a row pointing its directory elsewhere is not followed
        conn.execute("UPDATE jobs SET job_dir = ? WHERE name = 'done-1'", (str(tmp_path),))
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "planted.log").write_text("not the job's\n")
    assert [entry["task"] for entry in _get(client, "/api/jobs/done-1/logs").get_json()["logs"]] == ["master-0"]


def test_log_chunks_page_by_offset_keep_partial_lines_and_replace_bad_bytes(store):
    _job(store, "live-1", state=JobState.RUNNING)
    write_log(store, "live-1", "master-0", b"one\n\xff\xfe two \x1b[31mred\n<script>x</script>\npartial")
    client, _ = _client(store.home)
    first = _get(client, "/api/jobs/live-1/logs/master-0?offset=0").get_json()
    assert first["lines"] == ["one", "\ufffd\ufffd two \x1b[31mred", "<script>x</script>"]  # raw text; pages escape
    again = _get(client, f"/api/jobs/live-1/logs/master-0?offset={first['offset']}").get_json()
    assert again["lines"] == [] and again["offset"] == first["offset"]  # the partial line waits for its end
    tail = _get(client, "/api/jobs/live-1/logs/master-0").get_json()  # no offset: the file's end
    assert tail["lines"][-1] == "<script>x</script>"


def test_the_log_stream_resumes_at_last_event_id_and_ends_with_the_job(store):
    _job(store, "done-1")
    write_log(store, "done-1", "master-0", "a\nb\nc\n")
    client, _ = _client(store.home)
    answer = _get(client, "/api/jobs/done-1/logs/master-0/stream?offset=0")
    text = b"".join(answer.response).decode()
    assert answer.mimetype == "text/event-stream" and "id: 6\nevent: lines" in text
    assert text.endswith("event: end\ndata: {}\n\n")
    assert json.loads(text.split("data: ")[1].split("\n")[0])["lines"] == ["a", "b", "c"]
    resumed = b"".join(_get(client, "/api/jobs/done-1/logs/master-0/stream", headers={"Last-Event-ID": "2"}).response)
    assert json.loads(resumed.decode().split("data: ")[1].split("\n")[0])["lines"] == ["b", "c"]


def test_trials_merge_the_running_trials_fresher_measurements(store):
    make_study(store, "study-1", trials=4, stopped=(2,), failed=(3,))
    client, _ = _client(store.home)
    study = _get(client, "/api/jobs/study-1/trials").get_json()
    trials = {t["trialId"]: t for t in study["trials"]}
    assert len(trials) == 4 and study["bestTrial"]["trialId"] == "1" and trials["2"]["isTrialStoppedEarly"]
    listed = {r["jobId"]: r for r in _get(client, "/api/jobs").get_json()["jobs"]}
    assert listed["study-1"]["trialStates"] == {"SUCCEEDED": 2, "FAILED": 1, "RUNNING": 1}
    assert listed["study-1"]["isStudy"] and listed["study-1-trial-2"]["parentJob"] == "study-1"
    assert len(trials["4"]["allMetrics"]) == 5 and trials["4"]["jobState"] == "RUNNING"  # the summary held 4
    assert trials["3"]["state"] == "FAILED" and trials["3"]["jobState"] == "FAILED"
    measured = _get(client, "/api/jobs/study-1/trials/4/measurements").get_json()["measurements"]
    assert measured[-1] == {"trainingStep": 50, "objectiveValue": 0.6}
    not_a_study = _get(client, "/api/jobs/study-1-trial-1/trials")
    assert not_a_study.status_code == 404 and not_a_study.get_json()["kind"] == "missing"  # the job is there


def test_nan_is_null_and_a_deleted_job_is_said_gone(store):
    _job(store, "done-1", metric=float("nan"))
    client, _ = _client(store.home)
    assert _get(client, "/api/jobs/done-1").get_json()["details"]["metric"] is None
    delete_job(store, "done-1")
    gone = _get(client, "/api/jobs/done-1")
    assert gone.status_code == 404 and gone.get_json()["kind"] == "not-found"


def test_a_hostile_row_is_listed_as_data_and_its_page_refused(store):
    add_raw_job(store, HOSTILE, error="<script>alert(1)</script>")
    client, _ = _client(store.home)
    assert _get(client, "/api/jobs").get_json()["jobs"][0]["jobId"] == HOSTILE
    from urllib.parse import quote
    assert _get(client, "/api/jobs/" + quote(HOSTILE, safe="")).status_code in (400, 404)


def test_cancel_needs_allow_cancel_and_the_pages_origin(store):
    _job(store, "live-1", state=JobState.RUNNING)
    client, token = _client(store.home)
    refused = client.post("/api/jobs/live-1/cancel", headers={"Host": HOST, "Authorization": f"token {token}"})
    assert refused.status_code == 403 and "--allow-cancel" in refused.get_json()["error"]
    client, token = _client(store.home, allow_cancel=True)
    foreign = client.post("/api/jobs/live-1/cancel", headers={"Host": HOST, "Authorization": f"token {token}",
                                                             "Origin": "http://evil.example"})
    assert foreign.status_code == 403
    _job(store, "done-1")
    assert client.post("/api/jobs/done-1/cancel", headers={"Host": HOST, "Authorization": f"token {token}"}
                       ).status_code == 409
    assert store.get("live-1").state is JobState.RUNNING


def test_an_allowed_cancel_stops_a_real_job(home, no_orphans):
    spec = JobSpec.from_dict({}, job_id="probe-1", overrides={
        "pythonModule": "trainer.probe", "packagePath": str(TRAINER), "jobDir": "out", "args": ["--seconds", "60"]})
    api.submit(spec)
    store = JobStore(home)
    deadline = time.monotonic() + 30
    while not any(t.state == "RUNNING" for t in store.get("probe-1").tasks) and time.monotonic() < deadline:
        time.sleep(0.1)
    client, token = _client(home, allow_cancel=True)
    answer = client.post("/api/jobs/probe-1/cancel", headers={"Host": HOST, "Authorization": f"token {token}",
                                                              "Origin": f"http://{HOST}"})
    assert answer.status_code == 202
    while not store.get("probe-1").is_final and time.monotonic() < deadline + 30:
        time.sleep(0.1)
    assert store.get("probe-1").state is JobState.CANCELLED


def test_metrics_are_the_latest_scalars_under_the_output_dir(store, tmp_path):
    out = tmp_path / "out"
    _job(store, "done-1", plan={"args": ["--job-dir", str(out)], "primary": "master"})
    for step in range(3):
        report_metric("loss", 1.0 / (step + 1), step, directory=out / "train", environ={})
    client, _ = _client(store.home)
    metrics = _get(client, "/api/jobs/done-1/metrics").get_json()
    assert metrics["scalars"] == [{**metrics["scalars"][0], "run": "train", "tag": "loss", "step": 2,
                                   "value": pytest.approx(1 / 3)}]
    assert metrics["tensorboard"] == f"tensorboard --logdir {out}"


@pytest.mark.skipif(py_spy() is None, reason="py-spy is not installed (pip install 'tfdist[ui]')")
def test_stacks_show_where_each_running_task_waits(store):
    code = "import time\ndef waits_for_the_test():\n    time.sleep(60)\nprint('up', flush=True)\nwaits_for_the_test()\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        _job(store, "live-1", state=JobState.RUNNING, tasks=("master-0",))
        store.update_task("live-1", "master-0", state="RUNNING", pid=proc.pid, pid_start=start_ticks(proc.pid))
        _job(store, "live-2", state=JobState.RUNNING, tasks=("worker-0",))
        store.update_task("live-2", "worker-0", state="RUNNING", pid=proc.pid, pid_start=12345)  # a reused pid
        client, token = _client(store.home)
        headers = {"Host": HOST, "Authorization": f"token {token}"}
        dumped = client.post("/api/jobs/live-1/stacks", headers=headers).get_json()["tasks"]
        assert "waits_for_the_test" in dumped[0]["stack"], dumped
        reused = client.post("/api/jobs/live-2/stacks", headers=headers).get_json()["tasks"]
        assert "stack" not in reused[0] and "now belongs to another process" in reused[0]["error"]
    finally:
        proc.kill()
        proc.wait()


def test_progress_names_the_quiet_task(store):
    _job(store, "live-1", state=JobState.RUNNING)
    write_log(store, "live-1", "master-0", "step 1\n")
    old = write_log(store, "live-1", "worker-0", "step 1\n")
    os.utime(old, (time.time() - 600, time.time() - 600))
    client, _ = _client(store.home)
    rows = {r["task"]: r for r in _get(client, "/api/jobs/live-1/progress").get_json()["tasks"]}
    assert rows["worker-0"]["stalled"] and rows["worker-0"]["quietSeconds"] >= 599
    assert not rows["master-0"]["stalled"]


def test_tfdist_ui_refuses_a_taken_port(store, monkeypatch):
    monkeypatch.setenv("TFDIST_HOME", str(store.home))
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(["ui", "--port", str(taken.getsockname()[1])])
    assert code == 1 and "cannot serve on 127.0.0.1" in err.getvalue() and "--port" in err.getvalue()
