"""One error family and one set of value checks; the library speaks Python, the CLI speaks flags."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tf_config import TFConfigError, generate, validate
from tf_config.checks import check_int, check_number
from tf_config.errors import FieldError, Problem, ProblemsError
from toolkit.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_every_field_error_is_one_family_built_one_way():
    from strategies import DeviceMapError, ShardingError, StrategyError
    from toolkit.data import DataError
    from toolkit.estimator import EstimatorError, RunConfigError, SpecError
    from toolkit.estimator.canned import CannedError
    from toolkit.hypertune import MetricError
    from toolkit.jobs import JobNameError, JobSpecError
    from toolkit.launcher import LaunchError
    from toolkit.training import TrainingError

    for cls in (StrategyError, ShardingError, DataError, EstimatorError, RunConfigError, SpecError, CannedError,
                MetricError, LaunchError, TrainingError):
        error = cls("`x` is 0; expected a positive integer.", field="x")
        assert isinstance(error, FieldError) and isinstance(error, ValueError)
        assert (error.field, str(error)) == ("x", "`x` is 0; expected a positive integer.")
    for cls, title in ((TFConfigError, "invalid TF_CONFIG"), (JobSpecError, "invalid job spec"),
                       (JobNameError, "invalid job spec"), (DeviceMapError, "device map cannot be honoured")):
        error = cls([Problem("warning", "w", "risky"), Problem("error", "a.b", "wrong"), Problem("error", "c", "bad")])
        assert isinstance(error, ProblemsError) and isinstance(error, FieldError)
        assert error.field == "a.b" and [p.field for p in error.problems] == ["a.b", "c", "w"]
        assert str(error) == f"{title} (2 errors):\n  - a.b: wrong\n  - c: bad"
        with pytest.raises(ValueError, match="needs at least one error-severity Problem"):
            cls([Problem("warning", "w", "risky")])


def test_one_copy_of_the_suggestion_helpers():
    import tf_config._suggest
    import toolkit.jobs.errors

    assert toolkit.jobs.errors.show is tf_config._suggest.show
    assert toolkit.jobs.errors.did_you_mean is tf_config._suggest.did_you_mean


def test_value_checks_name_the_field_show_the_value_and_raise_the_callers_error():
    class MyError(FieldError):
        pass

    assert check_int(3, field="workers", minimum=0) == 3 and check_int(None, field="n", optional=True) is None
    for value in (0, 2.0, True, "2"):
        with pytest.raises(MyError) as info:
            check_int(value, field="epochs", error=MyError, example=5)
        assert info.value.field == "epochs"
        assert str(info.value) == f"`epochs` is {value!r}; expected a positive integer. Pass e.g. epochs=5."
    with pytest.raises(FieldError, match=r"^Strategy option `n` is -1; expected an integer >= 0 or None\.$"):
        check_int(-1, field="n", minimum=0, optional=True, owner="Strategy option", fix="")
    assert check_number(0.5, field="timeout") == 0.5 and check_number(0, field="delay", strict=False) == 0
    with pytest.raises(FieldError, match=r"^`timeout` is 0; expected a positive number of seconds\. Pass e.g\. "
                                         r"timeout=60\.$"):
        check_number(0, field="timeout", unit="seconds", example=60)
    with pytest.raises(FieldError, match=r"`delay` is -1; expected a number >= 0"):
        check_number(-1, field="delay", strict=False)


# --- the library names arguments; the CLI names flags ------------------------------------------

_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]+")
_COMMAND = re.compile(r"tfdist (tf-config|jobs|launch|local|demo)\b")
# Flags that are someone else's (Ray's CLI, the user's trainer), quoted to the user on purpose.
# Commands and flags of other tools (Ray's, a trainer's, gcloud's own flags a job spec records), not tfdist's CLI.
_NOT_OURS = ("ray start --head", "--address=", '"train.py", "--epochs"', "'--flag=true'", "a gcloud flag such as")


def _message_texts(tree: ast.AST):
    """The string parts of every ``raise`` and every ``Problem(...)`` (or helper that makes one) message."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) or (isinstance(node, ast.Call) and getattr(
                node.func, "id", getattr(node.func, "attr", "")) in ("Problem", "_err", "_bad", "error", "fail", "warn",
                                                                    "missing")):
            parts = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
            yield node.lineno, "".join(parts)


def test_library_errors_name_no_flag_and_no_command():
    found = []
    for package in ("tf_config", "strategies", "toolkit", "models"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.is_relative_to(ROOT / "toolkit" / "cli"):
                continue
            for line, text in _message_texts(ast.parse(path.read_text())):
                if any(ok in text for ok in _NOT_OURS):
                    continue
                if _FLAG.search(text) or _COMMAND.search(text):
                    found.append(f"{path.relative_to(ROOT)}:{line}: {text[:100]}")
    assert not found, "library messages that speak CLI (name the argument or field instead):\n" + "\n".join(found)


def test_generate_names_the_argument_and_the_cli_the_flag(capsys):
    with pytest.raises(TFConfigError) as info:
        generate(chief=0, dialect="cmle")
    assert info.value.field == "chief" and "pass `chief=1`" in str(info.value) and "--" not in str(info.value)
    assert main(["tf-config", "generate", "--dialect", "cmle", "--chief", "0"]) == 2
    err = capsys.readouterr().err
    assert "error: --chief: `--chief` is 0; expected 1 for cmle. CMLE always runs a master; pass `--chief 1`." in err


def test_validate_suggests_a_call_and_the_cli_the_command(tmp_path, capsys):
    doc = {"cluster": {"chief": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"]},
           "task": {"type": "chief", "index": 0}}
    (problem,) = validate(doc, strategy="parameter_server")
    assert "Generate it with `tf_config.generate(ps=1)`" in problem.message
    path = tmp_path / "tf_config.json"
    path.write_text(__import__("json").dumps(doc))
    assert main(["tf-config", "validate", str(path), "--strategy", "parameter_server"]) == 1
    assert "Generate it with `tfdist tf-config generate --ps 1`" in capsys.readouterr().out


def test_jobs_errors_name_the_argument_and_the_cli_the_flag(tmp_path, monkeypatch, capsys):
    from toolkit.jobs import JobSpec, JobSpecError, api, describe

    monkeypatch.setenv("TFDIST_HOME", str(tmp_path / "home"))
    with pytest.raises(JobSpecError) as info:
        JobSpec.from_file(tmp_path / "missing.yaml")
    assert info.value.field == "path" and "--config" not in str(info.value)
    with pytest.raises(JobSpecError) as info:
        api.get_backend("local", address="ray://head:10001")
    assert info.value.field == "address" and "pass `backend='ray'`" in str(info.value)
    with pytest.raises(LookupError, match=r"See the jobs with `toolkit\.jobs\.list_jobs\(\)`"):
        describe("nope")

    assert main(["jobs", "submit", "training", "job-1", "--config", str(tmp_path / "missing.yaml")]) != 0
    assert "ERROR: invalid job spec: --config: cannot read" in capsys.readouterr().err
    assert main(["jobs", "submit", "training", "job-1", "--module-name", "t.task", "--ray-address", "x"]) != 0
    assert ("ERROR: invalid job spec: --ray-address: applies to the ray backend only; remove it or pass "
            "`--backend ray`.") in capsys.readouterr().err
    assert main(["jobs", "describe", "nope"]) != 0
    assert "See the jobs with `tfdist jobs list`." in capsys.readouterr().err


@pytest.mark.parametrize("name", ["tf_config.errors", "tf_config.checks", "tf_config.lazy", "toolkit.cli._flags"])
def test_docstring_examples(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
