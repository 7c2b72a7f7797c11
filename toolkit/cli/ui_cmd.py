"""`tfdist ui`: a web dashboard over this machine's job store (every backend's jobs).

    tfdist ui [--port P] [--host 127.0.0.1] [--allow-cancel]

It serves until Ctrl-C. Open the URL it prints: the token in it is what keeps
other users of this machine out (it is also in $TFDIST_HOME/ui/server-<pid>.json,
readable by you alone; set TFDIST_UI_TOKEN to choose it, as JUPYTER_TOKEN does for
Jupyter). The dashboard only reads, unless --allow-cancel is given.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

EXIT_CODES = """\
Exit codes:
  0  stopped by SIGTERM
  1  the address cannot be used (the port is taken, the host is not this machine's)
  2  usage error (bad flags)
  130 stopped with Ctrl-C
"""
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("ui", help="a web dashboard for jobs and tuning studies",
                                   description=__doc__, epilog=EXIT_CODES,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=6007, help="port to serve on; 0 picks a free one (default 6007)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1: this machine only). Anything else exposes the "
                             "dashboard to the network, guarded by its token alone, over plain HTTP")
    parser.add_argument("--allow-cancel", action="store_true", help="let the dashboard cancel jobs (read-only without)")
    parser.set_defaults(handler=_ui)


def _ui(args: argparse.Namespace) -> int:
    from toolkit.ui import start

    if not 0 <= args.port <= 65535:
        print(f"ERROR: --port received {args.port}; expected 0..65535 (0 picks a free port).", file=sys.stderr)
        return 2
    if args.host not in _LOOPBACK:
        print(f"WARNING: --host {args.host} serves the dashboard beyond this machine over plain HTTP; only its "
              "token keeps others out. Prefer an SSH tunnel to the default 127.0.0.1.", file=sys.stderr)
    try:
        server = start(host=args.host, port=args.port, allow_cancel=args.allow_cancel,
                       token=os.environ.get("TFDIST_UI_TOKEN") or None)
    except OSError as exc:
        print(f"ERROR: cannot serve on {args.host}:{args.port}: {exc.strerror or exc}. Pick another port with "
              "--port (0 picks a free one).", file=sys.stderr)
        return 1

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    mode = "cancel allowed" if args.allow_cancel else "read-only"
    print(f"tfdist ui ({mode}) serving {server.app.reader.home}\n  {server.url}\n"
          f"(the token is also in {server.info_file}; Ctrl-C to stop)", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        server.app.stopping.set()
        server.server.server_close()
        server.info_file.unlink(missing_ok=True)
    return 0
