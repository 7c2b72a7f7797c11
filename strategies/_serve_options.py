"""Every timeout of the serve/goodbye protocol: one frozen, self-validating object.

Defaults survive a slow start: on Kubernetes the chief's pod can spend many
minutes pulling its image while the ps pods already serve, so a server waits
``chief_start_timeout`` = 15 minutes for a chief that never showed up. Once
the chief *was* up, ``chief_lost_after`` seconds of silence on its port end
the server (the job is restarted as a whole from the last checkpoint).

Set them per call (``run_role``, ``fit(options=FitOptions(serve=...))``, the Estimator's
``RunConfig``) or for every task of a launched job through the environment
the launcher sets: ``TFDIST_<NAME>`` in capitals, e.g.
``TFDIST_CHIEF_LOST_AFTER=20`` (seconds).
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from strategies._errors import StrategyError

__all__ = ["ENV_CHIEF_LOST_AFTER", "ENV_CHIEF_START_TIMEOUT", "ENV_GOODBYE_TIMEOUT", "ServeOptions"]


def _env_name(field: str) -> str:
    return f"TFDIST_{field.upper()}"


ENV_CHIEF_START_TIMEOUT = _env_name("chief_start_timeout")
ENV_CHIEF_LOST_AFTER = _env_name("chief_lost_after")
ENV_GOODBYE_TIMEOUT = _env_name("goodbye_timeout")


def _seconds(name: str, value: Any, source: str) -> float:  # Any: whatever was passed, float() decides
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        seconds = -1.0
    if isinstance(value, bool) or not 0 < seconds < float("inf"):
        raise StrategyError(f"`{name}` ({source}) is {value!r}; expected a positive number of seconds, "
                            f"e.g. {name}={ServeOptions.__dataclass_fields__[name].default:g}.", field=name)
    return seconds


@dataclasses.dataclass(frozen=True)
class ServeOptions:
    """Timeouts of the serve/goodbye protocol, one name per knob.

    Attributes:
        chief_start_timeout: a server whose chief never came up exits
            (``EXIT_CHIEF_NEVER_STARTED``) after this many seconds.
        chief_lost_after: a server whose chief was up and then stays
            unreachable this long exits (``EXIT_CHIEF_LOST``). Under TF1's
            layout without a chief, worker 0 is the chief: a ps whose workers
            all died exits this long after worker 0's port closed.
        goodbye_timeout: the chief's goodbye to all servers (sent in
            parallel) gives up on the ones that have not answered by then;
            those still exit through ``chief_lost_after``. Also how long a
            chief lets its coordinator's threads finish before the goodbye.
        workers_done_timeout: between-graph training: how long the chief
            waits for the other workers to finish before it ends the ps
            tasks anyway.
        poll_interval: how often a server looks for its goodbye.
        work_join_timeout: how long a server whose own work runs beside it
            (``serve(work=...)``) waits for that work to stop before exiting.
    """

    chief_start_timeout: float = 900.0
    chief_lost_after: float = 6.0
    goodbye_timeout: float = 30.0
    workers_done_timeout: float = 120.0
    poll_interval: float = 0.5
    work_join_timeout: float = 10.0

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, _seconds(field.name, getattr(self, field.name), "argument"))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, **explicit: Any) -> ServeOptions:
        """The environment's values (``TFDIST_<NAME>``), overridden by non-None ``explicit`` ones."""
        names = [field.name for field in dataclasses.fields(cls)]
        unknown = sorted(set(explicit) - set(names))
        if unknown:
            raise StrategyError(f"unknown serve option `{unknown[0]}`; valid: {', '.join(names)}.",
                                field=unknown[0])
        values: dict[str, Any] = {}
        for name in names:
            variable = _env_name(name)
            if environ.get(variable):
                values[name] = _seconds(name, environ[variable], f"environment variable {variable}")
        values.update({name: value for name, value in explicit.items() if value is not None})
        return cls(**values)
