"""experimental.KMeans on cases of tensorflow/estimator's ``canned/kmeans_test.py`` (public API only).

Ported from upstream's test (Copyright The TensorFlow Authors, Apache License 2.0): its random centers and
points helpers, ``KMeansTest._infer_helper`` (cluster index, score and ``transform`` against numpy, where
``transform`` under SQUARED_EUCLIDEAN_DISTANCE gives the Euclidean distance, as sklearn's) and
``KMeansTestMultiStageInit.test_kmeans_plus_plus_batch_too_small`` and ``test_random``.
Smaller data than upstream's, to stay fast.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from toolkit.estimator.canned.kmeans import KMeans  # served as toolkit.estimator.experimental.KMeans


def make_random_centers(num_centers, num_dims, center_norm=500):
    return np.round(np.random.rand(num_centers, num_dims).astype(np.float32) * center_norm)


def make_random_points(centers, num_points, max_offset=20):
    num_centers, num_dims = centers.shape
    assignments = np.random.choice(num_centers, num_points)
    offsets = np.round(np.random.randn(num_points, num_dims).astype(np.float32) * max_offset)
    return centers[assignments] + offsets, assignments, np.add.reduce(offsets * offsets, 1)


def test_upstream_infer_helper_index_score_and_euclidean_transform(tmp_path):
    np.random.seed(3)
    # well-separated centers (upstream draws 5 in [0, 500]^2; these keep every offset point nearest its own)
    clusters = np.array([[0, 0], [400, 0], [0, 400], [400, 400], [200, 200]], np.float32)
    train_points, _, _ = make_random_points(clusters, 200)
    kmeans = KMeans(5, model_dir=str(tmp_path), initial_clusters=clusters, use_mini_batch=False,
                    distance_metric=KMeans.SQUARED_EUCLIDEAN_DISTANCE, seed=24)
    kmeans.train(lambda: tf.constant(train_points), max_steps=1)
    clusters = kmeans.cluster_centers()
    assert clusters.shape == (5, 2)

    points, true_assignments, true_offsets = make_random_points(clusters, 10)
    input_fn = lambda: tf.data.Dataset.from_tensors(tf.constant(points))  # noqa: E731
    assert list(kmeans.predict_cluster_index(input_fn)) == list(true_assignments)
    score = kmeans.score(input_fn=lambda: (tf.constant(points), None))
    assert score == pytest.approx(np.sum(true_offsets), rel=0.01)
    transform = np.array(list(kmeans.transform(input_fn)))
    true_transform = np.sqrt(np.maximum(
        0, np.sum(np.square(points), axis=1, keepdims=True) - 2 * np.dot(points, np.transpose(clusters))
        + np.transpose(np.sum(np.square(clusters), axis=1, keepdims=True))))
    np.testing.assert_allclose(transform, true_transform, rtol=0.05, atol=10)


def test_upstream_kmeans_plus_plus_batch_too_small(tmp_path):
    points = np.array([[1, 2], [3, 4], [5, 6], [7, 8], [9, 0]], dtype=np.float32)
    kmeans = KMeans(num_clusters=points.shape[0], model_dir=str(tmp_path),
                    initial_clusters=KMeans.KMEANS_PLUS_PLUS_INIT,
                    distance_metric=KMeans.SQUARED_EUCLIDEAN_DISTANCE, use_mini_batch=True,
                    mini_batch_steps_per_iteration=100, seed=24, relative_tolerance=None)
    with pytest.raises(tf.errors.InvalidArgumentError):
        kmeans.train(input_fn=lambda: tf.constant(points[:4]), steps=1)


def test_upstream_multi_stage_random_init_reads_batches_until_k_points(tmp_path):
    # upstream's KMeansTestMultiStageInit.test_random: batches of one point, in order, seed all five centers
    points = np.array([[1, 2], [3, 4], [5, 6], [7, 8], [9, 0]], dtype=np.float32)

    def input_fn():
        return tf.data.Dataset.from_tensor_slices(points).repeat().batch(1)

    kmeans = KMeans(num_clusters=points.shape[0], model_dir=str(tmp_path), initial_clusters=KMeans.RANDOM_INIT,
                    distance_metric=KMeans.SQUARED_EUCLIDEAN_DISTANCE, use_mini_batch=True,
                    mini_batch_steps_per_iteration=100, seed=24, relative_tolerance=None)
    kmeans.train(input_fn=input_fn, steps=1)
    np.testing.assert_array_equal(kmeans.cluster_centers(), points)
