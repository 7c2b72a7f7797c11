"""``experimental.KMeans``: k-means clustering as an Estimator (``tf.compat.v1.estimator.experimental.KMeans``).

``input_fn`` returns the points (a ``[batch, dim]`` tensor, or a dict of
features read through ``feature_columns``; labels are ignored). Before the
first training step the centers are seeded (random points, read from as many
batches as it takes to get k, as upstream's; or k-means++ over the first batch
with ``initial_clusters=KMeans.KMEANS_PLUS_PLUS_INIT``; or the array / function
given); each training step moves them: with ``use_mini_batch`` each center by
the running mean of the points assigned to it so far, otherwise to the mean of
the batch's points assigned to it (Lloyd's step: the input_fn should then
return the whole data set each step). The loss and ``score`` are the summed
distances of the points to their nearest center.

Example:
    >>> km = KMeans(num_clusters=3, use_mini_batch=False)                  # doctest: +SKIP
    >>> km.train(lambda: tf.constant(points), steps=10)                     # doctest: +SKIP
    >>> km.cluster_centers(), list(km.predict_cluster_index(input_fn))     # doctest: +SKIP
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from toolkit.estimator import Estimator
from toolkit.estimator.canned._errors import CannedError

__all__ = ["KMeans"]

v1 = tf.compat.v1


def _points(features: Any, feature_columns: Sequence[Any] | None) -> tf.Tensor:
    if isinstance(features, Mapping) and feature_columns:
        return tf.cast(v1.feature_column.input_layer(dict(features), list(feature_columns)), tf.float32)
    if isinstance(features, Mapping):  # TF's rule without columns: every feature's values, side by side
        parts = [tf.cast(v1.convert_to_tensor(features[key]), tf.float32) for key in sorted(features)]
        parts = [tf.expand_dims(p, -1) if p.shape.rank == 1 else p for p in parts]
        features = tf.concat([tf.reshape(p, [-1, int(np.prod(p.shape[1:]))]) for p in parts], axis=1)
    points = tf.cast(v1.convert_to_tensor(features), tf.float32)
    if points.shape.rank != 2:
        raise CannedError(f"KMeans input_fn returned points of shape {points.shape.as_list()}; expected [batch, dim]. "
                          "Return a 2-D tensor (or a dict of features with feature_columns).", field="input_fn")
    return points


def _distances(points: tf.Tensor, centers: tf.Tensor, metric: str) -> tf.Tensor:
    """``[batch, k]`` distances of each point to each center."""
    if metric == KMeans.COSINE_DISTANCE:
        return 1.0 - tf.matmul(tf.nn.l2_normalize(points, 1), tf.nn.l2_normalize(centers, 1), transpose_b=True)
    return (tf.reduce_sum(tf.square(points), 1, keepdims=True) - 2.0 * tf.matmul(points, centers, transpose_b=True)
            + tf.expand_dims(tf.reduce_sum(tf.square(centers), 1), 0))


class _SeedCentersHook(tf.compat.v1.train.SessionRunHook):
    """Seeds the centers before the first training step, reading as many batches as it takes (at most k), as
    upstream's cluster-initialization hook; a step that still finds them unseeded seeds them instead."""

    def __init__(self, initialized: Any, seed_op: tf.Tensor, k: int) -> None:
        self._initialized, self._seed_op, self._k = initialized, seed_op, k

    def after_create_session(self, session: Any, coord: Any) -> None:
        for _ in range(self._k):
            if session.run(self._initialized):
                return
            session.run(self._seed_op)


class _RelativeToleranceHook(tf.compat.v1.train.SessionRunHook):
    """Stops training once the loss changes by less than ``tolerance`` (relative) between steps."""

    def __init__(self, loss: tf.Tensor, tolerance: float) -> None:
        self._loss, self._tolerance = loss, tolerance
        self._previous: float | None = None

    def before_run(self, run_context: Any) -> Any:
        return v1.train.SessionRunArgs(self._loss)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        loss = float(run_values.results)
        if self._previous is not None and abs(loss - self._previous) <= self._tolerance * max(abs(loss), 1e-12):
            run_context.request_stop()
        self._previous = loss


class KMeans(Estimator):
    """k-means clustering (TF's constructor arguments and methods).

    Args:
        num_clusters: k.
        model_dir, config: as for any Estimator.
        initial_clusters: ``KMeans.RANDOM_INIT`` (default), ``KMeans.KMEANS_PLUS_PLUS_INIT``, a
            ``[k, dim]`` array, or a function ``(points, k) -> centers``.
        distance_metric: ``KMeans.SQUARED_EUCLIDEAN_DISTANCE`` (default) or ``KMeans.COSINE_DISTANCE``.
        seed: seed of the random initialisation.
        use_mini_batch: running-mean updates (default) instead of Lloyd's step on each batch.
        mini_batch_steps_per_iteration, kmeans_plus_plus_num_retries: TF's arguments (the second
            is passed to k-means++; the first is accepted for compatibility, updates are per step).
        relative_tolerance: stop training once the loss changes by less than this (relative).
        feature_columns: columns reading dict features (default: every feature as a numeric column).
    """

    RANDOM_INIT = "random"
    KMEANS_PLUS_PLUS_INIT = "kmeans_plus_plus"
    SQUARED_EUCLIDEAN_DISTANCE = "squared_euclidean"
    COSINE_DISTANCE = "cosine"
    ALL_DISTANCES = "all_distances"
    CLUSTER_INDEX = "cluster_index"
    SCORE = "score"
    CLUSTER_CENTERS_VAR_NAME = "clusters"

    def __init__(self, num_clusters: int, model_dir: str | os.PathLike | None = None,
                 initial_clusters: Any = RANDOM_INIT, distance_metric: str = SQUARED_EUCLIDEAN_DISTANCE,
                 seed: int | None = None, use_mini_batch: bool = True, mini_batch_steps_per_iteration: int = 1,
                 kmeans_plus_plus_num_retries: int = 2, relative_tolerance: float | None = None, config: Any = None,
                 feature_columns: Sequence[Any] | None = None) -> None:
        if isinstance(num_clusters, bool) or not isinstance(num_clusters, int) or num_clusters < 1:
            raise CannedError(f"KMeans `num_clusters` is {num_clusters!r}; expected a positive int.",
                              field="num_clusters")
        if distance_metric not in (self.SQUARED_EUCLIDEAN_DISTANCE, self.COSINE_DISTANCE):
            raise CannedError(f"KMeans `distance_metric` is {distance_metric!r}; expected "
                              f"KMeans.SQUARED_EUCLIDEAN_DISTANCE or KMeans.COSINE_DISTANCE.", field="distance_metric")
        if isinstance(initial_clusters, str) and initial_clusters not in (self.RANDOM_INIT,
                                                                          self.KMEANS_PLUS_PLUS_INIT):
            raise CannedError(f"KMeans `initial_clusters` is {initial_clusters!r}; expected KMeans.RANDOM_INIT, "
                              "KMeans.KMEANS_PLUS_PLUS_INIT, an array of centers or a function.",
                              field="initial_clusters")
        del mini_batch_steps_per_iteration
        self._distance_metric = distance_metric
        settings = dict(k=num_clusters, init=initial_clusters, metric=distance_metric, seed=seed,
                        mini_batch=use_mini_batch, retries=kmeans_plus_plus_num_retries,
                        tolerance=relative_tolerance, columns=feature_columns)

        def _model_fn(features: Any, labels: Any, mode: str, config: Any) -> Any:
            del labels, config
            return _kmeans_model_fn(features, mode, **settings)

        super().__init__(_model_fn, model_dir=model_dir, config=config)

    def cluster_centers(self) -> np.ndarray:
        """The ``[k, dim]`` centers of the latest checkpoint."""
        return self.get_variable_value(self.CLUSTER_CENTERS_VAR_NAME)

    def predict_cluster_index(self, input_fn: Callable[..., Any]) -> Iterator[int]:
        for prediction in self.predict(input_fn, predict_keys=[self.CLUSTER_INDEX]):
            yield int(prediction[self.CLUSTER_INDEX])

    def transform(self, input_fn: Callable[..., Any]) -> Iterator[np.ndarray]:
        """The distance of each point to every center: Euclidean (not squared) under
        SQUARED_EUCLIDEAN_DISTANCE, as upstream's transform and sklearn's; the ``all_distances``
        prediction keeps the squared values."""
        for prediction in self.predict(input_fn, predict_keys=[self.ALL_DISTANCES]):
            distances = prediction[self.ALL_DISTANCES]
            yield np.sqrt(distances) if self._distance_metric == self.SQUARED_EUCLIDEAN_DISTANCE else distances

    def score(self, input_fn: Callable[..., Any]) -> float:
        """The summed distance of the points (one step of input_fn) to their nearest center."""
        return self.evaluate(input_fn=input_fn, steps=1)[self.SCORE]


def _initial_centers(points: tf.Tensor, *, k: int, init: Any, seed: int | None, retries: int) -> tf.Tensor:
    if callable(init):
        return tf.cast(init(points, k), tf.float32)
    if not isinstance(init, str):
        return tf.constant(np.asarray(init, np.float32))
    check = v1.debugging.assert_greater_equal(tf.shape(points)[0], k, message=(
        f"KMeans: the first training batch has fewer points than num_clusters={k}; seeding needs at least k points. "
        "Use a larger batch."))
    with tf.control_dependencies([check]):
        if init == KMeans.KMEANS_PLUS_PLUS_INIT:
            return tf.raw_ops.KmeansPlusPlusInitialization(points=points, num_to_sample=tf.constant(k, tf.int64),
                                                           seed=tf.constant(seed or 0, tf.int64),
                                                           num_retries_per_sample=tf.constant(retries, tf.int64))
        return tf.random.shuffle(points, seed=seed)[:k]


def _kmeans_model_fn(features: Any, mode: str, *, k: int, init: Any, metric: str, seed: int | None,
                     mini_batch: bool, retries: int, tolerance: float | None, columns: Any) -> Any:
    from toolkit.estimator import EstimatorSpec
    from toolkit.estimator.export import PredictOutput
    points = _points(features, columns)
    dim = points.shape[-1]
    if dim is None:
        raise CannedError("KMeans input_fn returned points whose dimension is unknown when the graph is built; "
                          "give the tensor a static last dimension.", field="input_fn")
    centers = v1.get_variable(KMeans.CLUSTER_CENTERS_VAR_NAME, [k, dim], tf.float32, v1.zeros_initializer(),
                              trainable=False)
    initialized = v1.get_variable("initialized", [], tf.bool, v1.zeros_initializer(), trainable=False)
    counts = v1.get_variable("clusters_cluster_counts", [k], tf.float32, v1.zeros_initializer(), trainable=False)
    distances = _distances(points, centers, metric)
    index = tf.argmin(distances, axis=1)
    loss = tf.reduce_sum(tf.reduce_min(distances, axis=1))
    predictions = {KMeans.ALL_DISTANCES: distances, KMeans.CLUSTER_INDEX: index}
    if mode == "infer":
        return EstimatorSpec(mode=mode, predictions=predictions,
                             export_outputs={"serving_default": PredictOutput(predictions)})
    if mode == "eval":
        return EstimatorSpec(mode=mode, loss=loss, predictions=predictions,
                             eval_metric_ops={KMeans.SCORE: v1.metrics.mean(loss)})
    global_step = v1.train.get_or_create_global_step()

    seeded = v1.get_variable("clusters_num_seeded", [], tf.int32, v1.zeros_initializer(), trainable=False)

    def seed_centers() -> tf.Tensor:
        # as upstream: batches smaller than k add their points until k are seeded
        if isinstance(init, str) and init == KMeans.RANDOM_INIT:
            count = seeded.read_value()
            take = tf.minimum(k - count, tf.shape(points)[0])
            chosen = tf.random.shuffle(points, seed=seed)[:take]
            rows = tf.expand_dims(tf.range(count, count + take), 1)
            with tf.control_dependencies([centers.assign(tf.tensor_scatter_nd_update(centers, rows, chosen)),
                                          initialized.assign(count + take >= k), seeded.assign(count + take)]):
                return tf.constant(0)
        first = _initial_centers(points, k=k, init=init, seed=seed, retries=retries)
        with tf.control_dependencies([centers.assign(first), initialized.assign(True)]):
            return tf.constant(0)

    def move_centers() -> tf.Tensor:
        one_hot = tf.one_hot(index, k, dtype=tf.float32)
        n = tf.reduce_sum(one_hot, 0)
        sums = tf.matmul(one_hot, points, transpose_a=True)
        if mini_batch:
            total = counts + n
            new = centers + tf.math.divide_no_nan(sums - tf.expand_dims(n, 1) * centers, tf.expand_dims(total, 1))
            updates = [counts.assign(total)]
        else:
            new = tf.where(tf.expand_dims(n > 0, 1), tf.math.divide_no_nan(sums, tf.expand_dims(n, 1)), centers)
            updates = []
        with tf.control_dependencies([centers.assign(new), *updates]):
            return tf.constant(0)

    seed_op = seed_centers()   # run by the hook before the first step; the cond's own copy is a fallback
    step = tf.cond(initialized, move_centers, seed_centers)
    with tf.control_dependencies([step]):
        train_op = v1.assign_add(global_step, 1).op
    hooks: list[Any] = [_SeedCentersHook(initialized, seed_op, k)]
    if tolerance is not None:
        hooks.append(_RelativeToleranceHook(loss, tolerance))
    return EstimatorSpec(mode=mode, loss=loss, train_op=train_op, training_hooks=hooks)
