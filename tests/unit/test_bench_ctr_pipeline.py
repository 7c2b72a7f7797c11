"""bench_ctr's input pipeline shuffles row numbers, and its batches hold exactly the peer pipeline's examples.

The TF1 peer shuffles its examples (``from_tensor_slices(...).shuffle(50_000, seed=index).repeat().batch(512)``);
the tfdist paths shuffle row numbers and gather each batch's rows, which is cheaper. Both must give the same
examples in the same order, over epochs (the shuffle reshuffles each one) and for each worker's seed.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import _ctr_paths  # noqa: E402

from toolkit.data import criteo_like  # noqa: E402

ROWS = 3 * _ctr_paths.BATCH + 100  # batches straddle the epochs


@pytest.mark.parametrize("index", [0, 1])
def test_batches_equal_the_shuffled_examples(tmp_path, index):
    data = criteo_like(ROWS, vocab=50, seed=1 + index)
    for part, array in (("dense", data.dense), ("categorical", data.categorical), ("labels", data.labels)):
        array.tofile(tmp_path / f"{part}-{index}.bin")
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=index, num_replicas_in_sync=1)
    ours = iter(_ctr_paths._dataset_fn(str(tmp_path))(context))
    peer = iter(_ctr_paths.examples_dataset(str(tmp_path), index).shuffle(50_000, seed=tf.cast(index, tf.int64))
                .repeat().batch(_ctr_paths.BATCH, drop_remainder=True))
    seen = set()
    for _ in range(8):  # over two epochs' reshuffles
        (got, got_labels), (want, want_labels) = next(ours), next(peer)
        for key in ("dense", "categorical"):
            np.testing.assert_array_equal(got[key].numpy(), want[key].numpy(), err_msg=key)
        np.testing.assert_array_equal(got_labels.numpy(), want_labels.numpy())
        seen.update(map(tuple, got["categorical"].numpy().tolist()))
    assert len(seen) > _ctr_paths.BATCH  # real examples, not one repeated row


def test_the_estimator_paths_batches_equal_the_shuffled_examples_by_feature(tmp_path):
    import _ctr_estimator

    index = 1
    data = criteo_like(ROWS, vocab=50, seed=1 + index)
    for part, array in (("dense", data.dense), ("categorical", data.categorical), ("labels", data.labels)):
        array.tofile(tmp_path / f"{part}-{index}.bin")
    ours = iter(_ctr_estimator._batches(str(tmp_path), index, canned=True))
    peer = iter(_ctr_paths.examples_dataset(str(tmp_path), index).shuffle(50_000, seed=index)
                .repeat().batch(_ctr_paths.BATCH, drop_remainder=True))
    for _ in range(5):  # over an epoch's reshuffle
        (got, got_labels), (want, want_labels) = next(ours), next(peer)
        np.testing.assert_array_equal(got["dense"].numpy(), want["dense"].numpy())
        for i in (0, 25):  # the named features TF1 input_fns gave feature columns
            np.testing.assert_array_equal(got[f"C{i + 1}"].numpy(), want["categorical"].numpy()[:, i:i + 1])
        np.testing.assert_array_equal(got_labels.numpy(), want_labels.numpy())
