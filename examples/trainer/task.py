"""Digits classifier trainer: the same module runs as every task of a job.

`toolkit.fit` reads TF_CONFIG and does what the task's role needs: the chief
coordinates and writes checkpoints, summaries and exports into ``--job-dir``;
ps and worker tasks serve and exit when the chief is done. Locally, with no
TF_CONFIG, it simply trains. The flags are the ones a tuning job sets.

Example:
    tfdist jobs submit training digits-1 --config examples/jobs/digits_ps.yaml \\
        --package-path examples/trainer --stream-logs
"""
import argparse
import logging


def _parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--job-dir", required=True, help="checkpoints, summaries and exports go here")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--hidden_units", type=int, default=64)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = _parse_args(argv)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # under parameter servers each worker runs its own step loop: it says how many steps it ran
    logging.getLogger("toolkit.training.between_graph_worker").setLevel(logging.INFO)
    import keras

    from models import digits_mlp
    from toolkit import data, fit

    def model_fn():
        model = digits_mlp(hidden_units=(args.hidden_units, args.hidden_units), seed=0)
        model.compile(optimizer=keras.optimizers.Adam(args.learning_rate),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"], steps_per_execution=5)
        return model

    train, test = data.load("digits", split="train"), data.load("digits", split="test")
    history = fit(
        model_fn,
        train.dataset_fn(args.batch_size, seed=0),
        epochs=args.epochs,
        steps_per_epoch=train.steps_per_epoch(args.batch_size),
        validation_fn=test.dataset_fn(256, shuffle=False, repeat=False, drop_remainder=False),
        model_dir=args.job_dir,
    )
    if history.history.get("val_accuracy"):
        print(f"final val_accuracy: {history.history['val_accuracy'][-1]:.4f}", flush=True)


if __name__ == "__main__":
    main()
