"""`tfdist launch`: flags, the command after `--`, exit codes."""
from __future__ import annotations

import subprocess
import sys

import pytest

from toolkit.cli import main


def test_help_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit) as info:
        main(["launch", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for line in ("N    the chief's exit code", "2    usage error", "124  the job ran past --timeout",
                 "130  interrupted"):
        assert line in out


def test_the_chiefs_exit_code_is_the_commands(tmp_path, capsys, no_orphans):
    code = main(["launch", "--workers", "2", "--job-dir", str(tmp_path / "job"), "--grace-period", "1", "--",
                 "python", "-c", "import os, sys; print('task', os.environ['TFDIST_TASK_NAME']); "
                 "sys.exit(4 if os.environ['TFDIST_TASK_NAME'] == 'worker-0' else 0)"])
    captured = capsys.readouterr()
    assert code == 4
    assert "[worker-0] task worker-0" in captured.out and "[worker-1] task worker-1" in captured.out
    assert "tfdist launch: failed" in captured.err and "exit code 4" in captured.err
    assert "the chief (worker-0) exited with code 4" in captured.err
    assert (tmp_path / "job" / "logs" / "worker-1.log").read_text() == "task worker-1\n"


def test_ps_without_chief_adds_the_coordinator(tmp_path, capsys, no_orphans):
    code = main(["launch", "--workers", "1", "--ps", "1", "--quiet", "--job-dir", str(tmp_path / "job"), "--",
                 "python", "-c", "pass"])
    err = capsys.readouterr().err
    assert code == 0
    assert "tasks: ps-0=0, chief-0=0, worker-0=0" in err


def test_cmle_dialect_and_cwd_flags(tmp_path, capsys, no_orphans):
    code = main(["launch", "--workers", "1", "--ps", "1", "--dialect", "cmle", "--cwd", str(tmp_path),
                 "--job-dir", str(tmp_path / "job"), "--", "python", "-c",
                 "import json, os; print(json.loads(os.environ['TF_CONFIG'])['task']['type'], os.getcwd())"])
    captured = capsys.readouterr()
    assert code == 0 and "tasks: ps-0=0, master-0=0, worker-0=0" in captured.err
    assert f"[master-0] master {tmp_path}" in captured.out and f"[worker-0] worker {tmp_path}" in captured.out


@pytest.mark.parametrize("argv, text", [
    (["launch", "--workers", "2"], "no command to run; put it after `--`"),
    (["launch", "--dialect", "cmle", "--chief", "0", "--", "python", "-c", "pass"],
     "`--chief` is 0 with `--dialect cmle`: a Cloud ML Engine job always runs a master"),
    (["launch", "--", "definitely-not-a-program-xyz"], "'definitely-not-a-program-xyz' was not found"),
])
def test_usage_errors_exit_2(argv, text, capsys, tmp_path):
    assert main([*argv[:1], "--job-dir", str(tmp_path / "job"), *argv[1:]]) == 2
    assert text in capsys.readouterr().err


def test_bad_flag_values_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["launch", "--workers", "-1", "--", "python"])
    assert info.value.code == 2
    assert "expected an integer >= 0, received -1" in capsys.readouterr().err


def test_the_cli_module_does_not_import_tensorflow(no_orphans):
    code = ("import sys; from toolkit.cli import build_parser; build_parser(); "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("flags, env, isolated", [
    ([], None, True), (["--no-isolate"], None, False), ([], "0", False), (["--isolate"], "0", True),
])
def test_isolation_is_on_by_default_and_can_be_turned_off(tmp_path, capsys, monkeypatch, no_orphans,
                                                          flags, env, isolated):
    import os

    from toolkit.launcher.local._isolation import unavailable_reason

    if unavailable_reason() is not None:
        pytest.skip(f"no network isolation here: {unavailable_reason()}")
    monkeypatch.delenv("TFDIST_ISOLATE", raising=False)
    if env is not None:
        monkeypatch.setenv("TFDIST_ISOLATE", env)
    code = main(["launch", "--workers", "2", *flags, "--job-dir", str(tmp_path / "job"), "--",
                 "python", "-c", "import os; print('netns', os.readlink('/proc/self/ns/net'))"])
    out = capsys.readouterr().out
    namespaces = {line.split("netns ", 1)[1] for line in out.splitlines() if "netns " in line}
    assert code == 0 and len(namespaces) == 1  # both tasks share one namespace...
    assert (namespaces != {os.readlink("/proc/self/ns/net")}) == isolated  # ...a private one, or ours
