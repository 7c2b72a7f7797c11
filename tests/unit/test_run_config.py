"""RunConfig: Estimator's derivation of the task's place in the cluster, and its error cases."""
from __future__ import annotations

import json

import pytest

from tf_config import TFConfigError
from toolkit.estimator.run_config import RunConfig, RunConfigError

_CLUSTER = {"chief": ["h:1"], "worker": ["h:2", "h:3"], "ps": ["h:4", "h:5"]}


def _config(task_type, index, cluster=_CLUSTER, **kwargs):
    return RunConfig(tf_config={"cluster": cluster, "task": {"type": task_type, "index": index}}, **kwargs)


@pytest.mark.parametrize("task_type,index,is_chief,global_id", [
    ("chief", 0, True, 0), ("worker", 0, False, 1), ("worker", 1, False, 2), ("ps", 0, False, 3), ("ps", 1, False, 4),
])
def test_roles_in_a_chief_cluster(task_type, index, is_chief, global_id):
    config = _config(task_type, index)
    assert (config.task_type, config.task_id, config.is_chief) == (task_type, index, is_chief)
    assert config.num_ps_replicas == 2 and config.num_worker_replicas == 3
    assert config.global_id_in_cluster == global_id
    assert config.cluster_spec == _CLUSTER


def test_master_is_the_chief():
    config = _config("master", 0, {"master": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]})
    assert config.is_chief and config.global_id_in_cluster == 0 and config.num_worker_replicas == 2
    worker = _config("worker", 0, {"master": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]})
    assert not worker.is_chief and worker.global_id_in_cluster == 1


def test_evaluator_is_outside_the_cluster_and_may_be_unlisted():
    config = _config("evaluator", 0)  # CMLE never lists the evaluator in `cluster`
    assert config.is_evaluator and not config.is_chief
    assert config.num_ps_replicas == 0 and config.num_worker_replicas == 0
    assert config.global_id_in_cluster is None
    listed = _config("evaluator", 0, {**_CLUSTER, "evaluator": ["h:9"]})
    assert listed.global_id_in_cluster is None and listed.num_worker_replicas == 0


def test_local_from_unset_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    config = RunConfig(model_dir="runs/x")
    assert (config.task_type, config.task_id, config.is_chief, config.is_local) == ("worker", 0, True, True)
    assert config.num_ps_replicas == 0 and config.num_worker_replicas == 1 and config.global_id_in_cluster == 0
    assert config.cluster_spec == {}


def test_reads_tf_config_from_the_environment(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": _CLUSTER, "task": {"type": "worker", "index": 1}}))
    config = RunConfig()
    assert config.task_type == "worker" and config.task_id == 1 and config.global_id_in_cluster == 2


def test_invalid_tf_config_in_the_environment_gives_the_validators_errors(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": _CLUSTER, "task": {"type": "worker", "index": 2}}))
    with pytest.raises(TFConfigError, match=r"`task.index` is 2 but `cluster.worker` has 2 addresses") as info:
        RunConfig()
    assert info.value.field == "task.index"


@pytest.mark.parametrize("doc,field,text", [
    ({"task": {"type": "chief", "index": 0}}, "task", "no `cluster`, so the task must be worker:0"),
    ({"task": {"type": "worker", "index": 1}}, "task", "no `cluster`, so the task must be worker:0"),
    ({"cluster": {"worker": ["h:1"], "ps": ["h:2"]}, "task": {"type": "worker", "index": 0}}, "cluster.chief",
     "no `chief`"),
    ({"cluster": {"chief": ["h:1", "h:2"]}, "task": {"type": "chief", "index": 0}}, "cluster.chief", "chief"),
    ({"cluster": _CLUSTER}, "task", "no `task`"),
    ({"cluster": _CLUSTER, "task": {"index": 0}}, "task.type", "`task.type` is missing"),
    ({"cluster": _CLUSTER, "task": {"type": "master", "index": 0}}, "task.type", "no 'master' job"),
    ({"cluster": _CLUSTER, "task": {"type": "worker", "index": -1}}, "task.index", "expected an integer >= 0"),
    ({"cluster": _CLUSTER, "task": {"type": "ps", "index": 2}}, "task.index", "`cluster.ps` has 2 addresses"),
    ({"cluster": {**_CLUSTER, "master": ["h:7"]}, "task": {"type": "chief", "index": 0}}, "cluster",
     "both `master` and `chief`"),
    ({"cluster": {"master": ["h:1"], "worker": ["h:2"]}, "task": {"type": "evaluator", "index": 0}},
     "task.type", "cannot run an evaluator"),
    ({"cluster": {"chief": ["h:1"]}}, "task", "no `task`"),  # one task: the validator only warns; Estimator refuses
])
def test_estimator_error_cases_raise_tf_config_errors(doc, field, text):
    with pytest.raises(TFConfigError, match=text) as info:
        RunConfig(tf_config=doc)
    assert info.value.field.startswith(field)


def test_train_distribute_that_is_no_strategy_is_refused_naming_the_ones_it_takes():
    with pytest.raises(RunConfigError, match="parameter_server.*MirroredStrategy.*MultiWorkerMirroredStrategy") as info:
        _config("chief", 0, train_distribute="parameter_server")
    assert info.value.field == "train_distribute"


def test_a_one_machine_strategy_on_a_cluster_is_refused_with_the_multi_worker_fix():
    import tensorflow as tf

    with pytest.raises(RunConfigError, match="one-machine strategy.*MultiWorkerMirroredStrategy") as info:
        _config("chief", 0, train_distribute=tf.distribute.OneDeviceStrategy("/cpu:0"))
    assert info.value.field == "train_distribute"


def test_workers_only_cluster_needs_no_chief_when_train_distribute_is_set():
    """TF's RunConfig skipped the chief rule under train_distribute: worker 0 is the chief."""
    import tensorflow as tf

    cluster = {"worker": ["h:1", "h:2"]}
    with pytest.raises(TFConfigError, match="no `chief`"):
        _config("worker", 0, cluster)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with pytest.raises(RunConfigError, match="one-machine"):  # the chief rule no longer speaks first
        _config("worker", 0, cluster, train_distribute=strategy)
    local = RunConfig(tf_config={}, train_distribute=strategy, eval_distribute=strategy)
    assert local.train_distribute is strategy and local.eval_distribute is strategy


@pytest.mark.parametrize("kwargs,field", [
    ({"save_checkpoints_steps": 0}, "save_checkpoints_steps"),
    ({"save_checkpoints_secs": 0}, "save_checkpoints_secs"),
    ({"save_summary_steps": -1}, "save_summary_steps"),
    ({"keep_checkpoint_max": 1.5}, "keep_checkpoint_max"),
    ({"log_step_count_steps": True}, "log_step_count_steps"),
    ({"tf_random_seed": "7"}, "tf_random_seed"),
    ({"model_dir": ""}, "model_dir"),
    ({"tf_config": 3}, "tf_config"),
    ({"device_fn": "ps"}, "device_fn"),
])
def test_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(RunConfigError, match=f"RunConfig `{field}` is") as info:
        RunConfig(**{"tf_config": {}, **kwargs})
    assert info.value.field == field


def test_checkpoint_steps_and_secs_exclude_each_other_and_default_to_600_secs():
    with pytest.raises(RunConfigError, match="at most one") as info:
        RunConfig(tf_config={}, save_checkpoints_steps=10, save_checkpoints_secs=10)
    assert info.value.field == "save_checkpoints_steps"
    assert RunConfig(tf_config={}).checkpoint_every == {"save_checkpoints_steps": None, "save_checkpoints_secs": 600}
    assert RunConfig(tf_config={}, save_checkpoints_steps=5).checkpoint_every["save_checkpoints_steps"] == 5


def test_master_is_this_tasks_grpc_address_and_empty_locally_and_on_the_evaluator():
    assert _config("chief", 0).master == "grpc://h:1"
    assert _config("worker", 1).master == "grpc://h:3"
    assert _config("ps", 1).master == "grpc://h:5"
    assert _config("evaluator", 0).master == "" and RunConfig(tf_config={}).master == ""
    assert _config("evaluator", 0).evaluation_master == ""
    doc = {"cluster": _CLUSTER, "task": {"type": "worker", "index": 0}, "session_master": "grpc://other:9"}
    explicit = RunConfig(tf_config=doc)
    assert explicit.master == "grpc://other:9" and explicit.evaluation_master == ""
    evaluator = RunConfig(tf_config={**doc, "task": {"type": "evaluator", "index": 0},
                                     "eval_session_master": "grpc://eval:9"})
    assert evaluator.evaluation_master == "grpc://eval:9" and evaluator.master == ""


def test_evaluator_sees_an_empty_cluster_spec_and_is_not_chief():
    config = _config("evaluator", 0, {**_CLUSTER, "evaluator": ["h:9"]})
    assert config.cluster_spec == {} and not config.cluster_spec and not config.is_chief
    listed = {**_CLUSTER, "evaluator": ["h:9"]}
    chief = _config("chief", 0, listed)  # TF's RunConfig keeps a listed evaluator in the others' cluster_spec
    assert chief.cluster_spec == listed and chief.cluster_spec.num_tasks("ps") == 2
    assert chief.cluster_spec.as_dict() == listed and sorted(chief.cluster_spec.jobs) == sorted(listed)


def test_model_dir_may_come_from_tf_config(monkeypatch):
    doc = {"cluster": _CLUSTER, "task": {"type": "worker", "index": 0}, "model_dir": "runs/from-env"}
    monkeypatch.setenv("TF_CONFIG", json.dumps(doc))
    assert RunConfig().model_dir == "runs/from-env"
    assert RunConfig(model_dir="runs/from-env").model_dir == "runs/from-env"
    assert RunConfig().replace(save_summary_steps=7).model_dir == "runs/from-env"
    with pytest.raises(RunConfigError, match="TF_CONFIG's `model_dir` is 'runs/from-env'") as info:
        RunConfig(model_dir="runs/other")
    assert info.value.field == "model_dir"


def test_replace_validates_again():
    config = RunConfig(tf_config={}, model_dir="a")
    assert config.replace(model_dir="b").model_dir == "b"
    with pytest.raises(RunConfigError):
        config.replace(save_checkpoints_steps=0)


def test_master_evaluation_master_and_model_dir_as_tensorflow_reads_them():
    config = _config("worker", 1)
    assert (config.master, config.evaluation_master) == ("grpc://h:3", "")
    doc = {"cluster": _CLUSTER, "task": {"type": "worker", "index": 0}, "session_master": "grpc://m:1",
           "model_dir": "gs://b/model"}
    config = RunConfig(tf_config=doc)
    assert (config.master, config.model_dir) == ("grpc://m:1", "gs://b/model")
    with pytest.raises(RunConfigError,
                       match="but TF_CONFIG's `model_dir` is 'gs://b/model'; pass the same path, or only one"):
        RunConfig(tf_config=doc, model_dir="elsewhere")
    evaluator = RunConfig(tf_config={"cluster": _CLUSTER, "task": {"type": "evaluator", "index": 0},
                                     "eval_session_master": "grpc://e:1"})
    assert (evaluator.master, evaluator.evaluation_master, evaluator.cluster_spec) == ("", "grpc://e:1", {})
    assert (evaluator.is_chief, evaluator.global_id_in_cluster) == (False, None)
    assert RunConfig(tf_config={"cluster": {"chief": ["h:1"]}, "task": {"type": "chief", "index": 0}}).master == ""
    assert RunConfig(tf_config={}).master == ""


def test_serve_timeouts_are_run_config_options():
    config = RunConfig(chief_start_timeout=1200, chief_lost_after=30.0)
    assert (config.chief_start_timeout, config.chief_lost_after) == (1200, 30.0)
    with pytest.raises(RunConfigError) as info:
        RunConfig(chief_lost_after=0)
    assert info.value.field == "chief_lost_after" and "is 0; expected a positive number of seconds" in str(info.value)


def test_building_a_run_config_does_not_import_tensorflow():
    import subprocess
    import sys

    code = ("import sys; from toolkit.estimator import RunConfig, EstimatorSpec, TrainSpec; "
            "RunConfig(tf_config={}); assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("doc,field,tf_phrase", [
    ({"cluster": {"worker": ["h:1", "h:2"]}}, "task",
     'If "cluster" is set in TF_CONFIG, it must have one "chief" node.'),
    ({"cluster": {"chief": ["h:1", "h:2"]}, "task": {"type": "chief", "index": 0}}, "cluster.chief",
     'The "cluster" in TF_CONFIG must have only one "chief" node.'),
    ({"cluster": {"master": ["h:1", "h:2"]}, "task": {"type": "master", "index": 0}}, "cluster.master",
     'The "cluster" in TF_CONFIG must have only one "master" node.'),
    ({"cluster": _CLUSTER, "task": {"type": "chief"}}, "task.index",
     'If "cluster" is set in TF_CONFIG, task index must be set.'),
    ({"cluster": _CLUSTER, "task": {"type": "worker", "index": -1}}, "task.index",
     "Task index must be non-negative number."),
    ({"cluster": _CLUSTER, "task": {"type": "master", "index": 0}}, "task.type",
     "master is not a valid task_type"),
    ({"cluster": _CLUSTER, "task": {"type": "ps", "index": 2}}, "task.index",
     "2 is not a valid task_id for task_type ps"),
    ({"task": {"type": "chief", "index": 0}}, "task",
     'If "cluster" is not set in TF_CONFIG, task type must be WORKER.'),
    ({"task": {"type": "worker", "index": 1}}, "task", 'If "cluster" is not set in TF_CONFIG, task index must be 0.'),
    ({"cluster": {**_CLUSTER, "master": ["h:7"]}, "task": {"type": "chief", "index": 0}}, "cluster",
     "If `master` node exists in `cluster`, job `chief` is not supported."),
    ({"cluster": {"master": ["h:1"], "worker": ["h:2"]}, "task": {"type": "evaluator", "index": 0}}, "task.type",
     "If `master` node exists in `cluster`, task_type `evaluator` is not supported."),
    ({"model_dir": ""}, "model_dir", "model_dir in TF_CONFIG should be non-empty"),
])
def test_tf_config_errors_carry_tf_estimators_phrase_after_the_house_message(doc, field, tf_phrase):
    with pytest.raises(ValueError) as info:
        RunConfig(tf_config=doc)
    assert isinstance(info.value, TFConfigError) and info.value.field.startswith(field)
    message = str(info.value)
    assert message.startswith("invalid TF_CONFIG") and f"(tf.estimator's RunConfig: {tf_phrase}" in message


def test_a_service_that_is_not_an_object_is_a_type_error_as_in_tf():
    with pytest.raises(TypeError, match='If "service" is set in TF_CONFIG, it must be a dict. Given 789') as info:
        RunConfig(tf_config={"service": 789})
    assert isinstance(info.value, RunConfigError) and info.value.field == "service"


def test_a_one_process_run_reads_eval_session_master_as_tf_did():
    config = RunConfig(tf_config={"eval_session_master": "grpc://e:1"})
    assert (config.evaluation_master, config.master, config.is_chief) == ("grpc://e:1", "", True)
    with pytest.raises(TFConfigError, match="refuses it for any task but the evaluator"):
        RunConfig(tf_config={"cluster": _CLUSTER, "task": {"type": "worker", "index": 0},
                             "eval_session_master": "grpc://e:1"})


@pytest.mark.parametrize("device_fn", [lambda x: "/cpu:0", lambda op, other: "/cpu:0", "/cpu:0"])
def test_device_fn_takes_one_argument_named_op_as_in_tf(device_fn):
    with pytest.raises(RunConfigError, match='device_fn must be callable with exactly one argument "op"'):
        RunConfig(device_fn=device_fn)
    assert RunConfig(device_fn=lambda op: "/cpu:0").device_fn is not None


_CAP = "experimental_max_worker_delay_secs"


@pytest.mark.parametrize(("task_type", "index", "kwargs", "seconds"), [
    ("worker", 0, {_CAP: 60}, 5), ("worker", 1, {_CAP: 60}, 10), ("worker", 30, {_CAP: 60}, 60),  # (i + 1) * 5, capped
    ("worker", 1, {_CAP: 7}, 7), ("worker", 1, {_CAP: 0}, 0),
    ("worker", 1, {}, 0),  # not asked for: workers start at once
    *[(task_type, 0, {_CAP: 60}, 0) for task_type in ("chief", "master", "evaluator", "ps")],
])
def test_train_and_evaluate_delays_each_worker_as_tf_estimator_did_when_asked(task_type, index, kwargs, seconds):
    from toolkit.estimator.training import worker_start_delay

    cluster = {"chief": ["h:1"], "worker": [f"h:{100 + i}" for i in range(31)], "ps": ["h:4"]}
    if task_type == "master":
        cluster = {"master": cluster.pop("chief"), **cluster}
    assert worker_start_delay(_config(task_type, index, cluster, **kwargs)) == seconds
