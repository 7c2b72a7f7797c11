"""The v1 ``ParameterServerStrategy`` under ``RunConfig(train_distribute=...)`` on a local ps/chief/worker cluster.

TF 2.x Estimators accepted ``tf.compat.v1.distribute.experimental.ParameterServerStrategy`` and ran it as
between-graph replication: the variables live on the ps, the chief and each worker step on their own.
The launcher starts every task with its TF_CONFIG; every task exits 0, the variables were placed on the
ps, both trainers stepped, and the chief's checkpoint is at ``max_steps``.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parent / "_scripts" / "estimator_v1_pss.py"
_STEPS = 60


@pytest.mark.cluster
def test_v1_parameter_server_strategy_trains_between_graph_on_the_ps(tmp_path, quiet_tf):
    import tensorflow as tf

    from toolkit.launcher import launch

    model_dir = tmp_path / "model"
    result = launch(["python", str(_SCRIPT), str(model_dir), str(_STEPS)], job_dir=tmp_path / "job", timeout=240,
                    echo=False, preload=("tensorflow",), workers=1, ps=1)
    logs = {task.name: task.log_path.read_text() for task in result.tasks}
    assert result.ok, f"{result.message}\n" + "\n".join(f"{n}: {log[-2000:]}" for n, log in logs.items())
    assert sorted(logs) == ["chief-0", "ps-0", "worker-0"]
    steps = {}
    for name in ("chief-0", "worker-0"):
        placed = re.findall(r"variables on \[(.*)\]", logs[name])
        assert placed and all("/job:ps/" in device for device in placed[0].split(",")), logs[name][-2000:]
        found = re.findall(r"^local steps (\d+)$", logs[name], re.M)
        assert found, logs[name][-2000:]
        steps[name] = int(found[-1])
    # between-graph: both trainers stepped against the shared global step on the ps (asynchronously)
    assert steps["chief-0"] > 0 and steps["worker-0"] > 0 and sum(steps.values()) >= _STEPS, steps
    checkpoint = tf.train.latest_checkpoint(str(model_dir))
    assert checkpoint and tf.train.load_variable(checkpoint, "global_step") >= _STEPS
    assert [(t.exit_code, t.stopped) for t in result.tasks if t.name == "ps-0"] == [(0, False)]  # ended by itself
