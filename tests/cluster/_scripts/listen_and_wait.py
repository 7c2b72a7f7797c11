"""A task that listens on its TF_CONFIG port, checks it can reach every other task, then waits.

``--tf``: the listener is a real ``tf.distribute.Server`` (which binds every
interface, whatever the cluster spec says); otherwise a plain socket bound to
0.0.0.0, as TensorFlow's would be. The chief writes ``reached.json`` in the job
directory once every task's port accepted it; every task exits 0 when the file
``release`` appears there.
"""
import json
import os
import socket
import sys
import time
from pathlib import Path

config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
address = config["cluster"][task["type"]][task["index"]]
job_dir = Path(os.environ["TFDIST_JOB_DIR"])

if "--tf" in sys.argv:
    import tensorflow as tf

    server = tf.distribute.Server(tf.train.ClusterSpec(config["cluster"]), job_name=task["type"],
                                  task_index=task["index"], start=True)
else:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", int(address.rsplit(":", 1)[1])))
    server.listen()
print(f"listening for {task['type']}-{task['index']} at {address}", flush=True)

if task["type"] == "chief":
    addresses = [a for job in config["cluster"].values() for a in job]
    reached = set()
    deadline = time.monotonic() + 240
    while len(reached) < len(addresses) and time.monotonic() < deadline:
        for peer in set(addresses) - reached:
            host, port = peer.rsplit(":", 1)
            try:
                socket.create_connection((host, int(port)), timeout=2).close()
                reached.add(peer)
            except OSError:
                time.sleep(0.2)
    (job_dir / "reached.tmp").write_text(json.dumps(sorted(reached)))
    (job_dir / "reached.tmp").rename(job_dir / "reached.json")

while not (job_dir / "release").exists():
    time.sleep(0.1)
sys.stdout.flush()
os._exit(0)  # a tf.distribute.Server never stops by itself
