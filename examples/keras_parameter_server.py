"""Parameter server training with Keras, written as in TensorFlow's tutorial, run by tfdist.

Plain Keras 3 ``compile``/``fit`` under a ``ParameterServerStrategy``; the
input is a dataset function of an ``input_context`` (the tutorial's
``DatasetCreator``, which Keras 3 no longer has, becomes a plain function).
tfdist adds two lines: ``run_role()`` (ps and worker tasks serve there and exit
when the chief is done) and ``toolkit.enable_distributed_keras()``::

    tfdist launch --workers 2 --ps 1 -- python examples/keras_parameter_server.py --model-dir runs/keras-ps

The launcher adds the chief (the coordinator). The data is scikit-learn's digits.
"""
import argparse
import os

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

import toolkit
from strategies import make_strategy, run_role

run_role()  # parameter servers and workers serve here until the chief says goodbye
toolkit.enable_distributed_keras()


def digits(split):
    data = load_digits()
    order = np.random.RandomState(0).permutation(len(data.target))  # a fixed shuffle before the split
    x, y = (data.data[order] / 16.0).astype("float32"), keras.utils.to_categorical(data.target[order], 10)
    return (x[:1500], y[:1500]) if split == "train" else (x[1500:], y[1500:])


def dataset_fn(input_context):
    global_batch_size = 64
    batch_size = input_context.get_per_replica_batch_size(global_batch_size)
    x, y = digits("train")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shard(input_context.num_input_pipelines,
                                                                input_context.input_pipeline_id)
    return dataset.shuffle(1500).batch(batch_size).repeat().prefetch(2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", default="runs/keras-ps")
    parser.add_argument("--epochs", type=int, default=8)
    args = parser.parse_args()

    strategy = make_strategy("parameter_server")
    with strategy.scope():
        model = keras.Sequential([
            keras.Input(shape=(64,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ])
        model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01), loss="categorical_crossentropy",
                      metrics=["accuracy", keras.metrics.AUC(name="auc")], steps_per_execution=8)

    os.makedirs(args.model_dir, exist_ok=True)
    checkpoint = keras.callbacks.ModelCheckpoint(os.path.join(args.model_dir, "digits.keras"), verbose=1)
    model.fit(dataset_fn, epochs=args.epochs, steps_per_epoch=1500 // 64, validation_data=digits("test"),
              callbacks=[checkpoint], verbose=2)
    loss, accuracy, auc = model.evaluate(*digits("test"), verbose=0)
    print(f"test loss {loss:.4f} accuracy {accuracy:.4f} auc {auc:.4f}")


if __name__ == "__main__":
    main()
