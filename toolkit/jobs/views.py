"""Human-readable views of job records, for the CLI to print."""
from __future__ import annotations

from typing import Iterable, Sequence

import yaml

from toolkit.jobs.records import JobRecord, iso_time

__all__ = ["format_record", "format_table", "format_list"]


def format_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A plain, left-aligned table; ``None`` cells print as ``-``."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


def format_list(records: Iterable[JobRecord]) -> str:
    return format_table(("JOB_ID", "BACKEND", "STATUS", "CREATED"),
                        ((r.name, r.backend, r.state, iso_time(r.created_at)) for r in records))


def format_record(record: JobRecord) -> str:
    """``describe``'s summary: state and times, problems, tasks, history, then the spec."""
    head = {"jobId": record.name, "state": str(record.state), "backend": record.backend,
            "createTime": iso_time(record.created_at), "startTime": iso_time(record.started_at),
            "endTime": iso_time(record.ended_at), "jobDir": record.job_dir,
            "errorMessage": record.error, "exitCode": record.exit_code}
    lines = [f"{k}: {v}" for k, v in head.items() if v is not None]
    if record.warnings:
        lines += ["warnings:"] + [f"  - {w}" for w in record.warnings]
    if record.tasks:
        table = format_table(("TASK", "STATE", "PID", "RESTARTS", "EXIT_CODE"),
                             ((t.name, t.state, t.pid, t.restarts, t.exit_code) for t in record.tasks))
        lines += ["tasks:"] + [f"  {line}" for line in table.splitlines()]
    if record.history:
        lines += ["history:"] + [f"  {iso_time(h.at)}  {h.state}" + (f"  {h.message}" if h.message else "")
                                 for h in record.history]
    if record.spec:
        lines.append(yaml.safe_dump(dict(record.spec), sort_keys=False).rstrip())
    return "\n".join(lines)
