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
    assert "[chief-0] " in out
    # the workers ran the steps themselves (fit's default under parameter servers) and say so
    for worker in ("worker-0", "worker-1"):
        assert any(line.startswith(f"[{worker}] ") and "between-graph steps done:" in line
                   for line in out.splitlines()), out[-3000:]
    # the ps prints only TensorFlow's start-up noise: off the console by default, kept in its log
    assert "[ps-0]" not in out
    assert "Started server with target" in (tmp_path / "home" / "jobs" / "digits-1" / "logs" / "ps-0.log").read_text()
    accuracy = float(out.split("final val_accuracy: ")[1].split()[0])
    assert accuracy > 0.85, out[-2000:]
    job_dir = tmp_path / "runs" / "digits-job"
    assert list(job_dir.glob("ckpt-*.index")), sorted(p.name for p in job_dir.iterdir())
    assert (job_dir / "export" / "model.keras").is_file()


@pytest.mark.cluster
def test_tfdist_demo_trains_and_leaves_checkpoints_tensorboard_logs_and_exports(tmp_path, no_orphans):
    """What `make demo` runs: forked tasks, between-graph workers, a final accuracy and every artifact."""
    run_dir = tmp_path / "demo"
    done = subprocess.run([sys.executable, "-m", "toolkit", "demo", "--epochs", "2", "--dir", str(run_dir)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "[chief-0] Epoch 2/2" in out
    accuracy = float(out.split("final test accuracy: ")[1].split()[0])
    assert accuracy > 0.7 and "(global step 44," in out
    model = run_dir / "model"
    assert (model / "checkpoint").exists() and list(model.glob("ckpt-44.*"))
    assert list((model / "train").glob("events.out.tfevents.*"))
    assert list((model / "validation").glob("events.out.tfevents.*"))
    assert (model / "export" / "model.keras").exists() and (model / "export" / "saved_model").is_dir()
    # every task was forked from the preload process, and the workers ran the steps themselves
    assert (run_dir / "logs" / "preload.log").exists()
    steps = [int(line.rsplit(": ", 1)[1].split()[0]) for worker in ("worker-0", "worker-1")
             for line in (run_dir / "logs" / f"{worker}.log").read_text().splitlines()
             if "between-graph steps done:" in line]
    assert len(steps) == 2 and sum(steps) == 44, steps
