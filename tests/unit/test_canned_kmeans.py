"""experimental.KMeans: finds three well-separated blobs, scores and assigns points, exports."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from toolkit.estimator.canned import CannedError
from toolkit.estimator.canned.kmeans import KMeans  # served as toolkit.estimator.experimental.KMeans
from toolkit.estimator.export import build_raw_serving_input_receiver_fn

CENTERS = np.array([[0.0, 0.0], [5.0, 5.0], [0.0, 5.0]], np.float32)
POINTS = np.concatenate([np.random.RandomState(0).normal(c, 0.1, (20, 2)) for c in CENTERS]).astype(np.float32)


@pytest.mark.parametrize("mini_batch, init", [(False, CENTERS[::-1] + 1.0), (True, KMeans.KMEANS_PLUS_PLUS_INIT)],
                         ids=["lloyd-from-array", "mini-batch-kmeans++"])
def test_kmeans_finds_the_blobs_scores_and_assigns(tmp_path, mini_batch, init):
    km = KMeans(3, model_dir=str(tmp_path), use_mini_batch=mini_batch, initial_clusters=init, seed=1)
    km.train(lambda: tf.constant(POINTS), steps=6)
    centers = km.cluster_centers()
    order = [int(np.argmin(((centers - c) ** 2).sum(1))) for c in CENTERS]
    assert sorted(order) == [0, 1, 2]
    # each center is its blob's mean
    for blob, center in enumerate(order):
        np.testing.assert_allclose(centers[center], POINTS[20 * blob:20 * blob + 20].mean(0), atol=1e-4)
    # score: the summed squared distance of each point to its nearest center
    nearest = ((POINTS[:, None, :] - centers[None]) ** 2).sum(-1).min(1).sum()
    assert km.score(lambda: tf.constant(POINTS)) == pytest.approx(nearest, rel=1e-4)
    one_per_blob = lambda: tf.data.Dataset.from_tensor_slices(POINTS[::20]).batch(3)  # noqa: E731
    assert list(km.predict_cluster_index(one_per_blob)) == order
    if not mini_batch:
        path = km.export_saved_model(str(tmp_path / "export"),
                                     build_raw_serving_input_receiver_fn(tf.constant(POINTS[:1])))
        served = tf.saved_model.load(path).signatures["serving_default"](input=tf.constant(POINTS[20:21]))
        assert int(served[KMeans.CLUSTER_INDEX].numpy()[0]) == order[1]


def test_kmeans_refuses_bad_arguments():
    with pytest.raises(CannedError, match="KMeans `distance_metric` is 'manhattan'"):
        KMeans(2, distance_metric="manhattan")
    with pytest.raises(CannedError, match="KMeans `num_clusters` is 0; expected a positive int"):
        KMeans(0)


def test_kmeans_stops_once_the_loss_settles(tmp_path):
    km = KMeans(3, model_dir=str(tmp_path), use_mini_batch=False, initial_clusters=CENTERS, relative_tolerance=1e-4)
    km.train(lambda: tf.constant(POINTS), steps=50)
    # seeded at the blobs' centres, Lloyd's steps settle at once: training ends long before 50 steps
    assert km.get_variable_value("global_step") < 6
