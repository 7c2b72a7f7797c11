"""Tasks leave out what they never run: servers Keras and its companions, the demo's chief the companions.

Real processes: the demo's script as a parameter-server ps whose chief never comes up (it
starts its TensorFlow server, gives up after the short chief start timeout and exits 4), and
the demo's script training alone. An exit hook reports which heavy packages each had imported.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from strategies import EXIT_CHIEF_NEVER_STARTED
from strategies._lean import SERVER_UNUSED_MODULES, TRAINER_UNUSED_MODULES, skip_imports
from tf_config.ports import pick_port

_REPO = Path(__file__).resolve().parents[2]

_PROBE = """\
import atexit, importlib.util, json, runpy, sys
names = ("tensorflow", "keras", "sklearn", "matplotlib", "scipy", "tensorflow_datasets", "IPython", "pandas", "PIL")
def _sklearn():
    try:
        import sklearn
    except ModuleNotFoundError as exc:
        return str(exc)
    return "imported"
atexit.register(lambda: print("SKLEARN " + json.dumps([_sklearn(), importlib.util.find_spec("sklearn").origin])))
atexit.register(lambda: print("LOADED " + json.dumps([n for n in names if sys.modules.get(n) is not None])))
sys.argv = ["demo", "--model-dir", sys.argv[1]]
runpy.run_module("toolkit.demo", run_name="__main__")
"""


def test_a_ps_running_the_demo_serves_without_keras_or_sklearn(tmp_path):
    ps, chief, worker = (f"127.0.0.1:{pick_port()}" for _ in range(3))
    tf_config = {"cluster": {"ps": [ps], "chief": [chief], "worker": [worker]}, "task": {"type": "ps", "index": 0}}
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(_REPO), "TF_CONFIG": json.dumps(tf_config),
           "TFDIST_CHIEF_START_TIMEOUT": "0.5", "TF_CPP_MIN_LOG_LEVEL": "2", "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", _PROBE, str(tmp_path / "model")], capture_output=True, text=True,
                          env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == EXIT_CHIEF_NEVER_STARTED, done.stderr[-2000:]
    assert "never came up" in done.stderr
    loaded = json.loads(done.stdout.split("LOADED ", 1)[1].splitlines()[0])
    assert loaded == ["tensorflow"], f"a serving ps imported {loaded}"


def test_nothing_is_skipped_once_tensorflow_or_a_skipped_package_is_imported(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", sys.modules.get("tensorflow") or object())
    before = {name: sys.modules.get(name, "absent") for name in SERVER_UNUSED_MODULES}
    assert skip_imports(SERVER_UNUSED_MODULES) is False
    assert {name: sys.modules.get(name, "absent") for name in SERVER_UNUSED_MODULES} == before


def test_the_demo_trains_without_keras_companions_and_loads_digits_without_scikit_learn(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(_REPO), "TF_CPP_MIN_LOG_LEVEL": "2", "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", _PROBE.replace('"--model-dir"', '"--epochs", "2", "--model-dir"'),
                           str(tmp_path / "model")], capture_output=True, text=True, env=env, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "final test accuracy: " in done.stdout and "on 360 held-out digits after 44 steps" in done.stdout
    result = json.loads((tmp_path / "model" / "demo_result.json").read_text())
    assert result["test_accuracy"] > 0.85
    loaded = json.loads(done.stdout.split("LOADED ", 1)[1].splitlines()[0])
    assert loaded == ["tensorflow", "keras"], f"the demo's trainer imported {loaded}"
    # Asked for, a left-out package says why it is missing; probes see no package at all.
    message, origin = json.loads(done.stdout.split("SKLEARN ", 1)[1].splitlines()[0])
    assert message == "No module named 'sklearn' (left out of this task: it never uses it)" and origin is None
    assert set(TRAINER_UNUSED_MODULES) <= set(SERVER_UNUSED_MODULES)
