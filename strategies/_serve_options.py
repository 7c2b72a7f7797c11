"""Every timeout of the serve/goodbye protocol: one frozen, self-validating object.

Defaults survive a slow start: on Kubernetes the chief's pod can spend many
minutes pulling its image while the ps pods already serve, so a server waits
``chief_start_timeout`` = 15 minutes for a chief that never showed up. Once
the chief *was* up, ``chief_lost_after`` seconds of silence on its port end
the server (the job is restarted as a whole from the last checkpoint).

A preempted task has ``preemption_grace`` seconds from the
``preemption_signal`` to its exit (docs/preemption.md): every task reads them
here, the servers, the training loop and the Estimator alike.

Set them per call (``run_role``, ``fit(options=FitOptions(serve=...))``, the Estimator's
``RunConfig``) or for every task of a launched job through the environment
the launcher sets: ``TFDIST_<NAME>`` in capitals, e.g.
``TFDIST_CHIEF_LOST_AFTER=20`` (seconds) or ``TFDIST_PREEMPTION_SIGNAL=SIGUSR1``.
"""
from __future__ import annotations

import dataclasses
import os
import signal
from collections.abc import Callable, Mapping
from typing import Any

from strategies._errors import StrategyError

__all__ = ["ENV_CHIEF_LOST_AFTER", "ENV_CHIEF_START_TIMEOUT", "ENV_GOODBYE_TIMEOUT", "ENV_PREEMPTION_GRACE",
           "ENV_PREEMPTION_SIGNAL", "ServeOptions"]


def _env_name(field: str) -> str:
    return f"TFDIST_{field.upper()}"


ENV_CHIEF_START_TIMEOUT = _env_name("chief_start_timeout")
ENV_CHIEF_LOST_AFTER = _env_name("chief_lost_after")
ENV_GOODBYE_TIMEOUT = _env_name("goodbye_timeout")
ENV_PREEMPTION_GRACE = _env_name("preemption_grace")
ENV_PREEMPTION_SIGNAL = _env_name("preemption_signal")
#: options whose seconds have an upper bound: a preemption notice longer than an hour is none
_BELOW = {"preemption_grace": 3600.0}


def _given(name: str, variable: str | None) -> tuple[str, str]:
    """Where a value came from, and the name a fix sets: the argument's, or the environment variable's."""
    return ("argument", name) if variable is None else (f"environment variable {variable}", variable)


def _seconds(name: str, value: Any, variable: str | None) -> float:  # Any: whatever was passed, float() decides
    source, key = _given(name, variable)
    below = _BELOW.get(name, float("inf"))
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        seconds = -1.0
    if isinstance(value, bool) or not 0 < seconds < below:
        expected = "a positive number of seconds" if below == float("inf") else f"seconds between 0 and {below:g}"
        raise StrategyError(f"`{name}` ({source}) is {value!r}; expected {expected}, "
                            f"e.g. {key}={ServeOptions.__dataclass_fields__[name].default:g}.", field=name)
    return seconds


def _signal(name: str, value: Any, variable: str | None) -> int:
    """A catchable signal from a name (``"SIGUSR1"``, ``"usr1"``), a number, or its text (``"10"``)."""
    source, key = _given(name, variable)
    number: int | None = None
    if isinstance(value, str):
        text = value.strip().upper()
        known = signal.Signals.__members__.get(text if text.startswith("SIG") else f"SIG{text}")
        number = int(text) if text.isdigit() else None if known is None else int(known)
    elif isinstance(value, int) and not isinstance(value, bool):
        number = int(value)
    if number is None or number not in {int(each) for each in signal.Signals}:
        raise StrategyError(f"`{name}` ({source}) is {value!r}, which is no signal; expected a name or a number, "
                            f"e.g. {key}=SIGUSR1 or {key}={int(signal.SIGTERM)} (SIGTERM).", field=name)
    if number in (signal.SIGKILL, signal.SIGSTOP):
        raise StrategyError(f"`{name}` ({source}) is {value!r}; expected a signal a process can catch (SIGKILL and "
                            f"SIGSTOP cannot be caught), e.g. {key}=SIGTERM.", field=name)
    return number


#: how an option's value is read (an argument, or the environment's text); seconds unless named here
_PARSERS: dict[str, Callable[[str, Any, str | None], float | int]] = {"preemption_signal": _signal}


def _parse(name: str, value: Any, variable: str | None = None) -> float | int:
    """``value`` for option ``name``, given as an argument or (``variable``) in the environment."""
    return _PARSERS.get(name, _seconds)(name, value, variable)


@dataclasses.dataclass(frozen=True)
class ServeOptions:
    """Timeouts of the serve/goodbye protocol and of a preemption, one name per knob.

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
        preemption_grace: seconds from the preemption signal to the task's
            exit, whatever happens (below 3600; default 25, under Kubernetes'
            30 s ``terminationGracePeriodSeconds``, leaving time for the exit
            itself). The checkpoint a preemption writes must fit in it.
        preemption_signal: the signal that means "preempted", stored as its
            number; given as a name (``"SIGUSR1"``, ``"usr1"``) or a number.
            Default SIGTERM; Slurm's ``--signal`` can send another one ahead of
            its SIGTERM. SIGKILL and SIGSTOP cannot be caught, so are refused.
    """

    chief_start_timeout: float = 900.0
    chief_lost_after: float = 6.0
    goodbye_timeout: float = 30.0
    workers_done_timeout: float = 120.0
    poll_interval: float = 0.5
    work_join_timeout: float = 10.0
    preemption_grace: float = 25.0
    preemption_signal: int = int(signal.SIGTERM)

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, _parse(field.name, getattr(self, field.name)))

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
                values[name] = _parse(name, environ[variable], variable)
        values.update({name: value for name, value in explicit.items() if value is not None})
        return cls(**values)
