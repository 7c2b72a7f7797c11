"""The Kubernetes backend against a fake `kubectl` on PATH that records its arguments.

No cluster exists here; these tests check exactly what tfdist asks kubectl to do
and how it reads kubectl's answers.
"""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
import yaml

from toolkit.cli import main
from toolkit.jobs import BackendError, JobSpec, JobSpecError, JobState, JobStateError, api, validate_tfjob
from toolkit.jobs.engines.kubernetes.backend import state_from_tfjob

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"


@pytest.fixture
def kube(tmp_path, monkeypatch):
    """A fake kubectl first on PATH; returns its state directory."""
    bin_dir, state = tmp_path / "bin", tmp_path / "kubectl-state"
    bin_dir.mkdir()
    state.mkdir()
    script = bin_dir / "kubectl"
    script.write_text(f"#!{sys.executable}\n" + (FIXTURES / "fake_kubectl.py").read_text())
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_KUBECTL_DIR", str(state))
    monkeypatch.setenv("TFDIST_HOME", str(tmp_path / "home"))
    return state


def _calls(state: Path) -> list[dict]:
    return [json.loads(line) for line in (state / "calls.jsonl").read_text().splitlines()]


def _set_status(state: Path, name: str, *conditions: str, **replicas) -> None:
    (state / "status").mkdir(exist_ok=True)
    status = {"conditions": [{"type": c, "status": "True", "message": f"TFJob {name} is {c.lower()}."}
                             for c in conditions],
              "replicaStatuses": {k: v for k, v in replicas.items()}}
    (state / "status" / f"{name}.json").write_text(json.dumps(status))


def _spec(name="tfjob-1") -> JobSpec:
    return JobSpec.from_file(FIXTURES / "cmle_custom.yaml", job_id=name)


def test_submit_pipes_a_valid_manifest_to_kubectl_apply(kube):
    record = api.submit(_spec(), backend="kubernetes", namespace="ml")
    assert record.state is JobState.QUEUED and record.backend == "kubernetes"
    calls = _calls(kube)
    assert [c["args"] for c in calls] == [["config", "current-context"], ["apply", "-f", "-"]]
    manifest = yaml.safe_load(calls[1]["stdin"])
    assert validate_tfjob(manifest) == []
    assert manifest["metadata"]["namespace"] == "ml" and set(manifest["spec"]["tfReplicaSpecs"]) == {
        "Master", "Worker", "PS"}
    assert Path(record.details["manifest"]).read_text() == calls[1]["stdin"]
    assert any("region 'us-central1'" in w for w in record.warnings)


def test_describe_maps_conditions_onto_job_states(kube):
    api.submit(_spec(), backend="kubernetes")
    assert api.describe("tfjob-1").state is JobState.QUEUED
    _set_status(kube, "tfjob-1", "Created")
    assert api.describe("tfjob-1").state is JobState.PREPARING
    _set_status(kube, "tfjob-1", "Created", "Running", Worker={"active": 2}, PS={"active": 1})
    running = api.describe("tfjob-1")
    assert running.state is JobState.RUNNING
    assert [(t.name, t.state) for t in running.tasks] == [("ps", "1 active, 0 succeeded, 0 failed"),
                                                         ("worker", "2 active, 0 succeeded, 0 failed")]
    _set_status(kube, "tfjob-1", "Created", "Restarting")
    assert api.describe("tfjob-1").state is JobState.RUNNING
    _set_status(kube, "tfjob-1", "Created", "Running", "Failed")
    failed = api.describe("tfjob-1")
    assert failed.state is JobState.FAILED and failed.error == "TFJob tfjob-1 is failed."
    assert [h.state for h in failed.history] == [JobState.QUEUED, JobState.PREPARING, JobState.RUNNING,
                                                 JobState.FAILED]
    get = _calls(kube)[-1]["args"]
    assert get == ["get", "tfjob", "tfjob-1", "-n", "default", "-o", "json"]


def test_a_job_seen_first_as_succeeded_gets_a_legal_history(kube):
    api.submit(_spec(), backend="kubernetes")
    _set_status(kube, "tfjob-1", "Created", "Succeeded")
    record = api.describe("tfjob-1")
    assert record.state is JobState.SUCCEEDED
    assert [h.state.value for h in record.history] == ["QUEUED", "PREPARING", "RUNNING", "SUCCEEDED"]


def test_state_from_tfjob_handles_deletion_and_empty_status():
    assert state_from_tfjob({}) == (JobState.QUEUED, None)
    assert state_from_tfjob({"metadata": {"deletionTimestamp": "x"}})[0] is JobState.CANCELLING
    falsy = {"status": {"conditions": [{"type": "Failed", "status": "False"}, {"type": "Running", "status": "True"}]}}
    assert state_from_tfjob(falsy)[0] is JobState.RUNNING


def test_list_merges_the_store_with_tfjobs_tfdist_did_not_submit(kube):
    api.submit(_spec("mine"), backend="kubernetes")
    foreign = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
               "metadata": {"name": "theirs", "namespace": "default"},
               "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1}}}}
    (kube / "tfjobs" / "theirs.json").write_text(json.dumps(foreign))
    _set_status(kube, "theirs", "Created", "Running")
    records = {r.name: r for r in api.list_jobs(backend="kubernetes")}
    assert set(records) == {"mine", "theirs"}
    assert records["theirs"].state is JobState.RUNNING and records["theirs"].details["external"] is True


def test_cancel_deletes_the_tfjob(kube):
    api.submit(_spec(), backend="kubernetes")
    _set_status(kube, "tfjob-1", "Created", "Running")
    record = api.cancel("tfjob-1")
    assert record.state is JobState.CANCELLED
    assert ["delete", "tfjob", "tfjob-1", "-n", "default", "--timeout=30s"] in [c["args"] for c in _calls(kube)]
    with pytest.raises(JobStateError, match="already ended CANCELLED"):
        api.cancel("tfjob-1")


def test_stream_logs_prefixes_every_pod_and_filters_one_task(kube):
    api.submit(_spec(), backend="kubernetes")
    (kube / "logs").mkdir()
    for pod, text in {"master-0": "step 1\nstep 2\n", "worker-0": "w0 ready\n", "worker-1": "w1 ready\n",
                      "ps-0": "serving\n"}.items():
        (kube / "logs" / f"tfjob-1-{pod}.txt").write_text(text)
    lines: list[str] = []
    api.stream_logs("tfjob-1", sink=lines.append)
    assert sorted(lines) == ["[master-0] step 1", "[master-0] step 2", "[ps-0] serving",
                             "[worker-0] w0 ready", "[worker-1] w1 ready"]
    assert lines.index("[master-0] step 1") < lines.index("[master-0] step 2")
    assert ["logs", "tfjob-1-worker-1", "-n", "default", "-c", "tensorflow", "-f"] in [c["args"] for c in _calls(kube)]
    one: list[str] = []
    api.stream_logs("tfjob-1", task="worker-1", sink=one.append, follow=False)
    assert one == ["[worker-1] w1 ready"]
    with pytest.raises(JobSpecError, match="has tasks master-0, worker-0, worker-1, ps-0"):
        api.stream_logs("tfjob-1", task="worker-7", sink=one.append)


def test_no_context_fails_clearly_and_says_where_the_yaml_is(kube):
    (kube / "no-context").touch()
    with pytest.raises(BackendError) as info:
        api.submit(_spec(), backend="kubernetes")
    message = str(info.value)
    assert "kubectl has no current context" in message and "kubectl config use-context" in message
    assert info.value.manifest_path and Path(info.value.manifest_path).exists()
    assert f"kubectl apply -f {info.value.manifest_path}" in message
    assert [c["args"] for c in _calls(kube)] == [["config", "current-context"]]  # nothing applied


def test_missing_kubectl_fails_clearly(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("TFDIST_HOME", str(tmp_path / "home"))
    with pytest.raises(BackendError, match="`kubectl` is not on PATH") as info:
        api.submit(_spec(), backend="kubernetes")
    assert yaml.safe_load(Path(info.value.manifest_path).read_text())["kind"] == "TFJob"


def test_hyperparameters_are_refused_until_tuning_exists(kube):
    spec = JobSpec.from_file(FIXTURES / "hptuning.yaml", job_id="hp")
    with pytest.raises(JobSpecError, match="hyperparameter tuning is not supported yet"):
        api.submit(spec, backend="kubernetes")
    assert not (kube / "calls.jsonl").exists()


def test_cli_dry_run_prints_valid_yaml_and_submit_uses_kubectl(kube, capsys):
    code = main(["jobs", "submit", "training", "cli-job", "--config", str(FIXTURES / "cmle_custom.yaml"),
                 "--backend", "kubernetes", "--dry-run", "--image", "me/trainer:1", "--", "--lr", "0.1"])
    out = capsys.readouterr()
    manifest = yaml.safe_load(out.out)
    assert code == 0 and validate_tfjob(manifest) == []
    container = manifest["spec"]["tfReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert (container["image"], container["args"]) == ("me/trainer:1", ["--lr", "0.1"])
    assert "WARNING: region 'us-central1'" in out.err and not (kube / "calls.jsonl").exists()
    code = main(["jobs", "submit", "training", "cli-job", "--config", str(FIXTURES / "cmle_custom.yaml"),
                 "--backend", "kubernetes"])
    out = capsys.readouterr()
    assert code == 0 and "Job [cli-job] submitted successfully." in out.out
    assert "$ tfdist jobs describe cli-job" in out.out
    _set_status(kube, "cli-job", "Created", "Succeeded")
    assert main(["jobs", "describe", "cli-job", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "SUCCEEDED"
    assert main(["jobs", "cancel", "cli-job"]) == 1
    assert "already ended SUCCEEDED" in capsys.readouterr().err
    (kube / "no-context").touch()
    assert main(["jobs", "submit", "training", "cli-job-2", "--module-name", "m", "--backend", "kubernetes"]) == 1
    assert "kubectl has no current context" in capsys.readouterr().err


def test_list_without_kubectl_shows_the_last_known_state(kube, tmp_path, monkeypatch, caplog):
    api.submit(_spec("remembered"), backend="kubernetes")
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    records = api.list_jobs()
    assert [(r.name, r.state) for r in records] == [("remembered", JobState.QUEUED)]
    assert "cannot refresh kubernetes jobs" in caplog.text
    with pytest.raises(BackendError, match="not on PATH"):
        api.list_jobs(backend="kubernetes")
