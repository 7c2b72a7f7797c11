"""Preemption of a graph-mode Estimator's chief on a real ps + chief + worker cluster.

The job (``_scripts/preempt_estimator.py``: a TF1 ``model_fn`` under
``toolkit.estimator``, checkpoints every 50 steps) has its chief SIGTERM itself
at step 70 and note the step; in the restarted run it SIGTERMs the ps at step 110.
Asserted on the artifacts: each time a checkpoint off the 50-step schedule at the
signalled step plus at most the steps in flight, the chief's first run exiting 143,
the ps serving on until the chief's checkpoint landed and then exiting 143, the
restarted job ending exactly on the last step, and a launch that counted
preemptions and no failure (``max_restarts=0``: a failure would end the job).
The ps tells the chief through the cluster, and the chief's goodbye after its
checkpoint, with 143, is what ends the ps.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parent / "_scripts" / "preempt_estimator.py"
_TOTAL, _EVERY, _AT, _PS_AT = 150, 50, 70, 110
_IN_FLIGHT = 5  # the chief's own step after the signal, plus the worker's steps in between


def _checkpoints(model_dir: Path) -> list[int]:
    return sorted(int(p.name[len("model.ckpt-"):-len(".index")]) for p in model_dir.glob("model.ckpt-*.index"))


@pytest.mark.cluster
def test_estimator_chief_preempted_under_parameter_servers_resumes_at_its_checkpoint(tmp_path, quiet_tf):
    from toolkit.launcher import launch

    model_dir = tmp_path / "model"
    cmd = ["python", str(_SCRIPT), "--model-dir", str(model_dir), "--max-steps", str(_TOTAL),
           "--save-every", str(_EVERY), "--preempt-at", str(_AT), "--preempt-ps-at", str(_PS_AT)]
    result = launch(cmd, job_dir=tmp_path / "job", timeout=400, echo=False, restartable=True, max_restarts=0,
                    settle_period=2.0, preload=("tensorflow",), workers=1, ps=1)
    chief = result.task("chief-0").log_path.read_text()
    assert result.ok, f"{result.message}\n{chief[-3000:]}"
    signals = dict(line.split() for line in (tmp_path / "job" / "signals.txt").read_text().splitlines())
    sent = int(signals["chief"])
    # the chief stopped after the step in flight and its CheckpointSaverHook saved there, off the schedule
    found = re.findall(r"preempted \(SIGTERM [\d.]+ s ago\): chief-0 stopped after the step in flight; "
                       r"newest checkpoint \S+model\.ckpt-(\d+); exiting with 143", chief)
    assert len(found) == 1, chief[-3000:]
    at = int(found[0])
    assert sent <= at <= sent + _IN_FLIGHT and at % _EVERY, (sent, at)
    assert at in _checkpoints(model_dir)
    # the restarted chief resumed from that checkpoint, and the job ended exactly on the last step
    assert f"Restoring parameters from {model_dir}/model.ckpt-{at}\n" in chief.split("exiting with 143", 1)[1], \
        chief[-3000:]
    # the ps's signal: it tells the chief, which stops after the step in flight and checkpoints there; the ps
    # serves until the chief's goodbye (after that checkpoint), and the cluster resumes from it
    ps_sent, ps = int(signals["ps-0"]), result.task("ps-0").log_path.read_text()
    found = re.findall(r"preempted \(ps-0 preempted\): chief-0 stopped after the step in flight; "
                       r"newest checkpoint \S+model\.ckpt-(\d+); exiting with 143", chief)
    assert len(found) == 1, chief[-3000:]
    ps_at = int(found[0])
    # the chief looks for notices every 0.1 s, and the worker's steps go on meanwhile, however long the notice
    # takes to cross the cluster on a loaded machine: the checkpoint is bounded from the step the chief stopped at
    # on the notice, and the notice's travel time is asserted instead (well inside the 25 s grace)
    stopping = re.findall(r"chief-0: stopping at global step (\d+), ps-0 was preempted \(signalled ([\d.]+) s ago\)",
                          chief)
    assert len(stopping) == 1 and float(stopping[0][1]) < 5.0, chief[-3000:]
    assert ps_sent <= ps_at <= int(stopping[0][0]) + _IN_FLIGHT and ps_at % _EVERY and ps_at in _checkpoints(model_dir)
    assert "SIGTERM: ps-0 was preempted; it tells the chief and serves until the chief has checkpointed" in ps
    assert "no goodbye from the chief" not in ps, ps
    # both goodbyes, after the chief's own preemption and after the ps's, reached the ps with 143 (the ps acts
    # on them unless the launcher, which restarts the cluster as soon as the chief exits 143, stops it first)
    assert chief.count("told ps-0 to exit with code 143") == 2, chief[-3000:]
    assert f"Restoring parameters from {model_dir}/model.ckpt-{ps_at}\n" in chief, chief[-3000:]
    assert _checkpoints(model_dir)[-1] == _TOTAL
    assert (tmp_path / "result.json").read_text() == f'{{"global_step": {_TOTAL}}}'
    assert (result.preemptions, result.failures) == (2, 0)
    # the second restart is counted on whichever of the chief and the ps exited 143 first
    assert result.task("chief-0").preemptions + result.task("ps-0").preemptions == 2
