"""The one place the canned estimators reach into TensorFlow's private modules.

``tf.estimator.export.ClassificationOutput`` / ``RegressionOutput`` /
``PredictOutput`` left the public API with ``tensorflow_estimator``; the same
classes (building the ``classify`` / ``regress`` / ``predict`` signature defs a
SavedModel serves) still live in ``tensorflow.python.saved_model``. A unit test
names each symbol so that an upgrade removing one fails loudly.
"""
from __future__ import annotations

from tensorflow.python.saved_model.model_utils import export_output as _export_output

__all__ = ["ClassificationOutput", "PredictOutput", "RegressionOutput"]

ClassificationOutput = _export_output.ClassificationOutput
PredictOutput = _export_output.PredictOutput
RegressionOutput = _export_output.RegressionOutput
