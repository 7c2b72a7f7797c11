"""Session hooks of ``tf.estimator.experimental``: early stopping, stop at a checkpoint's step, in-memory eval.

The public names are served by ``toolkit.estimator.experimental``.
"""
