"""tf.estimator's helpers: parse specs with the label, VocabInfo, the logit_fn builders and call_logit_fn."""
from __future__ import annotations

import pytest
import tensorflow as tf

from toolkit.estimator import VocabInfo, classifier_parse_example_spec, regressor_parse_example_spec
from toolkit.estimator.canned import CannedError
from toolkit.estimator.canned import helpers as experimental  # served as toolkit.estimator.experimental.*

fc = tf.feature_column
v1 = tf.compat.v1


def test_parse_specs_add_the_label_and_the_weights():
    city = fc.categorical_column_with_vocabulary_list("city", ["a", "b"])
    spec = classifier_parse_example_spec([fc.numeric_column("x"), city], "y", weight_column="w")
    assert spec["y"] == tf.io.FixedLenFeature((1,), tf.int64) and spec["w"] == tf.io.FixedLenFeature((1,), tf.float32)
    assert spec["city"] == tf.io.VarLenFeature(tf.string)
    spec = regressor_parse_example_spec([fc.numeric_column("x")], "y", label_dimension=2, label_default=(0.0, 0.0))
    assert spec["y"] == tf.io.FixedLenFeature((2,), tf.float32, (0.0, 0.0))
    with pytest.raises(ValueError, match="label should not be used as feature") as err:
        classifier_parse_example_spec([fc.numeric_column("y")], "y")
    assert err.value.field == "label_key"


def test_vocab_info_checks_its_files(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("a\nb\n")
    info = VocabInfo(str(vocab), 2, 1, str(vocab))
    assert isinstance(info, v1.train.VocabInfo) and info.num_oov_buckets == 1 and info.old_vocab_size == -1
    with pytest.raises(CannedError, match="VocabInfo `old_vocab` is '.*missing.txt', which is not an existing"):
        VocabInfo(str(vocab), 2, 0, str(tmp_path / "missing.txt"))


def test_logit_fn_builders_and_call_logit_fn_build_the_canned_networks():
    with tf.Graph().as_default():
        dnn = experimental.dnn_logit_fn_builder(3, [4], [fc.numeric_column("x")], tf.nn.relu, None, None, False)
        logits = experimental.call_logit_fn(dnn, {"x": tf.ones((2, 1))}, "train", None, None)
        assert logits.shape.as_list() == [2, 3]
        assert "dnn/hiddenlayer_0/kernel:0" in [v.name for v in v1.trainable_variables()]
        linear = experimental.linear_logit_fn_builder(2, [fc.numeric_column("z")])
        assert experimental.call_logit_fn(linear, {"z": tf.ones((5, 1))}, "eval", {}, None).shape.as_list() == [5, 2]
        assert v1.get_collection(v1.GraphKeys.GLOBAL_VARIABLES, "linear_model/bias_weights")  # TF's names
        with pytest.raises(ValueError, match="logit_fn should return a Tensor or a dictionary"):
            experimental.call_logit_fn(lambda features, mode: 3, {}, "train", None, None)
