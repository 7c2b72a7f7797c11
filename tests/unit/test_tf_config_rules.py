"""One test per validation rule: each asserts the field and the message a user reads."""
from __future__ import annotations

import json

import pytest

from tf_config import Problem, validate

PS_CHIEF_2W = {"ps": ["127.0.0.1:2221"], "chief": ["127.0.0.1:2222"],
               "worker": ["127.0.0.1:2223", "127.0.0.1:2224"]}


def _doc(cluster=None, task=None, **extra):
    doc = {} if cluster is None else {"cluster": cluster}
    if task is not None:
        doc["task"] = task
    doc.update(extra)
    return doc


def _one(problems: list[Problem], field: str, severity: str = "error") -> str:
    """The message of the single problem on ``field``; fails if there is not exactly one."""
    found = [p for p in problems if p.field == field and p.severity == severity]
    assert len(found) == 1, f"expected one {severity} on {field}, got: {[str(p) for p in problems]}"
    return found[0].message


def _errors(problems):
    return [p for p in problems if p.severity == "error"]


def test_valid_seed_config_has_no_problems():
    assert validate(_doc(PS_CHIEF_2W, {"type": "worker", "index": 1})) == []


def test_invalid_json_reports_line_and_column():
    text = '{\n  "cluster": {"worker": ["a:1"]},\n  "task": {"type": "worker" "index": 0}\n}'
    msg = _one(validate(text), "TF_CONFIG")
    assert "not valid JSON" in msg and "line 3 column" in msg and "commas" in msg


def test_single_quotes_get_a_double_quote_hint():
    msg = _one(validate("{'cluster': {}}"), "TF_CONFIG")
    assert "line 1 column 2" in msg and "double quotes" in msg


def _lax_and_strict(doc, field):
    """A risky form TensorFlow accepts: a warning, and the same message as an error under strict."""
    lax, strict = validate(doc), validate(doc, strict=True)
    assert _errors(lax) == [], [str(p) for p in lax]
    msg = _one(lax, field, "warning")
    assert _one(strict, field) == msg
    return msg


def test_duplicate_json_key_is_a_warning_json_keeps_the_last():
    msg = _lax_and_strict('{"cluster": {"worker": ["a:1"], "worker": ["a:2"]}, "task": {"type": "worker", "index": 0}}',
                          "TF_CONFIG")
    assert "'worker' twice" in msg and "Merge" in msg


def test_empty_text_says_how_to_run_locally():
    msg = _one(validate("   "), "TF_CONFIG")
    assert "empty" in msg and "Unset TF_CONFIG" in msg


@pytest.mark.parametrize("doc, shown", [("[1, 2]", "list: [1, 2]"), ('"x"', "str: 'x'"), (42, "int: 42")])
def test_top_level_must_be_an_object(doc, shown):
    msg = _one(validate(doc), "TF_CONFIG")
    assert "must be a JSON object" in msg and shown in msg


def test_unknown_top_level_key_is_a_warning_with_did_you_mean():
    problems = validate(_doc(PS_CHIEF_2W, {"type": "ps", "index": 0}, rpc_layr="grpc"))
    msg = _one(problems, "rpc_layr", "warning")
    assert "unknown top-level key 'rpc_layr'" in msg and "Did you mean 'rpc_layer'?" in msg
    assert _errors(problems) == []


def test_cluster_must_be_a_mapping():
    msg = _one(validate({"cluster": ["a:1"], "task": {"type": "worker", "index": 0}}), "cluster")
    assert "must be an object" in msg and "received list ['a:1']" in msg


def test_job_name_typo_is_a_custom_job_with_a_hint():
    problems = validate(_doc({"workers": ["a:1"]}, {"type": "worker", "index": 0}))
    msg = _one(problems, "cluster.workers", "warning")
    assert "custom job named 'workers'" in msg and "Did you mean 'worker'?" in msg
    assert "chief, worker, ps, evaluator" in msg
    # ...and the task that names the real job cannot find it: that is fatal.
    assert "has no 'worker' job" in _one(problems, "task.type")


def test_custom_job_names_are_accepted_as_tensorflow_does():
    doc = _doc({"chief": ["a:1"], "worker": ["a:2"], "reader": ["a:3"]}, {"type": "reader", "index": 0})
    msg = _lax_and_strict(doc, "cluster.reader")
    assert "custom job named 'reader'" in msg and "Keep it only if your code places ops on it" in msg


def test_job_names_tensorflow_cannot_parse_are_errors():
    msg = _one(validate(_doc({"my-job": ["a:1"]}, {"type": "my-job", "index": 0})), "cluster.my-job")
    assert "cannot use in a device name" in msg and "Rename the job" in msg


@pytest.mark.parametrize("value, expected", [
    ("a:1", "received str 'a:1'"),
    ([], "empty list"),
    ({"0": "a:1"}, "received dict"),
])
def test_job_value_must_be_a_non_empty_list(value, expected):
    msg = _one(validate(_doc({"worker": value}, {"type": "worker", "index": 0})), "cluster.worker")
    assert expected in msg


def test_job_entries_must_be_strings():
    msg = _one(validate(_doc({"worker": ["a:1", 2222]}, {"type": "worker", "index": 0})), "cluster.worker[1]")
    assert "is int 2222" in msg and '"host:port" string' in msg


@pytest.mark.parametrize("address, expected", [
    ("localhost", "has no port"),
    (":2222", "empty host"),
    ("a:http", "port 'http' (not an integer)"),
    ("a:70000", "port 70000, outside 1..65535"),
    ("grpc://a:1", "URL scheme"),
    ("::1:2222", "IPv6 address without brackets"),
    ("my host:2222", "not a host name or IP"),
])
def test_bad_addresses(address, expected):
    problems = validate(_doc({"worker": [address]}, {"type": "worker", "index": 0}))
    msg = _one(problems, "cluster.worker[0]")
    assert repr(address) in msg and expected in msg


def test_ipv6_in_brackets_is_accepted():
    assert validate(_doc({"worker": ["[::1]:2222", "[::1]:2223"]}, {"type": "worker", "index": 0})) == []


def test_same_host_port_twice():
    msg = _one(validate(_doc({"chief": ["h:2222"], "worker": ["h:2222"]}, {"type": "chief", "index": 0})),
               "cluster.worker[0]")
    assert "same endpoint as `cluster.chief[0]`" in msg and "another port" in msg


def test_localhost_and_127_are_the_same_endpoint():
    problems = validate(_doc({"chief": ["localhost:2222"], "worker": ["127.0.0.1:2222"]},
                             {"type": "chief", "index": 0}))
    assert "same endpoint" in _one(problems, "cluster.worker[0]")


def test_port_0_is_a_warning():
    msg = _lax_and_strict(_doc({"worker": ["a:0"]}, {"type": "worker", "index": 0}), "cluster.worker[0]")
    assert "'a:0'" in msg and "port 0" in msg and "one-task test" in msg


def test_loopback_mixed_with_real_hosts():
    msg = _lax_and_strict(_doc({"chief": ["localhost:2222"], "worker": ["10.0.0.7:2222"]},
                               {"type": "chief", "index": 0}), "cluster")
    assert "mixes loopback addresses (localhost:2222 in `cluster.chief[0]`)" in msg
    assert "10.0.0.7:2222" in msg and "would dial" in msg


def test_zero_address_is_a_warning():
    msg = _one(validate(_doc({"worker": ["0.0.0.0:2222"]}, {"type": "worker", "index": 0})),
               "cluster.worker[0]", "warning")
    assert "listen address" in msg


def test_task_missing_while_cluster_set():
    msg = _one(validate(_doc(PS_CHIEF_2W)), "task")
    assert "has a `cluster` of 4 tasks but no `task`" in msg


def test_task_may_be_left_out_of_a_one_task_cluster():
    from tf_config import TFConfig

    doc = _doc({"chief": ["a:1"]})
    assert validate(doc) == []
    assert "no `task`" in _one(validate(doc, strict=True), "task")
    cfg = TFConfig.from_dict(doc)
    assert (cfg.task_type, cfg.task_index, cfg.is_chief, cfg.address) == ("chief", 0, True, "a:1")


def test_task_must_be_an_object():
    msg = _one(validate(_doc(PS_CHIEF_2W, "worker")), "task")
    assert "received str 'worker'" in msg


@pytest.mark.parametrize("task, expected", [
    ({"index": 0}, "is missing"),
    ({"type": "", "index": 0}, "is ''"),
])
def test_task_type_missing_or_empty(task, expected):
    msg = _one(validate(_doc(PS_CHIEF_2W, task)), "task.type")
    assert expected in msg and "chief, worker, ps, evaluator, master" in msg


def test_task_type_unknown_suggests():
    msg = _one(validate(_doc(PS_CHIEF_2W, {"type": "wroker", "index": 0})), "task.type")
    assert "'wroker'" in msg and "Did you mean 'worker'?" in msg


def test_task_type_not_in_cluster():
    msg = _one(validate(_doc({"chief": ["a:1"], "worker": ["a:2"]}, {"type": "ps", "index": 0})), "task.type")
    assert "`task.type` is 'ps' but `cluster` has no 'ps' job (jobs: chief, worker)" in msg
    assert "add `cluster.ps`" in msg


def test_evaluator_may_be_absent_from_cluster():
    assert validate(_doc(PS_CHIEF_2W, {"type": "evaluator", "index": 0})) == []


def test_task_index_missing():
    assert "`task.index` is missing" in _one(validate(_doc(PS_CHIEF_2W, {"type": "ps"})), "task.index")


@pytest.mark.parametrize("index, expected", [
    ("1", 'is str \'1\'; TensorFlow reads it as 1, but expected an integer >= 0. Write it without quotes: "index": 1.'),
    (1.0, 'Write it as a whole number: "index": 1.'),
])
def test_task_index_tensorflow_casts_is_a_warning(index, expected):
    from tf_config import TFConfig

    doc = _doc(PS_CHIEF_2W, {"type": "worker", "index": index})
    assert expected in _lax_and_strict(doc, "task.index")
    assert TFConfig.from_dict(doc).task_index == 1


def test_string_index_out_of_range_is_still_an_error():
    msg = _one(validate(_doc(PS_CHIEF_2W, {"type": "worker", "index": "2"})), "task.index")
    assert "is 2 but `cluster.worker` has 2 addresses (valid: 0..1)" in msg


@pytest.mark.parametrize("index, expected", [
    ("one", "is str 'one'; expected an integer >= 0"),
    (1.5, "is float 1.5; expected an integer >= 0"),
    (True, "is bool True"),
    ([0], "is list [0]"),
])
def test_task_index_must_be_an_int(index, expected):
    assert expected in _one(validate(_doc(PS_CHIEF_2W, {"type": "worker", "index": index})), "task.index")


def test_task_index_negative():
    msg = _one(validate(_doc(PS_CHIEF_2W, {"type": "worker", "index": -1})), "task.index")
    assert "is -1; expected an integer >= 0" in msg


def test_task_index_out_of_range_matches_the_design_example():
    doc = _doc({"worker": ["a:1", "a:2"]}, {"type": "worker", "index": 3})
    assert _one(validate(doc), "task.index") == (
        "TF_CONFIG `task.index` is 3 but `cluster.worker` has 2 addresses (valid: 0..1). "
        "Fix the index or add an address."
    )


def test_more_than_one_chief():
    msg = _one(validate(_doc({"chief": ["a:1", "a:2"]}, {"type": "chief", "index": 0})), "cluster.chief")
    assert "has 2 addresses; at most one chief" in msg and "move the others to `worker`" in msg


def test_more_than_one_evaluator():
    doc = _doc({"worker": ["a:1"], "evaluator": ["a:2", "a:3"]}, {"type": "worker", "index": 0})
    assert "at most one evaluator" in _one(validate(doc), "cluster.evaluator")


def test_evaluator_index_must_be_zero():
    msg = _one(validate(_doc(PS_CHIEF_2W, {"type": "evaluator", "index": 1})), "task.index")
    assert "is 1 for the evaluator" in msg and 'Set "index": 0' in msg


def test_master_and_chief_together():
    doc = _doc({"master": ["a:1"], "chief": ["a:2"], "worker": ["a:3"]}, {"type": "worker", "index": 0})
    assert "both `master` and `chief`" in _one(validate(doc), "cluster")


def test_master_with_evaluator_in_cluster():
    doc = _doc({"master": ["a:1"], "evaluator": ["a:2"]}, {"type": "master", "index": 0})
    assert "cannot run an evaluator" in _one(validate(doc), "cluster.evaluator")


def test_evaluator_task_with_master_cluster():
    doc = _doc({"master": ["a:1"], "worker": ["a:2"]}, {"type": "evaluator", "index": 0})
    msg = _one(validate(doc), "task.type")
    assert "cannot run an evaluator" in msg and "useChiefInTfConfig" in msg


@pytest.mark.parametrize("task", [{"type": "chief", "index": 0}, {"type": "worker", "index": 1}])
def test_no_cluster_but_task_not_worker_0(task):
    msg = _one(validate({"task": task}), "task")
    assert f"received {task['type']}:{task['index']}" in msg and "must be worker:0" in msg


def test_no_cluster_and_worker_0_is_fine():
    assert validate({"task": {"type": "worker", "index": 0}}) == []
    assert validate({"cluster": {}}) == []


def test_cluster_without_any_trainer():
    doc = _doc({"ps": ["a:1"]}, {"type": "ps", "index": 0})
    assert "no chief or worker" in _lax_and_strict(doc, "cluster")


@pytest.mark.parametrize("key, value, expected", [
    ("rpc_layer", 1, 'expected a non-empty string such as "grpc"'),
    ("environment", "", "expected a non-empty string"),
    ("session_master", ["x"], "expected a non-empty string"),
    ("job", "BASIC", "expected an object"),
    ("model_dir", 3, "expected a non-empty string"),
])
def test_typed_top_level_keys(key, value, expected):
    doc = _doc(PS_CHIEF_2W, {"type": "ps", "index": 0}, **{key: value})
    assert expected in _one(validate(doc), key)


def test_every_key_tensorflow_reads_is_known():
    doc = _doc(PS_CHIEF_2W, {"type": "worker", "index": 0}, rpc_layer="grpc", environment="cloud",
               session_master="grpc://h:1", model_dir="gs://b/m", job={"scaleTier": "CUSTOM"}, service={})
    assert validate(doc) == []
    assert validate({**doc, "task": {"type": "evaluator", "index": 0}, "eval_session_master": "grpc://e:1"}) == []


def test_eval_session_master_is_for_the_evaluator_only():
    doc = _doc(PS_CHIEF_2W, {"type": "worker", "index": 0}, eval_session_master="grpc://e:1")
    assert "refuses it for any task but the evaluator" in _one(validate(doc), "eval_session_master")


def test_trial_should_be_a_string():
    msg = _lax_and_strict(_doc(PS_CHIEF_2W, {"type": "ps", "index": 0, "trial": 3}), "task.trial")
    assert "is int 3" in msg and '"trial": "1"' in msg


def test_unknown_task_key_is_a_warning():
    problems = validate(_doc(PS_CHIEF_2W, {"type": "ps", "index": 0, "idx": 0}))
    assert "unknown key 'idx'" in _one(problems, "task.idx", "warning")
    assert _errors(problems) == []


def test_all_problems_are_reported_at_once():
    doc = {"clustr": {}, "cluster": {"workers": ["a"], "chief": ["b:1", "c:2"]},
           "task": {"type": "chief", "index": "0"}}
    fields = {p.field for p in validate(doc)}
    assert {"clustr", "cluster.workers", "cluster.workers[0]", "cluster.chief", "task.index"} <= fields


def test_validate_accepts_json_text_dict_and_tfconfig():
    from tf_config import TFConfig

    doc = _doc(PS_CHIEF_2W, {"type": "worker", "index": 0})
    assert validate(json.dumps(doc)) == validate(doc) == validate(TFConfig.from_dict(doc)) == []


def test_problem_str_format():
    assert str(Problem("error", "task.index", "bad")) == "error: task.index: bad"
