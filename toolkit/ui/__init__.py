"""``tfdist ui``: a local web dashboard over the job store, for jobs of every backend.

A job list, a page per job (its spec, tasks, live logs, the chief's latest
metrics), a page per tuning study (trials, their curves, the best trial, the
parameters against the objective) and "Why is it stuck?" (each task's Python
stack, and how long each task has been quiet), all over a JSON API that
scripts can read too. It reads the store the way ``tfdist jobs describe``
does (``toolkit.jobs.reader``), binds to loopback, asks for a token as
Jupyter does, and changes nothing unless started with ``allow_cancel``.

Example:
    >>> from toolkit.ui import start                          # doctest: +SKIP
    >>> server = start(port=0)                                # doctest: +SKIP
    >>> server.url                                            # doctest: +SKIP
    'http://127.0.0.1:41234/?token=...'
    >>> server.stop()                                         # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import logging
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from toolkit.jobs.storage.store import JobStore
from toolkit.ui._app import UIApp, UIOptions
from toolkit.ui._auth import Auth, write_server_file

__all__ = ["UIServer", "start"]

_log = logging.getLogger(__name__)


class _RequestHandler(WSGIRequestHandler):
    """Werkzeug's handler, logging each request at debug level and without its query (the token)."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        _log.debug("%s %s %s", self.command, self.path.split("?", 1)[0], code)


@dataclass
class UIServer:
    """A running dashboard: its URL (with the token), the server and the file that names it."""

    url: str
    token: str
    server: BaseWSGIServer
    app: UIApp
    info_file: Path
    thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def serve_forever(self) -> None:
        self.server.serve_forever(poll_interval=0.2)

    def stop(self) -> None:
        """Ends the live-log streams, stops serving and removes the server file."""
        self.app.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        if self.thread is not None:
            self.thread.join(timeout=10)
        with contextlib.suppress(FileNotFoundError):
            self.info_file.unlink()


def start(*, host: str = "127.0.0.1", port: int = 0, home: str | Path | None = None,
          allow_cancel: bool = False, token: str | None = None, background: bool = False) -> UIServer:
    """Binds the dashboard (port 0: one the OS picks) and returns it; ``background`` serves from a thread.

    Raises:
        OSError: the address cannot be bound (the port is taken, the host is not this machine's).
    """
    store = JobStore(home)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family)  # an OSError here, not Werkzeug's sys.exit
    server = make_server(host, port, app=lambda environ, start_response: [], threaded=True, fd=sock.fileno(),
                         request_handler=_RequestHandler)
    sock.close()  # the server holds its own duplicate of the descriptor
    server.daemon_threads = True  # type: ignore[attr-defined]  # an open log stream must not keep the process alive
    bound = int(server.server_address[1])
    auth = Auth.for_address(host, bound, token)
    app = UIApp(UIOptions(home=store.home, allow_cancel=allow_cancel, port=bound, auth=auth))
    server.app = app
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/?token={auth.token}"
    info = write_server_file(store.home, url=url, token=auth.token, host=host, port=bound)
    ui = UIServer(url=url, token=auth.token, server=server, app=app, info_file=info)
    if background:
        ui.thread = threading.Thread(target=ui.serve_forever, name="tfdist-ui", daemon=True)
        ui.thread.start()
    return ui
