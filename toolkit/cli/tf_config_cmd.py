"""`tfdist tf-config generate|validate|explain`: TF_CONFIG without TensorFlow.

Nothing here imports TensorFlow, and the validate path imports neither yaml nor
portpicker unless a YAML file is given, so `tfdist tf-config validate` answers
in the time it takes Python to start.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tf_config import STRATEGIES
from tf_config.limits import MAX_FILE_BYTES
from toolkit.cli._flags import GENERATE_FLAGS, problem_text, speak_flags
from toolkit.cli._types import non_negative_int, path_text, task_count

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2

_GENERATE_HELP = """\
Print one TF_CONFIG per task, ready to paste (ps first, then chief, workers, evaluator).

Without --hosts every task gets 127.0.0.1 and a free port (or consecutive ports
from --base-port). --hosts h1,h2:2300,... assigns hosts round-robin in task
order, so as many hosts as tasks means one host per task; a host without a port
uses --port, and a host used again gets the next port up.

Exit codes: 0 printed/written, 2 usage error (bad counts, hosts, names or flags).
"""
_VALIDATE_HELP = """\
Check a TF_CONFIG against every rule and print each problem, errors and
warnings, one per line, then a summary. An error is what makes TensorFlow or
tfdist fail; what TensorFlow accepts but is risky (a string index, a custom job
name, port 0, a one-task cluster without `task`...) is a warning, or an error
with --strict.

Input: FILE (JSON, an `export TF_CONFIG=...` or `TF_CONFIG=...` line, or .yaml),
`-` for stdin, or $TF_CONFIG when no FILE is given.

Exit codes: 0 valid (warnings allowed), 1 invalid, 2 usage error (no input, unreadable file, bad flag).
"""
_EXPLAIN_HELP = """\
Describe a TF_CONFIG in words: this task's role, whether it is the chief, the
cluster's counts, the global id, which strategy `auto` would pick and why, and
every problem. Same inputs as `validate`.

Exit codes: 0 valid, 1 invalid, 2 usage error.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `tf-config` verb and its three sub-verbs."""
    verb = subparsers.add_parser(
        "tf-config", help="generate, validate and explain TF_CONFIG (no TensorFlow needed)",
        description="Generate, validate and explain TF_CONFIG. Exit codes: 0 ok, 1 invalid, 2 usage error.",
    )
    sub = verb.add_subparsers(dest="tf_config_verb", metavar="SUBCOMMAND")
    sub.required = True
    _register_generate(sub)
    from toolkit.cli.run_cmd import register_from_env
    register_from_env(sub)
    for name, help_text, handler in (("validate", _VALIDATE_HELP, _validate),
                                     ("explain", _EXPLAIN_HELP, _explain)):
        parser = sub.add_parser(name, help=help_text.splitlines()[0], description=help_text,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("file", nargs="?", metavar="FILE|-", help="TF_CONFIG file, or - for stdin")
        parser.add_argument("--strategy", choices=STRATEGIES,
                            help="also apply this strategy's rules (auto: the one the cluster implies)")
        if name == "validate":
            parser.add_argument("--strict", action="store_true",
                                help="report what TensorFlow accepts but is risky as errors")
        if name == "explain":
            parser.add_argument("--gpus", type=non_negative_int, default=0, metavar="N",
                                help="GPUs on this machine, for the `auto` recommendation (default 0)")
        parser.set_defaults(handler=handler)


def _register_generate(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("generate", help="print one TF_CONFIG per task, ready to paste",
                            description=_GENERATE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chief", type=non_negative_int, default=1, metavar="N", help="0 or 1 (default 1)")
    parser.add_argument("--workers", type=task_count, default=2, metavar="N", help="default 2")
    parser.add_argument("--ps", type=task_count, default=1, metavar="N", help="default 1")
    parser.add_argument("--evaluator", type=non_negative_int, default=0, metavar="N", help="0 or 1 (default 0)")
    parser.add_argument("--dialect", choices=("tf2", "cmle", "tfjob"), default="tf2",
                        help="tf2: chief; cmle: master + environment cloud + job block; "
                             "tfjob: <job>-<type>-<i>.<namespace>.svc:PORT (default tf2)")
    parser.add_argument("--hosts", type=_host_list, metavar="H1,H2[:PORT],...",
                        help="hosts assigned round-robin in task order (default: 127.0.0.1, free ports)")
    parser.add_argument("--port", type=non_negative_int, default=2222,
                        help="port for --hosts entries without one, and for tfjob (default 2222)")
    parser.add_argument("--base-port", type=non_negative_int, metavar="N",
                        help="loopback only: consecutive ports from N instead of free ones (reproducible)")
    parser.add_argument("--job-name", default="tfdist", help="tfjob: the TFJob's name (default tfdist)")
    parser.add_argument("--namespace", default="default", help="tfjob: Kubernetes namespace (default default)")
    parser.add_argument("--format", choices=("export", "json", "env", "yaml"), default="export",
                        help="export: `export TF_CONFIG='...'` lines; env: .env lines; json; yaml "
                             "(default export)")
    parser.add_argument("--output-dir", type=lambda text: Path(path_text(text)), metavar="DIR",
                        help="write one file per task, <type>-<index>.<ext>, instead of printing")
    parser.set_defaults(handler=_generate)


def _host_list(text: str) -> list[str]:
    hosts = [h.strip() for h in text.split(",")]
    if not all(hosts):
        raise argparse.ArgumentTypeError(f"expected comma-separated hosts like a,b:2223, received {text!r}")
    return hosts


def _generate(args: argparse.Namespace) -> int:
    from tf_config import TFConfigError, generate, render
    from tf_config._render import file_name

    try:
        configs = generate(chief=args.chief, workers=args.workers, ps=args.ps, evaluator=args.evaluator,
                           dialect=args.dialect, hosts=args.hosts, job_name=args.job_name,
                           namespace=args.namespace, base_port=args.base_port, port=args.port)
    except TFConfigError as exc:
        for problem in exc.problems:
            print(f"tfdist tf-config generate: {problem_text(problem, GENERATE_FLAGS)}", file=sys.stderr)
        return EXIT_USAGE
    if args.output_dir is None:
        sys.stdout.write(render(configs, args.format))
        return EXIT_OK
    out = args.output_dir
    if out.exists() and not out.is_dir():
        print(f"tfdist tf-config generate: --output-dir {str(out)!r} exists and is not a directory; "
              "choose a directory path.", file=sys.stderr)
        return EXIT_USAGE
    out.mkdir(parents=True, exist_ok=True)
    for cfg in configs:
        path = out / file_name(cfg, args.format)
        path.write_text(render([cfg], args.format), encoding="utf-8")
        print(path)
    return EXIT_OK


def _read_input(args: argparse.Namespace) -> tuple[object | None, str]:
    """(document or None on a usage error, where it came from)."""
    from tf_config import TFConfig
    from tf_config._render import read_rendered

    if args.file is None:
        text = TFConfig.env_text()
        if text is None:
            print("tfdist tf-config: no TF_CONFIG to read. Pass a FILE, '-' to read stdin, or set "
                  "TF_CONFIG (e.g. from `tfdist tf-config generate`).", file=sys.stderr)
        return text, "$TF_CONFIG"
    from tf_config.errors import printable
    from tf_config.limits import read_text

    path = Path(args.file)
    try:
        text = _read_stdin() if args.file == "-" else read_text(path)
    except (OSError, ValueError) as exc:
        print(printable(f"tfdist tf-config: cannot read FILE {args.file!r} ({exc}). Check the path and that "
                        "it is UTF-8 text."), file=sys.stderr)
        return None, args.file
    if args.file == "-":
        return read_rendered(text), "stdin"
    return read_rendered(text, yaml_file=path.suffix in (".yaml", ".yml")), args.file


def _read_stdin() -> str:
    """stdin's text, refused past the file-size limit (a pipe can be endless)."""
    from tf_config.limits import InputTooLargeError, decode

    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        return decode(buffer.read(MAX_FILE_BYTES + 1))
    text = sys.stdin.read(MAX_FILE_BYTES + 1)
    if len(text) > MAX_FILE_BYTES:
        raise InputTooLargeError(f"it is larger than the {MAX_FILE_BYTES:,} bytes tfdist reads")
    return text


def _load(args: argparse.Namespace) -> tuple[object | None, str, list]:
    from tf_config import TFConfigError

    try:
        doc, source = _read_input(args)
    except TFConfigError as exc:  # a YAML file that does not parse
        return None, args.file, exc.problems
    return doc, source, []


def _validate(args: argparse.Namespace) -> int:
    from tf_config import validate

    doc, source, problems = _load(args)
    if doc is None and not problems:
        return EXIT_USAGE
    if doc is not None:
        problems = validate(doc, strategy=args.strategy, strict=args.strict)
    for problem in problems:
        print(problem_text(problem, {}))
    errors = sum(p.is_error for p in problems)
    warnings = len(problems) - errors
    verdict = "invalid" if errors else "valid"
    rules = f" for {args.strategy}" if args.strategy else ""
    rules += " (strict)" if args.strict else ""
    print(f"TF_CONFIG from {source} is {verdict}{rules}: {errors} error(s), {warnings} warning(s).")
    return EXIT_INVALID if errors else EXIT_OK


def _explain(args: argparse.Namespace) -> int:
    from tf_config import explain, validate

    doc, source, problems = _load(args)
    if doc is None and not problems:
        return EXIT_USAGE
    if doc is None:
        for problem in problems:
            print(problem_text(problem, {}))
        return EXIT_INVALID
    print(f"# from {source}")
    sys.stdout.write(speak_flags(explain(doc, strategy=args.strategy, num_local_gpus=args.gpus), {}))
    return EXIT_INVALID if any(p.is_error for p in validate(doc, strategy=args.strategy)) else EXIT_OK
