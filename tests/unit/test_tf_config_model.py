"""The TFConfig model: builders, round-trips, derived facts, immutability."""
from __future__ import annotations

import dataclasses
import json
import logging

import pytest

from tf_config import Task, TFConfig, TFConfigError

SEED = {"cluster": {"ps": ["localhost:2221"], "chief": ["localhost:2222"],
                    "worker": ["localhost:2223", "localhost:2224"]},
        "task": {"type": "worker", "index": 1}}
CMLE = {"cluster": {"master": ["m:2222"], "worker": ["w0:2222", "w1:2222"], "ps": ["p:2222"]},
        "task": {"type": "worker", "index": 0, "trial": "3", "cloud": "abc"},
        "environment": "cloud", "rpc_layer": "grpc", "session_master": "grpc://m:2222",
        "job": {"scaleTier": "CUSTOM", "args": ["--lr", "0.1"]}}


def test_from_env_unset_or_blank_is_local(monkeypatch):
    assert TFConfig.from_env().is_local
    monkeypatch.setenv("TF_CONFIG", "  ")
    cfg = TFConfig.from_env()
    assert cfg == TFConfig() and cfg.task is None and dict(cfg.cluster) == {}


def test_from_env_reads_tf_config(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps(SEED))
    cfg = TFConfig.from_env()
    assert cfg.task == Task("worker", 1) and cfg.address == "localhost:2224"
    assert TFConfig.from_env({"TF_CONFIG": json.dumps(SEED)}) == cfg
    assert TFConfig.from_env({}).is_local  # an explicit environ wins over os.environ


def test_from_env_raises_with_every_error(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"workers": ["a:1"]}, "task": {"type": "worker", "index": -1}}')
    with pytest.raises(TFConfigError) as info:
        TFConfig.from_env()
    err = info.value
    # 'workers' is a legal (custom) job name for TensorFlow: a warning, kept with the errors.
    assert isinstance(err, ValueError) and err.field == "task.type"
    assert "invalid TF_CONFIG (2 errors)" in str(err)
    assert "Did you mean 'workers'?" in str(err) and "`task.index` is -1" in str(err)
    assert any(p.field == "cluster.workers" and p.severity == "warning" for p in err.problems)


def test_warnings_are_logged_not_raised(caplog):
    with caplog.at_level(logging.WARNING, logger="tf_config"):
        cfg = TFConfig.from_dict({**SEED, "clusterr": 1})
    assert cfg.num_ps == 1
    assert "Did you mean 'cluster'?" in caplog.text


@pytest.mark.parametrize("doc", [SEED, CMLE, {"cluster": {}}, {"cluster": {"worker": ["a:1"]},
                                                            "task": {"type": "worker", "index": 0},
                                                            "service": {"type": "x"}}])
def test_round_trip_keeps_every_legal_key(doc):
    cfg = TFConfig.from_json(json.dumps(doc))
    assert json.loads(cfg.to_json()) == doc == cfg.to_dict()
    assert TFConfig.from_json(cfg.to_json(indent=2)) == cfg
    assert TFConfig.from_dict(cfg.to_dict()) == cfg


def test_cmle_extras_are_exposed():
    cfg = TFConfig.from_dict(CMLE)
    assert cfg.task.trial == "3" and cfg.environment == "cloud" and cfg.rpc_layer == "grpc"
    assert cfg.job["scaleTier"] == "CUSTOM" and cfg.session_master == "grpc://m:2222"
    assert cfg.chief_job == "master" and cfg.chief_address == "m:2222"


def test_config_is_immutable():
    cfg = TFConfig.from_dict(SEED)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.task = None
    with pytest.raises(TypeError):
        cfg.cluster["ps"] = ("x:1",)
    assert isinstance(cfg.cluster["worker"], tuple)
    cfg.to_dict()["cluster"]["ps"].append("x:1")
    assert cfg.num_ps == 1
    assert hash(cfg) == hash(TFConfig.from_dict(SEED))


def test_direct_construction_validates():
    with pytest.raises(TFConfigError, match="`task.index` is 5 but `cluster.worker` has 1 address"):
        TFConfig(cluster={"worker": ["a:1"]}, task=Task("worker", 5))


def test_task_given_as_a_dict_becomes_a_task():
    cfg = TFConfig(cluster={"worker": ["a:1"]}, task={"type": "worker", "index": 0, "trial": "2"})
    assert cfg.task == Task("worker", 0, trial="2") and cfg.is_chief


def test_with_task_revalidates():
    cfg = TFConfig.from_dict(SEED)
    assert cfg.with_task("ps", 0).is_ps and cfg.with_task("ps", 0).cluster == cfg.cluster
    with pytest.raises(TFConfigError, match="valid: 0..1"):
        cfg.with_task("worker", 2)


@pytest.mark.parametrize("task, is_chief, global_id, address", [
    (("chief", 0), True, 0, "localhost:2222"),
    (("worker", 0), False, 1, "localhost:2223"),
    (("worker", 1), False, 2, "localhost:2224"),
    (("ps", 0), False, 3, "localhost:2221"),
    (("evaluator", 0), False, None, None),
])
def test_derived_facts_with_chief(task, is_chief, global_id, address):
    cfg = TFConfig.from_dict(SEED).with_task(*task)
    assert (cfg.is_chief, cfg.global_id, cfg.address) == (is_chief, global_id, address)
    assert (cfg.num_workers, cfg.num_ps, cfg.chief_job, cfg.is_local) == (3, 1, "chief", False)
    assert cfg.is_evaluator == (task[0] == "evaluator") and cfg.is_ps == (task[0] == "ps")


def test_worker_0_is_chief_without_chief_and_global_ids_sort_jobs():
    cluster = {"ps": ["p:1", "p:2"], "worker": ["w:1", "w:2"], "evaluator": ["e:1"]}
    cfg = TFConfig.from_dict({"cluster": cluster, "task": {"type": "worker", "index": 0}})
    assert cfg.is_chief and cfg.chief_job == "worker" and cfg.chief_address == "w:1"
    assert not cfg.with_task("worker", 1).is_chief
    # As TensorFlow's RunConfig counts: a listed evaluator takes its alphabetical slot, ps come last.
    assert [cfg.with_task(*t).global_id for t in (("worker", 0), ("worker", 1), ("ps", 0), ("ps", 1))] == [0, 1, 3, 4]
    assert cfg.with_task("evaluator", 0).global_id is None
    assert cfg.num_workers == 2


def test_master_is_chief():
    cfg = TFConfig.from_dict(CMLE)
    assert cfg.with_task("master", 0).is_chief and cfg.with_task("master", 0).global_id == 0
    assert cfg.global_id == 1 and cfg.with_task("ps", 0).global_id == 3 and cfg.num_workers == 3


def test_local_defaults():
    cfg = TFConfig()
    assert (cfg.task_type, cfg.task_index, cfg.is_chief, cfg.num_workers, cfg.num_ps) == ("worker", 0, True, 1, 0)
    assert (cfg.global_id, cfg.address, cfg.chief_address, cfg.chief_job) == (0, None, None, None)
    assert cfg.to_json() == '{"cluster": {}}'


def test_tfconfig_error_lists_errors_then_warnings():
    with pytest.raises(TFConfigError) as info:
        TFConfig.from_dict({"clustr": 1, "cluster": {"worker": ["a:1"]}, "task": {"type": "ps", "index": 0}})
    assert [p.severity for p in info.value.problems] == ["error", "warning"]
    assert "clustr" not in str(info.value)
