"""The chaos job's other front doors: Keras' own ``model.fit`` and the graph-mode Estimator, on the same digits.

``chaos_task.py --job keras`` trains ``models.digits_mlp`` with Keras'
``model.fit`` through ``toolkit.enable_distributed_keras()`` (parameter servers
or MultiWorkerMirrored, whatever TF_CONFIG says), checkpointing with
``keras.callbacks.BackupAndRestore(<model dir>, save_freq=<checkpoint every>)``;
``--job estimator`` trains a TF1 ``model_fn`` (the same MLP's shape, Adam) with
``toolkit.estimator``'s ``train()`` on every task (the ps serves inside it),
checkpointing every ``--checkpoint-every`` steps. Each chief writes
``<model dir>/../result.json``: its final global step and its accuracy on the
test split.

Under asynchronous parameter servers an Estimator worker's step can land after
the chief's last one and move the final checkpoint past the last step, so the
workers stop ``_WORKERS_STOP_EARLY`` steps before the end (each leaves
``<job dir>/worker-stopped-<name>``) and the chief takes the last steps alone
once every worker has stopped (at most 120 s of waiting).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

BATCH = 64
_WORKERS_STOP_EARLY = 10
#: seconds each Estimator task waits before a step: the graph-mode job is otherwise over (160 steps) before the
#: harness has seen its first checkpoint, and a "mid-step" signal would land after its end
_ESTIMATOR_STEP_SECONDS = 0.03


def _write_result(model_dir: str, step: int, accuracy: float) -> None:
    (Path(model_dir).parent / "result.json").write_text(json.dumps({"global_step": step, "accuracy": accuracy}))


def keras_fit(args: argparse.Namespace) -> int:
    from strategies import make_strategy, run_role

    cfg = run_role()  # parameter-server ps and workers serve here
    import keras
    import numpy as np

    import models
    import toolkit
    from toolkit import data

    toolkit.enable_distributed_keras()
    train, test = data.load("digits"), data.load("digits", split="test")
    with make_strategy(tf_config=cfg).scope():
        model = models.digits_mlp(seed=0)
        model.compile(optimizer=keras.optimizers.Adam(3e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    backup = keras.callbacks.BackupAndRestore(args.model_dir, save_freq=args.checkpoint_every,
                                              delete_checkpoint=False)
    history = model.fit(train.dataset_fn(BATCH, seed=1), epochs=args.epochs, steps_per_epoch=args.steps_per_epoch,
                        verbose=0, callbacks=[backup])
    if cfg.is_chief and history.epoch:
        predictions = np.argmax(model.predict(test.features, verbose=0), axis=-1)
        _write_result(args.model_dir, args.epochs * args.steps_per_epoch,
                      float(np.mean(predictions == test.labels)))
    return 0


def _stop_early_hooks(is_chief: bool, workers: list[str], stop_at: int, name: str) -> list[Any]:
    """The workers stop at ``stop_at``; the chief takes no step past it before they all have (module doc)."""
    import tensorflow as tf

    job_dir = Path(os.environ["TFDIST_JOB_DIR"])
    started = time.time()

    class WorkerStops(tf.compat.v1.train.SessionRunHook):
        def begin(self) -> None:
            self._step = tf.compat.v1.train.get_global_step()

        def before_run(self, run_context: Any) -> Any:
            return tf.compat.v1.train.SessionRunArgs(self._step)

        def after_run(self, run_context: Any, run_values: Any) -> None:
            if int(run_values.results) + 1 >= stop_at:
                run_context.request_stop()

        def end(self, session: Any) -> None:
            if int(session.run(self._step)) + 1 >= stop_at:
                (job_dir / f"worker-stopped-{name}").write_text("")

    class ChiefWaits(tf.compat.v1.train.SessionRunHook):
        def begin(self) -> None:
            self._step = tf.compat.v1.train.get_global_step()
            self._waited = False

        def before_run(self, run_context: Any) -> None:
            if self._waited or run_context.session.run(self._step) < stop_at:
                return
            self._waited, deadline = True, time.monotonic() + 120
            files = [job_dir / f"worker-stopped-{w}" for w in workers]
            while time.monotonic() < deadline and not all(f.exists() and f.stat().st_mtime >= started
                                                          for f in files):
                time.sleep(0.1)

    return [ChiefWaits()] if is_chief else [WorkerStops()]


def _paced() -> Any:
    import tensorflow as tf

    class Paced(tf.compat.v1.train.SessionRunHook):
        def before_run(self, run_context: Any) -> None:
            time.sleep(_ESTIMATOR_STEP_SECONDS)

    return Paced()


def estimator_train(args: argparse.Namespace) -> int:
    import numpy as np

    import toolkit.compat.v1 as tf
    from toolkit import data

    train, test = data.load("digits"), data.load("digits", split="test")

    def model_fn(features: Any, labels: Any, mode: str, config: Any) -> Any:
        flat = tf.reshape(tf.cast(features, tf.float32), [-1, 64])
        hidden = tf.layers.dense(flat, 64, activation=tf.nn.relu)
        hidden = tf.layers.dense(hidden, 64, activation=tf.nn.relu)
        logits = tf.layers.dense(hidden, 10)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.EstimatorSpec(mode, predictions={"class": tf.argmax(logits, axis=-1)})
        loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
        train_op = tf.train.AdamOptimizer(3e-3).minimize(loss, global_step=tf.train.get_global_step())
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

    config = tf.estimator.RunConfig(model_dir=args.model_dir, save_checkpoints_steps=args.checkpoint_every,
                                    save_checkpoints_secs=None, keep_checkpoint_max=2)
    estimator = tf.estimator.Estimator(model_fn, config=config)
    total = args.epochs * args.steps_per_epoch
    cfg = estimator.config.tf_config
    workers = [f"worker-{i}" for i in range(len(cfg.cluster.get("worker", ())))]
    name = f"{estimator.config.task_type}-{estimator.config.task_id}"
    hooks = _stop_early_hooks(estimator.config.is_chief, workers, total - _WORKERS_STOP_EARLY, name) \
        if workers and cfg.cluster.get("ps") else []
    hooks.append(_paced())
    features, labels = train.features, train.labels
    estimator.train(lambda: tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(512, seed=1).repeat()
                    .batch(BATCH), max_steps=total, hooks=hooks)
    if estimator.config.is_chief:
        step = int(estimator.get_variable_value("global_step"))
        predicted = [p["class"] for p in estimator.predict(
            lambda: tf.data.Dataset.from_tensor_slices(test.features).batch(BATCH))]
        _write_result(args.model_dir, step, float(np.mean(np.array(predicted) == test.labels)))
    return 0


JOBS = {"keras": keras_fit, "estimator": estimator_train}
