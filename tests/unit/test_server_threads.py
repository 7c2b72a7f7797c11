"""A server's thread pools follow the share of the host's cores its task has (strategies._server_threads)."""
from __future__ import annotations

import pytest

from strategies._errors import StrategyError
from strategies._server_threads import ENV_INTER_OP, server_config, tasks_on_host

LOCAL = {"chief": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001", "localhost:2002"],
         "ps": ["127.0.0.1:2003", "127.0.0.1:2004"]}


def test_every_loopback_name_is_one_host_and_other_hosts_are_apart():
    assert tasks_on_host(LOCAL, "127.0.0.1:2003") == 5
    spread = {"worker": ["w0.example:2222", "w1.example:2222"], "ps": ["w0.example:2223", "p1.example:2222"]}
    assert tasks_on_host(spread, "w0.example:2223") == 2
    assert tasks_on_host(spread, "p1.example:2222") == 1


def test_tasks_sharing_a_host_split_its_cores(monkeypatch):
    monkeypatch.delenv(ENV_INTER_OP, raising=False)
    config = server_config(LOCAL, "127.0.0.1:2003", cores=2)
    assert (config.intra_op_parallelism_threads, config.inter_op_parallelism_threads) == (1, 2)
    # TF1 graph steps only (an Estimator's servers): the share of the cores for inter-op threads too
    config = server_config(LOCAL, "127.0.0.1:2003", cores=2, graph_only=True)
    assert (config.intra_op_parallelism_threads, config.inter_op_parallelism_threads) == (1, 1)
    config = server_config(LOCAL, "127.0.0.1:2003", cores=16)
    assert (config.intra_op_parallelism_threads, config.inter_op_parallelism_threads) == (3, 3)


def test_a_task_alone_on_its_host_keeps_tensorflows_defaults():
    assert server_config({"worker": ["a.example:1"], "ps": ["b.example:1"]}, "b.example:1", cores=8) is None


def test_the_inter_op_threads_can_be_set_and_a_bad_count_is_named(monkeypatch):
    monkeypatch.setenv(ENV_INTER_OP, "3")
    config = server_config(LOCAL, "127.0.0.1:2003", cores=2, graph_only=True)
    assert (config.intra_op_parallelism_threads, config.inter_op_parallelism_threads) == (1, 3)
    monkeypatch.setenv(ENV_INTER_OP, "two")
    with pytest.raises(StrategyError, match=r"TFDIST_INTER_OP_THREADS='two' is not a thread count.*default, 2"):
        server_config(LOCAL, "127.0.0.1:2003", cores=2)
