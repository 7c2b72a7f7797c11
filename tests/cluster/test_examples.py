"""The README's job example, run exactly as a newcomer would: submit, follow the logs, succeed."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.jobs import JobSpec

_ROOT = Path(__file__).resolve().parents[2]
_EXAMPLES = _ROOT / "examples"


@pytest.mark.parametrize("name", ["digits_ps.yaml", "digits_tuning.yaml"])
def test_example_job_specs_parse(name):
    spec = JobSpec.from_file(_EXAMPLES / "jobs" / name)
    assert spec.training_input.python_module == "trainer.task"


@pytest.mark.cluster
def test_example_parameter_server_job_trains_digits_and_succeeds(tmp_path, no_orphans):
    # the console's noise filter steps aside for a user's own TF_CPP_MIN_LOG_LEVEL: test the default
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["TFDIST_HOME"] = str(tmp_path / "home")
    cmd = [sys.executable, "-m", "toolkit", "jobs", "submit", "training", "digits-1",
           "--config", str(_EXAMPLES / "jobs" / "digits_ps.yaml"),
           "--package-path", str(_EXAMPLES / "trainer"), "--stream-logs"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "Job [digits-1] ended SUCCEEDED." in out
    for task in ("[chief-0]", "[worker-0]", "[worker-1]"):
        assert task in out
    # the ps prints only TensorFlow's start-up noise: off the console by default, kept in its log
    assert "[ps-0]" not in out
    assert "Started server with target" in (tmp_path / "home" / "jobs" / "digits-1" / "logs" / "ps-0.log").read_text()
    accuracy = float(out.split("final val_accuracy: ")[1].split()[0])
    assert accuracy > 0.85, out[-2000:]
    job_dir = tmp_path / "runs" / "digits-job"
    assert list(job_dir.glob("ckpt-*.index")), sorted(p.name for p in job_dir.iterdir())
    assert (job_dir / "export" / "model.keras").is_file()
