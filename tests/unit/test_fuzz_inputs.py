"""Property-based fuzzing: whatever bytes reach a parser end as a clean, field-named error.

TF_CONFIG documents and job-spec YAML built from hostile values (tests/unit/_hostile.py)
go through the Python API and through ``tfdist`` in this process; every call runs under
a deadline (5 s of CPU time, 60 s of wall time). A clean error is the documented error family (API) or exit 1/2 with a
printable message and no traceback (CLI). Bounded to well under a minute in all.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _hostile import RAW_TEXTS, cli_outcome, job_docs, outcome, tf_config_docs, write, yaml_text
from hypothesis import HealthCheck, given, settings

from tf_config import TFConfig, TFConfigError, explain, validate
from toolkit.jobs import JobSpec
from toolkit.jobs.errors import JobError

_fuzz = settings(max_examples=150, deadline=None, database=None, derandomize=True,
                 suppress_health_check=list(HealthCheck))
_DRY_RUN = ["jobs", "submit", "training", "fuzz-job", "--backend", "kubernetes", "--dry-run", "--image", "i:1"]


def _assert_clean(result: tuple[str, str]) -> None:
    kind, detail = result
    assert kind in ("ok", "clean"), f"{kind}: {detail}"


@_fuzz
@given(tf_config_docs)
def test_tf_config_documents_get_problems_or_clean_errors(tmp_path_factory, doc):
    _assert_clean(outcome(lambda: validate(doc)))
    _assert_clean(outcome(lambda: explain(doc)))
    text = yaml_text(doc)
    _assert_clean(outcome(lambda: TFConfig.from_json(text), (TFConfigError,)))
    path = tmp_path_factory.mktemp("tfc") / "tf_config.json"
    write(path, text)
    _assert_clean(cli_outcome(["tf-config", "validate", str(path)]))
    _assert_clean(cli_outcome(["tf-config", "explain", str(path)]))


@_fuzz
@given(job_docs)
def test_job_specs_are_accepted_or_refused_by_field(tmp_path_factory, doc):
    _assert_clean(outcome(lambda: JobSpec.from_dict(doc, job_id="fuzz-job"), (JobError,)))
    path = tmp_path_factory.mktemp("spec") / "job.yaml"
    write(path, yaml_text(doc))
    _assert_clean(cli_outcome([*_DRY_RUN, "--config", str(path)]))


@pytest.mark.parametrize("index", range(len(RAW_TEXTS)))
def test_raw_hostile_texts_end_cleanly_everywhere(tmp_path, index):
    text = RAW_TEXTS[index]
    for suffix in (".json", ".yaml"):
        path = tmp_path / f"input{suffix}"
        write(path, text)
        for verb in ("validate", "explain"):
            kind, detail = cli_outcome(["tf-config", verb, str(path)])
            assert kind in ("ok", "clean"), f"tf-config {verb} {suffix}: {kind}: {detail}"
    kind, detail = cli_outcome([*_DRY_RUN, "--config", str(tmp_path / "input.yaml")])
    assert kind == "clean", f"jobs submit --dry-run: {kind}: {detail}"


def test_the_alias_bomb_is_refused_before_it_expands(tmp_path):
    path = tmp_path / "bomb.yaml"
    write(path, RAW_TEXTS[-3])  # nine levels of nine aliases: 387 million strings if expanded
    kind, detail = outcome(lambda: JobSpec.from_file(path, job_id="fuzz-job"), (JobError,))
    assert kind == "clean" and "expands to more than 100,000 values" in detail and "path" in detail


@pytest.mark.parametrize("argv_tail", [
    ["jobs", "submit", "training", "bad-\ud800-name", "--module-name", "t.m", "--backend", "kubernetes",
     "--dry-run"],
    ["jobs", "submit", "training", "ok-name", "--module-name", "t.m", "--job-dir", "out\x00dir", "--backend",
     "kubernetes", "--dry-run"],
    ["tf-config", "validate", "no\x00such-file"],
    ["launch", "--workers", "²", "--", "python", "-c", "pass"],
    ["launch", "--job-dir", "a\x00b", "--", "python", "-c", "pass"],
    ["launch", "--cwd", "\udcff", "--", "python", "-c", "pass"],
    ["launch", "--workers", "100000", "--", "python", "-c", "pass"],  # refused, not 100,000 processes started
    ["launch", "--timeout", "nan", "--", "python", "-c", "pass"],
    ["tf-config", "generate", "--workers", "100000"],
    ["tf-config", "generate", "--workers", "1", "--output-dir", "out\x00"],
    ["jobs", "submit", "training", "ok-name", "--config", "spec\x00.yaml"],
])
def test_hostile_arguments_get_exit_2_or_1_and_a_printable_message(argv_tail):
    kind, detail = cli_outcome(argv_tail)
    assert kind == "clean", f"{kind}: {detail}"


def test_a_real_process_prints_no_traceback_for_hostile_bytes(tmp_path):
    """Through a real interpreter and its UTF-8 streams: a lone surrogate and NUL bytes in a spec."""
    spec = tmp_path / "job.yaml"
    spec.write_bytes(b"trainingInput:\n  pythonModule: t.m\n  region: \"\\ud800\"\n  args: [\"a\\0b\"]\n")
    tfc = tmp_path / "tf.json"
    tfc.write_bytes(json.dumps({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": "\u00b2"},
                                "\ud800": 1}).encode())
    for argv, expected in ((["jobs", "submit", "training", "fz", "--config", str(spec), "--backend", "kubernetes",
                             "--dry-run"], "lone surrogate"),
                           (["tf-config", "validate", str(tfc)], "task.index")):
        proc = subprocess.run([sys.executable, "-m", "toolkit", *argv], capture_output=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONUTF8": "1"})
        out = (proc.stdout + proc.stderr).decode("utf-8")
        assert proc.returncode == 1 and "Traceback" not in out and expected in out, out


_DIGITS = "9" * 5000
_DIGIT_LIMIT_TF_CONFIGS = [
    '{"cluster": {"worker": ["localhost:' + _DIGITS + '"]}, "task": {"type": "worker", "index": 0}}',
    '{"cluster": {"worker": ["localhost:1"]}, "task": {"type": "worker", "index": ' + _DIGITS + '}}',
    '{"cluster": {"worker": ["localhost:1"]}, "task": {"type": "worker", "index": -' + _DIGITS + '}}',
]


@pytest.mark.parametrize("text", _DIGIT_LIMIT_TF_CONFIGS, ids=["port", "index", "negative-index"])
def test_numbers_past_pythons_digit_limit_are_refused_by_field(tmp_path, text):
    """int() of 4,301+ digits raises ValueError with its own words: each reader bounds the digits first."""
    problems = validate(text)
    assert problems and "digits" in problems[0].message and "sys.set_int_max_str_digits" not in str(problems)
    _assert_clean(outcome(lambda: explain(text)))
    _assert_clean(outcome(lambda: TFConfig.from_json(text), (TFConfigError,)))
    path = tmp_path / "tf_config.json"
    write(path, text)
    for verb in ("validate", "explain"):
        kind, detail = cli_outcome(["tf-config", verb, str(path)])
        assert kind == "clean" and "set_int_max_str_digits" not in detail, f"{verb}: {kind}: {detail}"


@pytest.mark.parametrize("seconds", ["9" * 400 + "s", "1" + "0" * 30 + ".5s", "0s", "99999999999s"])
def test_a_max_running_time_beyond_a_year_is_refused_by_field(seconds):
    doc = {"trainingInput": {"scheduling": {"maxRunningTime": seconds}}}
    with pytest.raises(JobError) as info:
        JobSpec.from_dict(doc, job_id="fuzz-job")
    assert "trainingInput.scheduling.maxRunningTime" in str(info.value) and "at most 31,622,400s" in str(info.value)
