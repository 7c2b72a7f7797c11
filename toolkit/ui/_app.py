"""The dashboard as a WSGI application: a JSON API over the job store, and the pages that use it.

Werkzeug (TensorBoard's own web layer, so already installed with tfdist)
routes the requests. The pages are static files: they fetch the JSON API and
build the page with DOM calls that take data as text (``textContent``), and a
Content-Security-Policy forbids inline scripts, so a job name, a log line or a
trial parameter is shown, never run. See docs/ui.md for the API.
"""
from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from werkzeug.exceptions import HTTPException, NotFound
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from toolkit.jobs.errors import JobError, JobNameError, JobNotFoundError
from toolkit.jobs.reader import JobReader, job_doc, job_row, study_doc, task_rows
from toolkit.ui import _logs, _stacks
from toolkit.ui._auth import Auth
from toolkit.ui._metrics import ChiefMetrics

__all__ = ["UIApp", "UIOptions"]

_log = logging.getLogger(__name__)
STATIC = Path(__file__).with_name("static")
_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".png": "image/png",
          ".svg": "image/svg+xml", ".txt": "text/plain"}
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
_PAGES = ("/", "/jobs/<name>", "/jobs/<name>/study", "/jobs/<name>/stuck")


@dataclass
class UIOptions:
    """What one server was started with."""

    home: Path | None = None
    allow_cancel: bool = False
    port: int = 0
    auth: Auth = field(default_factory=Auth)


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: they become null (a diverged metric shows as a gap, not an error)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _json(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(_clean(body), separators=(",", ":")), status=status, mimetype="application/json")


def _static_files() -> dict[str, Path]:
    """Every file the server may send, by its URL name, fixed at start: a URL never becomes a path."""
    return {p.relative_to(STATIC).as_posix(): p for p in STATIC.rglob("*") if p.is_file()}


class UIApp:
    """``UIApp(options)`` is the WSGI callable ``tfdist ui`` serves."""

    def __init__(self, options: UIOptions) -> None:
        self.options = options
        self.reader = JobReader(options.home)
        self.metrics = ChiefMetrics()
        self.stopping = threading.Event()
        self.static = _static_files()
        rules = [Rule(p, endpoint="page") for p in _PAGES] + [
            Rule("/static/<path:name>", endpoint="static"),
            Rule("/api/config", endpoint="config"),
            Rule("/api/jobs", endpoint="jobs"),
            Rule("/api/jobs/<name>", endpoint="job"),
            Rule("/api/jobs/<name>/tasks", endpoint="tasks"),
            Rule("/api/jobs/<name>/logs", endpoint="logs"),
            Rule("/api/jobs/<name>/logs/<task>", endpoint="log"),
            Rule("/api/jobs/<name>/logs/<task>/stream", endpoint="log_stream"),
            Rule("/api/jobs/<name>/metrics", endpoint="metrics"),
            Rule("/api/jobs/<name>/trials", endpoint="trials"),
            Rule("/api/jobs/<name>/trials/<trial>/measurements", endpoint="measurements"),
            Rule("/api/jobs/<name>/progress", endpoint="progress"),
            Rule("/api/jobs/<name>/stacks", endpoint="stacks", methods=["POST"]),
            Rule("/api/jobs/<name>/cancel", endpoint="cancel", methods=["POST"]),
        ]
        self.url_map = Map(rules, strict_slashes=False)

    # -- WSGI ------------------------------------------------------------------------------------------
    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        request = Request(environ)
        response = self._dispatch(request)
        response.headers["Content-Security-Policy"] = _CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers.setdefault("Cache-Control", "no-store")
        return response(environ, start_response)

    def _dispatch(self, request: Request) -> Response:
        auth, port = self.options.auth, self.options.port
        if not auth.host_ok(request.host):
            return _json({"error": f"this server answers to {', '.join(sorted(auth.hosts))}, not Host "
                                   f"{request.host!r}"}, 403)
        adapter = self.url_map.bind_to_environ(request.environ)
        try:
            endpoint, args = adapter.match()
        except HTTPException as exc:
            return _json({"error": exc.description}, exc.code or 404)
        if endpoint == "static":
            return self._static(args["name"])
        query_token = request.args.get("token")
        if endpoint == "page" and query_token is not None and auth.token_ok(query_token):
            here = "/" + request.path.lstrip("/")  # one slash: "//host/x" would lead to another site
            response = Response(status=303, headers={"Location": here})  # the token leaves the URL
            response.set_cookie(auth.cookie_name(port), auth.token, httponly=True, samesite="Strict", path="/")
            return response
        if not auth.token_ok(auth.request_token(dict(request.headers), request.cookies, port)):
            if endpoint == "page":
                return self._static("denied.html", status=401)
            return _json({"error": "no valid token: open the URL `tfdist ui` printed, or send the header "
                                   "'Authorization: token <token>' (the token is in $TFDIST_HOME/ui/)"}, 401)
        if request.method == "POST" and not auth.same_origin(request.headers.get("Origin"), request.host):
            return _json({"error": "cross-origin request refused"}, 403)
        if endpoint == "page":
            return self._static("page.html")
        try:
            answer: Response = getattr(self, f"_api_{endpoint}")(request, **args)
            return answer
        except JobNameError as exc:
            return _json({"error": str(exc), "kind": "invalid-name"}, 400)
        except JobNotFoundError as exc:
            return _json({"error": str(exc), "kind": "not-found"}, 404)
        except NotFound as exc:  # the job is there, not this part of it (yet): a log, a study, a trial
            return _json({"error": exc.description, "kind": "missing"}, 404)
        except JobError as exc:
            return _json({"error": str(exc)}, 409)

    def _static(self, name: str, *, status: int = 200) -> Response:
        path = self.static.get(name)
        if path is None:
            return _json({"error": f"no such file: {name!r}"}, 404)
        response = Response(path.read_bytes(), status=status, mimetype=_TYPES.get(path.suffix, "text/plain"))
        if path.suffix != ".html":
            response.headers["Cache-Control"] = "max-age=3600"
        return response

    # -- API -------------------------------------------------------------------------------------------
    def _api_config(self, request: Request) -> Response:
        return _json({"allowCancel": self.options.allow_cancel, "home": str(self.reader.home),
                      "stallAfterSeconds": _stacks.STALL_AFTER, "pySpy": _stacks.py_spy() is not None})

    def _api_jobs(self, request: Request) -> Response:
        now = time.time()
        rows = [job_row(r, now=now) for r in self.reader.records()]
        for key, column in (("state", "state"), ("backend", "backend"), ("parent", "parentJob")):
            wanted = request.args.get(key)
            if wanted is not None:
                rows = [r for r in rows if (r[column] or "") == wanted]
        return _json({"jobs": rows, "count": len(rows), "time": now})

    def _api_job(self, request: Request, name: str) -> Response:
        return _json(job_doc(self.reader.get(name)))

    def _api_tasks(self, request: Request, name: str) -> Response:
        return _json({"tasks": task_rows(self.reader.get(name))})

    def _logs_of(self, name: str) -> tuple[Any, dict[str, Path]]:
        record = self.reader.get(name)  # the name is valid: the directory is the store's own, never a stored path
        return record, _logs.log_files(record, self.reader.store.job_dir(record.name))

    def _api_logs(self, request: Request, name: str) -> Response:
        _, files = self._logs_of(name)
        return _json({"logs": [{"task": task, "size": path.stat().st_size} for task, path in files.items()]})

    def _log_path(self, name: str, task: str) -> Path:
        _, files = self._logs_of(name)
        if task not in files:
            raise NotFound(f"job {name!r} has no log named {task!r} (logs: {', '.join(files) or 'none yet'})")
        return files[task]

    def _api_log(self, request: Request, name: str, task: str) -> Response:
        path = self._log_path(name, task)
        offset = request.args.get("offset", default=-1, type=int)
        chunk = _logs.read_chunk(path, offset, final=self.reader.get(name).is_final)
        return _json({"lines": chunk.lines, "offset": chunk.offset, "start": chunk.start, "size": chunk.size})

    def _api_log_stream(self, request: Request, name: str, task: str) -> Response:
        self.reader.get(name)  # 404 for a job that is not there, before the stream starts
        resumed = request.headers.get("Last-Event-ID")
        offset = int(resumed) if resumed and resumed.isdigit() else request.args.get("offset", default=-1, type=int)

        def path() -> Path | None:
            try:
                return self._logs_of(name)[1].get(task)
            except JobError:
                return None

        def is_final() -> bool:
            try:
                return self.reader.get(name).is_final
            except JobError:  # deleted while streamed: nothing more will come
                return True

        body = _logs.stream(path, offset, is_final, stopping=self.stopping)
        return Response(body, mimetype="text/event-stream", headers={"X-Accel-Buffering": "no"},
                        direct_passthrough=True)

    def _api_metrics(self, request: Request, name: str) -> Response:
        doc = job_doc(self.reader.get(name))
        return _json({**self.metrics.latest(doc["view"]["outputDir"]), "outputDir": doc["view"]["outputDir"],
                      "tensorboard": doc["view"]["tensorboard"]})

    def _api_trials(self, request: Request, name: str) -> Response:
        record = self.reader.get(name)
        study = study_doc(record, self.reader.trials(record))
        if study is None:
            raise NotFound(f"job {name!r} is not a hyperparameter tuning job (or its study has not started)")
        return _json({"jobId": record.name, "state": str(record.state), **study})

    def _api_measurements(self, request: Request, name: str, trial: str) -> Response:
        record = self.reader.get(name)
        study = study_doc(record, self.reader.trials(record)) or {}
        for doc in study.get("trials", []):
            if str(doc.get("trialId")) == trial:
                return _json({"trialId": trial, "measurements": doc.get("allMetrics") or []})
        raise NotFound(f"job {name!r} has no trial {trial!r}")

    def _api_progress(self, request: Request, name: str) -> Response:
        record, files = self._logs_of(name)
        view = job_doc(record)["view"]
        last = self.metrics.latest(view["outputDir"])["lastStep"]
        return _json({"state": str(record.state), "stallAfterSeconds": _stacks.STALL_AFTER,
                      "tasks": _stacks.progress(record, files, None if last is None else (last[0], last[1]))})

    def _api_stacks(self, request: Request, name: str) -> Response:
        record = self.reader.get(name)
        return _json({"state": str(record.state), "time": time.time(),
                      "tasks": _stacks.stacks(self.reader.store, record)})

    def _api_cancel(self, request: Request, name: str) -> Response:
        if not self.options.allow_cancel:
            return _json({"error": "this dashboard is read-only; start it with `tfdist ui --allow-cancel` to "
                                   "cancel jobs from it"}, 403)
        record = self.reader.get(name)
        if record.is_final:
            return _json({"error": f"job {name!r} already ended {record.state}; there is nothing to cancel"}, 409)
        from toolkit.jobs import api

        threading.Thread(target=self._cancel, args=(api, record.name), daemon=True).start()
        return _json({"jobId": record.name, "cancelling": True}, 202)

    def _cancel(self, api: Any, name: str) -> None:
        try:
            api.cancel(name, home=self.reader.home)
        except JobError as exc:  # it ended meanwhile: the page shows how
            _log.info("cancel %s from the dashboard: %s", name, exc)
