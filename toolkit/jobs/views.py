"""Human-readable views of job records, for the CLI to print."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from tf_config.errors import printable
from toolkit.jobs.reader import task_rows
from toolkit.jobs.storage.records import JobRecord, iso_time

__all__ = ["format_record", "format_table", "format_list", "format_trials"]


def format_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A plain, left-aligned table; ``None`` cells print as ``-``."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else printable(str(c)) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in cells)


def format_list(records: Iterable[JobRecord]) -> str:
    """``list``'s table (control characters escaped, as in every view here: ``tf_config.errors.printable``)."""
    return format_table(("JOB_ID", "BACKEND", "STATUS", "CREATED"),
                        ((r.name, r.backend, r.state, iso_time(r.created_at)) for r in records))


def format_record(record: JobRecord) -> str:
    """``describe``'s summary: state and times, problems, tasks, history, then the spec."""
    head = {"jobId": record.name, "state": str(record.state), "backend": record.backend,
            "createTime": iso_time(record.created_at), "startTime": iso_time(record.started_at),
            "endTime": iso_time(record.ended_at), "errorMessage": record.error, "exitCode": record.exit_code}
    lines = [f"{k}: {v}" for k, v in head.items() if v is not None]
    lines += _places(record)
    warnings = [*record.warnings, *([record.details["noStrategy"]["message"]] if record.details.get("noStrategy")
                                    else [])]
    if warnings:
        lines += ["warnings:"] + [f"  - {w}" for w in warnings]
    nodes = record.details.get("nodes") or {}
    if record.tasks:
        rows = task_rows(record)  # the rows `tfdist ui` shows too: one reading of a task (toolkit.jobs.reader)
        if nodes:  # a Ray or Slurm job: where each task ran instead of a pid
            table = format_table(("TASK", "STATE", "NODE", "ADDRESS", "RESTARTS", "EXIT_CODE"),
                                 ((t["name"], t["state"], t["node"], t["address"], t["restarts"], t["exitCode"])
                                  for t in rows))
        else:
            table = format_table(("TASK", "STATE", "PID", "RESTARTS", "EXIT_CODE"),
                                 ((t["name"], t["state"], t["pid"], t["restarts"], t["exitCode"]) for t in rows))
        lines += ["tasks:"] + [f"  {line}" for line in table.splitlines()]
        lines += [f"  {t['name']}: {t['reason']}" for t in rows if t["reason"]]  # e.g. killed with its Slurm job
    restarts = record.details.get("restarts")
    if restarts:  # preemptions apart from failures (docs/preemption.md)
        lines.append(f"restarts: {restarts.get('preemptions', 0)} after preemptions, "
                     f"{restarts.get('failures', 0)} after failures")
        lines += [f"  {name}: preempted {count}x" for name, count in (restarts.get("preemptedTasks") or {}).items()]
    output = record.details.get("trainingOutput")
    if output:
        lines += format_trials(output).splitlines()
    measured = record.details.get("measurements")
    if measured:  # a tuning trial's curve of its metric
        lines.append("measurements (step:value): " + " ".join(
            f"{m['trainingStep']}:{_number(m['objectiveValue'])}" for m in measured))
    if record.details.get("stoppedEarly"):
        lines.append(f"isTrialStoppedEarly: true ({record.details['stoppedEarly']})")
    if record.parent_job:
        lines.append(f"parentJob: {record.parent_job}")
    if record.history:
        lines += ["history:"] + [f"  {iso_time(h.at)}  {h.state}" + (f"  {h.message}" if h.message else "")
                                 for h in record.history]
    if record.spec:
        lines.append(yaml.safe_dump(dict(record.spec), sort_keys=False).rstrip())
    return printable("\n".join(lines))  # a task's output in errorMessage must not drive the terminal


def _places(record: JobRecord) -> list[str]:
    """Where things are, each under its own name: the user's job dir, tfdist's record, logs, tuning output."""
    lines = [f"jobDir: {record.user_job_dir or '(none: the trainer got no --job-dir)'}  "
             "[the trainer's --job-dir, shared by every task]"]
    if record.record_dir:
        lines.append(f"recordDir: {record.record_dir}  [tfdist's record of the job: logs, supervisor.log]")
    if record.tuning_output_dir:
        lines.append(f"tuningOutputDir: {record.tuning_output_dir}  [each trial n writes to <this>/n]"
                     if record.details.get("tuning") else
                     f"tuningOutputDir: {record.tuning_output_dir}  [this trial's --job-dir]")
    logs = record.log_paths()
    if logs:
        lines += ["logPaths:"] + [f"  {name}: {path}" for name, path in logs.items()]
    return lines


def _number(value: Any) -> str | None:
    return None if value is None else f"{value:.6g}"


def _note(trial: Mapping[str, Any]) -> str | None:
    if trial.get("resumedFrom"):
        return f"from {trial['resumedFrom']}"
    if trial.get("isTrialStoppedEarly"):
        return f"stopped early at step {trial.get('stoppedAtStep')}"
    error = (trial.get("error") or trial.get("warning") or "").strip().splitlines()
    return (error[0][:97] + "..." if len(error[0]) > 100 else error[0]) if error else None


def format_trials(output: Mapping[str, Any]) -> str:
    """A tuning job's trials, best first (the order the study stored them in), and its best parameters."""
    stopped = f" ({output['stoppedEarlyTrialCount']} stopped early)" if output.get("stoppedEarlyTrialCount") else ""
    lines = [f"trials: {output.get('completedTrialCount', 0)} succeeded{stopped}, {output.get('failedTrialCount', 0)} "
             f"failed, {output.get('runningTrialCount', 0)} running ({output.get('goal')} "
             f"{output.get('hyperparameterMetricTag')!r}, {str(output.get('metricValue', 'FINAL')).lower()} value)"]
    rows = [(t["trialId"], t["state"], _number((t.get("finalMetric") or {}).get("objectiveValue")),
             None if t.get("durationSeconds") is None else f"{t['durationSeconds']:.1f}s",
             " ".join(f"{k}={v}" for k, v in t.get("hyperparameters", {}).items()),
             _note(t))
            for t in output.get("trials", [])]
    if rows:
        table = format_table(("TRIAL", "STATE", "OBJECTIVE", "DURATION", "PARAMETERS", "NOTE"), rows)
        lines += [f"  {line}" for line in table.splitlines()]
    curves = [f"  trial {t['trialId']}: " + ("... " if len(t["allMetrics"]) > 10 else "")
              + " ".join(f"{m['trainingStep']}:{_number(m['objectiveValue'])}" for m in t["allMetrics"][-10:])
              for t in sorted(output.get("trials", []), key=lambda t: int(t["trialId"])) if t.get("allMetrics")]
    if curves:
        lines += ["measurements (step:value):"] + curves
    best = output.get("bestTrial")
    if best:
        params = ", ".join(f"{k}={v}" for k, v in best.get("hyperparameters", {}).items())
        lines.append(f"bestTrial: {best['trialId']} ({_number(best['finalMetric']['objectiveValue'])}): {params}")
    return printable("\n".join(lines))
