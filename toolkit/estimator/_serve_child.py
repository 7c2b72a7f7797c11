"""Serves one ps/worker task (TF_CONFIG) for a parent coordinator, and dies with it.

Started by ``toolkit.estimator.replica.start_slot_server`` as
``python -m toolkit.estimator._serve_child``: the TF1-style worker 0 is both a
worker slot and the coordinator, so its server runs in this child. A thread
watches the parent; if the parent disappears without saying goodbye the child
exits at once, so it can never outlive the job.
"""
from __future__ import annotations

import os
import sys
import threading
import time


def _watch_parent(parent: int, code: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(code)


def main() -> int:
    from strategies import EXIT_CHIEF_LOST, serve

    threading.Thread(target=_watch_parent, args=(os.getppid(), EXIT_CHIEF_LOST), daemon=True).start()
    return serve()


if __name__ == "__main__":
    sys.exit(main())
