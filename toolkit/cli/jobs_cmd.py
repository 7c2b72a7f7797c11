"""`tfdist jobs ...`: CMLE-style job submission (gcloud ai-platform jobs' shape).

    tfdist jobs submit training JOB --config job.yaml [--module-name pkg.mod] [--package-path DIR]
        [--job-dir DIR] [--scale-tier TIER] [--backend local|kubernetes|ray|slurm] [--ray-address ADDR]
        [--stream-logs] -- USER_ARGS
    tfdist jobs list [--filter EXPR] [--sort-by KEY] [--limit N] [--format json|yaml|value(...)]
    tfdist jobs describe JOB [--format json|yaml|value(...)] | stream-logs JOB [--task-name worker-1] | cancel JOB

TensorFlow is never imported here: every task is a separate process.
"""
from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tf_config.errors import FieldError
from toolkit.cli._flags import JOBS_FLAGS, error_text, problem_text, speak_flags
from toolkit.cli._gcloud_flags import add_gcloud_training_flags, gcloud_submission
from toolkit.cli._gcloud_format import FormatError, filter_records, render, sort_records
from toolkit.cli._types import positive_int
from toolkit.cli.launch_cmd import add_isolate_flag, isolate_children

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_CANCELLED = 0, 1, 2, 3, 4
EXIT_CODES = """\
Exit codes:
  0  success (for --stream-logs and stream-logs: the job SUCCEEDED)
  1  the job FAILED, the job config is invalid, or the backend failed (e.g. no kubectl)
  2  usage error (bad flags, invalid job name)
  3  no such job
  4  the job was CANCELLED (when following it)
  130 interrupted (Ctrl-C); a submitted job keeps running, cancel it with `tfdist jobs cancel JOB`
"""
_FOLLOW_UP = """\
Job [{job}] submitted successfully.
Your job is still active. You may view the status of your job with the command

  $ tfdist jobs describe {job}

or continue streaming the logs with the command

  $ tfdist jobs stream-logs {job}

and stop it with

  $ tfdist jobs cancel {job}"""
_BACKENDS = ("local", "kubernetes", "ray", "slurm")


class UserArgsParser(argparse.ArgumentParser):
    """Everything after the first ``--`` belongs to the trainer, verbatim (as with gcloud)."""

    def parse_known_args(self, args=None, namespace=None):  # noqa: D102 - argparse API
        args = list(sys.argv[1:] if args is None else args)
        head, tail = (args[:args.index("--")], args[args.index("--") + 1:]) if "--" in args else (args, [])
        namespace, extras = super().parse_known_args(head, namespace)
        namespace.user_args = tail
        return namespace, extras


def register(subparsers: argparse._SubParsersAction) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    jobs = subparsers.add_parser("jobs", help="submit and manage training jobs (local, Kubernetes or Ray)",
                                 description=__doc__, epilog=EXIT_CODES, formatter_class=fmt)
    verbs = jobs.add_subparsers(dest="jobs_verb", metavar="COMMAND")
    verbs.required = True
    verb = functools.partial(verbs.add_parser, epilog=EXIT_CODES, formatter_class=fmt)
    kinds = verb("submit", help="submit a job").add_subparsers(dest="job_kind", metavar="KIND",
                                                               parser_class=UserArgsParser)
    kinds.required = True
    _add_training(kinds.add_parser("training", help="submit a training job", epilog=EXIT_CODES,
                                   formatter_class=fmt, description=_TRAINING_HELP))
    listing = verb("list", help="list jobs, newest first")
    _add_backend(listing, default=None)
    listing.add_argument("--filter", metavar="EXPRESSION",
                         help="gcloud's filter: KEY=VALUE, KEY!=VALUE, KEY:WORD (globs), AND/OR/NOT, on the JSON "
                              "record's keys, e.g. 'state=RUNNING AND labels.team:ml'")
    listing.add_argument("--limit", type=positive_int, help="at most this many jobs (after --filter and --sort-by)")
    listing.add_argument("--sort-by", metavar="KEY[,~KEY]", help="sort by these keys; ~ for descending")
    listing.add_argument("--page-size", type=positive_int, help="accepted for gcloud; every job is listed at once")
    listing.add_argument("--format", default="table", help="table (default), json, yaml or value(KEY,...)")
    listing.add_argument("--uri", action="store_true", help="print each job's URI (its record folder, file://)")
    listing.set_defaults(handler=_guard(_list))
    describe = verb("describe", help="show a job's state, tasks and history")
    describe.add_argument("job")
    _add_backend(describe, default=None)
    describe.add_argument("--format", default="text", help="text (default), json, yaml or value(KEY,...)")
    describe.add_argument("--summarize", action="store_true",
                          help="gcloud's human-readable tables: the text view (--format text)")
    describe.add_argument("--plot", metavar="PATH", help="tuning jobs: write a PNG of objective vs trial to PATH")
    describe.set_defaults(handler=_guard(_describe))
    logs = verb("stream-logs", help="follow a job's logs until it ends")
    logs.add_argument("job")
    logs.add_argument("--task", "--task-name", dest="task", help="only this task, e.g. worker-1 or master-0 "
                                                                 "(gcloud: --task-name)")
    logs.add_argument("--no-follow", dest="follow", action="store_false", help="print what exists and stop")
    logs.add_argument("--polling-interval", type=positive_int, metavar="SECONDS",
                      help="accepted for gcloud; local logs are read as they are written (no polling delay)")
    logs.add_argument("--allow-multiline-logs", action="store_true",
                      help="accepted for gcloud; every line of a task's output is shown as written")
    logs.add_argument("--raw", action="store_true",
                      help="print the tasks' lines as they are, control characters included (default: escaped)")
    _add_backend(logs, default=None)
    logs.set_defaults(handler=_guard(_stream_logs))
    cancel = verb("cancel", help="stop every process of a job")
    cancel.add_argument("job")
    cancel.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the job to stop")
    _add_backend(cancel, default=None)
    cancel.set_defaults(handler=_guard(_cancel))


_TRAINING_HELP = """\
Runs `python -m MODULE USER_ARGS --job-dir DIR` in every task, with TF_CONFIG set per task
(`master` names the primary task, as on CMLE; `chief` with useChiefInTfConfig). Flags override
the same fields of --config. The local backend puts the parent of --package-path on PYTHONPATH
(gcloud builds a package from that parent), so --module-name must start with the package's name.
Every flag of `gcloud ai-platform jobs submit training` is taken: applied as gcloud applies it, or
recorded with a warning that it has no effect on this backend (docs/jobs.md, "gcloud's flags")."""


def _add_backend(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, default: str | None) -> None:
    parser.add_argument("--backend", choices=_BACKENDS, default=default,
                        help="where the job runs (default: local; for existing jobs: where it was submitted)")
    parser.add_argument("--namespace", default=None, help="Kubernetes namespace (default: default)")
    parser.add_argument("--ray-address", default=None, metavar="ADDR",
                        help="ray: the Ray cluster, e.g. ray://head:10001 (default: $RAY_ADDRESS, else this machine)")


def _add_training(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="job name: a DNS-1035 label such as mnist-run-1")
    add_gcloud_training_flags(parser)
    tfdist = parser.add_argument_group("tfdist flags (where and how the job runs)")
    _add_backend(tfdist, default="local")
    tfdist.add_argument("--image", help="kubernetes: container image holding the trainer package")
    tfdist.add_argument("--placement", default=None, metavar="STRATEGY",
                        help="ray: placement group strategy auto|STRICT_SPREAD|SPREAD|PACK|STRICT_PACK (default auto)")
    tfdist.add_argument("--partition", default=None, help="slurm: the partition (default: the cluster's default)")
    tfdist.add_argument("--time-limit", default=None, metavar="TIME",
                        help="slurm: sbatch --time, e.g. 30 or 1:00:00 (default: maxRunningTime, else the partition's)")
    tfdist.add_argument("--shared-job-dir", action="store_true", default=None,
                        help="ray, slurm: the local --job-dir (and TFDIST_HOME) is mounted at the same path on "
                             "every node")
    tfdist.add_argument("--dry-run", action="store_true",
                        help="kubernetes: print the TFJob YAML (a Katib Experiment for a tuning job), submit nothing")
    tfdist.add_argument("--kubeflow-trainer", action="store_true",
                        help="kubernetes --dry-run: render a Kubeflow Trainer v2 TrainJob and its "
                             "ClusterTrainingRuntime (pods run `tfdist run`) instead of a TFJob (docs/jobs.md)")
    tfdist.add_argument("--max-running", type=int, default=None, metavar="N",
                        help="local: run at most N of this home's jobs at once; later ones wait QUEUED (default: "
                             "from this machine's cores and memory)")
    tfdist.add_argument("--max-log-bytes", type=int, default=None, metavar="N",
                        help="local: keep at most N bytes of each task run's output in its log (default: all)")
    tfdist.add_argument("--log-backups", type=int, default=None, metavar="K",
                        help="local, with --max-log-bytes: rotate a full log to <task>.log.1 (.1 to .2, ...), "
                             "keeping K older files, so a long job keeps its newest output")
    add_isolate_flag(tfdist)
    parser.set_defaults(handler=_guard(_submit))


def _guard(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Maps the jobs error family onto the documented exit codes, printing one clear message."""
    def run(args: argparse.Namespace) -> int:
        from toolkit.jobs.errors import JobError, JobNameError, JobNotFoundError

        try:
            return handler(args)
        except JobError as exc:
            print(f"ERROR: {_text(exc)}", file=sys.stderr)
            if isinstance(exc, (JobNameError, JobNotFoundError)):
                return EXIT_USAGE if isinstance(exc, JobNameError) else EXIT_NOT_FOUND
            return EXIT_FAILED  # a bad spec, a taken name, a job in the wrong state, a failing backend
    return run


def _text(exc: Exception) -> str:
    """The error in the CLI's words: fields named by their flags, library calls by their commands."""
    return error_text(exc, JOBS_FLAGS) if isinstance(exc, FieldError) else speak_flags(str(exc), {})


# flag (as argparse stores it) -> the backend constructor option it sets
_OPTION_FLAGS = {"namespace": "namespace", "image": "image", "ray_address": "address", "placement": "placement",
                 "shared_job_dir": "shared_job_dir", "partition": "partition", "time_limit": "time_limit",
                 "max_running": "max_running", "max_log_bytes": "max_log_bytes", "log_backups": "log_backups"}


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """Backend constructor options from the flags that were given."""
    return {option: getattr(args, flag) for flag, option in _OPTION_FLAGS.items() if getattr(args, flag, None)}


def _submit(args: argparse.Namespace) -> int:
    from toolkit.jobs import JobSpec, api
    from toolkit.jobs.model import names
    names.validate_job_name(args.job)
    try:
        overrides, labels, gcloud_flags = gcloud_submission(args)
    except argparse.ArgumentTypeError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return EXIT_USAGE
    isolate_children(args.isolate)  # the local backend's supervisor inherits it
    if args.max_running is not None and args.backend != "local":
        print(f"ERROR: --max-running applies to the local backend; {args.backend} runs jobs on its own "
              "cluster's resources.", file=sys.stderr)
        return EXIT_USAGE
    if (args.max_log_bytes is not None or args.log_backups is not None) and args.backend != "local":
        print(f"ERROR: --max-log-bytes and --log-backups apply to the local backend; {args.backend} writes its "
              "tasks' logs itself.", file=sys.stderr)
        return EXIT_USAGE
    given = {"job_id": args.job, "overrides": overrides, "labels": labels, "gcloud_flags": gcloud_flags}
    spec = JobSpec.from_file(args.config, **given) if args.config else JobSpec.from_dict({}, **given)
    for problem in spec.warnings:
        print(f"WARNING: {problem_text(problem, JOBS_FLAGS).removeprefix('warning: ')}", file=sys.stderr)
    if args.dry_run:
        if args.backend != "kubernetes":
            print("ERROR: --dry-run renders a TFJob; use it with --backend kubernetes.", file=sys.stderr)
            return EXIT_USAGE
        from toolkit.jobs.engines.kubernetes.backend import KubernetesBackend

        backend = api.get_backend("kubernetes", **_options(args))
        assert isinstance(backend, KubernetesBackend)
        if spec.training_input.hyperparameters is not None:  # a tuning job: Katib runs the study
            from toolkit.jobs.engines.kubernetes.katib import experiment_yaml
            text, warnings = experiment_yaml(spec, options=backend.options)
        elif args.kubeflow_trainer:  # Trainer v2: a TrainJob and its runtime, each pod under `tfdist run`
            from toolkit.jobs.engines.kubernetes.trainjob import trainjob_yaml
            text, warnings = trainjob_yaml(spec, options=backend.options)
        else:
            text, warnings = backend.render(spec)
        for warning in warnings:
            print(f"WARNING: {warning}", file=sys.stderr)
        print(text, end="")
        return EXIT_OK
    record = api.submit(spec, backend=args.backend, **_options(args))
    for warning in record.warnings[len(spec.warnings):]:
        print(f"WARNING: {warning}", file=sys.stderr)
    if not args.stream_logs:
        print(_FOLLOW_UP.format(job=args.job))
        return EXIT_OK
    print(f"Job [{args.job}] submitted successfully.", file=sys.stderr)
    return _follow(args.job, None, args.backend, True, _options(args), verbose=args.verbose > 0)


def _follow(job: str, task: str | None, backend: str | None, follow: bool, options: dict[str, Any], *,
            verbose: bool, raw: bool = False) -> int:
    import os

    from tf_config.errors import printable
    from toolkit.jobs import api
    from toolkit.launcher import console_filter

    noise = console_filter(os.environ, verbose=verbose)  # TensorFlow's start-up noise stays in the log files
    filters: dict[str, Any] = {}

    def sink(line: str) -> None:
        task, _, text = line.partition("] ")
        hide = filters.setdefault(task, noise()) if noise is not None else None
        if hide is None or not hide(text):  # escaped: a task's output must not drive the terminal
            print(line if raw else printable(line), flush=True)

    record = api.stream_logs(job, task=task, follow=follow, backend=backend, sink=sink, **options)
    if not record.is_final:
        return EXIT_OK
    if record.details.get("noStrategy"):
        print(printable(f"WARNING: {record.details['noStrategy']['message']}"), file=sys.stderr)
    print(printable(f"Job [{job}] ended {record.state}" + (f": {record.error}" if record.error else ".")),
          file=sys.stderr)
    return {"SUCCEEDED": EXIT_OK, "CANCELLED": EXIT_CANCELLED}.get(str(record.state), EXIT_FAILED)


def _stream_logs(args: argparse.Namespace) -> int:
    return _follow(args.job, args.task, args.backend, args.follow, _options(args), verbose=args.verbose > 0,
                   raw=args.raw)


def _list(args: argparse.Namespace) -> int:
    from toolkit.jobs import api
    from toolkit.jobs.views import format_list
    records = {r.name: r for r in api.list_jobs(backend=args.backend, **_options(args))}
    try:
        docs = sort_records(filter_records([r.to_dict() for r in records.values()], args.filter), args.sort_by)
        docs = docs[:args.limit] if args.limit else docs
        text = render(docs, args.format, many=True) if not args.uri else "\n".join(
            Path(str(d["recordDir"])).as_uri() for d in docs if d.get("recordDir"))
    except FormatError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if text is not None:
        print(text)
    elif docs:
        print(format_list(records[d["jobId"]] for d in docs))
    else:
        print("Listed 0 items.", file=sys.stderr)
    return EXIT_OK


def _describe(args: argparse.Namespace) -> int:
    from toolkit.jobs import api
    from toolkit.jobs.views import format_record
    record = api.describe(args.job, backend=args.backend, **_options(args))
    try:
        text = None if args.summarize else render([record.to_dict()], args.format, many=False)
    except FormatError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(format_record(record) if text is None else text)
    if args.plot:
        return _plot(record, args.plot)
    return EXIT_OK


def _plot(record: Any, path: str) -> int:
    output = record.details.get("trainingOutput")
    if not output:
        print(f"ERROR: --plot: job {record.name!r} is not a hyperparameter tuning job; only those have trials "
              "to plot. Remove --plot.", file=sys.stderr)
        return EXIT_USAGE
    from toolkit.jobs.tuning import plot_trials
    print(f"plot written to {plot_trials(output, path)}", file=sys.stderr)
    return EXIT_OK


def _cancel(args: argparse.Namespace) -> int:
    from toolkit.jobs import api
    record = api.cancel(args.job, backend=args.backend, timeout=args.timeout, **_options(args))
    print(f"Job [{args.job}] is {record.state}.")
    return EXIT_OK if record.is_final else EXIT_FAILED
