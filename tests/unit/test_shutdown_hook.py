"""The launcher's sitecustomize: armed in every task's environment, free until TensorFlow is imported."""
from __future__ import annotations

import os
import subprocess
import sys

from toolkit.launcher._task import _HOOKS, armed_env


def test_armed_env_puts_the_hook_first_once_and_keeps_the_users_path():
    env = armed_env({"PYTHONPATH": "/opt/lib", "A": "1"})
    assert env["PYTHONPATH"] == os.pathsep.join([_HOOKS, "/opt/lib"]) and env["A"] == "1"
    assert env["TFDIST_HAND_BUILT"] == "1"
    assert armed_env(env)["PYTHONPATH"] == env["PYTHONPATH"]  # a restart does not stack it
    assert armed_env({})["PYTHONPATH"] == _HOOKS


def test_the_hook_imports_nothing_of_ours_and_runs_the_sitecustomize_it_shadows(tmp_path):
    shadowed = tmp_path / "site"
    shadowed.mkdir()
    (shadowed / "sitecustomize.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('yes')\n")
    code = "import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'strategies')))"
    env = armed_env({**os.environ, "PYTHONPATH": str(shadowed)})
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert (tmp_path / "ran").read_text() == "yes"
