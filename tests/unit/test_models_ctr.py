"""``models.ctr`` (the wide & deep click-through model) and ``toolkit.data.criteo_like`` (its data)."""
from __future__ import annotations

import keras
import numpy as np
import pytest

import models
from toolkit.data import DataError, criteo_like


def _features(n: int, vocab: int) -> dict[str, np.ndarray]:
    data = criteo_like(n, vocab=vocab, seed=3)
    return data.features


def test_ctr_has_the_peer_shapes_one_table_per_part_and_stable_names():
    model = models.ctr(vocab=50, seed=0)
    assert not model.compiled
    assert model.get_layer("deep_embedding").embeddings.shape == (26 * 50, 16)
    assert model.get_layer("wide_embedding").embeddings.shape == (26 * 50, 1)
    assert [model.get_layer(f"hidden_{i}").units for i in (1, 2)] == [256, 128]
    assert model.get_layer("hidden_1").kernel.shape == (26 * 16 + 13, 256)  # embeddings concatenated with dense
    assert tuple(model(_features(7, 50)).shape) == (7, 1)


def test_each_feature_reads_its_own_rows_of_the_shared_table():
    model = models.ctr(vocab=10, embedding_dim=2, hidden_units=(4,), seed=0)
    table = np.zeros((260, 1), np.float32)
    table[:, 0] = np.arange(260)  # row r holds r: the wide logit is the sum of the rows looked up
    model.get_layer("wide_embedding").embeddings.assign(table)
    categorical = np.tile(np.arange(26) % 10, (1, 1)).astype(np.int64)
    rows = np.arange(26) % 10 + np.arange(26) * 10  # id + feature * vocab
    wide = keras.Model(model.inputs, model.get_layer("wide_logit").output)
    got = wide({"dense": np.zeros((1, 13), np.float32), "categorical": categorical})
    np.testing.assert_allclose(np.asarray(got), [[rows.sum()]])


def test_ctr_learns_the_synthetic_clicks_below_the_base_rate():
    train, heldout = criteo_like(20_000, vocab=200, seed=1), criteo_like(4_000, vocab=200, seed=999)
    model = models.ctr(vocab=200, hidden_units=(32,), seed=0)
    model.compile(optimizer=keras.optimizers.Adagrad(0.05, initial_accumulator_value=0.1),
                  loss=keras.losses.BinaryCrossentropy(from_logits=True))
    model.fit(train.features, train.labels, batch_size=256, epochs=2, verbose=0)
    loss = model.evaluate(heldout.features, heldout.labels, batch_size=1024, verbose=0)
    assert loss < heldout.base_rate_logloss() - 0.03, (loss, heldout.base_rate_logloss())


def test_ctr_round_trips_through_a_keras_file(tmp_path):
    model = models.ctr(vocab=20, hidden_units=(8,), seed=1)
    model.save(tmp_path / "ctr.keras")
    again = keras.saving.load_model(tmp_path / "ctr.keras")
    features = _features(5, 20)
    np.testing.assert_allclose(np.asarray(again(features)), np.asarray(model(features)), rtol=1e-6)


def test_same_seed_same_weights():
    a, b = models.ctr(vocab=20, hidden_units=(8,), seed=4), models.ctr(vocab=20, hidden_units=(8,), seed=4)
    for wa, wb in zip(a.get_weights(), b.get_weights(), strict=True):
        np.testing.assert_array_equal(wa, wb)


@pytest.mark.parametrize(("kwargs", "text"), [
    ({"vocab": 0}, "ctr `vocab` is 0; expected a positive integer. Pass e.g. vocab=100000."),
    ({"embedding_dim": -1}, "ctr `embedding_dim` is -1"),
    ({"hidden_units": (64, 0)}, "ctr `hidden_units[1]` is 0; expected a positive integer. Pass e.g. hidden_units"),
    ({"num_shards": 2}, "ctr: `num_shards` is an option of the `embedding` layer"),
])
def test_ctr_refuses_bad_arguments_naming_them(kwargs, text):
    with pytest.raises(ValueError) as caught:
        models.ctr(**kwargs)
    assert text in str(caught.value)


def test_ctr_passes_options_to_the_embedding_layer_it_is_given():
    calls = []

    def embedding(rows, dim, **kwargs):
        calls.append((rows, dim, kwargs.pop("name"), kwargs.pop("marker")))
        return keras.layers.Embedding(rows, dim, **kwargs)

    models.ctr(vocab=5, hidden_units=(4,), embedding=embedding, marker="x")
    assert calls == [(130, 16, "deep_embedding", "x"), (130, 1, "wide_embedding", "x")]


def test_criteo_like_is_deterministic_shaped_zipf_and_learnable():
    a, b, other = criteo_like(3000, vocab=500, seed=2), criteo_like(3000, vocab=500, seed=2), criteo_like(
        3000, vocab=500, seed=5)
    for x, y in ((a.dense, b.dense), (a.categorical, b.categorical), (a.labels, b.labels)):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.categorical, other.categorical)
    assert (a.dense.dtype, a.categorical.dtype, a.labels.dtype) == (np.float32, np.int64, np.float32)
    assert a.dense.shape == (3000, 13) and a.categorical.shape == (3000, 26) and a.labels.shape == (3000, 1)
    assert a.categorical.min() >= 0 and a.categorical.max() < 500
    counts = np.sort(np.bincount(a.categorical[:, 0], minlength=500))[::-1]
    assert counts[0] > 0.1 * 3000 and (counts <= 2).sum() > 200  # a hot id and a long, rarely seen tail
    assert set(np.unique(a.labels)) == {0.0, 1.0} and 0.05 < a.labels.mean() < 0.5
    # the hidden model makes the labels depend on the ids: the hottest id's click rate differs from the rest
    hot = a.categorical[:, 0] == np.argmax(np.bincount(a.categorical[:, 0]))
    assert abs(a.labels[hot].mean() - a.labels[~hot].mean()) > 0.02


def test_criteo_like_dataset_fn_batches_the_model_inputs():
    data = criteo_like(600, vocab=50, seed=0)
    features, labels = next(iter(data.dataset_fn(128)(None)))
    assert set(features) == {"dense", "categorical"} and features["categorical"].shape == (128, 26)
    assert labels.shape == (128, 1)


@pytest.mark.parametrize(("kwargs", "field"), [({"vocab": 0}, "vocab"), ({"zipf": 1.0}, "zipf"),
                                               ({"num_examples": -3}, "num_examples")])
def test_criteo_like_refuses_bad_arguments(kwargs, field):
    arguments = {"num_examples": 10, **kwargs}
    with pytest.raises(DataError) as caught:
        criteo_like(**arguments)
    assert caught.value.field == field and field in str(caught.value)
