"""The graph-mode Estimator in one process: TF1 model_fns trained, evaluated, predicted, exported and served."""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import toolkit.compat.v1 as tf1
from toolkit.estimator import (
    BestExporter,
    Estimator,
    EstimatorError,
    EstimatorSpec,
    EvalSpec,
    FinalExporter,
    LatestExporter,
    ModeKeys,
    RunConfig,
    SpecError,
    TrainSpec,
    train_and_evaluate,
)
from toolkit.estimator.export import (
    build_parsing_serving_input_receiver_fn,
    build_raw_serving_input_receiver_fn,
)

_ROOT = Path(__file__).resolve().parents[2]
v1 = tf.compat.v1
_COLUMNS = [v1.feature_column.numeric_column("x", shape=(4,))]


def _data(n=256, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.normal(size=(n, 4)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int64")
    return x, y


def _train_input(batch=32):
    x, y = _data()
    return lambda: tf1.data.Dataset.from_tensor_slices(({"x": x}, y)).shuffle(256, seed=1).repeat().batch(batch)


def _eval_input():
    x, y = _data(seed=1)
    return lambda: tf1.data.Dataset.from_tensor_slices(({"x": x}, y)).batch(64)


class _CountHook(tf1.train.SessionRunHook):
    def __init__(self):
        self.runs = 0

    def after_run(self, run_context, run_values):
        self.runs += 1


_HOOKS = {"train": _CountHook(), "eval": _CountHook()}


def tf1_model_fn(features, labels, mode, params):
    """TF1 style: feature columns, tf.layers, tf.losses, tf.metrics (pairs and a Keras metric), hooks."""
    net = tf1.feature_column.input_layer(features, params["feature_columns"])
    net = tf1.layers.dense(net, units=16, activation=tf1.nn.relu)
    net = tf1.layers.dropout(net, rate=0.1, training=mode == ModeKeys.TRAIN)
    logits = tf1.layers.dense(net, 2)
    classes = tf1.argmax(logits, 1)
    predictions = {"class_ids": classes, "probabilities": tf1.nn.softmax(logits)}
    if mode == ModeKeys.PREDICT:
        return EstimatorSpec(mode, predictions=predictions,
                             export_outputs={"serving_default": tf1.estimator.PredictOutput(predictions)})
    loss = tf1.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    auc = tf1.keras.metrics.AUC(name="auc_metric")
    auc.update_state(labels, predictions["probabilities"][:, 1])
    metrics = {"accuracy": tf1.metrics.accuracy(labels=labels, predictions=classes), "auc": auc}
    if mode == ModeKeys.EVAL:
        return EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics, evaluation_hooks=[_HOOKS["eval"]])
    train_op = tf1.train.AdagradOptimizer(0.3).minimize(loss, global_step=tf1.train.get_global_step())
    return EstimatorSpec(mode, loss=loss, train_op=train_op, training_hooks=[_HOOKS["train"]])


def test_tf1_model_fn_trains_evaluates_predicts_exports_and_serves(tmp_path):
    _HOOKS.update(train=_CountHook(), eval=_CountHook())
    train_hook, eval_hook = _HOOKS["train"], _HOOKS["eval"]
    est = Estimator(tf1_model_fn, model_dir=str(tmp_path / "m"), params={"feature_columns": _COLUMNS},
        config=RunConfig(tf_config={}, save_checkpoints_steps=50, tf_random_seed=3))
    est.train(_train_input(), max_steps=120)
    assert train_hook.runs == 120 and est.latest_checkpoint().endswith("model.ckpt-120")
    est.train(_train_input(), steps=30)
    assert est.latest_checkpoint().endswith("model.ckpt-150")
    metrics = est.evaluate(_eval_input(), name="holdout")
    assert metrics["global_step"] == 150 and metrics["accuracy"] > 0.9 and metrics["auc"] > 0.95
    assert metrics["loss"] < 0.4 and eval_hook.runs == 4  # 256 examples / 64
    assert list((tmp_path / "m" / "eval_holdout").glob("events.out.tfevents.*"))
    assert est.evaluate(_eval_input(), steps=2)["global_step"] == 150
    kernel = est.get_variable_value("dense/kernel")
    assert kernel.shape == (4, 16) and "global_step" in est.get_variable_names()

    x, y = _data(seed=1)
    predictions = list(est.predict(lambda: tf1.data.Dataset.from_tensor_slices({"x": x[:10]}).batch(4),
                                   predict_keys=["class_ids"]))
    assert len(predictions) == 10 and set(predictions[0]) == {"class_ids"}
    predicted = [int(p["class_ids"]) for p in predictions]
    assert np.mean(np.array(predicted) == y[:10]) >= 0.8

    spec = tf1.feature_column.make_parse_example_spec(_COLUMNS)
    export_dir = est.export_saved_model(tmp_path / "export", build_parsing_serving_input_receiver_fn(spec))
    assert os.path.basename(export_dir).isdigit() and os.listdir(tmp_path / "export") == [os.path.basename(export_dir)]
    served = tf.saved_model.load(export_dir).signatures["serving_default"]
    examples = [tf.train.Example(features=tf.train.Features(feature={"x": tf.train.Feature(
        float_list=tf.train.FloatList(value=row))})).SerializeToString() for row in x[:10]]
    out = served(examples=tf.constant(examples))
    assert list(out["class_ids"].numpy()) == predicted  # the export serves what predict() gave
    assert tf.executing_eagerly()  # the engine never switched eager mode off


def test_published_iris_custom_estimator_runs_with_one_import_changed(tmp_path, monkeypatch):
    """TensorFlow's get_started/custom_estimator.py, unchanged but for `import toolkit.compat.v1 as tf`."""
    source = (_ROOT / "examples" / "tf1" / "custom_estimator.py").read_text()
    assert "import toolkit.compat.v1 as tf  # was: import tensorflow as tf" in source
    assert "\nimport tensorflow" not in source
    monkeypatch.syspath_prepend(str(_ROOT / "examples" / "tf1"))
    monkeypatch.chdir(tmp_path)
    import custom_estimator

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        custom_estimator.main(["custom_estimator.py", "--train_steps", "200"])
    text = out.getvalue()
    accuracy = float(text.split("Test set accuracy: ")[1].split()[0])
    assert accuracy > 0.8, text
    assert text.count('expected "') == 3 and 'Prediction is "Setosa"' in text


def _simple_model_fn(features, labels, mode):
    x = features["x"] if isinstance(features, dict) else features
    logits = tf1.layers.dense(tf1.cast(x, tf1.float32), 2, name="out")
    if mode == ModeKeys.PREDICT:
        return EstimatorSpec(mode, predictions=tf1.argmax(logits, 1))
    loss = tf1.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=tf1.train.get_global_step())
    return EstimatorSpec(mode, loss=loss, train_op=train_op)


def test_input_fn_may_return_tensors_features_only_sparse_and_ragged(tmp_path):
    x, y = _data(64)
    est = Estimator(_simple_model_fn, model_dir=str(tmp_path), config=RunConfig(tf_config={}))
    est.train(lambda: (tf1.constant(x), tf1.constant(y)), steps=3)  # a (features, labels) tuple of tensors
    assert est.latest_checkpoint().endswith("-3")
    assert len(list(est.predict(lambda: tf1.data.Dataset.from_tensor_slices(x[:5]).batch(5)))) == 5
    batch = list(est.predict(lambda: tf1.data.Dataset.from_tensors(x[:6]), yield_single_examples=False))
    assert len(batch) == 1 and batch[0].shape == (6,)

    def sparse_model_fn(features, labels, mode):
        column = v1.feature_column.categorical_column_with_vocabulary_list("word", ["a", "b", "c"])
        net = v1.feature_column.input_layer(features, [v1.feature_column.indicator_column(column)])
        ragged = tf1.cast(features["lengths"].row_lengths(), tf1.float32)[:, None]
        return _simple_model_fn({"x": tf1.concat([net, ragged], 1)}, labels, mode)

    def sparse_input_fn():
        words = tf1.SparseTensor(indices=[[0, 0], [1, 0], [1, 1]], values=["a", "b", "c"], dense_shape=[2, 2])
        lengths = tf1.RaggedTensor.from_row_lengths([1.0, 2.0, 3.0], [1, 2])
        return {"word": words, "lengths": lengths}, tf1.constant([0, 1], tf1.int64)

    sparse = Estimator(sparse_model_fn, model_dir=str(tmp_path / "sparse"), config=RunConfig(tf_config={}))
    sparse.train(sparse_input_fn, steps=2)
    assert sparse.get_variable_value("out/kernel").shape == (4, 2)


def _bad_model_fn(kind):
    def model_fn(features, labels, mode):
        spec = _simple_model_fn(features, labels, mode)
        if kind == "dict":
            return {"loss": spec.loss}
        if kind == "no_train_op":
            return EstimatorSpec(mode, loss=spec.loss)
        if kind == "metric":
            return EstimatorSpec(mode, loss=spec.loss, train_op=spec.train_op, eval_metric_ops={"acc": 0.5})
        if kind == "vector_loss":
            return EstimatorSpec(mode, loss=tf1.ones([3]), train_op=spec.train_op)
        return spec
    return model_fn


@pytest.mark.parametrize("kind,input_fn,field,text", [
    ("dict", None, "model_fn", "model_fn returned dict"),
    ("no_train_op", None, "train_op", "needs `train_op`"),
    ("metric", None, "eval_metric_ops.acc", r"expected a \(value, update_op\) pair"),
    ("vector_loss", None, "loss", "expected a scalar tensor"),
    ("ok", lambda: "data.csv", "input_fn", "input_fn returned str"),
    ("ok", lambda: (1, 2, 3), "input_fn", "3 items"),
])
def test_bad_model_fn_or_input_fn_names_the_argument_and_writes_nothing(tmp_path, kind, input_fn, field, text):
    x, y = _data(8)
    est = Estimator(_bad_model_fn(kind), model_dir=str(tmp_path / "m"), config=RunConfig(tf_config={}))
    with pytest.raises(SpecError, match=text) as info:
        est.train(input_fn or (lambda: ({"x": tf1.constant(x)}, tf1.constant(y))), steps=1)
    assert info.value.field == field
    assert not (tmp_path / "m").exists() or not os.listdir(tmp_path / "m")


def test_checkpoint_from_another_model_is_refused_by_name(tmp_path):
    x, y = _data(8)
    first = Estimator(_simple_model_fn, model_dir=str(tmp_path), config=RunConfig(tf_config={}))
    first.train(lambda: ({"x": tf1.constant(x)}, tf1.constant(y)), steps=1)
    other = Estimator(tf1_model_fn, model_dir=str(tmp_path), config=RunConfig(tf_config={}),
                      params={"feature_columns": _COLUMNS})
    with pytest.raises(EstimatorError, match="written by another model") as info:
        other.evaluate(lambda: ({"x": tf1.constant(x)}, tf1.constant(y)))
    assert info.value.field == "checkpoint_path"
    # no checkpoint: TF's fresh variables (and a warning), at global step 0
    fresh = Estimator(_simple_model_fn, model_dir=str(tmp_path / "empty"), config=RunConfig(tf_config={}))
    assert fresh.evaluate(lambda: ({"x": tf1.constant(x)}, tf1.constant(y)), steps=1)["global_step"] == 0
    with pytest.raises(EstimatorError, match="not find trained model"):
        fresh.get_variable_names()


def test_warm_start_and_raw_serving_receiver(tmp_path):
    x, y = _data(64)
    source = Estimator(_simple_model_fn, model_dir=str(tmp_path / "a"), config=RunConfig(tf_config={}))
    source.train(lambda: ({"x": tf1.constant(x)}, tf1.constant(y)), steps=5)
    warm = Estimator(_simple_model_fn, model_dir=str(tmp_path / "b"), config=RunConfig(tf_config={}),
                     warm_start_from=str(tmp_path / "a"))
    warm.train(lambda: ({"x": tf1.constant(x)}, tf1.constant(y)), steps=1)
    assert warm.get_variable_value("global_step") == 1
    # one more step from the warm start moves the kernel a little, not from a fresh random init
    assert np.abs(warm.get_variable_value("out/kernel") - source.get_variable_value("out/kernel")).max() < 0.2
    export = source.export_saved_model(tmp_path / "raw", build_raw_serving_input_receiver_fn(
        {"x": tf.zeros([1, 4])}))
    served = tf.saved_model.load(export).signatures["serving_default"]
    assert served(x=tf.constant(x[:3]))["output"].shape == (3,)


def test_train_and_evaluate_locally_runs_every_exporter(tmp_path):
    spec = tf1.feature_column.make_parse_example_spec(_COLUMNS)
    receiver = build_parsing_serving_input_receiver_fn(spec)
    est = Estimator(tf1_model_fn, config=RunConfig(model_dir=str(tmp_path), tf_config={}, save_checkpoints_steps=40),
                    params={"feature_columns": _COLUMNS})
    result, exports = train_and_evaluate(est, TrainSpec(_train_input(), max_steps=80), EvalSpec(
        _eval_input(), steps=None, exporters=[LatestExporter("latest", receiver), BestExporter("best", receiver),
                                              FinalExporter("final", receiver)]))
    assert result["global_step"] == 80 and result["accuracy"] > 0.8
    assert sorted(Path(p).parent.name for p in exports) == ["best", "final", "latest"]
    with pytest.raises(SpecError, match="repeated names"):
        EvalSpec(_eval_input(), exporters=[LatestExporter("x", receiver), FinalExporter("x", receiver)])


def test_spec_defaults_follow_tf():
    spec = EvalSpec(lambda: None)
    assert (spec.steps, spec.start_delay_secs, spec.throttle_secs) == (100, 120, 600)
    with pytest.raises(SpecError, match="needs `predictions`"):
        EstimatorSpec(ModeKeys.PREDICT)
    with pytest.raises(SpecError, match="`mode` is 'training'"):
        EstimatorSpec("training")


def test_keras3_paths_do_not_import_tf_keras_and_tf1_scripts_may_disable_eager(tmp_path):
    code = f"""
import sys
import numpy as np
import toolkit, toolkit.training, toolkit.estimator, models
from toolkit.estimator import Estimator, RunConfig, EstimatorSpec, ModeKeys
import toolkit.compat.v1 as tf
tf.estimator.Estimator; tf.train.AdamOptimizer
assert 'tf_keras' not in sys.modules, sorted(m for m in sys.modules if 'tf_keras' in m)[:3]
assert tf.estimator.DNNClassifier is toolkit.estimator.canned.v1.DNNClassifier  # TF1 scripts: TF1 defaults
tf.disable_eager_execution()   # what TF1 scripts ported to TF 2 do first

def model_fn(features, labels, mode):
    logits = tf.layers.dense(features, 2)
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=tf.train.get_global_step())
    return EstimatorSpec(mode, loss=loss, train_op=train_op)

x, y = np.ones((8, 3), 'float32'), np.zeros(8, 'int64')
est = Estimator(model_fn, model_dir={str(tmp_path)!r}, config=RunConfig(tf_config={{}}))
est.train(lambda: tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(4), steps=3)
assert est.evaluate(lambda: tf.data.Dataset.from_tensor_slices((x, y)).batch(4))['global_step'] == 3
assert 'tf_keras' in sys.modules
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=180)


def test_private_symbols_behind_the_fences_still_exist():
    from toolkit._compat import tensorflow as _tf_compat
    from toolkit._compat import tf_keras as _tf_keras

    layers = _tf_keras.legacy_layers()
    for name in ("dense", "conv2d", "max_pooling2d", "dropout", "batch_normalization", "flatten"):
        assert callable(getattr(layers, name)), name
    with tf.Graph().as_default():
        tf1.train.get_or_create_global_step()
        opt = tf1.train.SyncReplicasOptimizer(tf1.train.GradientDescentOptimizer(0.1), replicas_to_aggregate=1)
        v = tf1.Variable(1.0)
        opt.minimize(v * v, global_step=tf1.train.get_global_step())
        hook = opt.make_session_run_hook(is_chief=True)
        assert _tf_compat.sync_optimizers([hook]) == [opt]
