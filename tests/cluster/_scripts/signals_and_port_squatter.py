"""A task that makes its signal directory as a server does, says where it is, then lets another user take its port.

Usage: ``python signals_and_port_squatter.py UID GID``. The task looks up its own port in TF_CONFIG and starts a
listener on it as user UID (the "other user"), then waits: the launcher must notice and fail the job.
"""
import json
import os
import subprocess
import sys
import time

from strategies._signals import ensure_private_dir

path = ensure_private_dir()
print("signal-dir", path, oct(os.stat(path).st_mode & 0o777), flush=True)
config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
port = config["cluster"][task["type"]][task["index"]].rpartition(":")[2]
squatter = ("import socket, sys, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            "s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(); time.sleep(20)")
subprocess.Popen(["/usr/bin/python3", "-c", squatter, port], user=int(sys.argv[1]), group=int(sys.argv[2]),
                 extra_groups=[])
time.sleep(60)
