"""Hostile inputs for the fuzz tests: what a careless or malicious user can hand tfdist.

Strategies build TF_CONFIG documents and job-spec YAML out of the values that
broke parsers before (Unicode digits, lone surrogates, NUL bytes, 400-digit
numbers, NaN, invalid YAML dates, deep nesting, alias bombs), mixed into
documents that are otherwise close to valid so the fuzzer reaches the deep
checks. ``outcome`` runs one call under a wall-clock deadline and classifies
it, so a test can count inputs, clean errors and crashes.
"""
from __future__ import annotations

import contextlib
import io
import json
import signal
import traceback
from collections.abc import Callable, Iterator

from hypothesis import strategies as st

DEADLINE_S = 5

# Values that made parsers raise or hang.
HOSTILE_SCALARS = [
    "²", "١٢", "\ud800", "a\udcffb", "\x00", "x\x00y", "2001-13-45", 10 ** 400, -(10 ** 400),
    "9" * 400, "9" * 5000, float("nan"), float("inf"), -0.0, 1e308, "NaN", "Infinity", "", " ",
    "../../etc/passwd", "a" * 10_000, "\u202e", "０", True, None, [], {},
]
_names = st.sampled_from(["chief", "worker", "ps", "evaluator", "master", "type", "index", "cluster", "task",
                          "trial", "rpc_layer", "environment", "job", "model_dir", "²", "\ud800", "\x00"])
scalars = (st.sampled_from(HOSTILE_SCALARS) | st.integers() | st.floats() | st.text(max_size=8)
           | st.booleans() | st.none())
json_ish = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(_names | st.text(max_size=4), inner, max_size=4), max_leaves=12)
_address = st.sampled_from(["127.0.0.1:2222", "localhost:2223", "h:²", "h:１２", "h:\x00", "\ud800:1",
                            "h:" + "9" * 400, "[::1]:2224", "h:-1"]) | scalars
tf_config_docs = st.fixed_dictionaries({}, optional={
    "cluster": st.dictionaries(_names, st.lists(_address, max_size=3) | scalars, max_size=3) | scalars,
    "task": st.fixed_dictionaries({}, optional={"type": _names | scalars, "index": scalars,
                                                "trial": scalars}) | scalars,
    "environment": scalars, "rpc_layer": scalars, "model_dir": scalars, "job": json_ish,
}) | json_ish


def nested(depth: int, open_: str = "[", close: str = "]") -> str:
    return open_ * depth + close * depth


def alias_bomb(levels: int = 9, fan: int = 9) -> str:
    """The "billion laughs" in YAML: a few hundred bytes that expand to fan**levels strings."""
    lines = ['a0: &a0 ["lol"]']
    for i in range(1, levels):
        refs = ", ".join([f"*a{i - 1}"] * fan)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


RAW_TEXTS = [
    nested(100_000), nested(5_000, '{"a":', "}"),
    '{"cluster": {"worker": ["h:1"]}, "task": {"index": 1' + "0" * 5000 + "}}",
    '{"task": {"type": "worker", "index": NaN}}', '{"task": {"index": 1e999}}', '{"a": "\\ud800"}', "\x00",
    alias_bomb(), "region: 2001-13-45\n", "trainingInput:\n  region: 2001-13-45\n", "- " * 2000 + "x",
    "a: !!python/object/apply:os.system ['true']\n", "? [a, b]\n: c\n", "1: 2\n", "<<: *nope\n",
    "a: &x [*x]\n", "trainingInput: {workerCount: 100000, scaleTier: CUSTOM}\n", "\ufeff{}", "%YAML 9.9\n---\n",
    "trainingInput:\n  hyperparameters:\n    maxTrials: 1" + "0" * 400 + "\n",
    alias_bomb() + "task: {type: worker, index: *a8}\n",
    alias_bomb() + "trainingInput: {pythonModule: t.m, args: *a8, region: *a8}\n",
    "trainingInput: {scaleTier: CUSTOM, masterType: standard, workerType: standard, workerCount: 100000,\n"
    "  pythonModule: trainer.task}\n",
    '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": "\u00b2"}}',
]


def _job_doc(ti: dict) -> dict:
    return {"trainingInput": ti}


_counts = st.sampled_from(["workerCount", "parameterServerCount", "evaluatorCount"])
_param = st.fixed_dictionaries({}, optional={
    "parameterName": st.sampled_from(["lr", "²", "\ud800", "a\x00", "x" * 300]) | scalars,
    "type": st.sampled_from(["DOUBLE", "INTEGER", "CATEGORICAL", "DISCRETE"]) | scalars,
    "minValue": scalars, "maxValue": scalars, "discreteValues": st.lists(scalars, max_size=4) | scalars,
    "categoricalValues": st.lists(scalars, max_size=4) | scalars, "scaleType": scalars,
})
_hyper = st.fixed_dictionaries({}, optional={
    "goal": st.sampled_from(["MAXIMIZE", "MINIMIZE"]) | scalars, "maxTrials": scalars,
    "maxParallelTrials": scalars, "hyperparameterMetricTag": scalars, "algorithm": scalars,
    "params": st.lists(_param, max_size=3) | scalars,
})
training_inputs = st.fixed_dictionaries({"pythonModule": st.just("trainer.task") | scalars}, optional={
    "scaleTier": st.sampled_from(["CUSTOM", "BASIC"]) | scalars,
    "masterType": st.just("standard") | scalars, "workerType": st.just("standard") | scalars,
    "parameterServerType": st.just("standard") | scalars,
    "workerCount": st.sampled_from([0, 1, 2, 100_000, "²", "3"]) | scalars,
    "parameterServerCount": st.sampled_from([0, 1, "1"]) | scalars,
    "args": st.lists(scalars, max_size=3) | scalars, "region": scalars, "jobDir": scalars,
    "packagePath": scalars, "runtimeVersion": scalars, "useChiefInTfConfig": st.booleans() | scalars,
    "scheduling": st.fixed_dictionaries({}, optional={"maxRunningTime": scalars}) | scalars,
    "workerConfig": st.fixed_dictionaries({}, optional={"imageUri": scalars, "acceleratorConfig": json_ish}),
    "hyperparameters": _hyper,
})
job_docs = (st.builds(_job_doc, training_inputs)
            | st.fixed_dictionaries({"trainingInput": training_inputs},
                                    optional={"jobId": scalars, "labels": json_ish})
            | json_ish)


def yaml_text(doc: object) -> str:
    """The YAML (JSON is YAML) a user would write for ``doc``; NaN and big ints as YAML reads them."""
    return json.dumps(doc, ensure_ascii=False, default=str).replace("NaN", ".nan").replace("Infinity", ".inf")


def write(path, text: str) -> None:
    """Writes ``text`` as the bytes a hostile user could put in a file (lone surrogates included)."""
    path.write_bytes(text.encode("utf-8", "surrogatepass"))


class Hang(BaseException):
    """A call ran past its deadline."""


@contextlib.contextmanager
def deadline(cpu_seconds: float = DEADLINE_S, wall_seconds: float = 12 * DEADLINE_S) -> Iterator[None]:
    """Raises ``Hang`` in the call after ``cpu_seconds`` of this process's CPU time (a parser
    spinning), or ``wall_seconds`` of wall time (one blocked); CPU time does not count the
    other work of a busy machine, so the tight limit stays fair under load."""
    def _expired(signum, frame):
        kind = "CPU" if signum == signal.SIGPROF else "wall-clock"
        raise Hang(f"no answer within {cpu_seconds if kind == 'CPU' else wall_seconds} s of {kind} time")

    old = {sig: signal.signal(sig, _expired) for sig in (signal.SIGPROF, signal.SIGALRM)}
    signal.setitimer(signal.ITIMER_PROF, cpu_seconds)
    signal.setitimer(signal.ITIMER_REAL, wall_seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in old.items():
            signal.signal(sig, handler)


def outcome(call: Callable[[], object], clean: tuple[type[BaseException], ...] = ()) -> tuple[str, str]:
    """Runs ``call`` under the deadline: ("ok" | "clean" | "crash" | "hang", detail).

    ``clean`` exceptions are the documented error family; any other exception
    is a crash, reported with its traceback.
    """
    try:
        with deadline():
            call()
    except Hang as exc:
        return "hang", str(exc)
    except clean as exc:
        return "clean", str(exc)
    except BaseException:  # noqa: BLE001 - the fuzzer's job is to see every kind of failure
        return "crash", traceback.format_exc(limit=6)
    return "ok", ""


def cli(argv: list[str]) -> tuple[int, str, str]:
    """``tfdist ARGV`` in this process: (exit code, stdout, stderr); argparse's exits count as codes."""
    from toolkit.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def cli_outcome(argv: list[str], ok_codes: tuple[int, ...] = (0,)) -> tuple[str, str]:
    """Like ``outcome`` for the CLI: a clean error is exit 1 or 2 with a message and no traceback."""
    result: list[tuple[int, str, str]] = []
    kind, detail = outcome(lambda: result.append(cli(argv)))
    if kind != "ok":
        return kind, detail
    code, out, err = result[0]
    if "Traceback" in out + err:
        return "crash", err[-2000:]
    try:  # a terminal's UTF-8 stream refuses lone surrogates: printing one is a crash
        (out + err).encode("utf-8")
    except UnicodeEncodeError as exc:
        return "crash", f"unprintable output: {exc}"
    if code in ok_codes:
        return "ok", ""
    if code in (1, 2) and (out + err).strip():
        return "clean", err[-300:]
    return "crash", f"exit {code}: {(out + err)[-500:]}"
