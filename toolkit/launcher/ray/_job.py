"""A Ray launch as the local launcher's ``Job``: same control loop and failure policy, tasks on actors.

``RayJob`` replaces how tasks are made and where they listen; everything else
(the chief ends the job, a parameter-server worker is restarted alone, any
other death restarts the cluster when ``restartable``, timeouts, signals) is
``toolkit.launcher.local._supervisor`` unchanged.
"""
from __future__ import annotations

import itertools
import json
import logging
import secrets
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

import ray
from ray.actor import ActorHandle
from ray.util.placement_group import PlacementGroup, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from toolkit.launcher._policy import FailurePolicy, Outcome
from toolkit.launcher._result import EXIT_TASK_FAILED, Reason, TaskEvent
from toolkit.launcher._signal_dir import name_remote_signal_dir
from toolkit.launcher._spec import LaunchSpec
from toolkit.launcher.local._supervisor import Job, generate_configs
from toolkit.launcher.ray._actor import RemoteTaskRunner
from toolkit.launcher.ray._cluster import connect, driver_ip, place
from toolkit.launcher.ray._options import RayOptions, check_shared_paths
from toolkit.launcher.ray._task import RayTask

logger = logging.getLogger(__name__)
_STOP_POLL = 1.0  # seconds between looks at ``should_stop``


def task_names(spec: LaunchSpec) -> list[str]:
    """The tasks in TF_CONFIG order (ps, chief, workers, evaluator), as ``tf_config.generate`` lists them."""
    from tf_config import generate

    assert spec.chief is not None  # LaunchSpec.__post_init__ resolved it
    configs = generate(chief=spec.chief, workers=spec.workers, ps=spec.ps, evaluator=spec.evaluator,
                       dialect="tf2", base_port=20000)
    return [spec.tf_dialect.task_name(str(cfg.task)) for cfg in configs]


class RayJob(Job):
    """One launch whose tasks are Ray actors in one placement group."""

    def __init__(self, spec: LaunchSpec, job_dir: Path, *, options: RayOptions, env: Mapping[str, str] | None,
                 stream: IO[str] | None, on_task: Callable[[TaskEvent], None] | None = None,
                 on_placement: Callable[[dict[str, dict]], None] | None = None,
                 should_stop: Callable[[], bool] | None = None, shared_paths: Sequence[str] = (),
                 verbose: bool = False) -> None:
        self.spec, self.job_dir, self.options = spec, job_dir, options
        self.policy = FailurePolicy.of(spec)
        self.wrap = None  # a Ray cluster's tasks run on their nodes' own networks: no local namespace
        # Each node's own environment is the base (its PATH, its Python); the job adds only its variables.
        self.base_env = dict(env or {})
        name_remote_signal_dir(self.base_env)  # private and random, made by each task on its node
        self.on_placement, self.should_stop = on_placement, should_stop
        self.shared_paths = [str(job_dir), *shared_paths]
        self.tag = f"{job_dir.name}-{secrets.token_hex(3)}"
        self.group: PlacementGroup | None = None
        # RayTask shares TaskBase with TaskProcess, and its surface (start/poll/signal_group), not its Popen.
        self.tasks: dict[str, RayTask] = {}  # type: ignore[assignment]
        self.actor_names: dict[str, str] = {}
        self._next_stop_check = 0.0
        names = task_names(spec)
        connect(options.address)
        try:
            self.group, self.strategy = place([options.task_resources(n.rpartition("-")[0]) for n in names],
                                              strategy=options.placement, timeout=options.placement_timeout,
                                              name=f"tfdist-{self.tag}")
            self._add_tasks(names, lambda name, **common: RayTask(
                name, make_actor=self._actor_factory(name, names.index(name)), start_timeout=options.start_timeout,
                **common), stream=stream, on_task=on_task, verbose=verbose)
            self.configs = self._generate()
        except BaseException:
            self.teardown()
            raise
        self._ready()

    def _actor_factory(self, name: str, bundle: int) -> Callable[[], ActorHandle]:
        """Makes the task's actor in its bundle; Ray restarts a parameter-server worker's actor itself."""
        generations = itertools.count()
        task_type = name.rpartition("-")[0]
        restarts = self.spec.max_restarts if (self.spec.is_parameter_server and task_type == "worker") else 0
        resources = self.options.task_resources(task_type)

        def make() -> ActorHandle:
            generation = next(generations)
            actor_name = f"{self.tag}/{name}" + (f"#{generation}" if generation else "")
            self.actor_names[name] = actor_name
            assert self.group is not None  # placed before any actor is made
            return RemoteTaskRunner.options(
                name=actor_name, namespace="tfdist", max_restarts=restarts,
                num_cpus=resources.get("CPU", 0), num_gpus=resources.get("GPU", 0),
                memory=resources.get("memory") or None,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=bundle),
            ).remote(name)

        return make

    # ---- cluster ----------------------------------------------------------------
    def _generate(self) -> dict:
        """TF_CONFIGs from the address each actor's node has and the port each actor reserved."""
        hosts = [task.locate() for task in self.tasks.values()]
        by_name = generate_configs(self.spec, self.job_dir, hosts=hosts)
        placement = self.placement()
        (self.job_dir / "placement.json").write_text(json.dumps(placement, indent=2) + "\n")
        check_shared_paths(self.shared_paths, [t.ip for t in self.tasks.values() if t.ip is not None], here=driver_ip(),
                           asserted=self.options.shared_dirs)
        if self.on_placement is not None:
            self.on_placement(placement)
        return by_name

    def placement(self) -> dict[str, dict]:
        """Per task: Ray node id, address, actor name (namespace ``tfdist``) and actor restarts."""
        return {name: {"node_id": t.node_id, "address": f"{t.ip}:{t.port}", "actor": self.actor_names.get(name),
                       "actor_restarts": t.actor_restarts, "strategy": self.strategy}
                for name, t in self.tasks.items()}

    def _restart_task(self, task, *, preempted: bool = False) -> None:  # type: ignore[override]
        super()._restart_task(task, preempted=preempted)
        if self.on_placement is not None:
            self.on_placement(self.placement())

    # ---- policy hooks -----------------------------------------------------------
    def check(self, deadline: float | None):  # type: ignore[override]
        now = time.monotonic()
        if self.should_stop is not None and self.signal is None and now >= self._next_stop_check:
            self._next_stop_check = now + _STOP_POLL
            if self.should_stop():
                self.signal = int(signal.SIGTERM)
        lost = next((t.port_lost for t in self.tasks.values() if t.port_lost), None)
        if lost is not None:  # its actor has killed the task; every other task goes with the job
            self.failures += 1
            return Outcome(EXIT_TASK_FAILED, Reason.FAILED, lost)
        return super().check(deadline)

    def wind_down(self, grace: float) -> None:
        try:
            super().wind_down(grace)
        finally:
            self.teardown()

    def teardown(self) -> None:
        """Kills every actor and frees the placement group; nothing of the job stays on the cluster."""
        for task in self.tasks.values():
            task.kill_actor()
        if self.group is not None:
            try:
                remove_placement_group(self.group)
            except ray.exceptions.RayError as exc:
                logger.warning("could not remove placement group %s: %s", self.tag, exc)
            self.group = None
