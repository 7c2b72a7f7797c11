"""keras.distribution on clusters started by the launcher (TF_CONFIG from it).

* DataParallel on 2 workers: each lists the cluster's devices, runs
  DataParallel over them and trains with Keras' own ``model.fit``: the
  strategy is MultiWorkerMirrored with 2 replicas, the loss falls, and both
  workers end with the same weights.
* ModelParallel over 2 ps: the chief connects (an in-graph session), a mesh
  over the ps devices splits a layer's kernel, one shard and its Adam slots on
  each ps; Keras' fit trains it; every task exits 0.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.cluster

_SCRIPT = Path(__file__).resolve().parent / "_scripts" / "keras_dp_train.py"


def test_data_parallel_on_two_workers_trains_one_model(tmp_path):
    from toolkit.launcher import launch

    out = tmp_path / "out"
    out.mkdir()
    result = launch(["python", str(_SCRIPT), str(out)], workers=2, ps=0, job_dir=tmp_path / "job", timeout=240,
                    echo=False, preload=("tensorflow", "keras"))
    assert result.ok, result.message
    seen = [json.loads((out / f"process{i}.json").read_text()) for i in range(2)]
    for process in seen:
        assert process["devices"] == [f"/job:worker/replica:0/task:{i}/device:CPU:0" for i in range(2)]
        assert (process["processes"], process["strategy"], process["replicas"]) == (
            2, "CollectiveAllReduceStrategy", 2)
        assert process["loss"][-1] < 0.2 * process["loss"][0]
    for mine, theirs in zip(seen[0]["weights"], seen[1]["weights"], strict=True):
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))


def test_model_parallel_over_two_ps_splits_the_layer_across_them(tmp_path):
    from toolkit.launcher import launch

    out = tmp_path / "result.json"
    result = launch(["python", str(_SCRIPT.with_name("keras_mp_ps.py")), str(out)], workers=1, ps=2,
                    job_dir=tmp_path / "job", timeout=240, echo=False, preload=("tensorflow", "keras"))
    assert result.ok, result.message
    for task in result.tasks:
        assert task.exit_code == 0, task.name  # the ps exit when the client releases them
    seen = json.loads(out.read_text())
    assert seen["ps"] == [f"/job:ps/replica:0/task:{i}/device:CPU:0" for i in range(2)]
    rows = {(r["variable"], r["shard"]): r for r in seen["rows"]}
    for shard in range(2):
        row = rows[("table/kernel", f"{shard}/2")]
        where = [f"ps:{shard} CPU:0"]
        assert (row["shape"], row["devices"], row["slots"]) == ([32, 32], where, where)
    assert rows[("head/kernel", "-")]["devices"] == ["chief:0 CPU:0"]  # the client, whole
    assert seen["loss"][-1] < 0.5 * seen["loss"][0]
