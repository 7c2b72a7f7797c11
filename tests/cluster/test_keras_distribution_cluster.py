"""keras.distribution.DataParallel on a 2-worker cluster started by the launcher (TF_CONFIG from it).

Each worker lists the cluster's devices, runs DataParallel over them, and
trains with Keras' own ``model.fit``: the strategy is MultiWorkerMirrored
with 2 replicas, the loss falls, and both workers end with the same weights.
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
