"""Preemptions in the launcher's policy: their own budget, their own decision, counted apart. No processes."""
from __future__ import annotations

import dataclasses

import pytest

from toolkit.launcher import Decision, FailurePolicy, LaunchError, LaunchSpec, TaskExit
from toolkit.launcher._result import EXIT_PREEMPTED, LaunchResult, Reason, is_preemption

D = Decision
PS = FailurePolicy(max_restarts=0, settle_period=5.0, parameter_server=True, max_preemptions=2)
PS_RESUMES = dataclasses.replace(PS, restartable=True)
MWMS = FailurePolicy(max_restarts=0, settle_period=5.0, max_preemptions=2)
MWMS_RESUMES = dataclasses.replace(MWMS, restartable=True)


def _exit(task_type, code, *, after=10.0, task_restarts=0, cluster_restarts=0, preemptions=0):
    return TaskExit(task_type=task_type, is_chief=task_type in ("chief", "master"), exit_code=code,
                    seconds_since_exit=after, task_restarts=task_restarts, cluster_restarts=cluster_restarts,
                    preemptions=preemptions)


def test_what_counts_as_a_preemption():
    assert EXIT_PREEMPTED == 143
    assert is_preemption(143) and is_preemption(-15)
    assert not any(is_preemption(code) for code in (0, 1, -9, 137, -6, None))
    assert _exit("worker", 143).preempted and not _exit("worker", -9).preempted


@pytest.mark.parametrize("policy, ended, decision", [
    # a preempted chief restarts the cluster on the preemption budget, even with max_restarts=0
    (PS_RESUMES, _exit("chief", 143, after=0.0), D.RESTART_CLUSTER),
    (MWMS_RESUMES, _exit("chief", -15, after=0.0), D.RESTART_CLUSTER),
    (PS_RESUMES, _exit("chief", 143, preemptions=2), D.PREEMPTED),
    (PS, _exit("chief", 143), D.PREEMPTED),  # not restartable: the engine above restarts it
    # a preempted parameter-server worker (or the evaluator) comes back alone, after the settle period
    (PS, _exit("worker", 143, after=4.9), D.WAIT),
    (PS, _exit("worker", 143), D.RESTART_TASK),
    (PS, _exit("worker", 143, task_restarts=5), D.RESTART_TASK),  # failures do not spend preemptions
    (PS, _exit("worker", -15, preemptions=2), D.PREEMPTED),
    (MWMS, _exit("evaluator", 143), D.RESTART_TASK),
    (MWMS, _exit("evaluator", 143, preemptions=2), D.PREEMPTED),
    # a ps, or a multi-worker-mirrored worker, needs the whole cluster back
    (PS_RESUMES, _exit("ps", 143), D.RESTART_CLUSTER),
    (PS_RESUMES, _exit("ps", 143, cluster_restarts=9), D.RESTART_CLUSTER),
    (PS, _exit("ps", 143), D.PREEMPTED),
    (MWMS_RESUMES, _exit("worker", 143, after=1.0), D.WAIT),
    (MWMS_RESUMES, _exit("worker", 143), D.RESTART_CLUSTER),
    (MWMS_RESUMES, _exit("worker", 143, preemptions=2), D.PREEMPTED),
    # a SIGKILL is no preemption: it stays on the failure budget
    (PS_RESUMES, _exit("chief", -9), D.FAIL_JOB),
    (PS, _exit("worker", -9), D.FAIL_JOB),
])
def test_preemption_decisions(policy, ended, decision):
    assert policy.decide(ended) is decision


def test_preemptions_are_explained_and_the_budget_validates():
    assert PS_RESUMES.explain(_exit("chief", 143, preemptions=2)) == (
        "was preempted; the job ends as preempted (the job was already restarted after 2 preemption(s) "
        "(max_preemptions=2))")
    assert MWMS.explain(_exit("worker", 143)) == (
        "was preempted; the job ends as preempted (the entrypoint is not restartable)")
    with pytest.raises(LaunchError, match=r"`max_preemptions` is -1; expected an integer >= 0") as info:
        FailurePolicy(max_preemptions=-1)
    assert info.value.field == "max_preemptions"
    spec = LaunchSpec(cmd=("python", "-c", "pass"), workers=2, ps=1, restartable=True, max_preemptions=7)
    assert FailurePolicy.of(spec).max_preemptions == 7
    with pytest.raises(LaunchError, match="max_preemptions"):
        LaunchSpec(cmd=("python", "-c", "pass"), max_preemptions=-2)


def test_a_launch_result_counts_preemptions_apart_from_failures(tmp_path):
    result = LaunchResult(exit_code=EXIT_PREEMPTED, reason=Reason.PREEMPTED, message="m", tasks=(), duration=1.0,
                          job_dir=tmp_path, cluster_restarts=2, preemptions=3, failures=1)
    assert (result.preemptions, result.failures, str(result.reason)) == (3, 1, "preempted")
    assert not result.ok


def test_kubernetes_pods_get_the_grace_and_a_preempted_chief_is_restarted_by_exit_code():
    from toolkit.jobs import JobSpec, JobSpecError, KubernetesOptions, render_tfjob

    spec = JobSpec.from_dict({"trainingInput": {"scaleTier": "CUSTOM", "masterType": "standard",
                                                "workerType": "standard", "workerCount": 1,
                                                "pythonModule": "trainer.task"}}, job_id="pre")
    manifest, _ = render_tfjob(spec, options=KubernetesOptions(termination_grace_seconds=60))
    for replica in manifest["spec"]["tfReplicaSpecs"].values():
        pod = replica["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] == 60
        assert {"name": "TFDIST_PREEMPTION_GRACE", "value": "55"} in pod["containers"][0]["env"]
    assert manifest["spec"]["tfReplicaSpecs"]["Master"]["restartPolicy"] == "ExitCode"  # 143 is retried
    with pytest.raises(JobSpecError, match="termination_grace_seconds"):
        KubernetesOptions(termination_grace_seconds=3)


def test_describe_shows_preemptions_apart_from_failures(tmp_path):
    from toolkit.jobs.engines.local._run_parts import finish
    from toolkit.jobs.storage.store import JobStore
    from toolkit.jobs.views import format_record
    from toolkit.launcher._result import TaskResult

    store = JobStore(tmp_path)
    store.create("job1", backend="local", spec={})
    tasks = tuple(TaskResult(name=name, task_type=name[:-2], index=0, exit_code=0, restarts=restarts, stopped=False,
                             log_path=tmp_path / f"{name}.log", preemptions=preempted)
                  for name, restarts, preempted in (("chief-0", 1, 1), ("worker-0", 2, 1)))
    result = LaunchResult(exit_code=0, reason=Reason.SUCCEEDED, message="ok", tasks=tasks, duration=1.0,
                          job_dir=tmp_path, cluster_restarts=1, preemptions=2, failures=1)
    finish(result, store=store, job="job1")
    text = format_record(store.get("job1"))
    assert "restarts: 2 after preemptions, 1 after failures" in text
    assert "  chief-0: preempted 1x" in text and "  worker-0: preempted 1x" in text


_TASK = """
import os, pathlib, signal, sys, time
task = pathlib.Path(os.environ["TFDIST_TASK_DIR"])
def preempted(signum, frame):
    marked = (task / "stop-requested").exists()  # the launcher's own stop, not a preemption
    (task / "got").write_text("stopped" if marked else "preempted")
    sys.exit(143)
signal.signal(signal.SIGTERM, preempted)
(task / "ready").write_text("")
time.sleep(60)
"""


def test_a_sigterm_to_the_launcher_is_passed_on_as_a_preemption(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    job = tmp_path / "job"
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", "launch", "--workers", "2", "--job-dir", str(job),
                             "--quiet", "--", sys.executable, "-c", _TASK], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env={**os.environ, "TFDIST_PREEMPTION_GRACE": "5"})
    ready = [job / "tasks" / name / "ready" for name in ("worker-0", "worker-1")]
    deadline = time.monotonic() + 60
    while not all(p.exists() for p in ready) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == EXIT_PREEMPTED, out
    assert "interrupted by SIGTERM; every task was told to checkpoint and exit" in out
    assert [(job / "tasks" / n / "got").read_text() for n in ("worker-0", "worker-1")] == ["preempted"] * 2
    assert "worker-0=143" in out and "worker-1=143" in out
