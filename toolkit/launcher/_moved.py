"""The old paths of the local engine's launcher modules, before they moved into ``launcher/local/``:
each still imports, as the same module (``toolkit._moved``)."""
from toolkit._moved import moved_modules

MOVED = {
    "_supervisor": "toolkit.launcher.local._supervisor",
    "_preload": "toolkit.launcher.local._preload",
    "_isolation": "toolkit.launcher.local._isolation",
    "_ports": "toolkit.launcher.local._ports",
}

__getattr__ = moved_modules("toolkit.launcher", MOVED)
