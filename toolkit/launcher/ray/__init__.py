"""The Ray launcher: the same job as ``toolkit.launcher.launch``, with one Ray actor per task.

Every task (chief, workers, ps, evaluator) is an actor in one placement group
(``STRICT_SPREAD`` when the cluster has a node per task, ``SPREAD`` otherwise,
or the ``placement`` asked for). Each actor reserves a port on its node and
runs the unchanged entrypoint as a subprocess whose TF_CONFIG uses the address
Ray reports for every node. The failure policy, exit codes, ``[worker-1]``
prefixes and per-task logs are the local launcher's; a parameter-server
worker's actor is restarted by Ray itself (``max_restarts``).

Example:
    >>> from toolkit.launcher.ray import launch_ray                 # doctest: +SKIP
    >>> result = launch_ray(["python", "train.py"], workers=2, ps=1, address="ray://head:10001")  # doctest: +SKIP
    >>> result.exit_code  # doctest: +SKIP
    0

Ray is imported only when ``launch_ray`` runs; ``RayOptions`` needs no Ray.
"""
from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import IO, Any

from toolkit.launcher._result import LaunchResult, TaskEvent
from toolkit.launcher._spec import LaunchError, LaunchSpec, make_spec
from toolkit.launcher.ray._options import (
    DEFAULT_TASK_RESOURCES,
    PLACEMENTS,
    RayOptions,
    check_shared_paths,
    is_shared_uri,
)

__all__ = ["DEFAULT_TASK_RESOURCES", "PLACEMENTS", "RayOptions", "check_shared_paths", "is_shared_uri", "launch_ray"]

logger = logging.getLogger(__name__)


def launch_ray(cmd: Sequence[str] | LaunchSpec, *, job_dir: str | PathLike[str] | None = None,
               env: Mapping[str, str] | None = None, stream: IO[str] | None = None, echo: bool = True,
               on_task: Callable[[TaskEvent], None] | None = None, options: RayOptions | None = None,
               on_placement: Callable[[dict[str, dict]], None] | None = None,
               should_stop: Callable[[], bool] | None = None, shared_paths: Sequence[str] = (),
               verbose: bool = False, **fields: Any) -> LaunchResult:
    """Runs a ``LaunchSpec`` as every task of a cluster of Ray actors and waits for the job to end.

    Takes ``toolkit.launcher.launch``'s arguments (a ``LaunchSpec``, or the
    entrypoint with the spec's fields as keywords), plus:

    Args:
        options: a ``RayOptions``; or give its fields as keywords (``address=``,
            ``placement=``, ``resources=``, ``shared_dirs=``). Without an
            address, ``RAY_ADDRESS`` is used. ``cwd`` must exist on every node.
        on_placement: called with ``{task: {"node_id", "address", ...}}`` once
            the tasks are placed (and again after a restart).
        should_stop: polled about once a second; True stops every task (the
            job ends ``interrupted``, exit code 143), as a cancel does.
        shared_paths: local paths besides ``job_dir`` that every task writes
            (a ``model_dir``): refused when tasks run on other hosts, unless
            ``shared_dirs``.

    Raises:
        LaunchError: a bad argument, an unreachable cluster, a cluster too
            small for the tasks, or a local path on a multi-host placement
            (nothing is left running).
    """
    from toolkit.launcher import default_job_dir
    from toolkit.launcher._loop import supervise
    from toolkit.launcher._task import preemption_grace
    from toolkit.launcher.ray._job import RayJob

    spec_names = {f.name for f in dataclasses.fields(LaunchSpec)}
    option_fields = {k: v for k, v in fields.items() if k not in spec_names}
    options = options if options is not None else RayOptions.from_env(**option_fields)
    spec = make_spec(cmd, {k: v for k, v in fields.items() if k in spec_names})
    if spec.max_log_bytes is not None:
        raise LaunchError(f"`max_log_bytes` is {spec.max_log_bytes}, but a Ray task's output comes back through "
                          "Ray, whose log files the launcher does not write. Leave `max_log_bytes` out on Ray.",
                          field="max_log_bytes")
    if spec.preload:
        raise LaunchError(f"`preload` is {spec.preload!r}, but on Ray every task is an actor that starts its own "
                          "interpreter on its node. Preloading is for the local launcher: leave `preload` out.",
                          field="preload")
    preemption_grace(env or {})  # a value the tasks would refuse stops the job here (each node's own env is the base)
    directory = Path(job_dir if job_dir is not None else default_job_dir()).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    out = (stream if stream is not None else sys.stdout) if echo else None
    job = RayJob(spec, directory, options=options, env=env, stream=out, on_task=on_task,
                 on_placement=on_placement, should_stop=should_stop, shared_paths=shared_paths, verbose=verbose)
    logger.info("launching %s on Ray (%s) in %s: %s", ", ".join(job.tasks), job.strategy, directory,
                " ".join(spec.cmd))
    return supervise(job)
