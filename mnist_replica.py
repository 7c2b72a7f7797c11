"""TensorFlow's old official mnist_replica.py, ported to TF 2: same flags, same experiments.

Between-graph async (1 ps, 2 workers):

  python mnist_replica.py --num_gpus=0 --job_name=ps --task_index=0
  python mnist_replica.py --num_gpus=0 --job_name=worker --task_index=0 --train_steps=2000
  python mnist_replica.py --num_gpus=0 --job_name=worker --task_index=1 --train_steps=2000

Add --sync_replicas to the workers for synchronous updates, and
--ps_hosts=localhost:2222,localhost:2225 to every task for two ps (the
coordinator prints where each variable lives).
"""
from __future__ import annotations

import argparse
import logging
import sys

_EPILOG = """\
how the TF1 process model maps onto TF 2: worker 0 (TF1's chief) coordinates a
ParameterServerStrategy; a child process serves its worker slot. ps tasks and the other
workers serve until worker 0 says goodbye, then exit 0. Training stops when the GLOBAL
step reaches --train_steps: async, every worker step is an update; --sync_replicas,
--replicas_to_aggregate worker steps (default: one per worker) make one update and
contributions computed on an outdated step are dropped and counted (stale).
Workers not listening after --worker_wait_secs are left out, so worker 0 alone still
trains (with --sync_replicas and 2 workers: one global step per two of its steps).

data: MNIST from a prepared TFDS directory (--data_dir), else the embedded 8x8 digits.
exit codes: 0 success, 1 failure, 2 bad flags, 3 (servers) the coordinator vanished.
"""


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=_EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--job_name", required=True, choices=("ps", "worker"), help="job name: worker or ps")
    parser.add_argument("--task_index", type=int, required=True, help="worker task index; 0 is the chief")
    parser.add_argument("--ps_hosts", default="localhost:2222", help="comma-separated host:port list")
    parser.add_argument("--worker_hosts", default="localhost:2223,localhost:2224", help="comma-separated host:port list")
    parser.add_argument("--num_gpus", type=int, default=0, help="GPUs per worker (0: CPU)")
    parser.add_argument("--train_steps", type=int, default=200, help="global training steps to perform")
    parser.add_argument("--batch_size", type=int, default=100, help="training batch size")
    parser.add_argument("--learning_rate", type=float, default=0.01)
    parser.add_argument("--hidden_units", type=int, default=100, help="hidden layer width")
    parser.add_argument("--sync_replicas", action="store_true", help="aggregate gradients before applying them")
    parser.add_argument("--replicas_to_aggregate", type=int, default=None,
                        help="contributions per update (default: number of workers)")
    parser.add_argument("--data_dir", default=None, help="TFDS directory holding a prepared 'mnist'")
    parser.add_argument("--worker_wait_secs", type=float, default=60.0,
                        help="worker 0: how long to wait for the other workers before training without them")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    return parser.parse_args(argv)


def _data(data_dir: str | None, batch_size: int):
    from toolkit import data

    if data_dir:
        train, test = (data.load("tfds:mnist", split=s, data_dir=data_dir) for s in ("train", "test"))
        images, labels = _materialise(test)
    else:
        logging.getLogger("mnist_replica").warning("no --data_dir: training on the embedded 8x8 digits")
        train, test = data.load("digits"), data.load("digits", split="test")
        images, labels = test.features, test.labels
    return train.dataset_fn(batch_size, seed=0), (images, labels), int(train.num_classes), train.input_shape


def _materialise(split):
    import numpy as np
    import tensorflow as tf

    batches = list(split.dataset_fn(1000, shuffle=False, repeat=False, drop_remainder=False)(tf.distribute.InputContext()))
    return np.concatenate([b[0].numpy() for b in batches]), np.concatenate([b[1].numpy() for b in batches])


def _coordinate(args: argparse.Namespace, job) -> int:
    import math

    from toolkit.estimator import replica
    from toolkit.estimator.replica_train import ReplicaNet, train_replicas

    child = replica.start_slot_server(job)
    code = 1
    try:
        workers = replica.live_workers(job, wait_secs=args.worker_wait_secs)
        cfg = replica.coordinator_config(job, workers)
        strategy = replica.make_coordinator_strategy(cfg)
        dataset_fn, eval_data, classes, shape = _data(args.data_dir, args.batch_size)
        aggregate = (args.replicas_to_aggregate or len(job.worker_hosts)) if args.sync_replicas else None
        result = train_replicas(
            strategy, net_fn=lambda: ReplicaNet(math.prod(shape), args.hidden_units, classes),
            dataset_fn=dataset_fn, eval_data=eval_data, train_steps=args.train_steps,
            learning_rate=args.learning_rate, workers=len(workers), aggregate=aggregate)
        for path, device in result.placement:
            print(f"placement: {path}: {device}", flush=True)
        steps = ", ".join(f"worker-{i}={n}" for i, n in enumerate(result.local_steps))
        mode = f"sync aggregate={aggregate}" if aggregate else "async"
        print(f"training done ({mode}): global_step={result.global_step} local_steps: {steps} "
              f"total_local_steps={sum(result.local_steps)} stale={result.stale} pending={result.pending}", flush=True)
        print(f"final loss {result.final_loss:.4f}, test accuracy {result.accuracy:.4f}", flush=True)
        code = 0
    finally:
        child_code = replica.goodbye(job, child, code)
    return code or child_code


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from tf_config import TFConfigError

    from toolkit.estimator.replica import ReplicaJob

    try:
        job = ReplicaJob.from_flags(args.job_name, args.task_index, args.ps_hosts, args.worker_hosts)
    except (TFConfigError, ValueError) as exc:
        print(f"mnist_replica.py: {exc}", file=sys.stderr)
        return 2
    if args.num_gpus:
        logging.getLogger("mnist_replica").warning("--num_gpus=%d: GPUs are used if TensorFlow sees them", args.num_gpus)
    if not job.is_coordinator:
        from strategies import serve

        return serve(job.server_config())
    return _coordinate(args, job)


if __name__ == "__main__":
    sys.exit(main())
