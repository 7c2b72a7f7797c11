"""A Cloud ML Engine trainer submitted with gcloud's own command line, run as published.

The trainer (``tests/fixtures/jobs/census_core``) is a stand-in for
cloudml-samples' census TF-core sample: it starts ``tf.train.Server`` itself
with the job name TF_CONFIG gives it (``master`` on CMLE), joins on the ps, and
every task creates the job dir with a bare ``os.makedirs``. The command is
gcloud's, flags and all (counts, machine types, ``--staging-bucket``,
``--stream-logs``).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from toolkit.cli import main

pytestmark = pytest.mark.cluster
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"


def test_census_core_trainer_starts_its_server_as_master_and_every_task_ends_0(home, tmp_path, capsys, quiet_tf,
                                                                              no_orphans):
    out = tmp_path / "census-out"
    code = main(["jobs", "submit", "training", "census-core", "--package-path", str(FIXTURES / "census_core"),
                 "--module-name", "census_core.task", "--job-dir", str(out), "--region", "us-central1",
                 "--scale-tier", "custom", "--master-machine-type", "n1-standard-4", "--worker-count", "1",
                 "--worker-machine-type", "n1-standard-4", "--parameter-server-count", "1",
                 "--parameter-server-machine-type", "n1-highmem-2", "--staging-bucket", "gs://census-staging",
                 "--stream-logs", "--", "--train-steps", "40"])
    streamed = capsys.readouterr()
    assert code == 0, streamed.err[-3000:] + streamed.out[-3000:]
    assert "WARNING: --staging-bucket: is recorded with the job (gs://census-staging); it has no effect" in streamed.err
    assert "[master-0] server master:0 started" in streamed.out  # the script's own name, as on CMLE
    assert re.search(r"\[master-0\] master 0 done: is_chief True, global step (4\d|5\d)", streamed.out)
    assert re.search(r"\[worker-0\] worker 0 done: is_chief False", streamed.out)

    assert main(["jobs", "describe", "census-core", "--format", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["state"] == "SUCCEEDED"
    # every task, the ps included, ended by itself with 0: its join() ended the process when the master was
    # done, as TF1's join() never returned, so the script's code after join() never ran
    assert {t["name"]: t["exitCode"] for t in record["tasks"]} == {"master-0": 0, "worker-0": 0, "ps-0": 0}
    ps_log = Path(record["logPaths"]["ps-0"]).read_text()
    assert "server ps:0 started" in ps_log and "ps joined" not in ps_log
    # the user's job dir is jobDir, tfdist's record is recordDir; the master checkpointed into the job dir
    assert record["jobDir"] == str(out) and record["recordDir"] == str(home / "jobs" / "census-core")
    assert re.search(r'model_checkpoint_path: ".*/model.ckpt-\d+"', (out / "checkpoint").read_text())
    assert record["gcloudFlags"] == {"--staging-bucket": "gs://census-staging"}
    # each task wrote its scratch file into its own directory, not the shared job dir
    for task in ("master-0", "worker-0", "ps-0"):
        assert (home / "jobs" / "census-core" / "tasks" / task / "scratch.txt").read_text() == task
