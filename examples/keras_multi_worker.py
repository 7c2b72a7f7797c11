"""Multi-worker training with Keras, written as in TensorFlow's tutorial, run by tfdist.

Plain Keras 3: a ``keras.Sequential`` built and compiled inside the scope of a
``tf.distribute.MultiWorkerMirroredStrategy``, then ``model.fit``. The one
tfdist line is ``toolkit.enable_distributed_keras()`` (Keras 3 alone fails
here, keras-team/keras#20585). Start every worker with its TF_CONFIG, e.g.::

    tfdist launch --workers 2 -- python examples/keras_multi_worker.py --model-dir runs/keras-mwms

Without TF_CONFIG it trains in one process. The data is scikit-learn's digits
(8x8 images, shipped with scikit-learn, no download).
"""
import argparse
import os

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

import toolkit

toolkit.enable_distributed_keras()


def digits(split):
    data = load_digits()
    order = np.random.RandomState(0).permutation(len(data.target))  # a fixed shuffle before the split
    x, y = (data.data[order] / 16.0).astype("float32"), keras.utils.to_categorical(data.target[order], 10)
    return (x[:1500], y[:1500]) if split == "train" else (x[1500:], y[1500:])


def digits_dataset(global_batch_size):
    x, y = digits("train")
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1500, seed=1).repeat().batch(global_batch_size)


def build_and_compile_model():
    model = keras.Sequential([
        keras.Input(shape=(64,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9), loss="categorical_crossentropy",
                  metrics=["accuracy", keras.metrics.AUC(name="auc")])
    return model


def main():
    keras.utils.set_random_seed(1)  # the same initial weights and data order on every worker
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", default="runs/keras-mwms")
    parser.add_argument("--epochs", type=int, default=8)
    args = parser.parse_args()

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    per_worker_batch_size = 32
    global_batch_size = per_worker_batch_size * strategy.num_replicas_in_sync

    with strategy.scope():
        model = build_and_compile_model()

    os.makedirs(args.model_dir, exist_ok=True)
    checkpoint = keras.callbacks.ModelCheckpoint(os.path.join(args.model_dir, "digits.keras"), verbose=1)
    model.fit(digits_dataset(global_batch_size), epochs=args.epochs, steps_per_epoch=1500 // global_batch_size,
              validation_data=digits("test"), callbacks=[checkpoint], verbose=2)
    loss, accuracy, auc = model.evaluate(*digits("test"), verbose=0)
    print(f"test loss {loss:.4f} accuracy {accuracy:.4f} auc {auc:.4f}")


if __name__ == "__main__":
    main()
