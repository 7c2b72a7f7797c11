"""estimator.py (a TF1-style Estimator script) started by hand in every task of a real cluster, the seed's
four-terminal procedure.

TF_CONFIGs come from ``tf_config.generate`` (what ``tfdist tf-config generate --chief 1
--workers 2 --ps 1 --evaluator 1`` prints) and each task is started by hand with its own
exported TF_CONFIG, not the launcher (forked from one process that imported TensorFlow,
so the test pays for one import): the point is that hand-started tasks, the ps included,
end by themselves with exit code 0.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tf_config import generate

_ROOT = Path(__file__).resolve().parents[2]
_TIMEOUT = 240


@pytest.fixture
def hand_cluster(forked_hand_cluster):
    """Each task forked from a process that imported TensorFlow once (conftest.py), not a fresh interpreter."""
    return forked_hand_cluster


@pytest.mark.cluster
def test_four_terminals_and_an_evaluator_all_exit_zero(tmp_path, no_orphans, hand_cluster, quiet_tf):
    model_dir = tmp_path / "model"
    args = [str(_ROOT / "estimator.py"), "--model_dir", str(model_dir), "--train_steps", "200",
            "--save_checkpoints_steps", "50", "--batch_size", "32", "-v"]
    for cfg in generate(chief=1, workers=2, ps=1, evaluator=1):
        hand_cluster.start(f"{cfg.task_type}-{cfg.task_index}", args, cfg.to_json())
    codes = {name: code for name, (code, _) in hand_cluster.wait(_TIMEOUT).items()}
    procs = hand_cluster.procs
    logs = {name: hand_cluster.log(name) for name in procs}
    assert codes == {name: 0 for name in procs}, {n: logs[n][-2000:] for n in procs if codes.get(n) != 0}
    assert set(procs) == {"ps-0", "chief-0", "worker-0", "worker-1", "evaluator-0"}
    assert (model_dir / "checkpoint").exists() and list(model_dir.glob("model.ckpt-20[0-9].index"))
    evaluator = re.search(r"\[evaluator-0\] global_step=(\d+) accuracy=([0-9.]+)", logs["evaluator-0"])
    assert evaluator, logs["evaluator-0"][-2000:]
    assert int(evaluator.group(1)) >= 200 and float(evaluator.group(2)) > 0.6
    assert "[chief-0] done" in logs["chief-0"] and "[worker-1] done" in logs["worker-1"]
    # between-graph: each training task ran its own session on its own shard against the ps
    for name in ("chief-0", "worker-0", "worker-1"):
        assert re.search(rf"{name}: \d+ local steps", logs[name]), logs[name][-2000:]
    assert "the chief said goodbye; exiting with 0" in logs["ps-0"]
    assert list((model_dir / "export" / "exporter").glob("*/saved_model.pb"))
