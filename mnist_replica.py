"""TensorFlow's old official mnist_replica.py, between-graph as TF1 ran it: same flags, same experiments.

Between-graph async (1 ps, 2 workers):

  python mnist_replica.py --num_gpus=0 --job_name=ps --task_index=0
  python mnist_replica.py --num_gpus=0 --job_name=worker --task_index=0 --train_steps=2000
  python mnist_replica.py --num_gpus=0 --job_name=worker --task_index=1 --train_steps=2000

Add --sync_replicas to the workers for synchronous updates, and
--ps_hosts=localhost:2222,localhost:2225 to every task for two ps (each worker
prints where each variable lives, in TF's device placement format).
"""
from __future__ import annotations

import argparse
import hashlib
import logging
import sys
import time

_EPILOG = """\
as in TF1: every worker is its own client with its own graph and its own shard of the
training data (worker i reads examples i, i+N, i+2N, ... of N workers); the variables live
on the ps tasks (replica_device_setter: several ps split them); worker 0 is the chief and
initialises them, the others start stepping as soon as it has. Training stops when the
GLOBAL step reaches --train_steps: async, every worker step is an update; --sync_replicas
(SyncReplicasOptimizer), --replicas_to_aggregate worker steps (default: one per worker)
make one update, so with 2 workers their local steps add up to about twice --train_steps
(a chief alone takes two local steps per global step).
At the end the chief waits up to --worker_wait_secs for the other workers to finish, then
tells the ps tasks to exit: every process exits 0.

data: MNIST from a prepared TFDS directory (--data_dir), else the embedded 8x8 digits.
exit codes: 0 success, 1 failure, 2 bad flags, 3 (ps) the chief vanished, 143 preempted (SIGTERM to any
task: worker 0 checkpoints at the step reached in --checkpoint_dir, and a signalled ps serves until then).
"""

logger = logging.getLogger("mnist_replica")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=_EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--job_name", required=True, choices=("ps", "worker"), help="job name: worker or ps")
    parser.add_argument("--task_index", type=int, required=True, help="worker task index; 0 is the chief")
    parser.add_argument("--ps_hosts", default="localhost:2222", help="comma-separated host:port list")
    parser.add_argument("--worker_hosts", default="localhost:2223,localhost:2224",
                        help="comma-separated host:port list")
    parser.add_argument("--num_gpus", type=int, default=0, help="GPUs per worker (0: CPU)")
    parser.add_argument("--train_steps", type=int, default=200, help="global training steps to perform")
    parser.add_argument("--batch_size", type=int, default=100, help="training batch size")
    parser.add_argument("--learning_rate", type=float, default=0.01)
    parser.add_argument("--hidden_units", type=int, default=100, help="hidden layer width")
    parser.add_argument("--sync_replicas", action="store_true", help="aggregate gradients before applying them")
    parser.add_argument("--replicas_to_aggregate", type=int, default=None,
                        help="contributions per update (default: number of workers)")
    parser.add_argument("--checkpoint_dir", default=None, help="worker 0 checkpoints here and resumes from it; "
                        "a preemption (SIGTERM) checkpoints at the step reached and exits 143")
    parser.add_argument("--data_dir", default=None, help="TFDS directory holding a prepared 'mnist'")
    parser.add_argument("--worker_wait_secs", type=float, default=60.0,
                        help="chief: how long to wait for the other workers to finish before ending the ps tasks")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    return parser.parse_args(argv)


def _cluster(args: argparse.Namespace) -> dict[str, list[str]]:
    from tf_config import TFConfig

    cluster = {"ps": args.ps_hosts.split(","), "worker": args.worker_hosts.split(",")}
    TFConfig.from_dict({"cluster": cluster, "task": {"type": args.job_name, "index": args.task_index}})
    for name in ("train_steps", "batch_size", "hidden_units"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} is {getattr(args, name)}; expected a positive integer.")
    if args.replicas_to_aggregate is not None and args.replicas_to_aggregate < 1:
        raise ValueError(f"--replicas_to_aggregate is {args.replicas_to_aggregate}; expected a positive integer.")
    return cluster


def shard_indices(num_examples: int, num_workers: int, task_index: int) -> list[int]:
    """The examples worker ``task_index`` trains on: every ``num_workers``-th, starting at its index."""
    return list(range(task_index, num_examples, num_workers))


def fingerprint(indices: list[int]) -> str:
    return hashlib.sha256(",".join(map(str, indices)).encode()).hexdigest()[:12]


def _data(args: argparse.Namespace, num_workers: int):
    import numpy as np

    from toolkit import data

    if args.data_dir:
        import tensorflow as tf

        def arrays(split):
            batches = list(data.load("tfds:mnist", split=split, data_dir=args.data_dir).dataset_fn(
                1000, shuffle=False, repeat=False, drop_remainder=False)(tf.distribute.InputContext()))
            return (np.concatenate([b[0].numpy() for b in batches]), np.concatenate([b[1].numpy() for b in batches]))

        (x, y), (tx, ty) = arrays("train"), arrays("test")
    else:
        logger.warning("no --data_dir: training on the embedded 8x8 digits")
        train, test = data.load("digits"), data.load("digits", split="test")
        (x, y), (tx, ty) = (train.features, train.labels), (test.features, test.labels)
    x, tx = x.reshape(len(x), -1).astype("float32"), tx.reshape(len(tx), -1).astype("float32")
    shard = shard_indices(len(x), num_workers, args.task_index)
    print(f"worker {args.task_index}: data shard {args.task_index} of {num_workers}: {len(shard)} examples "
          f"of {len(x)} (fingerprint {fingerprint(shard)})", flush=True)
    return x[shard], y[shard].astype("int64"), tx, ty.astype("int64"), int(max(y.max(), ty.max())) + 1


def _build(args: argparse.Namespace, cluster: dict, num_features: int, classes: int):
    """TF1's graph: variables on the ps by replica_device_setter, the rest on this worker."""
    import tensorflow as tf

    from strategies import between_graph

    v1 = tf.compat.v1
    num_workers = len(cluster["worker"])
    with v1.device(between_graph.replica_setter(cluster, "worker", args.task_index)):
        global_step = v1.train.get_or_create_global_step()
        hid_w = v1.Variable(v1.truncated_normal([num_features, args.hidden_units], stddev=1.0 / num_features ** 0.5),
                            name="hid_w")
        hid_b = v1.Variable(v1.zeros([args.hidden_units]), name="hid_b")
        sm_w = v1.Variable(v1.truncated_normal([args.hidden_units, classes], stddev=1.0 / args.hidden_units ** 0.5),
                           name="sm_w")
        sm_b = v1.Variable(v1.zeros([classes]), name="sm_b")
        x = v1.placeholder(tf.float32, [None, num_features])
        y_ = v1.placeholder(tf.int64, [None])
        hid = tf.nn.relu(v1.nn.xw_plus_b(x, hid_w, hid_b))
        logits = v1.nn.xw_plus_b(hid, sm_w, sm_b)
        cross_entropy = v1.losses.sparse_softmax_cross_entropy(y_, logits)
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y_), tf.float32))
        opt = v1.train.AdamOptimizer(args.learning_rate)
        hooks = []
        if args.sync_replicas:
            opt = v1.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=args.replicas_to_aggregate or num_workers,
                                                 total_num_replicas=num_workers, name="mnist_sync_replicas")
            hooks.append(opt.make_session_run_hook(args.task_index == 0))
        train_step = opt.minimize(cross_entropy, global_step=global_step)
        release = opt.get_init_tokens_op(num_tokens=num_workers) if args.sync_replicas else None
    return {"x": x, "y": y_, "train": train_step, "step": global_step, "loss": cross_entropy, "acc": accuracy,
            "hooks": hooks, "release": release}


def _placement(run_metadata, variables) -> list[str]:
    """``name: (Op): device`` lines for the variables, from the partition graphs TF really ran."""
    names = {v.op.name: v.op.type for v in variables}
    lines = set()
    for graph in run_metadata.partition_graphs:
        for node in graph.node:
            if node.name in names:
                lines.add(f"{node.name}: ({names[node.name]}): {node.device}")
    return sorted(lines)


def _preemption_hooks(args: argparse.Namespace, cluster: dict, scaffold: object) -> list:
    """Stop after the step in flight on SIGTERM (docs/preemption.md); worker 0 saves then, as the session closes.

    Worker 0 also stops when a ps tells it that it was preempted (the ps serves on until worker 0's goodbye).
    """
    import tensorflow as tf

    from toolkit.estimator._preemption import PreemptionHook
    from toolkit.training.preemption import watcher

    hooks: list = [PreemptionHook(cluster if args.task_index == 0 else None)]
    if watcher().task == "local":  # the log names the task (the launcher's name wins)
        watcher().task = f"worker-{args.task_index}"
    if args.checkpoint_dir and args.task_index == 0:
        every = max(args.train_steps // 4, 1)
        hooks.append(tf.compat.v1.train.CheckpointSaverHook(args.checkpoint_dir, save_steps=every, scaffold=scaffold))
    return hooks


def _end_if_preempted(args: argparse.Namespace, cluster: dict) -> None:
    """Exits 143 once the session has closed (and worker 0 has checkpointed) if this worker was preempted.

    Worker 0 first tells the ps tasks to exit with 143 too.
    """
    from toolkit.compat._preemption import end_if_preempted

    end_if_preempted(args.checkpoint_dir, f"worker-{args.task_index}", cluster, chief=args.task_index == 0)


def _train(args: argparse.Namespace, cluster: dict) -> int:
    import numpy as np
    import tensorflow as tf

    from strategies import between_graph

    v1 = tf.compat.v1
    is_chief, num_workers = args.task_index == 0, len(cluster["worker"])
    target = between_graph.start_server(cluster, "worker", args.task_index)
    ending = between_graph.between_graph_ending(cluster)  # worker 0 waits for the others, then ends the ps
    if is_chief:
        between_graph.expect_trainers(cluster, ("worker", 0), ending.trainers)
    x, y, tx, ty, classes = _data(args, num_workers)
    with tf.Graph().as_default():
        ops = _build(args, cluster, x.shape[1], classes)
        scaffold = v1.train.Scaffold()
        proto = between_graph.session_config("worker", args.task_index)
        creator = (v1.train.ChiefSessionCreator(scaffold=scaffold, master=target, config=proto,
                                                checkpoint_dir=args.checkpoint_dir) if is_chief
                   else between_graph.FastWorkerSessionCreator(scaffold, target, proto))
        rng = np.random.RandomState(args.task_index)
        local_step, step, started = 0, 0, time.monotonic()
        # the sync chief's queue runner may wait for gradients that will never come: don't give it TF's 120 s
        hooks = [*ops["hooks"], *_preemption_hooks(args, cluster, scaffold)]
        with v1.train.MonitoredSession(session_creator=creator, hooks=hooks,
                                       stop_grace_period_secs=between_graph.STOP_GRACE_SECS) as sess:
            print(f"worker {args.task_index}: session ready after {time.monotonic() - started:.1f} s", flush=True)
            options = v1.RunOptions(output_partition_graphs=True)
            metadata = v1.RunMetadata()
            while True:
                batch = rng.randint(0, len(x), args.batch_size)
                feed = {ops["x"]: x[batch], ops["y"]: y[batch]}
                _, step = sess.run([ops["train"], ops["step"]], feed_dict=feed,
                                   **({"options": options, "run_metadata": metadata} if local_step == 0 else {}))
                if local_step == 0:
                    for line in _placement(metadata, v1.global_variables()):
                        print(line, flush=True)
                local_step += 1
                if local_step % 100 == 0:
                    print(f"{time.time():f}: Worker {args.task_index}: training step {local_step} done "
                          f"(global step: {step})", flush=True)
                if step >= args.train_steps or sess.should_stop():  # should_stop: preempted
                    break
            preempted = step < args.train_steps  # the PreemptionHook stopped the session: it runs no more steps
            # the others' last steps may wait for a token: hand them one each
            if ops["release"] is not None and not preempted:
                try:
                    sess.run(ops["release"])
                except tf.errors.CancelledError:  # the chief has finished and closed the queue: nobody waits
                    logger.info("sync tokens not released: the chief has closed the token queue")
            if preempted:
                loss, accuracy = float("nan"), float("nan")
            else:
                loss, accuracy = sess.run([ops["loss"], ops["acc"]], feed_dict={ops["x"]: tx, ops["y"]: ty})
    if preempted:  # after the session closed, so worker 0 has saved
        _end_if_preempted(args, cluster)
    mode = f"sync aggregate={args.replicas_to_aggregate or num_workers}" if args.sync_replicas else "async"
    print(f"worker {args.task_index}: training done ({mode}): local_steps={local_step} global_step={step}", flush=True)
    print(f"After {args.train_steps} training step(s), validation cross entropy = {loss:g}, "
          f"test accuracy {accuracy:.4f}", flush=True)
    if is_chief:
        from strategies import ServeOptions

        between_graph.end_job(ending, 0, options=ServeOptions.from_env(workers_done_timeout=args.worker_wait_secs))
    else:
        between_graph.report_done(cluster, ("worker", args.task_index), ("worker", 0))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from tf_config import TFConfigError

    try:
        cluster = _cluster(args)
    except (TFConfigError, ValueError) as exc:
        print(f"mnist_replica.py: {exc}", file=sys.stderr)
        return 2
    if args.num_gpus:
        logger.warning("--num_gpus=%d: GPUs are used if TensorFlow sees them", args.num_gpus)
    if args.job_name == "ps":
        from strategies import serve
        from tf_config import TFConfig

        # the ps tasks watch worker 0 (TF1's chief) and exit on its goodbye
        return serve(TFConfig.from_dict({"cluster": cluster, "task": {"type": "ps", "index": args.task_index}}))
    return _train(args, cluster)


if __name__ == "__main__":
    sys.exit(main())
