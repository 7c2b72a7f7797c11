"""Tasks started by hand (no launcher) end by themselves when the chief ends.

Each task is started like a user would in its own terminal: the same script
with its own TF_CONFIG, no launcher watching it (each is forked from one process
that imported TensorFlow, so the tests pay for one import, not one per task).
The ps and workers only run ``strategies.run_role``; nothing but the chief's
goodbye, or the chief's port going away, stops them.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from strategies import EXIT_CHIEF_LOST
from tf_config import generate

SCRIPTS = Path(__file__).parent / "_scripts"

pytestmark = pytest.mark.cluster
_TIMEOUT = 240


@pytest.fixture
def hand_cluster(forked_hand_cluster):
    """Each task forked from a process that imported TensorFlow (tests/cluster/conftest.py), not launched."""
    return forked_hand_cluster


def _start(hand_cluster, chief_args):
    configs = generate(chief=1, workers=2, ps=1)
    for cfg in configs:
        args = chief_args if cfg.task.type == "chief" else []
        hand_cluster.start(str(cfg.task), [str(SCRIPTS / "pss_train.py"), *args], cfg.to_json())
    return [str(cfg.task) for cfg in configs]


@pytest.mark.parametrize("fail, code", [(False, 0), (True, 1)])
def test_servers_exit_with_the_chiefs_outcome(hand_cluster, quiet_tf, tmp_path, no_orphans, fail, code):
    out = tmp_path / "result.json"
    names = _start(hand_cluster, ["--steps", "40", "--out", str(out)] + (["--fail"] if fail else []))
    ended = hand_cluster.wait(_TIMEOUT)
    assert sorted(ended) == sorted(names), {n: hand_cluster.log(n)[-2000:] for n in names if n not in ended}
    assert {name: ended[name][0] for name in names} == dict.fromkeys(names, code), hand_cluster.log("chief-0")[-3000:]
    assert all(end - ended["chief-0"][1] < 30 for _, end in ended.values())
    if fail:
        assert "planned failure after training" in hand_cluster.log("chief-0")
        assert not out.exists()
    else:
        assert json.loads(out.read_text())["steps"] == 40


def test_servers_exit_when_the_chief_is_killed(hand_cluster, quiet_tf, tmp_path, no_orphans):
    names = _start(hand_cluster, ["--steps", "400", "--chief-dies-at-step", "10", "--out", str(tmp_path / "r.json")])
    ended = hand_cluster.wait(_TIMEOUT)
    assert sorted(ended) == sorted(names), {n: hand_cluster.log(n)[-2000:] for n in names if n not in ended}
    assert ended["chief-0"][0] == -9, hand_cluster.log("chief-0")[-3000:]
    for name in ("ps-0", "worker-0", "worker-1"):
        assert ended[name][0] == EXIT_CHIEF_LOST, hand_cluster.log(name)[-2000:]
        assert ended[name][1] - ended["chief-0"][1] < 30
        assert "without saying goodbye; exiting with 3" in hand_cluster.log(name)
