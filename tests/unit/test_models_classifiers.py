"""The reference classifiers: plain uncompiled Keras 3 models with stable layer names."""
from __future__ import annotations

import keras
import numpy as np
import pytest

import models


@pytest.mark.parametrize(
    ("builder", "shape", "layers"),
    [
        (models.digits_mlp, (8, 8, 1), ["image", "flatten", "dense_1", "dense_2", "logits"]),
        (models.digits_cnn, (8, 8, 1), ["image", "conv_1", "conv_2", "flatten", "dense_1", "logits"]),
        (models.mnist_cnn, (28, 28, 1),
         ["image", "conv_1", "pool_1", "conv_2", "pool_2", "flatten", "dense_1", "logits"]),
    ],
)
def test_builders_return_uncompiled_models_with_stable_names(builder, shape, layers):
    model = builder(seed=1)
    assert isinstance(model, keras.Model)
    assert [layer.name for layer in model.layers] == layers
    assert not model.compiled  # no training code: uncompiled
    out = model(np.zeros((3, *shape), np.float32))
    assert tuple(out.shape) == (3, 10)


def test_same_seed_gives_identical_weights_and_other_seed_does_not():
    a, b, c = models.digits_mlp(seed=7), models.digits_mlp(seed=7), models.digits_mlp(seed=8)
    for wa, wb in zip(a.get_weights(), b.get_weights(), strict=False):
        np.testing.assert_array_equal(wa, wb)
    assert not np.array_equal(a.get_weights()[0], c.get_weights()[0])


def test_shapes_and_sizes_are_parameters():
    model = models.digits_mlp((4, 4, 1), 3, hidden_units=(5,), dropout=0.5)
    assert model.output_shape == (None, 3)
    assert model.get_layer("dense_1").units == 5
    assert model.get_layer("dropout_1").rate == 0.5
    assert models.mnist_cnn((32, 32, 3), 100).output_shape == (None, 100)


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: models.digits_mlp((8, 0, 1)), "must be a tuple of positive ints. Received: input_shape=(8, 0, 1)"),
        (lambda: models.digits_cnn(num_classes=0),
         "digits_cnn `num_classes` is 0; expected a positive integer. Pass e.g. num_classes=10."),
        (lambda: models.mnist_cnn(dense_units=-1), "mnist_cnn `dense_units` is -1; expected a positive integer."),
        (lambda: models.digits_mlp(hidden_units=(8, 0)),
         "digits_mlp `hidden_units[1]` is 0; expected a positive integer. Pass e.g. hidden_units=(128, 64)."),
        (lambda: models.recommender(embedding_dim=True), "recommender `embedding_dim` is True; expected a positive"),
        (lambda: models.synthetic_interactions(2.5, num_users=10, num_items=10),
         "synthetic_interactions `num_examples` is 2.5; expected a positive integer."),
    ],
)
def test_bad_arguments_name_the_argument_and_value(call, needle):
    with pytest.raises(ValueError) as info:
        call()
    assert needle in str(info.value)
