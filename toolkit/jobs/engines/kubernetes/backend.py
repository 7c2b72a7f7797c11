"""The Kubernetes backend: TFJobs applied, watched and deleted through ``kubectl``.

The job record in the local store is a cache of what the cluster says; every
``describe`` asks ``kubectl get tfjob -o json`` again and maps the TFJob's
conditions onto CMLE's states (see ``state_from_tfjob``).
"""
from __future__ import annotations

import datetime as _dt
import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tf_config import validate
from toolkit.jobs.engines.kubernetes._kubectl import Kubectl
from toolkit.jobs.engines.kubernetes.tfjob import (
    KubernetesOptions,
    pod_tf_configs,
    render_tfjob,
    to_yaml,
    validate_tfjob,
)
from toolkit.jobs.errors import BackendError, JobNotFoundError, JobSpecError, JobStateError, Problem, refuse_invalid
from toolkit.jobs.model.spec import JobSpec
from toolkit.jobs.storage.records import JobRecord, TaskRecord
from toolkit.jobs.storage.states import JobState, advance_path
from toolkit.jobs.storage.store import JobStore

__all__ = ["KubernetesBackend", "state_from_tfjob"]

_log = logging.getLogger(__name__)
# TFJob condition type -> job state, strongest first (a job that failed may also show Running).
_CONDITIONS = (("Failed", JobState.FAILED), ("Succeeded", JobState.SUCCEEDED),
               ("Restarting", JobState.RUNNING), ("Running", JobState.RUNNING), ("Created", JobState.PREPARING))


def state_from_tfjob(obj: dict[str, Any]) -> tuple[JobState, str | None]:
    """The job state a TFJob object is in, and the message of the condition that says so.

    No condition yet means the operator has not seen the job: QUEUED. A
    deletion timestamp means someone cancelled it: CANCELLING until it is gone.
    """
    if obj.get("metadata", {}).get("deletionTimestamp"):
        return JobState.CANCELLING, "the TFJob is being deleted"
    true = {c.get("type"): c for c in obj.get("status", {}).get("conditions") or []
            if c.get("status") == "True"}
    for kind, state in _CONDITIONS:
        if kind in true:
            return state, true[kind].get("message") or kind
    return JobState.QUEUED, None


def _tasks_from_tfjob(obj: dict[str, Any]) -> tuple[TaskRecord, ...]:
    statuses = obj.get("status", {}).get("replicaStatuses") or {}
    return tuple(TaskRecord(name=kind.lower(), state=", ".join(f"{status.get(k, 0)} {k}" for k in
                                                              ("active", "succeeded", "failed")))
                 for kind, status in sorted(statuses.items()))


class KubernetesBackend:
    """Submits TFJobs with ``kubectl apply`` and records them in the job store."""

    name = "kubernetes"

    def __init__(self, store: JobStore, *, options: KubernetesOptions | None = None,
                 kubectl: Kubectl | None = None) -> None:
        self.store = store
        self.options = options if options is not None else KubernetesOptions()
        self.kubectl = kubectl or Kubectl()

    def render(self, spec: JobSpec) -> tuple[str, list[str]]:
        """The manifest as YAML, validated against the CRD schema, and mapping warnings."""
        manifest, warnings = render_tfjob(spec, options=self.options)
        refuse_invalid("the rendered TFJob does not validate against the CRD schema", validate_tfjob(manifest))
        refuse_invalid("the operator would give these pods a TF_CONFIG TensorFlow cannot use",
                       [f"{pod}: {p}" for pod, text in pod_tf_configs(manifest, ends_only=True).items()
                        for p in validate(text) if p.is_error])
        return to_yaml(manifest), warnings

    def submit(self, spec: JobSpec) -> JobRecord:
        if spec.training_input.hyperparameters is not None:
            raise JobSpecError([Problem("error", "trainingInput.hyperparameters",
                                        "hyperparameter tuning is not supported yet on the kubernetes "
                                        "backend's submit: tfdist does not drive Katib. Render the study as a "
                                        "Katib Experiment (`toolkit.jobs.katib.experiment_yaml(spec)`) and apply "
                                        "it to a cluster running Katib, tune with `backend='local'`, 'ray' or "
                                        "'slurm', or remove the block to run one training job.")])
        text, warnings = self.render(spec)
        name = spec.required_job_id
        job_dir = self.store.job_dir(name)
        job_dir.mkdir(parents=True, exist_ok=True)
        manifest_path = job_dir / "tfjob.yaml"
        manifest_path.write_text(text, encoding="utf-8")
        self.kubectl.require(manifest_path=str(manifest_path))
        all_warnings = tuple(str(w) for w in spec.warnings) + tuple(warnings)
        self.store.create(name, backend=self.name, spec=spec.to_dict(), warnings=all_warnings,
                          details={"namespace": self.options.namespace, "manifest": str(manifest_path)})
        try:
            out = self.kubectl.run(["apply", "-f", "-"], stdin=text)
        except BackendError as exc:
            self.store.transition(name, JobState.FAILED, error=f"kubectl apply failed: {exc}")
            raise BackendError(f"{exc} The manifest is in {manifest_path}.", manifest_path=str(manifest_path)) from exc
        _log.info("kubectl apply: %s", out.strip())
        return self.store.get(name)

    def _namespace(self, name: str) -> str:
        try:
            return self.store.get(name).details.get("namespace", self.options.namespace)
        except JobNotFoundError:
            return self.options.namespace

    def describe(self, name: str) -> JobRecord:
        obj = self.kubectl.get_json(["get", "tfjob", name, "-n", self._namespace(name)])
        return self._sync(name, obj)

    def _sync(self, name: str, obj: dict[str, Any] | None) -> JobRecord:
        try:
            record = self.store.get(name)
        except JobNotFoundError:
            if obj is None:
                raise JobNotFoundError(f"no TFJob named {name!r} in namespace {self.options.namespace!r} "
                                       "and no such job in the local store.") from None
            return _record_from_tfjob(obj)
        if obj is None:
            if record.state is JobState.CANCELLING:
                return self.store.transition(name, JobState.CANCELLED, message="the TFJob is deleted")
            if not record.is_final:
                return self.store.transition(name, JobState.FAILED, error="the TFJob no longer exists on the cluster")
            return record
        state, message = state_from_tfjob(obj)
        for step in advance_path(record.state, state):
            record = self.store.transition(name, step, message=message,
                                           error=message if step is JobState.FAILED else None)
        return _with_tasks(record, _tasks_from_tfjob(obj))

    def list(self) -> list[JobRecord]:
        listing = self.kubectl.get_json(["get", "tfjob", "-n", self.options.namespace]) or {}
        on_cluster = {item["metadata"]["name"]: item for item in listing.get("items", [])}
        records = []
        for name in self.store.names(backend=self.name):
            if self._namespace(name) == self.options.namespace:
                records.append(self._sync(name, on_cluster.pop(name, None)))
        records.extend(_record_from_tfjob(obj) for obj in on_cluster.values())
        return records

    def cancel(self, name: str, *, timeout: float = 30.0) -> JobRecord:
        record = self.describe(name)
        if record.is_final:
            raise JobStateError(f"job {name!r} already ended {record.state}; there is nothing to cancel.")
        if record.backend == self.name and record.state is not JobState.CANCELLING:
            self.store.transition(name, JobState.CANCELLING, message="cancel requested")
        self.kubectl.run(["delete", "tfjob", name, "-n", self._namespace(name),
                          f"--timeout={int(timeout)}s"])
        return self.describe(name)

    def stream_logs(self, name: str, *, task: str | None = None, sink: Callable[[str], None],
                    follow: bool = True, poll_interval: float = 0.5) -> JobRecord:
        """Prints ``kubectl logs`` of every pod (or one task's), each line prefixed ``[worker-1]``."""
        obj = self.kubectl.get_json(["get", "tfjob", name, "-n", self._namespace(name)])
        if obj is None:
            raise JobNotFoundError(f"no TFJob named {name!r} on the cluster.")
        tasks = [f"{kind.lower()}-{i}" for kind, rs in obj["spec"]["tfReplicaSpecs"].items()
                 for i in range(int(rs.get("replicas", 1)))]
        if task is not None and task not in tasks:
            raise JobSpecError([Problem("error", "task", f"received {task!r}; job {name!r} has tasks "
                                        f"{', '.join(tasks)}. Pick one of them.")])
        lock = threading.Lock()
        threads = [threading.Thread(target=self._pump, args=(name, t, follow, sink, lock), daemon=True)
                   for t in ([task] if task else tasks)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return self.describe(name)

    def _pump(self, name: str, task: str, follow: bool, sink: Callable[[str], None], lock: threading.Lock) -> None:
        args = ["logs", f"{name}-{task}", "-n", self._namespace(name), "-c", "tensorflow"]
        proc = self.kubectl.popen(args + (["-f"] if follow else []))
        with proc:
            assert proc.stdout is not None  # Kubectl.popen pipes stdout
            for line in proc.stdout:
                with lock:
                    sink(f"[{task}] {line.rstrip()}")


def _with_tasks(record: JobRecord, tasks: tuple[TaskRecord, ...]) -> JobRecord:
    return replace(record, tasks=tasks) if tasks else record


def _record_from_tfjob(obj: dict[str, Any]) -> JobRecord:
    """A record for a TFJob tfdist did not submit (or no longer has in its store)."""
    meta = obj.get("metadata", {})
    created = meta.get("creationTimestamp")
    created_at = _dt.datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=_dt.timezone.utc).timestamp() if created else 0.0
    state, message = state_from_tfjob(obj)
    return JobRecord(name=meta.get("name", "?"), backend="kubernetes", state=state, spec={},
                     created_at=created_at, error=message if state is JobState.FAILED else None,
                     tasks=_tasks_from_tfjob(obj), details={"namespace": meta.get("namespace"),
                                                            "external": True})
