"""The local launcher engine: every task a process on this machine.

``toolkit.launcher.launch`` is its entry point (also ``toolkit.launcher.local.launch``).
``_supervisor`` (``Job``: starts, watches and restarts the task processes; the Ray
launcher's job extends it), ``_preload`` and ``_zygote`` (tasks forked from one process
that imported TensorFlow), ``_isolation`` (a private network namespace) and ``_ports``
(who else listens on a task's port).
"""
from tf_config.lazy import lazy_exports

__all__ = ["launch"]

__getattr__, __dir__ = lazy_exports(__name__, {"launch": "toolkit.launcher"})
