"""The modules that moved into toolkit.jobs' and toolkit.launcher's subpackages keep their old paths.

Run in a fresh interpreter, so that nothing the test session imported first makes an old path work.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from toolkit.jobs._moved import MOVED as JOBS_MOVED
from toolkit.launcher._moved import MOVED as LAUNCHER_MOVED

ROOT = Path(__file__).resolve().parents[2]

_PROBE = textwrap.dedent("""
    import importlib, json, sys
    moved = json.loads(sys.argv[1])
    import toolkit.jobs.store                              # the statement users wrote
    from toolkit.jobs.store import JobStore, default_home  # and this one
    from toolkit.jobs import tfjob                         # a submodule through the package
    import toolkit.jobs
    seen = {}
    for old, new in moved.items():
        module = importlib.import_module(old)
        seen[old] = [module.__name__, module.__spec__.name, module is sys.modules[new]]
    seen["attribute"] = toolkit.jobs.katib.__name__        # an attribute, never imported by its old path
    seen["same class"] = JobStore is importlib.import_module("toolkit.jobs.storage.store").JobStore
    seen["from package"] = tfjob.__name__
    print(json.dumps(seen))
""")


def test_every_old_path_imports_the_module_at_its_new_path():
    moved = {f"toolkit.jobs.{old}": new for old, new in JOBS_MOVED.items()}
    moved |= {f"toolkit.launcher.{old}": new for old, new in LAUNCHER_MOVED.items()}
    assert len(moved) == 36 and "toolkit.jobs.store" in moved
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(moved)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    for old, new in moved.items():
        assert seen[old] == [new, new, True], old
    assert seen["attribute"] == "toolkit.jobs.engines.kubernetes.katib"
    assert seen["same class"] is True
    assert seen["from package"] == "toolkit.jobs.engines.kubernetes.tfjob"


def test_a_name_that_never_existed_is_still_an_error():
    proc = subprocess.run([sys.executable, "-c", "import toolkit.jobs.nothing_here"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 1 and "No module named 'toolkit.jobs.nothing_here'" in proc.stderr


def test_the_library_imports_moved_modules_by_their_new_paths():
    """An old path still works, but inside the library it would hide an edge from the import graph test."""
    import ast

    old = {f"toolkit.jobs.{name}" for name in JOBS_MOVED} | {f"toolkit.launcher.{name}" for name in LAUNCHER_MOVED}
    found = []
    for package in ("tf_config", "strategies", "toolkit", "models"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
                else:
                    continue
                found += [f"{path.relative_to(ROOT)}:{node.lineno} imports {name}" for name in names if name in old]
    assert not found, "use the new paths (toolkit/jobs/_moved.py, toolkit/launcher/_moved.py):\n" + "\n".join(found)
