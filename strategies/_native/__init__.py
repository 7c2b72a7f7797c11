"""tfdist's native kernels: built once per TensorFlow against its headers, loaded by every task that serves.

Four kernels (``sparse_ops.cc``):

* ``TfdistSparseApplyAdagrad``: TensorFlow's ``ResourceSparseApplyAdagradV2`` (locked, slots
  updated) bit for bit, about 3.8x less CPU per row on 16-wide click-through rows (172 against
  650 us for 3,100 rows of a 1.3M-row table, one process). A parameter server's sparse Adagrad
  updates are most of its work on that workload.
* ``TfdistRowSum``: ``tf.math.unsorted_segment_sum`` of a 2-D tensor's rows, bit for bit, with
  which a training task sums a lookup's gradient per distinct row before it goes to the ps
  (``toolkit._rows``): TensorFlow's kernel spends about 60 ns on each 16-wide row (830 us for a
  click-through batch's 13,312), a plain loop a few ns.
* ``TfdistGatherParts`` and ``TfdistSparseApplyAdagradParts``: a gather and a TF1 Adagrad update
  over many parts of tables in one op, rows named by (part, row): a packed click-through lookup
  reads and updates some fifty parts on each ps each step (``toolkit.estimator.canned._fast_columns``).

* ``build()`` compiles ``sparse_ops.cc`` with the C++ compiler (``$CXX``, ``g++`` or
  ``c++``) and TensorFlow's own flags into ``$TFDIST_NATIVE_DIR`` (default
  ``~/.cache/tfdist/native``), named by the TensorFlow version and the source's hash, under a
  lock, written to a new file and renamed. ``make`` builds it with the venv
  (``python -m strategies._native``); otherwise the first task that needs it builds it (about
  10 s).
* ``load()`` loads it into this process (``tf.load_op_library``), building it if needed; None
  (and one log line) when it cannot be built or loaded, or ``TFDIST_NATIVE=0``.
  Every server tfdist starts calls it (``strategies._roles``, ``strategies.between_graph``,
  ``strategies._hand_built``), so its ps can run the kernel.
* A graph uses the kernel on a task only after ``probe()`` ran it there, and only while
  built inside ``kernels_on(those tasks)`` (``usable_on(device)``): a ps started by plain
  TensorFlow (a script's own ``tf.distribute.Server(...).join()``) has not loaded it, and a
  graph naming an op its task does not know fails. The between-graph step builders probe
  their cluster first; any other graph takes TensorFlow's kernel.

The directory must belong to this user and be writable by no one else, and the library must
belong to this user: a library loaded into every task is code, so one another user could have
planted or swapped is refused (as ``toolkit._owned`` refuses such directories for jobs).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import stat
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["ENV_DIR", "ENV_SWITCH", "build", "gather_parts", "kernels_on", "library_path", "load", "probe", "row_sum",
           "sparse_apply_adagrad", "sparse_apply_adagrad_parts", "usable_on"]

logger = logging.getLogger(__name__)

#: where the built library is kept (default ``~/.cache/tfdist/native``)
ENV_DIR = "TFDIST_NATIVE_DIR"
#: ``0`` turns the native kernels off (TensorFlow's own kernels everywhere)
ENV_SWITCH = "TFDIST_NATIVE"

_SOURCE = Path(__file__).with_name("sparse_ops.cc")
_BUILD_TIMEOUT_SECS = 300
_PROBE_TIMEOUT_MS = 30_000  # a task that does not answer: TensorFlow's kernels there
_lock = threading.Lock()
_loaded: dict[str, Any] = {}
_probed: dict[tuple[Any, str | None], bool] = {}
_scope = threading.local()


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def _directory() -> Path:
    given = os.environ.get(ENV_DIR)
    if given:
        return Path(given).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "tfdist" / "native"


def _check_mine(path: Path, *, directory: bool) -> None:
    """Raises ``RuntimeError`` unless ``path`` is this user's (a directory: writable by no one else)."""
    info = os.lstat(path)
    kind_ok = stat.S_ISDIR(info.st_mode) if directory else stat.S_ISREG(info.st_mode)
    problem = ("is not a plain " + ("directory" if directory else "file") if not kind_ok
               else f"belongs to uid {info.st_uid}, not to this user (uid {os.getuid()})" if info.st_uid != os.getuid()
               else f"is writable by others (mode {stat.S_IMODE(info.st_mode):o})" if info.st_mode & 0o022
               else None)
    if problem:
        raise RuntimeError(f"refusing {path}: it {problem}; remove it or set ${ENV_DIR} to a directory of your own")


def _private_dir(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    _check_mine(path, directory=True)
    return path


def library_path() -> Path:
    """The library for the installed TensorFlow and this source (built or not)."""
    import tensorflow as tf

    digest = hashlib.sha256(_SOURCE.read_bytes() + tf.__version__.encode()).hexdigest()[:12]
    return _directory() / f"tfdist_ops-tf{tf.__version__}-{digest}.so"


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "g++", "c++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def build() -> Path:
    """Compile the library if it is not there yet; its path. Raises ``RuntimeError`` saying why it cannot."""
    import tensorflow as tf

    target = library_path()
    directory = _private_dir(target.parent)
    with open(directory / ".lock", "a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)  # one task builds; the others wait, then find it built
        if target.exists():
            return target
        compiler = _compiler()
        if compiler is None:
            raise RuntimeError("no C++ compiler (set $CXX, or install g++: apt-get install g++)")
        partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        cmd = [compiler, "-shared", "-fPIC", "-O3", "-ffp-contract=off", "-w", *tf.sysconfig.get_compile_flags(),
               str(_SOURCE), "-o", str(partial), *tf.sysconfig.get_link_flags()]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_SECS, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RuntimeError(f"{compiler} did not finish: {exc}") from None
        if done.returncode != 0:
            with contextlib.suppress(OSError):
                partial.unlink()
            raise RuntimeError(f"{compiler} failed (exit {done.returncode}): {done.stderr.strip()[-800:]}")
        os.chmod(partial, 0o755)
        os.replace(partial, target)
        logger.info("built tfdist's native kernels: %s", target)
        return target


def load() -> Any:
    """The loaded op module (``tf.load_op_library``), building it first if needed; None if off or impossible."""
    with _lock:
        if "module" in _loaded:
            return _loaded["module"]
        module = None
        if enabled():
            try:
                import tensorflow as tf

                path = build()
                _check_mine(path, directory=False)
                module = tf.load_op_library(str(path))
            except Exception as exc:  # a missing compiler, a failed build, an ABI mismatch: TF's kernels serve
                logger.warning("tfdist's native kernels are off here (%s); TensorFlow's own kernels run instead",
                               exc)
        _loaded["module"] = module
        return module


def _task_key(device: str) -> tuple[str | None, int, int]:
    import tensorflow as tf

    spec = tf.DeviceSpec.from_string(device)
    return spec.job, spec.replica or 0, spec.task or 0


_EXPECTED = 1.0 - 0.5 / (1.1 ** 0.5 + 1e-7)  # the probe's row after one update


def _probe_ops(module: Any, tf: Any) -> tuple[Any, list[Any]]:
    """(the probe row after one update, the ops that then delete the probe's variables: none eagerly)."""
    name = f"tfdist_native_probe_{uuid.uuid4().hex[:12]}"  # concurrent probes of one ps do not share variables
    var = tf.Variable([[1.0, 2.0]], name=f"{name}_var")
    accum = tf.Variable([[0.1, 0.1]], name=f"{name}_accum")
    eager = tf.executing_eagerly()  # control dependencies are no-ops there: ops run in order
    with tf.control_dependencies([] if eager else [var.initializer, accum.initializer]):
        update = module.tfdist_sparse_apply_adagrad(var=var.handle, accum=accum.handle, lr=tf.constant(0.5),
                                                     epsilon=tf.constant(1e-7), grad=tf.constant([[1.0, 1.0]]),
                                                     indices=tf.constant([0], tf.int64))
    with tf.control_dependencies([] if eager else [update]):
        value = var.read_value()
    if eager:
        return value, []
    with tf.control_dependencies([value]):  # a session's variables outlive it on a ps: deleted once read
        cleanup = [tf.raw_ops.DestroyResourceOp(resource=v.handle) for v in (var, accum)]
    return value, cleanup


def probe(devices: Sequence[str], target: str | None = None, *, config: Any = None) -> list[str]:
    """The devices of ``devices`` that ran the kernel: through a session on ``target``, or eagerly (None).

    Each answer is remembered for the process; the probe's two tiny variables go with its
    session (or, eagerly, with their last reference).
    """
    module = load()
    if module is None:
        return []
    import tensorflow as tf

    ran = []
    for device in devices:
        key = (_task_key(device), target)
        if key not in _probed:
            try:
                if target is None:
                    with tf.device(device):
                        value = _probe_ops(module, tf)[0].numpy()
                else:
                    graph = tf.Graph()
                    with graph.as_default(), tf.device(device):
                        result, cleanup = _probe_ops(module, tf)
                    bounded = tf.compat.v1.ConfigProto()
                    if config is not None:
                        bounded.CopyFrom(config)
                    bounded.operation_timeout_in_ms = bounded.operation_timeout_in_ms or _PROBE_TIMEOUT_MS
                    with tf.compat.v1.Session(target, graph=graph, config=bounded) as session:
                        value = session.run([result, cleanup])[0]
                _probed[key] = abs(float(value[0][0]) - _EXPECTED) < 1e-5
            except Exception as exc:  # the op unknown there (a task of plain TensorFlow), or no such task
                logger.info("tfdist's native kernels are not on %s (%s); TensorFlow's run there", device,
                            str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
                _probed[key] = False
        if _probed[key]:
            ran.append(device)
    return ran


@contextlib.contextmanager
def kernels_on(devices: Sequence[str]) -> Iterator[None]:
    """Inside, ops built for a variable on one of ``devices`` (tasks ``probe`` found ready) use the kernels."""
    previous: frozenset[Any] = getattr(_scope, "tasks", frozenset())
    _scope.tasks = frozenset(_task_key(d) for d in devices)
    try:
        yield
    finally:
        _scope.tasks = previous


def usable_on(device: str | None) -> bool:
    """Whether an op for a variable on ``device`` may use the kernel here (inside ``kernels_on`` naming its task)."""
    if not device or _loaded.get("module") is None:
        return False
    return _task_key(device) in getattr(_scope, "tasks", frozenset())


def sparse_apply_adagrad(var: Any, accum: Any, lr: Any, epsilon: Any, grad: Any, indices: Any, *,
                         use_epsilon: bool = True) -> Any:
    """The native kernel's op (``usable_on(var.device)`` must hold).

    ``use_epsilon=False``: TF1's ``AdagradOptimizer`` (``var -= lr * g / sqrt(accum)``, ``epsilon`` unused).
    """
    return _loaded["module"].tfdist_sparse_apply_adagrad(var=var, accum=accum, lr=lr, epsilon=epsilon, grad=grad,
                                                          indices=indices, use_epsilon=use_epsilon)


def row_sum(data: Any, segment_ids: Any, num_segments: Any) -> Any:
    """``tf.math.unsorted_segment_sum`` of the 2-D ``data``'s rows, natively (``usable_on`` its device must hold)."""
    return _loaded["module"].tfdist_row_sum(data=data, segment_ids=segment_ids, num_segments=num_segments)


def gather_parts(parts: Sequence[Any], which: Any, rows: Any, dtype: Any) -> Any:
    """``[len(rows), width]``: row ``rows[i]`` of part ``which[i]`` (handles of 2-D variables of one width)."""
    return _loaded["module"].tfdist_gather_parts(parts=list(parts), which=which, rows=rows, dtype=dtype)


def sparse_apply_adagrad_parts(variables: Sequence[Any], accums: Sequence[Any], lr: Any, grad: Any, which: Any,
                               rows: Any) -> Any:
    """TF1's Adagrad update (``var -= lr * g / sqrt(accum)``) of row ``rows[i]`` of part ``which[i]`` by ``grad[i]``."""
    return _loaded["module"].tfdist_sparse_apply_adagrad_parts(vars=list(variables), accums=list(accums), lr=lr,
                                                                grad=grad, which=which, rows=rows)


def main(argv: list[str] | None = None) -> int:
    """``python -m strategies._native [build]``: build the library now (what ``make`` runs)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not enabled():
        print(f"{ENV_SWITCH}=0: native kernels off")
        return 0
    try:
        print(build())
    except (RuntimeError, OSError) as exc:
        print(f"tfdist's native kernels not built ({exc}); TensorFlow's own kernels will run", file=sys.stderr)
    return 0
