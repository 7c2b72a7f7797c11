"""numpy_input_fn / pandas_input_fn: epochs, shuffling, batching and bad input, as tf.estimator's inputs."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from toolkit.estimator.inputs import numpy_input_fn, pandas_input_fn
from toolkit.estimator.inputs._feed import InputsError

tf1 = tf.compat.v1


def _drain(input_fn):
    """Every batch input_fn yields, run in a TF1 graph as Estimator runs it."""
    with tf.Graph().as_default():
        batch = input_fn()
        out = []
        with tf1.Session() as session:
            while True:
                try:
                    out.append(session.run(batch))
                except tf.errors.OutOfRangeError:
                    return out


def test_numpy_input_fn_batches_epochs_and_keeps_order_without_shuffle():
    x = {"age": np.arange(5.0), "height": np.arange(10, 15)}
    batches = _drain(numpy_input_fn(x, np.arange(-5, 0), batch_size=2, num_epochs=2, shuffle=False))
    sizes = [len(labels) for _, labels in batches]
    assert sizes == [2, 2, 2, 2, 2]  # 10 rows over two epochs; no batch is split at the epoch boundary
    ages = np.concatenate([features["age"] for features, _ in batches])
    np.testing.assert_array_equal(ages, np.concatenate([np.arange(5.0)] * 2))
    labels = np.concatenate([labels for _, labels in batches])
    np.testing.assert_array_equal(labels, np.concatenate([np.arange(-5, 0)] * 2))
    last = _drain(numpy_input_fn(x, None, batch_size=3, num_epochs=1, shuffle=False))
    assert [len(f["age"]) for f in last] == [3, 2]  # TF's dequeue_up_to: a short last batch


def test_numpy_input_fn_shuffles_rows_together_and_an_array_x_is_one_feature():
    x = np.arange(100.0).reshape(100, 1)
    batches = _drain(numpy_input_fn(x, np.arange(100) * 2, batch_size=100, num_epochs=1, shuffle=True))
    features, labels = batches[0]
    assert isinstance(features, np.ndarray) and features.shape == (100, 1)
    assert not np.array_equal(features[:, 0], np.arange(100.0))  # shuffled...
    np.testing.assert_array_equal(np.sort(features[:, 0]), np.arange(100.0))  # ...each row once
    np.testing.assert_array_equal(labels, features[:, 0] * 2)  # rows stay paired with their labels


def test_numpy_input_fn_refuses_bad_input_with_tf_types():
    with pytest.raises(InputsError, match="shuffle must be provided and explicitly set as boolean") as info:
        numpy_input_fn({"a": np.arange(3)})
    assert info.value.field == "shuffle"
    with pytest.raises(ValueError, match="Length of tensors in x and y is mismatched"):
        numpy_input_fn({"a": np.arange(3)}, np.arange(4), shuffle=False)()
    with pytest.raises(TypeError, match="x must be a dict or array; got list"):
        numpy_input_fn([1, 2], shuffle=False)()
    with pytest.raises(ValueError, match="duplicate keys are found in both x and y"):
        numpy_input_fn({"a": np.arange(3)}, {"a": np.arange(3)}, shuffle=False)()


def test_numpy_input_fn_repeats_forever_with_full_batches():
    input_fn = numpy_input_fn({"a": np.arange(3)}, batch_size=2, num_epochs=None, shuffle=False)
    with tf.Graph().as_default():
        batch = input_fn()
        with tf1.Session() as session:
            rows = [session.run(batch)["a"].tolist() for _ in range(4)]
    assert rows == [[0, 1], [2, 0], [1, 2], [0, 1]]


def test_pandas_input_fn_feeds_columns_and_targets():
    pd = pytest.importorskip("pandas")
    x = pd.DataFrame({"a": np.arange(4.0), "b": ["p", "q", "r", "s"]}, index=np.arange(10, 14))
    y = pd.Series(np.arange(4) * 10, index=x.index)
    batches = _drain(pandas_input_fn(x, y, batch_size=3, num_epochs=1, shuffle=False))
    assert [len(labels) for _, labels in batches] == [3, 1]
    features, labels = batches[0]
    assert sorted(features) == ["a", "b"]
    assert features["b"].tolist() == [b"p", b"q", b"r"] and labels.tolist() == [0, 10, 20]
    with pytest.raises(ValueError, match="Index for x and y are mismatched"):
        pandas_input_fn(x, pd.Series(np.arange(4)), shuffle=False)
    with pytest.raises(ValueError, match="Cannot use name a for target column"):
        pandas_input_fn(x, y, shuffle=False, target_column="a")


def test_the_tf1_namespace_serves_the_input_functions():
    import toolkit.compat.v1 as tf_v1

    assert tf_v1.estimator.inputs.numpy_input_fn is numpy_input_fn
    assert tf_v1.estimator.inputs.pandas_input_fn is pandas_input_fn
