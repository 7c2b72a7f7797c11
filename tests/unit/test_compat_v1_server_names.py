"""A TF1 script's own ``tf.train.Server`` under every dialect the launcher writes (CMLE, TFJob, TF2).

Census' TF-core sample (cloudml-samples) starts ``tf.train.Server(cluster_spec,
job_name=task.type, task_index=task.index)`` from TF_CONFIG, so under CMLE's
TF_CONFIG its coordinating task is ``master``; other scripts write ``master``
out while their TF_CONFIG says ``chief``. Each server must start, as the
cluster names the task, and be tfdist's chief.
"""
from __future__ import annotations

import logging

import pytest

import toolkit.compat.v1 as tf1
from strategies._hand_built import task_config
from tf_config import generate
from toolkit.compat import _v1_server
from toolkit.launcher._dialect import DIALECTS, cmle_dialect

_CASES = {"cmle": DIALECTS["cmle"], "cmle-use-chief": cmle_dialect(use_chief=True), "tfjob": DIALECTS["tfjob"],
          "tf2": DIALECTS["tf"]}


def _tf_configs(dialect_name: str, evaluator: int = 0) -> list[dict]:
    dialect = _CASES[dialect_name]
    return [dialect.apply(cfg).to_dict() for cfg in generate(chief=1, workers=1, ps=0, evaluator=evaluator)]


@pytest.mark.parametrize("dialect_name", list(_CASES))
def test_the_script_starts_its_server_with_the_names_tf_config_gives_it(dialect_name):
    evaluator = 1 if dialect_name in ("tfjob", "cmle-use-chief") else 0
    configs = _tf_configs(dialect_name, evaluator)
    primary = next(c for c in configs if c["task"]["type"] in ("master", "chief"))
    expected = "master" if dialect_name == "cmle" else "chief"
    assert primary["task"]["type"] == expected and expected in primary["cluster"]
    # census/tensorflowcore's dispatch(): the names straight from TF_CONFIG
    server = tf1.train.Server(tf1.train.ClusterSpec(primary["cluster"]), job_name=primary["task"]["type"],
                              task_index=primary["task"]["index"])
    assert server.server_def.job_name == expected  # TensorFlow serves the job the cluster has
    cfg = task_config(server)
    assert (cfg.task_type, cfg.task_index) == ("chief", 0)  # tfdist's roles see the chief
    assert set(cfg.cluster) == {"chief", "worker"}  # master renamed, an evaluator is outside the cluster


@pytest.mark.parametrize(("dialect_name", "script_says", "cluster_says"),
                         [("tf2", "master", "chief"), ("tfjob", "master", "chief"), ("cmle", "chief", "master")])
def test_a_job_name_written_out_follows_the_cluster_it_got(dialect_name, script_says, cluster_says):
    primary = next(c for c in _tf_configs(dialect_name) if c["task"]["type"] in ("master", "chief"))
    server = tf1.train.Server(tf1.train.ClusterSpec(primary["cluster"]), job_name=script_says, task_index=0)
    assert server.server_def.job_name == cluster_says
    assert task_config(server).task_type == "chief"


def test_the_renamed_job_is_said_once(caplog):
    _v1_server._say_once.cache_clear()
    with caplog.at_level(logging.WARNING, logger="toolkit.compat._v1_server"):
        for _ in range(2):
            primary = next(c for c in _tf_configs("tf2") if c["task"]["type"] == "chief")
            tf1.train.Server(tf1.train.ClusterSpec(primary["cluster"]), job_name="master", task_index=0)
    said = [r.getMessage() for r in caplog.records if "is not in the cluster" in r.getMessage()]
    assert len(said) == 1 and "job_name 'master'" in said[0] and "starting the server as 'chief'" in said[0]


def test_a_job_the_cluster_lacks_is_still_refused_by_tensorflow():
    primary = next(c for c in _tf_configs("tf2") if c["task"]["type"] == "chief")
    with pytest.raises(Exception, match="ps"):
        tf1.train.Server(tf1.train.ClusterSpec(primary["cluster"]), job_name="ps", task_index=0)
