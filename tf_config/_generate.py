"""Generate one TF_CONFIG per task, in the dialect of the platform that will run it.

Dialects are named builders in ``_DIALECTS``: ``tf2`` (TF2 strategies, ``chief``),
``cmle`` (AI Platform / CMLE: ``master``, ``environment: cloud``, a ``job`` block)
and ``tfjob`` (Kubeflow TFJob: Kubernetes service DNS names).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ._errors import Problem, TFConfigError, errors_of
from ._model import Task, TFConfig
from ._validate import validate

LOOPBACK_HOST = "127.0.0.1"  # not "localhost": it may resolve to ::1 while the port was checked on IPv4
TFJOB_PORT = 2222
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class _Request:
    chief: int
    workers: int
    ps: int
    evaluator: int
    hosts: tuple[str, ...] | None
    job_name: str
    namespace: str
    base_port: int | None
    port: int


@dataclass(frozen=True)
class _Layout:
    """What a dialect decides: task types in start order, which are listed in `cluster`, extra keys."""

    roles: tuple[tuple[str, int], ...]
    listed: frozenset[str]
    addresses: Callable[[list[tuple[str, int]], _Request], list[str]]
    extras: dict


def generate(
    *,
    chief: int = 1,
    workers: int = 2,
    ps: int = 1,
    evaluator: int = 0,
    dialect: str = "tf2",
    hosts: Sequence[str] | None = None,
    job_name: str = "tfdist",
    namespace: str = "default",
    base_port: int | None = None,
    port: int = TFJOB_PORT,
) -> list[TFConfig]:
    """One validated TF_CONFIG per task: ps first, then chief, workers, evaluator.

    Without ``hosts`` every task gets a loopback address (127.0.0.1) and a free
    port from the OS, or consecutive ports from ``base_port`` for reproducible
    output. ``hosts`` are assigned round-robin in task order (so N hosts for N
    tasks means one per task); a host without ``:port`` uses ``port``, and a
    host used again gets the next port up.

    Raises:
        TFConfigError: a count, name, host or port is invalid (all listed at once).

    Example:
        >>> [str(c.task) for c in generate(workers=2, ps=1, base_port=2221)]
        ['ps-0', 'chief-0', 'worker-0', 'worker-1']
    """
    request = _Request(chief, workers, ps, evaluator, None if hosts is None else tuple(hosts),
                       job_name, namespace, base_port, port)
    problems = _check_request(request, dialect)
    if problems:
        raise TFConfigError(problems)
    layout = _DIALECTS[dialect](request)
    slots = [(t, i) for t, n in layout.roles for i in range(n)]
    listed = [(t, i) for t, i in slots if t in layout.listed]
    cluster: dict[str, list[str]] = {}
    for (task_type, _), address in zip(listed, layout.addresses(listed, request), strict=False):
        cluster.setdefault(task_type, []).append(address)
    # What we write ourselves must pass the strict reading (e.g. no loopback beside other hosts).
    t0, i0 = slots[0]
    strict = errors_of(validate({"cluster": cluster, "task": Task(t0, i0).to_dict(), **layout.extras}, strict=True))
    if strict:
        raise TFConfigError(strict)
    return TFConfig._for_tasks(cluster, [Task(t, i) for t, i in slots], layout.extras)


def _tf2(request: _Request) -> _Layout:
    roles = (("ps", request.ps), ("chief", request.chief), ("worker", request.workers),
             ("evaluator", request.evaluator))
    return _Layout(roles, frozenset(t for t, _ in roles), _host_addresses, {})


def _cmle(request: _Request) -> _Layout:
    # CMLE names the chief `master`, unless useChiefInTfConfig is set; an evaluator needs that.
    chief = "chief" if request.evaluator else "master"
    roles = (("ps", request.ps), (chief, 1), ("worker", request.workers), ("evaluator", request.evaluator))
    training_input: dict = {"scaleTier": "CUSTOM", "masterType": "standard"}
    for key, count in (("worker", request.workers), ("parameterServer", request.ps),
                       ("evaluator", request.evaluator)):
        if count:
            training_input.update({f"{key}Type": "standard", f"{key}Count": count})
    if request.evaluator:
        training_input["useChiefInTfConfig"] = True
    listed = frozenset(t for t, _ in roles if t != "evaluator")  # CMLE never lists the evaluator
    return _Layout(roles, listed, _host_addresses, {"environment": "cloud", "job": training_input})


def _tfjob(request: _Request) -> _Layout:
    roles = (("ps", request.ps), ("chief", request.chief), ("worker", request.workers),
             ("evaluator", request.evaluator))

    def addresses(slots: list[tuple[str, int]], req: _Request) -> list[str]:
        return [f"{req.job_name}-{t}-{i}.{req.namespace}.svc:{req.port}" for t, i in slots]

    return _Layout(roles, frozenset(t for t, _ in roles), addresses, {"environment": "cloud"})


_DIALECTS: dict[str, Callable[[_Request], _Layout]] = {"tf2": _tf2, "cmle": _cmle, "tfjob": _tfjob}
DIALECTS = tuple(_DIALECTS)


def _host_addresses(slots: list[tuple[str, int]], request: _Request) -> list[str]:
    if request.hosts is None:
        return [f"{LOOPBACK_HOST}:{p}" for p in _loopback_ports(len(slots), request.base_port)]
    next_port: dict[str, int] = {}
    out = []
    for k in range(len(slots)):
        entry = request.hosts[k % len(request.hosts)].strip()
        host, port = _split_host(entry, request.port)
        port = next_port.get(entry, port)
        next_port[entry] = port + 1
        out.append(f"{host}:{port}")
    return out


def _split_host(entry: str, default_port: int) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port`` -> (host as written in addresses, port)."""
    if entry.startswith("[") and "]:" in entry:
        host, _, port_text = entry.rpartition(":")
    elif entry.startswith("[") or entry.count(":") != 1:
        host, port_text = (entry if entry.count(":") < 2 else f"[{entry}]"), ""
    else:
        host, _, port_text = entry.partition(":")
    return host, int(port_text) if port_text.isdigit() else default_port


def _loopback_ports(count: int, base_port: int | None) -> list[int]:
    if base_port is not None:
        return list(range(base_port, base_port + count))
    from .ports import pick_ports  # portpicker is imported only when ports are picked

    return pick_ports(count)


def _check_request(r: _Request, dialect: str) -> list[Problem]:
    problems = []
    if dialect not in _DIALECTS:
        problems.append(_bad("dialect", dialect, f"one of {', '.join(_DIALECTS)}", "Pick a listed dialect."))
    for name, value, top in (("chief", r.chief, 1), ("workers", r.workers, None), ("ps", r.ps, None),
                             ("evaluator", r.evaluator, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (top and value > top):
            expected = f"0 or {top}" if top else "an integer >= 0"
            problems.append(_bad(name, value, expected, f"Pass `{name}` with {expected}."))
    if not problems and r.chief + r.workers < 1 and dialect != "cmle":
        problems.append(_bad("workers", r.workers, ">= 1 when there is no chief",
                             "Pass `chief=1` or `workers=1`: someone has to train."))
    if dialect == "cmle" and r.chief == 0:
        problems.append(_bad("chief", 0, "1 for cmle", "CMLE always runs a master; pass `chief=1`."))
    problems += _check_places(r, dialect)
    return problems


def _check_places(r: _Request, dialect: str) -> list[Problem]:
    problems = []
    if r.hosts is not None and dialect == "tfjob":
        problems.append(_bad("hosts", list(r.hosts), "no hosts for tfjob",
                             "TFJob addresses are Kubernetes service names; drop `hosts`."))
    if r.hosts is not None and r.base_port is not None:
        problems.append(_bad("base_port", r.base_port, "no `base_port` with `hosts`",
                             "Put ports in `hosts` (host:port) or use `port`."))
    if r.hosts is not None and (not r.hosts or not all(isinstance(h, str) and h.strip() for h in r.hosts)):
        problems.append(_bad("hosts", list(r.hosts), "a non-empty list of host or host:port",
                             "Pass e.g. `hosts=['10.0.0.1', '10.0.0.2:2223']`."))
    if not isinstance(r.port, int) or isinstance(r.port, bool) or not 1 <= r.port <= 65535:
        problems.append(_bad("port", r.port, "an integer in 1..65535", "Pick another `port`."))
    if r.base_port is not None and (isinstance(r.base_port, bool) or not isinstance(r.base_port, int)
                                    or not 1 <= r.base_port <= 65535 - (r.chief + r.workers + r.ps + 1)):
        problems.append(_bad("base_port", r.base_port, "an integer leaving room for every task below 65536",
                             "Pick a lower `base_port`."))
    for name, value in (("job_name", r.job_name), ("namespace", r.namespace)):
        if dialect == "tfjob" and not (isinstance(value, str) and _DNS_LABEL.match(value)):
            problems.append(_bad(name, value, "a DNS label (lowercase letters, digits, '-')",
                                 f"Choose a `{name}` like 'mnist-1'."))
    return problems


def _bad(field: str, value: object, expected: str, fix: str) -> Problem:
    return Problem("error", field, f"`{field}` is {value!r}; expected {expected}. {fix}")
