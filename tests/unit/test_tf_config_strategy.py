"""Strategy-aware checks and the `auto` recommendation."""
from __future__ import annotations

import pytest

from tf_config import STRATEGIES, TFConfig, TFConfigError, recommend_strategy, validate

PS = {"ps": ["127.0.0.1:2221"], "chief": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223", "127.0.0.1:2224"]}
MWMS = {"chief": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"]}


def _cfg(cluster, task_type="chief", index=0):
    return TFConfig.from_dict({"cluster": cluster, "task": {"type": task_type, "index": index}})


def _messages(doc, strategy, field, severity="error"):
    return [p.message for p in validate(doc, strategy=strategy) if p.field == field and p.severity == severity]


def test_parameter_server_needs_ps():
    (msg,) = _messages({"cluster": MWMS, "task": {"type": "chief", "index": 0}}, "parameter_server", "cluster.ps")
    assert msg == ("parameter_server needs at least one `ps` task; the cluster has none. "
                   "Generate it with `tf_config.generate(ps=1)`, or use multi_worker_mirrored.")


def test_parameter_server_needs_a_worker_and_a_chief():
    doc = {"cluster": {"ps": ["a:1"], "master": ["a:2"]}, "task": {"type": "ps", "index": 0}}
    assert "`tf_config.generate(workers=1)`" in _messages(doc, "parameter_server", "cluster.worker")[0]
    doc = {"cluster": {"ps": ["a:1"], "worker": ["a:2"]}, "task": {"type": "ps", "index": 0}}
    msg = _messages(doc, "parameter_server", "cluster.chief")[0]
    assert "coordinator" in msg and "`tf_config.generate(chief=1)`" in msg
    assert recommend_strategy(TFConfig.from_dict(doc))[1].endswith(
        "but no chief: TF1's between-graph layout, which TF1 graph scripts run; TF2's ParameterServerStrategy "
        "would need a chief")
    # TF1's between-graph layout (and Kubeflow's usual TFJob) is named, with who can run it and the fix
    assert "TF1's between-graph layout (ps and workers, worker 0 the chief)" in msg
    assert "only TF1 graph scripts (`replica_device_setter`, `MonitoredTrainingSession`) can run" in msg
    assert "(launcher: chief=1)" in msg


def test_parameter_server_without_cluster():
    (msg,) = _messages({}, "parameter_server", "cluster")
    assert "`tf_config.generate(chief=1, workers=2, ps=1)`" in msg


def test_multi_worker_mirrored_rejects_ps():
    (msg,) = _messages(_cfg(PS), "multi_worker_mirrored", "cluster.ps")
    assert "must have no `ps` task; the cluster has 1" in msg and "`tf_config.generate(ps=0)`" in msg


@pytest.mark.parametrize("strategy", ["parameter_server", "multi_worker_mirrored"])
def test_tf2_strategies_reject_master(strategy):
    doc = {"cluster": {"master": ["a:1"], "worker": ["a:2"], "ps": ["a:3"]}, "task": {"type": "ps", "index": 0}}
    (msg,) = _messages(doc, strategy, "cluster.master")
    assert "expect `chief`" in msg and "useChiefInTfConfig" in msg


@pytest.mark.parametrize("strategy", ["mirrored", "one_device", "default"])
def test_evaluator_only_where_it_can_run(strategy):
    cluster = dict(MWMS, evaluator=["127.0.0.1:2230"])
    (msg,) = _messages(_cfg(cluster, "evaluator"), strategy, "task.type")
    assert f"{strategy} trains in one process" in msg and "2-task cluster" in msg
    assert "`tf_config.generate(evaluator=0)`" in msg
    (msg,) = _messages(_cfg(cluster, "chief"), strategy, "cluster.evaluator")
    assert "never train" in msg
    # A single trainer with a side-car evaluator works under any strategy.
    single = {"worker": ["127.0.0.1:2223"], "evaluator": ["127.0.0.1:2230"]}
    assert validate(_cfg(single, "evaluator"), strategy=strategy) == []
    assert validate(_cfg(cluster, "evaluator"), strategy="multi_worker_mirrored") == []
    assert validate(_cfg(dict(PS, evaluator=["127.0.0.1:2230"]), "evaluator"), strategy="parameter_server") == []


def test_one_process_strategy_warns_about_ignored_cluster():
    (msg,) = _messages(_cfg(MWMS), "mirrored", "cluster", "warning")
    assert "ignores the cluster's other 1 task(s)" in msg


def test_unknown_strategy_lists_valid_ones():
    with pytest.raises(TFConfigError) as info:
        _cfg(PS).check("horovod")
    assert info.value.field == "strategy"
    assert "'horovod'" in str(info.value) and ", ".join(STRATEGIES) in str(info.value)
    assert [p.field for p in validate("not json", strategy="horovod")] == ["TF_CONFIG", "strategy"]


def test_check_returns_self_and_auto_follows_the_cluster():
    cfg = _cfg(PS)
    assert cfg.check("parameter_server") is cfg and cfg.check("auto") is cfg and cfg.check() is cfg
    with pytest.raises(TFConfigError, match="must have no `ps` task"):
        cfg.check("multi_worker_mirrored")


@pytest.mark.parametrize("cluster, gpus, name, reason", [
    (PS, 0, "parameter_server", "the cluster has 1 ps task and 3 worker tasks (chief included)"),
    (MWMS, 0, "multi_worker_mirrored", "the cluster has 2 worker tasks (chief included) and no ps task"),
    ({}, 2, "mirrored", "there is no cluster and this machine has 2 GPUs"),
    ({}, 1, "default", "there is no cluster and this machine has one GPU"),
    ({"worker": ["a:1"]}, 0, "default", "the cluster has a single worker task and no ps"),
])
def test_recommend_strategy(cluster, gpus, name, reason):
    cfg = _cfg(cluster, "worker" if "chief" not in cluster else "chief") if cluster else TFConfig()
    got_name, got_reason = recommend_strategy(cfg, num_local_gpus=gpus)
    assert got_name == name and reason in got_reason


@pytest.mark.parametrize("strategy", ["parameter_server", "multi_worker_mirrored"])
def test_multi_worker_strategies_refuse_custom_jobs(strategy):
    cluster = {**(PS if strategy == "parameter_server" else MWMS), "reader": ["127.0.0.1:2230"]}
    doc = {"cluster": cluster, "task": {"type": "chief", "index": 0}}
    assert not [p for p in validate(doc) if p.is_error]  # TensorFlow's resolver takes it...
    (msg,) = _messages(doc, strategy, "cluster.reader")  # ...the strategy does not
    assert f"{strategy} refuses the custom job 'reader'" in msg
    assert _messages(doc, "mirrored", "cluster.reader") == []
