"""Training throughput: Keras ``fit``, ``toolkit.fit`` under every strategy, bare loops and the TF1 peer.

The small model of FINDINGS.md (MLP 32 -> 64 -> 64 -> 1, MSE, Adam, global
batch 64, synthetic data), measured on this machine in one run:

* ``keras_fit``: single-process ``model.fit`` (the 1x reference);
* ``toolkit/<strategy>``: ``toolkit.fit`` under default, one_device, mirrored
  (2 logical CPUs), multi_worker_mirrored (2 workers) and parameter_server
  (1 ps, 2 workers), with ``steps_per_execution`` 1 and 10 (under
  parameter_server also 32, and ``default``: left unset, as a user would, with
  Adam and, as ``default/rmsprop`` and ``default/adagrad``, RMSprop and
  Adagrad; fit's default there is between-graph steps, each worker its own
  graph-mode loop; ``coordinator/spe1``, ``coordinator/spe32``: the chief
  scheduling closures instead, ``FitOptions(between_graph=False)``, and
  ``coordinator/spe1/unpacked``, ``coordinator/spe32/unpacked``: the same
  with a ``TrainStep`` with ``pack_transfers = False``, one transfer per
  variable instead of one per ps);
* ``tutorial_ps``: the TensorFlow tutorial's parameter-server loop, one step per
  ``ClusterCoordinator.schedule``;
* ``bare_mwms``: a bare MultiWorkerMirrored custom loop (tutorial style, one
  ``strategy.run`` per ``tf.function`` call, loss reduced every step);
* ``local_mwms``: the same step in the same two processes, each training its
  own local copy on its half of the global batch (no strategy, no all-reduce):
  ``1 - bare_mwms / local_mwms`` is the share of an MWMS step spent in the
  all-reduce and the synchronisation around it;
* ``tf1_peer``: the hand-written TF1 between-graph script (``tf.compat.v1``
  graph mode, ``replica_device_setter``, ``MonitoredTrainingSession``, one
  ``session.run`` per step, 1 ps + 2 workers; ``--peer PATH``), global steps/s
  after its 35 s warm-up, with its Adam, and (``tf1_peer/rmsprop``,
  ``tf1_peer/adagrad``) a copy of it whose optimizer is TF1's RMSProp or Adagrad.

Each measurement runs in fresh processes (clusters through ``toolkit.launcher``)
and reports the best epoch after a warm-up epoch. Prints steps/s, examples/s,
the load average before and after, and each ratio against its target with
"met" or "NOT MET". Not a test: on a shared machine expect +-30% between runs,
so compare ratios from one run.

Usage:
    python benchmarks/bench_training.py [--steps 300] [--only keras_fit tf1_peer ...] [--peer PATH]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:  # run as a plain script from a checkout
    sys.path.insert(0, str(_REPO))

BATCH, FEATURES, EXAMPLES, EPOCHS = 64, 32, 8192, 3


# ------------------------------------------------------------------- children: one measurement each

def _arrays():
    import numpy as np

    rng = np.random.RandomState(0)
    x = rng.randn(EXAMPLES, FEATURES).astype(np.float32)
    return x, (x @ rng.randn(FEATURES, 1)).astype(np.float32)


def _model():
    import keras

    return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                             keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])


def _dataset_fn():
    import tensorflow as tf

    from toolkit.data import make_dataset_fn

    x, y = _arrays()
    return make_dataset_fn(lambda: tf.data.Dataset.from_tensor_slices((x, y)), BATCH, seed=0)


#: the optimizers compared with the peer: Keras' (for toolkit.fit) and TF1's (swapped into the peer), same rates
_OPTIMIZERS = {"adam": ("Adam", "AdamOptimizer(1e-3)"), "rmsprop": ("RMSprop", "RMSPropOptimizer(1e-3)"),
               "adagrad": ("Adagrad", "AdagradOptimizer(1e-3)")}


def _keras_fit(args) -> float:
    import time as clock

    import keras

    class EpochClock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.rates, self.start = [], 0.0

        def on_epoch_begin(self, epoch, logs=None):
            self.start = clock.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.rates.append(args.steps / (clock.perf_counter() - self.start))

    model, timer = _model(), EpochClock()
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    model.fit(_dataset_fn()(None), epochs=EPOCHS, steps_per_epoch=args.steps, verbose=0, callbacks=[timer])
    return max(timer.rates[1:])  # the first epoch traces


def _toolkit(args) -> float:
    import keras

    from strategies import StrategyOptions
    from toolkit import CheckpointConfig, LogConfig, fit
    from toolkit.training import FitOptions, TrainStep

    class UnpackedStep(TrainStep):
        pack_transfers = False  # one transfer per variable, as before toolkit.training.packing

    options = StrategyOptions(logical_cpus=2) if args.strategy == "mirrored" else None
    optimizer = getattr(keras.optimizers, _OPTIMIZERS[args.optimizer][0])
    # --spe unset: Keras' default, as a user leaves it; 32 where the chief coordinates the ps workers' steps
    coordinated = args.strategy == "parameter_server" and (args.coordinator or args.unpacked)
    spe = args.spe if args.spe is not None else 32 if coordinated else 1

    def model_fn():
        model = _model()
        model.compile(optimizer=optimizer(1e-3), loss="mse", steps_per_execution=spe)
        return model

    history = fit(model_fn, _dataset_fn(), epochs=EPOCHS, steps_per_epoch=args.steps, model_dir=args.model_dir,
                  verbose=0, strategy=args.strategy,
                  options=FitOptions(train_step=UnpackedStep if args.unpacked else None,
                                     logs=LogConfig(every=args.steps, summary_every=EPOCHS * args.steps),
                                     checkpoint=CheckpointConfig(every=EPOCHS * args.steps), export=False,
                                     between_graph=False if args.coordinator else None, strategy=options))
    if history.role != "chief":
        return -1.0
    return max(rate["steps_per_sec"] for rate in history.rates[1:])


def _tutorial_ps(args) -> float:
    import time as clock

    import keras
    import tensorflow as tf

    from strategies import chief_session, make_coordinator, make_strategy, run_role

    cfg = run_role()
    strategy = make_strategy("parameter_server", tf_config=cfg)
    coordinator = make_coordinator(strategy)
    with chief_session(strategy):
        with strategy.scope():
            model, optimizer = _model(), keras.optimizers.Adam(1e-3)
        dataset_fn = _dataset_fn()
        iterator = iter(coordinator.create_per_worker_dataset(
            lambda: strategy.distribute_datasets_from_function(dataset_fn)))

        @tf.function
        def train_step(it):
            def replica(x, y):
                with tf.GradientTape() as tape:
                    per_example = tf.reduce_mean(tf.square(model(x, training=True) - y), axis=-1)
                    loss = tf.nn.compute_average_loss(per_example)
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=False))
                return loss
            return strategy.run(replica, args=next(it))

        best = 0.0
        for epoch in range(EPOCHS):
            start = clock.perf_counter()
            for _ in range(args.steps):
                coordinator.schedule(train_step, args=(iterator,))
            coordinator.join()
            if epoch:
                best = max(best, args.steps / (clock.perf_counter() - start))
    return best


def _bare_mwms(args) -> float:

    import keras
    import tensorflow as tf

    from strategies import make_strategy

    strategy = make_strategy("multi_worker_mirrored")
    with strategy.scope():
        model, optimizer = _model(), keras.optimizers.Adam(1e-3)
    iterator = iter(strategy.distribute_datasets_from_function(_dataset_fn()))

    @tf.function
    def train_step(x, y):
        def replica(x, y):
            with tf.GradientTape() as tape:
                per_example = tf.reduce_mean(tf.square(model(x, training=True) - y), axis=-1)
                loss = tf.nn.compute_average_loss(per_example)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=False))
            return loss
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica, args=(x, y)), axis=None)

    return _best_rate(train_step, iterator, args.steps)


def _best_rate(train_step, iterator, steps: int) -> float:
    """The best steps/s over the epochs after the first (which traces the step)."""
    import time as clock

    best = 0.0
    for epoch in range(EPOCHS):
        start = clock.perf_counter()
        for _ in range(steps):
            train_step(*next(iterator))
        if epoch:
            best = max(best, steps / (clock.perf_counter() - start))
    return best


def _local_mwms(args) -> float:
    """``_bare_mwms``'s step without the strategy: each process trains its own copy on half the batch."""

    import keras
    import tensorflow as tf

    from tf_config import TFConfig

    cfg = TFConfig.from_env()
    context = tf.distribute.InputContext(num_input_pipelines=cfg.num_workers, input_pipeline_id=cfg.task_index,
                                         num_replicas_in_sync=cfg.num_workers)
    model, optimizer = _model(), keras.optimizers.Adam(1e-3)
    iterator = iter(_dataset_fn()(context))

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(model(x, training=True) - y), axis=-1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=False))
        return loss

    return _best_rate(train_step, iterator, args.steps)


_CHILDREN = {"keras_fit": _keras_fit, "toolkit": _toolkit, "tutorial_ps": _tutorial_ps, "bare_mwms": _bare_mwms,
             "local_mwms": _local_mwms}


def _child(argv) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=sorted(_CHILDREN))
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--spe", type=int, default=None)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--model-dir", default=None)
    parser.add_argument("--unpacked", action="store_true")
    parser.add_argument("--coordinator", action="store_true")
    parser.add_argument("--optimizer", choices=sorted(_OPTIMIZERS), default="adam")
    args = parser.parse_args(argv)
    rate = _CHILDREN[args.kind](args)
    if rate >= 0:
        Path(args.out).write_text(json.dumps({"steps_per_sec": rate}))


# ------------------------------------------------------------------- parent: the table and ratios

_CLUSTERS = {"multi_worker_mirrored": {"workers": 2}, "parameter_server": {"chief": 1, "workers": 2, "ps": 1}}


def _cases(steps: int) -> dict[str, tuple[list[str], str | None]]:
    """name -> (child arguments, cluster shape or None for one process)."""
    cases = {"keras_fit": (["keras_fit"], None)}
    for strategy in ("default", "one_device", "mirrored", "multi_worker_mirrored", "parameter_server"):
        for spe in (1, 10):
            cluster = strategy if strategy in _CLUSTERS else None
            cases[f"toolkit/{strategy}/spe{spe}"] = (["toolkit", "--strategy", strategy, "--spe", str(spe)], cluster)
    cases["toolkit/parameter_server/spe32"] = (["toolkit", "--strategy", "parameter_server", "--spe", "32"],
                                               "parameter_server")
    cases["toolkit/parameter_server/default"] = (["toolkit", "--strategy", "parameter_server"], "parameter_server")
    for optimizer in ("rmsprop", "adagrad"):
        cases[f"toolkit/parameter_server/default/{optimizer}"] = (
            ["toolkit", "--strategy", "parameter_server", "--optimizer", optimizer], "parameter_server")
    for spe in (1, 32):
        coordinator = ["toolkit", "--strategy", "parameter_server", "--spe", str(spe), "--coordinator"]
        cases[f"toolkit/parameter_server/coordinator/spe{spe}"] = (coordinator, "parameter_server")
        cases[f"toolkit/parameter_server/coordinator/spe{spe}/unpacked"] = ([*coordinator, "--unpacked"],
                                                                           "parameter_server")
    cases["tutorial_ps"] = (["tutorial_ps"], "parameter_server")
    cases["bare_mwms"] = (["bare_mwms"], "multi_worker_mirrored")
    cases["local_mwms"] = (["local_mwms"], "multi_worker_mirrored")
    return cases


def _measure(name: str, child_args: list[str], cluster: str | None, steps: int, work: Path) -> float | None:
    from toolkit.launcher import launch

    slug = name.replace("/", "-")
    out = work / f"{slug}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", *child_args, "--out", str(out),
           "--steps", str(steps), "--model-dir", str(work / slug / "model")]
    quiet = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(_REPO)}
    if cluster is None:
        env = {**{k: v for k, v in os.environ.items() if k != "TF_CONFIG"}, **quiet}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=_REPO)
        if proc.returncode:
            print(f"  {name} failed:\n{proc.stderr[-1500:]}", file=sys.stderr)
    else:
        result = launch(cmd, job_dir=work / slug / "job", timeout=900, echo=False, env=quiet, **_CLUSTERS[cluster])
        if not result.ok:
            print(f"  {name} failed: {result.message}", file=sys.stderr)
    return json.loads(out.read_text())["steps_per_sec"] if out.exists() else None


def _peer_path(given: str | None) -> Path | None:
    """The TF1 peer script: ``--peer``, else ``shared/peers/tf1_between_graph.py`` beside the checkout."""
    if given:
        return Path(given)
    for root in (_REPO.parent, _REPO.parent.parent):
        candidate = root / "shared" / "peers" / "tf1_between_graph.py"
        if candidate.exists():
            return candidate
    return None


def _measure_peer(path: Path | None, steps: int, optimizer: str, work: Path) -> float | None:
    if path is None or not path.exists():
        print(f"  tf1_peer: peer script {path or 'shared/peers/tf1_between_graph.py'} not found; skipped "
              "(pass --peer PATH)", file=sys.stderr)
        return None
    if optimizer != "adam":  # the same script with TF1's optimizer of that kind
        source = path.read_text(encoding="utf-8")
        if _OPTIMIZERS["adam"][1] not in source:
            print(f"  tf1_peer/{optimizer}: the peer does not build {_OPTIMIZERS['adam'][1]}; skipped", file=sys.stderr)
            return None
        path = work / f"tf1_peer_{optimizer}.py"
        path.write_text(source.replace(_OPTIMIZERS["adam"][1], _OPTIMIZERS[optimizer][1]), encoding="utf-8")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, str(path), "--workers", "2", "--steps", str(steps)], capture_output=True,
                          text=True, timeout=1200, check=False, env=env)
    found = re.search(r"\"global_steps_per_s\": ([\d.]+)", proc.stdout)
    if not found:
        print(f"  tf1_peer failed:\n{proc.stdout[-800:]}{proc.stderr[-800:]}", file=sys.stderr)
        return None
    return float(found.group(1))


def _best_ps(rates: dict[str, float | None], *, coordinator_only: bool = False) -> str | None:
    """The fastest ``toolkit.fit`` PS case with Adam; ``coordinator_only``: among the coordinator's."""
    measured = {name: rate for name, rate in rates.items()
                if name.startswith("toolkit/parameter_server/") and rate
                and not name.endswith(("unpacked", "rmsprop", "adagrad"))
                and (not coordinator_only or "/coordinator/" in name)}
    return max(measured, key=lambda name: measured[name]) if measured else None


def _targets(rates: dict[str, float | None]) -> list[tuple[str, str | None, str | None, float | None]]:
    """(label, numerator case, denominator case, target ratio or None to report only)."""
    best, best_spe = _best_ps(rates), _best_ps(rates, coordinator_only=True)
    return [
        ("toolkit PS default (Adam) / TF1 between-graph peer", "toolkit/parameter_server/default", "tf1_peer", 1.0),
        ("toolkit PS default, RMSprop / TF1 peer, RMSProp", "toolkit/parameter_server/default/rmsprop",
         "tf1_peer/rmsprop", 1.0),
        ("toolkit PS default, Adagrad / TF1 peer, Adagrad", "toolkit/parameter_server/default/adagrad",
         "tf1_peer/adagrad", 1.0),
        ("toolkit PS spe1 (between-graph) / TF1 between-graph peer", "toolkit/parameter_server/spe1", "tf1_peer",
         1.0),
        ("toolkit PS spe1 through the coordinator / TF1 between-graph peer",
         "toolkit/parameter_server/coordinator/spe1", "tf1_peer", None),
        (f"toolkit PS best ({best or 'n/a'}) / keras fit", best, "keras_fit", 0.6),
        ("toolkit PS default / the coordinator's best", "toolkit/parameter_server/default", best_spe, None),
        ("toolkit PS coordinator spe32 / tutorial PS (1 step per schedule)",
         "toolkit/parameter_server/coordinator/spe32", "tutorial_ps", 4.0),
        ("toolkit PS coordinator spe1 / the same without packed transfers",
         "toolkit/parameter_server/coordinator/spe1", "toolkit/parameter_server/coordinator/spe1/unpacked", None),
        ("toolkit PS coordinator spe32 / the same without packed transfers",
         "toolkit/parameter_server/coordinator/spe32", "toolkit/parameter_server/coordinator/spe32/unpacked",
         None),
        ("toolkit MWMS spe1 / bare MWMS loop", "toolkit/multi_worker_mirrored/spe1", "bare_mwms", 1.0),
        ("toolkit MWMS spe10 / bare MWMS loop", "toolkit/multi_worker_mirrored/spe10", "bare_mwms", None),
        ("toolkit default spe1 / keras fit", "toolkit/default/spe1", "keras_fit", None),
        ("toolkit default spe10 / keras fit", "toolkit/default/spe10", "keras_fit", None),
    ]


def _report(rates: dict[str, float | None]) -> list[str]:
    lines = ["ratios against targets (from this run):"]
    for label, a, b, target in _targets(rates):
        if a and b and rates.get(a) and rates.get(b):
            ratio = rates[a] / rates[b]
            verdict = "" if target is None else ("   met" if ratio >= target else "   NOT MET")
            bracket = f"[>= {target:g}x]" if target is not None else "[report]"
            lines.append(f"  {label + ' ' + bracket:72s} {ratio:5.2f}x{verdict}")
        else:
            lines.append(f"  {label:72s}   n/a (not measured)")
    if rates.get("bare_mwms") and rates.get("local_mwms"):
        share = 1.0 - rates["bare_mwms"] / rates["local_mwms"]
        lines.append(f"  {'MWMS: all-reduce and sync share of a step [report]':72s} {100 * share:5.0f}%")
    return lines


def _load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="steps per epoch (default 300)")
    parser.add_argument("--peer-steps", type=int, default=20000, help="global steps of the TF1 peer (default 20000)")
    parser.add_argument("--only", nargs="*", default=None, help="measure only these cases")
    parser.add_argument("--peer", default=None, help="the TF1 between-graph peer script")
    args = parser.parse_args()
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
          f"{os.cpu_count()} cores, load average {_load()} (1/5/15 min)", flush=True)
    rates: dict[str, float | None] = {}
    cases: dict[str, Any] = {**_cases(args.steps), **{f"tf1_peer{'' if name == 'adam' else '/' + name}": name
                                                      for name in _OPTIMIZERS}}
    with tempfile.TemporaryDirectory(prefix="bench-training-") as tmp:
        for name, case in cases.items():
            if args.only and name not in args.only:
                continue
            started = time.perf_counter()
            if isinstance(case, str):
                rates[name] = _measure_peer(_peer_path(args.peer), args.peer_steps, case, Path(tmp))
            else:
                rates[name] = _measure(name, case[0], case[1], args.steps, Path(tmp))
            shown = f"{rates[name]:8.1f} steps/s {rates[name] * BATCH:10.0f} examples/s" if rates[name] else "  failed"
            print(f"{name:34s} {shown}   ({time.perf_counter() - started:.0f} s, load {_load()})", flush=True)
    print()
    print("\n".join(_report(rates)))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2:])
    else:
        main()
