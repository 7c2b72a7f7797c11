"""Hostile output stays bounded: one endless line, a full disk, a log cap, terminal escapes.

A task that prints 8 MiB without a newline must not grow the launcher (lines are cut at ``MAX_LINE`` for the
console and the failure message; the log keeps every byte); a log write that fails with ENOSPC is counted and
the pipe still drained; ``max_log_bytes`` caps a run's log; every human view escapes control characters.
"""
from __future__ import annotations

import os

import pytest

from toolkit.jobs import JobSpec
from toolkit.jobs.errors import JobError
from toolkit.jobs.storage.logs import LogFollower
from toolkit.jobs.storage.records import JobRecord, TaskRecord
from toolkit.jobs.storage.states import JobState
from toolkit.jobs.views import format_list, format_record
from toolkit.launcher import launch
from toolkit.launcher._lines import MAX_LINE, LineCutter, LogSink

_ESCAPES = "\x1b]0;owned\x07\x1b[2J\rSUCCEEDED"


def test_an_endless_line_is_cut_and_counted():
    cutter = LineCutter()
    lines = []
    for _ in range(64):
        lines += cutter.feed(b"x" * 65536)
    lines += cutter.feed(b"tail\nnext line\n")
    assert len(lines) == 2 and lines[1] == "next line"
    assert lines[0].startswith("x" * MAX_LINE) and len(lines[0]) < MAX_LINE + 100
    assert f"[... {64 * 65536 + 4 - MAX_LINE:,} more bytes of this line cut; the log file has them]" in lines[0]


def test_a_full_disk_is_recorded_and_the_output_still_drained():
    sink = LogSink(os.open("/dev/full", os.O_WRONLY), name="/dev/full")
    for _ in range(3):
        sink.write(b"line\n")  # never raises: the pump goes on reading the task's pipe
    sink.close()
    assert sink.error == "No space left on device" and sink.dropped == 15 and sink.written == 0


def test_a_task_printing_8_mib_without_a_newline_fails_with_a_short_message(tmp_path, no_orphans):
    script = "import sys; sys.stdout.write('y' * (8 << 20)); sys.stdout.flush(); sys.exit(3)"
    result = launch(["python", "-c", script], job_dir=tmp_path / "job", echo=False, isolate=False)
    assert result.exit_code == 3
    assert len(result.message) < 2000 and "more bytes of this line cut" not in result.message  # quoted 500 chars
    assert (tmp_path / "job" / "logs" / "worker-0.log").stat().st_size == 8 << 20  # the log has every byte


def test_max_log_bytes_caps_a_runs_log_and_says_so(tmp_path, no_orphans):
    script = "print('z' * 100_000)"
    result = launch(["python", "-c", script], job_dir=tmp_path / "job", echo=False, isolate=False,
                    max_log_bytes=1000)
    assert result.exit_code == 0
    log = (tmp_path / "job" / "logs" / "worker-0.log").read_bytes()
    assert log.startswith(b"z" * 1000) and b"the log reached its cap of 1,000 bytes" in log and len(log) < 1200
    assert result.task("worker-0").log_problem == "its log reached its cap of 1,000 bytes; 99,001 bytes were not kept"


def test_every_view_escapes_control_characters(tmp_path):
    record = JobRecord(name="j", backend="local", state=JobState.FAILED, spec={"args": [_ESCAPES]}, created_at=0,
                       error=_ESCAPES, tasks=(TaskRecord(name="master-0", state="FAILED", reason=_ESCAPES),))
    for text in (format_record(record), format_list([record])):
        assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    assert "\\x1b]0;owned\\x07\\x1b[2J\\rSUCCEEDED" in format_record(record)


def test_stream_logs_reads_a_bounded_amount_and_cuts_long_lines(tmp_path):
    (tmp_path / "worker-0.log").write_bytes(b"a" * (3 << 20) + b"\nshort\n")
    seen: list[str] = []
    LogFollower(tmp_path, None, seen.append).poll(final=True)
    assert len(seen) == 2 and seen[1] == "[worker-0] short" and len(seen[0]) < MAX_LINE + 100


def test_control_characters_in_categorical_values_are_refused_at_submit():
    doc = {"trainingInput": {"hyperparameters": {"goal": "MAXIMIZE", "hyperparameterMetricTag": "acc",
                                                 "maxTrials": 2, "params": [
                                                     {"parameterName": "opt", "type": "CATEGORICAL",
                                                      "categoricalValues": ["adam", "sgd\x1b[2J"]}]}}}
    with pytest.raises(JobError) as info:
        JobSpec.from_dict(doc, job_id="hp")
    assert "categoricalValues" in str(info.value) and "without control characters" in str(info.value)


def test_readers_write_nothing_to_the_store(tmp_path):
    from toolkit.jobs import JobStore

    JobStore(tmp_path).create("j", backend="local", spec={})
    files = [p for p in sorted(tmp_path.glob("jobs.db*")) if p.suffix != ".db-shm"]  # -shm is shared memory
    before = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in files}
    store = JobStore(tmp_path)  # a reader's start: no schema write, no WAL pragma
    assert store.get("j").state is JobState.QUEUED and store.names() == ["j"]
    assert {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in files} == before


def test_a_damaged_store_is_one_line_not_a_traceback(tmp_path, capsys, monkeypatch):
    from toolkit.cli import main

    (tmp_path / "jobs.db").write_bytes(b"not a database, " * 512)
    monkeypatch.setenv("TFDIST_HOME", str(tmp_path))
    code = main(["jobs", "list"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1, err
    assert f"ERROR: the job store {tmp_path / 'jobs.db'} cannot be used: file is not a database" in err


def test_arguments_that_would_not_fit_execve_are_refused_at_submit(tmp_path):
    from toolkit.jobs import JobSpecError, JobStore, api

    spec = JobSpec.from_dict({}, job_id="big-args", overrides={"pythonModule": "trainer.task",
                                                                "args": ["a" * 60_000] * 3})
    with pytest.raises(JobSpecError) as info:
        api.submit(spec, home=tmp_path)
    assert info.value.field == "trainingInput.args"
    assert "Linux refuses an environment variable of 131,072 bytes or more" in str(info.value)
    assert JobStore(tmp_path).names() == []  # nothing recorded, nothing started
    small = JobSpec.from_dict({}, job_id="ok-args", overrides={"pythonModule": "trainer.task",
                                                                "args": ["a" * 30_000]})
    from toolkit.jobs.engines.local._local_plan import plan_local
    assert plan_local(small, cwd=tmp_path)[0].args == ("a" * 30_000,)


def test_a_tasks_lost_log_output_is_recorded_on_the_job(tmp_path):
    from pathlib import Path

    from toolkit.jobs import JobStore
    from toolkit.jobs.engines.local._run_parts import finish
    from toolkit.launcher import LaunchResult, Reason, TaskResult

    store = JobStore(tmp_path)
    store.create("full", backend="local", spec={})
    task = TaskResult(name="master-0", task_type="master", index=0, exit_code=0, restarts=0, stopped=False,
                      log_path=Path("master-0.log"), log_problem="its log lost 4,096 bytes: No space left on device")
    finish(LaunchResult(0, Reason.SUCCEEDED, "ok", (task,), 1.0, tmp_path, 0), store=store, job="full")
    assert store.get("full").details["logProblems"] == {
        "master-0": "its log lost 4,096 bytes: No space left on device"}


def test_metric_lines_of_any_shape_parse_or_are_skipped_with_a_reason():
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from toolkit.jobs.tuning._metric_file import _parse

    scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10 ** 30), max_value=10 ** 30),
                        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
                        st.just("9" * 5000), st.just("Infinity"), st.just("1e400"))
    records = st.dictionaries(st.sampled_from(["global_step", "timestamp", "accuracy", "loss", "trial"]), scalars,
                              max_size=4)

    @settings(max_examples=200, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(records)
    def check(record):
        import json
        import math

        try:
            parsed = _parse(json.dumps(record))
        except ValueError:
            return
        for _, (_, step, value) in parsed:
            assert 0 <= step <= 2 ** 63 - 1 and not math.isinf(value)

    check()
