"""TF_CONFIG from the environment srun, mpirun, an Indexed Job or Trainer v2 start a task in."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tf_config import Layout, TFConfigError, expand_hostlist, from_env
from tf_config._hostlist import expand_counts


def _slurm(rank: int, ntasks: int, nodelist: str, per_node: str, **extra: str) -> dict[str, str]:
    return {"SLURM_PROCID": str(rank), "SLURM_STEP_NUM_TASKS": str(ntasks), "SLURM_NTASKS": str(ntasks),
            "SLURM_STEP_NODELIST": nodelist, "SLURM_STEP_TASKS_PER_NODE": per_node, "SLURM_JOB_ID": "42",
            "SLURM_STEP_ID": "0", **extra}


@pytest.mark.parametrize("text, hosts", [
    ("vm", ["vm"]),
    ("h[1-3]", ["h1", "h2", "h3"]),
    ("node[08-11]", ["node08", "node09", "node10", "node11"]),
    ("n[1,3-4],gpu7", ["n1", "n3", "n4", "gpu7"]),
    ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
    ("a,b[9-10]", ["a", "b9", "b10"]),
])
def test_slurm_hostlists_expand_with_ranges_padding_and_lists(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text", ["h[1-3", "h[3-1]", "h[a-b]", "h1,,h2", "h[1-[2]]"])
def test_a_malformed_hostlist_names_the_variable(text):
    with pytest.raises(TFConfigError, match=re.escape(f"SLURM_STEP_NODELIST: is {text!r}")) as err:
        expand_hostlist(text)
    assert err.value.field == "SLURM_STEP_NODELIST" and "expected a Slurm hostlist" in str(err.value)


def test_task_counts_expand_repeats():
    assert expand_counts("2(x3),1") == [2, 2, 2, 1]
    assert expand_counts("4") == [4]
    with pytest.raises(TFConfigError, match=r"SLURM_STEP_TASKS_PER_NODE: is '2\(3\)'"):
        expand_counts("2(3)")


def test_slurm_ps_layout_block_distribution_gives_every_task_the_same_cluster():
    configs = [from_env(_slurm(r, 4, "h[1-3]", "2,1(x2)"), strategy="parameter_server").tf_config
               for r in range(4)]
    cluster = {"chief": ("h1:16344",), "worker": ("h1:16345", "h2:16344"), "ps": ("h3:16344",)}
    assert all(dict(c.cluster) == cluster for c in configs)  # 15000 + 32 * 42
    assert [(c.task.type, c.task.index) for c in configs] == [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)]


def test_slurm_cyclic_distribution_and_node_name_check():
    env = _slurm(1, 4, "h[1-2]", "2(x2)", SLURM_DISTRIBUTION="cyclic", SLURMD_NODENAME="h2")
    cfg = from_env(env, layout="ps=1,chief=1").tf_config
    assert cfg.cluster["worker"] == ("h2:16344", "h1:16345") and cfg.task.type == "worker"
    with pytest.raises(TFConfigError, match=r"SLURMD_NODENAME: is 'h1', but SLURM_PROCID 1 belongs on 'h2'"):
        from_env({**env, "SLURMD_NODENAME": "h1"})
    with pytest.raises(TFConfigError, match=r"SLURM_DISTRIBUTION: is 'plane=2'; expected block or cyclic"):
        from_env({**env, "SLURM_DISTRIBUTION": "plane=2"})


def test_slurm_inconsistent_environments_name_the_variable():
    with pytest.raises(TFConfigError, match=r"SLURM_STEP_TASKS_PER_NODE: is '2', counts for 1 nodes, but "
                                            r"SLURM_STEP_NODELIST 'h\[1-2\]' names 2"):
        from_env(_slurm(0, 2, "h[1-2]", "2"))
    with pytest.raises(TFConfigError, match=r"SLURM_STEP_TASKS_PER_NODE: is '1\(x2\)', 2 tasks, but "
                                            r"SLURM_STEP_NUM_TASKS is 3"):
        from_env(_slurm(0, 3, "h[1-2]", "1(x2)"))
    with pytest.raises(TFConfigError, match=r"SLURM_PROCID: is 5 but there are 2 tasks"):
        from_env(_slurm(5, 2, "h[1-2]", "1(x2)"))
    with pytest.raises(TFConfigError, match=r"SLURM_PROCID: is 'x'; expected an integer >= 0"):
        from_env(_slurm(0, 2, "h[1-2]", "1(x2)") | {"SLURM_PROCID": "x"})
    batch = {"SLURM_JOB_ID": "3", "SLURM_PROCID": "0", "SLURM_NTASKS": "3", "SLURM_JOB_NODELIST": "h[1-3]"}
    with pytest.raises(TFConfigError, match=r"this is Slurm's batch script, not a task started by srun") as err:
        from_env(batch)
    assert err.value.field == "SLURM_STEP_NODELIST"


def test_a_layout_needing_more_tasks_than_started_says_how_many():
    with pytest.raises(TFConfigError, match=r"SLURM_STEP_NUM_TASKS: is 2 but the layout \(a chief, 1 ps, at least "
                                            r"1 worker\) needs 3 tasks") as err:
        from_env(_slurm(0, 2, "h[1-2]", "1(x2)"), strategy="parameter_server")
    assert err.value.field == "SLURM_STEP_NUM_TASKS"


def test_layouts_parse_and_validate():
    assert Layout.for_strategy("parameter_server") == Layout(ps=1, chief=True)
    assert Layout.for_strategy(None) == Layout.for_strategy("multi_worker_mirrored") == Layout()
    assert Layout.parse("ps=2,chief=1,evaluator=1").roles(6) == [
        ("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0), ("ps", 1), ("evaluator", 0)]
    with pytest.raises(TFConfigError, match=r"layout: is 'ps=x'; expected KEY=N pairs"):
        Layout.parse("ps=x")
    with pytest.raises(TFConfigError, match=r"layout.chief: is 2; expected 0 or 1"):
        Layout.parse("chief=2")
    with pytest.raises(TFConfigError, match=r"strategy: is 'mirrored'; expected one of parameter_server"):
        Layout.for_strategy("mirrored")
    with pytest.raises(TFConfigError, match=r"layout.ps: is -1"):
        Layout(ps=-1)


def test_kubernetes_indexed_job_uses_the_pods_stable_dns_names():
    env = {"JOB_COMPLETION_INDEX": "2", "TFDIST_NUM_TASKS": "3", "HOSTNAME": "train-2", "TFDIST_SUBDOMAIN": "svc"}
    result = from_env(env, layout=Layout(chief=True))
    assert dict(result.tf_config.cluster) == {"chief": ("train-0.svc:2222",),
                                              "worker": ("train-1.svc:2222", "train-2.svc:2222")}
    assert (result.tf_config.task.type, result.tf_config.task.index) == ("worker", 1)
    assert "JOB_COMPLETION_INDEX=2" in result.explain() and "TFDIST_SUBDOMAIN=svc" in result.explain()
    with pytest.raises(TFConfigError, match=r"TFDIST_NUM_TASKS: is not set \(an Indexed Job does not tell"):
        from_env({"JOB_COMPLETION_INDEX": "0", "HOSTNAME": "train-0"})
    with pytest.raises(TFConfigError, match=r"HOSTNAME: is 'other' but JOB_COMPLETION_INDEX is 2"):
        from_env({**env, "HOSTNAME": "other"})


def test_jobset_pod_names_follow_from_the_hostname():
    env = {"JOB_COMPLETION_INDEX": "1", "TFDIST_NUM_TASKS": "2", "HOSTNAME": "js-node-0-1", "TFDIST_SUBDOMAIN": "js"}
    assert from_env(env).tf_config.cluster["worker"] == ("js-node-0-0.js:2222", "js-node-0-1.js:2222")


def test_trainer_v2_runtime_env():
    env = {"PET_NNODES": "4", "PET_NODE_RANK": "3", "PET_NPROC_PER_NODE": "1",
           "PET_MASTER_ADDR": "mnist-node-0-0.mnist", "PET_MASTER_PORT": "29400", "JOB_COMPLETION_INDEX": "3"}
    cfg = from_env(env, strategy="parameter_server").tf_config
    assert cfg.cluster["ps"] == ("mnist-node-0-3.mnist:2222",) and cfg.task.type == "ps"
    assert cfg.cluster["chief"] == ("mnist-node-0-0.mnist:2222",)
    with pytest.raises(TFConfigError, match=r"PET_NPROC_PER_NODE: is '2'; expected 1"):
        from_env({**env, "PET_NPROC_PER_NODE": "2"})
    with pytest.raises(TFConfigError, match=r"PET_MASTER_ADDR: is 'head.svc'; expected the first pod's DNS name"):
        from_env({**env, "PET_MASTER_ADDR": "head.svc"})


@pytest.mark.parametrize("rank_var, size_var", [("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                                                ("PMI_RANK", "PMI_SIZE")])
def test_mpi_ranks_with_a_host_list_with_slots(rank_var, size_var):
    env = {rank_var: "1", size_var: "3", "TFDIST_HOSTS": "node[1-2]:2"}
    with pytest.raises(TFConfigError, match=rf"TFDIST_HOSTS: lists 4 task slots but {size_var} is 3"):
        from_env(env)
    cfg = from_env({**env, "TFDIST_HOSTS": "node1:2,node2"}, port=3000).tf_config
    assert cfg.cluster["worker"] == ("node1:3000", "node1:3001", "node2:3000") and cfg.task.index == 1


def test_mpi_without_a_host_list_says_how_to_give_one():
    with pytest.raises(TFConfigError, match=r"TFDIST_HOSTS: is not set; PMIX_RANK gives this task's rank"):
        from_env({"PMIX_RANK": "0", "TFDIST_NUM_TASKS": "2"})


def test_unknown_environment_and_bad_port_name_the_variable():
    with pytest.raises(TFConfigError, match=r"SLURM_STEP_NODELIST: is not set, so this environment is not one a "
                                            r"launcher prepared \(looked for slurm: SLURM_STEP_NODELIST; trainer"):
        from_env({"HOME": "/"})
    with pytest.raises(TFConfigError, match=r"kind: is 'pbs'; expected one of slurm, trainer, kubernetes, mpi"):
        from_env({}, kind="pbs")
    with pytest.raises(TFConfigError, match=r"TFDIST_PORT: is '99999'; expected a port number"):
        from_env(_slurm(0, 1, "vm", "1") | {"TFDIST_PORT": "99999"})
    assert from_env(_slurm(0, 1, "vm", "1") | {"TFDIST_PORT": "5000"}).tf_config.cluster["worker"] == ("vm:5000",)


def test_explain_names_every_variable_read():
    text = from_env(_slurm(0, 2, "vm", "2", SLURMD_NODENAME="vm")).explain()
    for name in ("SLURM_PROCID=0", "SLURM_STEP_NUM_TASKS=2", "SLURM_STEP_NODELIST=vm", "SLURM_STEP_TASKS_PER_NODE=2",
                 "SLURM_JOB_ID=42", "SLURMD_NODENAME=vm", "rank 0 is worker 0", "base 16344 (the slurm default)"):
        assert name in text, name


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TF_CONFIG", "PMI", "OMPI"))}
    return subprocess.run([sys.executable, "-m", "toolkit", *args], env={**base, **env}, capture_output=True,
                          text=True, timeout=60)


def test_tfdist_run_execs_the_command_with_tf_config_and_never_imports_tensorflow():
    code = "import json, os, sys; print(os.environ['TF_CONFIG']); print('tensorflow' in sys.modules)"
    out = _cli(["run", "--strategy", "parameter_server", "--dialect", "cmle", "--", sys.executable, "-c", code],
               _slurm(0, 3, "h[1-3]", "1(x3)"))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout.splitlines()[0])
    assert doc["task"] == {"type": "master", "index": 0} and doc["environment"] == "cloud"
    assert doc["cluster"] == {"master": ["h1:16344"], "worker": ["h2:16344"], "ps": ["h3:16344"]}
    assert out.stdout.splitlines()[1] == "False"

    bad = _cli(["run", "--", "true"], {"SLURM_JOB_ID": "1", "SLURM_PROCID": "0"})
    assert bad.returncode == 1 and "Start the command with srun" in bad.stderr
    shown = _cli(["tf-config", "from-env", "--explain"], {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1",
                                                          "TFDIST_HOSTS": "a"})
    assert shown.returncode == 0 and "OMPI_COMM_WORLD_RANK=0" in shown.stdout
    assert json.loads(shown.stdout.splitlines()[-1])["cluster"] == {"worker": ["a:2222"]}


def test_a_chief_alone_is_a_one_task_cluster():
    cfg = from_env(_slurm(0, 1, "vm", "1"), layout="chief=1").tf_config
    assert dict(cfg.cluster) == {"chief": ("vm:16344",)} and cfg.task.type == "chief"
    with pytest.raises(TFConfigError, match=r"is 0; expected at least one task|needs 1 tasks"):
        Layout().roles(0)
