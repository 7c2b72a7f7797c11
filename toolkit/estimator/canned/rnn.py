"""``RNNClassifier`` and ``RNNEstimator``: tf.estimator's recurrent canned estimators on the graph engine.

As upstream, the network is Keras 2 (``tf_keras``) layers: ``SequenceFeatures``
over the sequence columns, ``DenseFeatures`` over the context columns (tiled
along time and appended to each step), a ``SimpleRNN`` / ``LSTM`` / ``GRU`` (or
``RNN`` over the caller's cells) masked by each example's sequence length, and a
``Dense`` logits layer. By default only the last valid step's output is used;
with ``return_sequences=True`` every step gets logits, and the head reads one
label (and weight) per valid step (upstream's ``SequentialHeadWrapper``; see
``_sequential``).

Example:
    >>> col = tf.feature_column.sequence_numeric_column("x")   # doctest: +SKIP
    >>> est = RNNClassifier([col], units=[16], cell_type="lstm", model_dir="runs/rnn")  # doctest: +SKIP
    >>> est.train(train_input_fn, max_steps=200)  # doctest: +SKIP
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import tensorflow as tf
import tf_keras

from toolkit.estimator import Estimator
from toolkit.estimator.canned import _args, _sequential
from toolkit.estimator.canned._errors import CannedError
from toolkit.estimator.canned._head_base import TRAIN, make_spec
from toolkit.estimator.canned._model_fns import _minimize, _spec
from toolkit.estimator.canned.head_based import check_head
from toolkit.estimator.canned.heads import classifier_head
from toolkit.estimator.canned.optimizers import check_optimizer, get_optimizer
from toolkit.estimator.estimator import EstimatorV1

__all__ = ["RNNClassifier", "RNNEstimator"]

v1 = tf.compat.v1
USE_DEFAULT = "basic_rnn"
# an optimizer given by name: upstream's learning rate and per-gradient clip norm
_DEFAULT_LEARNING_RATE = 0.05
_DEFAULT_CLIP_NORM = 5.0
# cell_type -> (one cell, whole layer), as upstream's _CELL_TYPES / _CELL_TYPE_TO_LAYER_MAPPING
# (the default, 'basic_rnn', is upstream's USE_DEFAULT: a Keras RNN layer named 'rnn' over SimpleRNN cells)
_CELLS: dict[str, tuple[Any, Any]] = {
    "basic_rnn": (tf_keras.layers.SimpleRNNCell, None),
    "simple_rnn": (tf_keras.layers.SimpleRNNCell, tf_keras.layers.SimpleRNN),
    "lstm": (tf_keras.layers.LSTMCell, tf_keras.layers.LSTM),
    "gru": (tf_keras.layers.GRUCell, tf_keras.layers.GRU),
}


def _check_units(units: Any) -> int | list[int]:
    if isinstance(units, int) and not isinstance(units, bool) and units > 0:
        return units
    if isinstance(units, (list, tuple)) and units and all(
            isinstance(u, int) and not isinstance(u, bool) and u > 0 for u in units):
        return list(units)
    raise CannedError(f"`units` is {units!r}; expected a positive int or a non-empty list of positive ints "
                      "(one per stacked cell), e.g. units=[32, 16]. Or pass rnn_cell_fn instead.", field="units")


def _rnn_layer_fn(*, units: Any, cell_type: Any, rnn_cell_fn: Any, return_sequences: bool) -> Callable[[], Any]:
    """Checks the cell arguments now; returns what builds the recurrent layer inside each graph."""
    if rnn_cell_fn is not None:
        if units is not None or cell_type != USE_DEFAULT:
            raise CannedError(f"units and cell_type must not be specified when using rnn_cell_fn (got units={units!r}, "
                              f"cell_type={cell_type!r}); the cells it returns define both. Drop one of them.",
                              field="rnn_cell_fn")
        if not callable(rnn_cell_fn):
            raise CannedError(f"`rnn_cell_fn` is {type(rnn_cell_fn).__name__} {rnn_cell_fn!r}; expected a "
                              "function returning a Keras RNN cell (or a list of cells).", field="rnn_cell_fn")
        return lambda: tf_keras.layers.RNN(cell=rnn_cell_fn(), return_sequences=return_sequences)
    if units is None:
        raise CannedError("`units` is None and no rnn_cell_fn was given; expected the cell width, e.g. "
                          "units=[32], or an rnn_cell_fn.", field="units")
    checked = _check_units(units)
    if isinstance(cell_type, type) and callable(cell_type):   # a class producing a cell, as upstream
        cell_cls, layer_cls = cell_type, None
    elif isinstance(cell_type, str) and cell_type in _CELLS:
        cell_cls, layer_cls = _CELLS[cell_type]
    else:
        raise CannedError(f"`cell_type` is {cell_type!r}; supported cell types are {sorted(_CELLS)}, or a "
                          "class producing a Keras RNN cell. For anything else pass rnn_cell_fn.", field="cell_type")
    if isinstance(checked, int) and layer_cls is not None:
        return lambda: layer_cls(units=checked, return_sequences=return_sequences)

    def _stacked() -> Any:
        cells = [cell_cls(units=n) for n in ([checked] if isinstance(checked, int) else checked)]
        return tf_keras.layers.RNN(cell=cells[0] if len(cells) == 1 else cells, return_sequences=return_sequences)
    return _stacked


def _check_sequence_columns(value: Any) -> tuple[Any, ...]:
    columns = _args.check_feature_columns("sequence_feature_columns", value, dense=False)
    for column in columns:
        if not type(column).__name__.startswith("Sequence") and "Sequence" not in type(
                getattr(column, "categorical_column", None)).__name__:
            raise CannedError(f"`sequence_feature_columns` holds {type(column).__name__} {column!r}, which is "
                              "not a sequence column; expected tf.feature_column.sequence_numeric_column(...) or "
                              "an embedding/indicator column over a sequence_categorical_column_*. Put "
                              "per-example columns in context_feature_columns.", field="sequence_feature_columns")
    return columns


def _cell_weights_in_layer_scope(rnn_layer: Any) -> Callable[..., Any]:
    """A variable creator putting the cells' weights directly under the RNN layer's scope
    ('rnn_model/rnn/kernel', a second stacked cell's 'rnn_model/rnn/kernel_1'), as Keras named them when
    upstream wrote its RNN estimators; today's tf_keras adds a scope per cell ('.../simple_rnn_cell/kernel')."""
    prefix = f"{v1.get_default_graph().get_name_scope()}/{rnn_layer.name}/"

    def creator(next_creator: Callable[..., Any], **kwargs: Any) -> Any:
        if v1.get_default_graph().get_name_scope().startswith(prefix):
            with tf.name_scope(prefix):
                return next_creator(**kwargs)
        return next_creator(**kwargs)
    return creator


def _rnn_logits(features: Mapping[str, Any], mode: str, *, units: int, layer_fn: Callable[[], Any],
                sequence_columns: Any, context_columns: Any) -> tuple[tf.Tensor, tf.Tensor, list[Any]]:
    training = mode == TRAIN
    # upstream's variable names (its Keras model 'rnn_model'), so its checkpoints restore and warm-start here
    with v1.variable_scope("rnn_model"):
        sequence_layer = tf_keras.experimental.SequenceFeatures(list(sequence_columns))
        sequence_input, sequence_length = sequence_layer(dict(features), training=training)
        v1.summary.histogram("sequence_length", sequence_length)
        layers: list[Any] = [sequence_layer]
        if context_columns:
            context_layer = tf_keras.layers.DenseFeatures(list(context_columns))
            context = context_layer(dict(features), training=training)
            steps = tf.shape(sequence_input)[1]
            tiled = tf.tile(tf.expand_dims(tf.cast(context, sequence_input.dtype), 1), [1, steps, 1])
            sequence_input = tf.concat([sequence_input, tiled], axis=2)
            layers.append(context_layer)
        rnn_layer = layer_fn()
        mask = tf.sequence_mask(sequence_length, maxlen=tf.shape(sequence_input)[1])
        # the inputs' static batch size: else Keras' time loop sees its state change shape ((1, n) -> (None, n))
        mask.set_shape(sequence_input.shape[:2])
        with tf.variable_creator_scope(_cell_weights_in_layer_scope(rnn_layer)):
            outputs = rnn_layer(sequence_input, mask=mask, training=training)
        logits_layer = tf_keras.layers.Dense(units, name="logits")
        logits = logits_layer(outputs)
        layers += [rnn_layer, logits_layer]
    variables = [v for layer in layers for v in layer.trainable_weights]
    return logits, mask, variables


def _rnn_estimator(self: Estimator, head: Any, *, sequence_feature_columns: Any, context_feature_columns: Any,
                   units: Any, cell_type: Any, rnn_cell_fn: Any, return_sequences: bool, model_dir: Any,
                   optimizer: Any, config: Any, sequence_mask: str = _sequential.MASK_KEY) -> None:
    if not isinstance(return_sequences, bool):
        raise CannedError(f"`return_sequences` is {return_sequences!r}; expected True (logits for every time "
                          "step) or False (for the last one).", field="return_sequences")
    if return_sequences:
        _sequential.check(head, sequence_mask)
    sequence_columns = _check_sequence_columns(sequence_feature_columns)
    context_columns = (_args.check_feature_columns("context_feature_columns", context_feature_columns, dense=True)
                       if context_feature_columns else ())
    layer_fn = _rnn_layer_fn(units=units, cell_type=cell_type, rnn_cell_fn=rnn_cell_fn,
                             return_sequences=bool(return_sequences))
    optimizer = check_optimizer("optimizer", optimizer)

    def _model_fn(features: Any, labels: Any, mode: str, config: Any) -> Any:
        del config
        if not isinstance(features, Mapping):
            raise CannedError(f"input_fn returned features as {type(features).__name__}; RNN estimators read "
                              "features by name through feature columns. Return a dict {name: tensor}.",
                              field="features")
        logits, mask, variables = _rnn_logits(features, mode, units=head.logits_dimension, layer_fn=layer_fn,
                                              sequence_columns=sequence_columns, context_columns=context_columns)

        def train_op_fn(loss: tf.Tensor) -> Any:
            opt = get_optimizer("optimizer", optimizer, learning_rate=_DEFAULT_LEARNING_RATE)
            global_step = v1.train.get_or_create_global_step()
            if not isinstance(optimizer, str):
                return _minimize(opt, loss, variables, global_step=global_step)
            # by name: each gradient clipped to norm 5.0, as upstream set clipnorm on the Keras optimizer
            grads = [(tf.clip_by_norm(g, _DEFAULT_CLIP_NORM), v)
                     for g, v in opt.compute_gradients(loss, var_list=variables) if g is not None]
            with tf.control_dependencies(v1.get_collection(v1.GraphKeys.UPDATE_OPS)):
                return opt.apply_gradients(grads, global_step=global_step)

        if return_sequences:
            return _sequential.spec(head, features=features, mode=mode, logits=logits, labels=labels, mask=mask,
                                    mask_key=sequence_mask, train_op_fn=train_op_fn if mode == TRAIN else None)
        return _spec(head, make_spec, features=features, mode=mode, logits=logits, labels=labels,
                     train_op_fn=train_op_fn if mode == TRAIN else None)

    Estimator.__init__(self, _model_fn, model_dir=model_dir, config=config)
    self.head = head


class RNNEstimator(EstimatorV1):
    """A recurrent network over sequence feature columns under ``head``
    (``tf.estimator.experimental.RNNEstimator``; as upstream's, it keeps TF1's ``export_savedmodel``).

    Args:
        head: a head, e.g. ``toolkit.estimator.RegressionHead()``.
        sequence_feature_columns: sequence columns (``sequence_numeric_column``,
            or embedding/indicator columns over ``sequence_categorical_column_*``).
        context_feature_columns: dense per-example columns, appended to every step.
        units: the cell width (an int: one Keras SimpleRNN/LSTM/GRU layer) or a
            list of widths (stacked cells).
        cell_type: 'basic_rnn' (default; also 'simple_rnn'), 'lstm', 'gru', or a
            class producing a Keras RNN cell.
        rnn_cell_fn: instead of units/cell_type, a function returning a Keras
            RNN cell or a list of cells.
        return_sequences: False (default): one prediction per sequence, from
            its last valid step. True: logits for every step; labels are
            ``[batch, time]`` (dense, padded, or sparse over the valid steps),
            the loss and metrics count only valid steps, and predictions hold
            one value per step plus the step mask under ``sequence_mask``.
        model_dir: where checkpoints go (or ``config.model_dir``).
        optimizer: a name ('Adagrad' default; learning rate 0.05 and each gradient
            clipped to norm 5.0, as upstream), a
            ``tf.compat.v1.train.Optimizer``, a Keras optimizer, or a function
            returning one.
        config: a ``RunConfig``.
        sequence_mask: with return_sequences, the key of the step mask in the
            features the head sees and in the predictions (default
            'sequence_mask').
    """

    def __init__(self, head: Any, sequence_feature_columns: Iterable[Any],
                 context_feature_columns: Iterable[Any] | None = None, units: int | list[int] | None = None,
                 cell_type: str = USE_DEFAULT, rnn_cell_fn: Callable[[], Any] | None = None,
                 return_sequences: bool = False, model_dir: str | os.PathLike | None = None,
                 optimizer: Any = "Adagrad", config: Any = None, sequence_mask: str = "sequence_mask") -> None:
        _rnn_estimator(self, check_head(head), sequence_feature_columns=sequence_feature_columns,
                       context_feature_columns=context_feature_columns, units=units, cell_type=cell_type,
                       rnn_cell_fn=rnn_cell_fn, return_sequences=return_sequences, model_dir=model_dir,
                       optimizer=optimizer, config=config, sequence_mask=sequence_mask)


class RNNClassifier(RNNEstimator):
    """A recurrent classifier over sequence feature columns (``tf.estimator.experimental.RNNClassifier``).

    Args are ``RNNEstimator``'s without ``head``, plus ``n_classes`` (2: a
    sigmoid head; more: softmax), ``weight_column``, ``label_vocabulary``,
    ``loss_reduction`` ('sum_over_batch_size' default) and ``sequence_mask``
    (the key of the per-step mask in the predictions; used only with
    return_sequences, where ``weight_column`` is per step too).
    """

    def __init__(self, sequence_feature_columns: Iterable[Any],
                 context_feature_columns: Iterable[Any] | None = None, units: int | list[int] | None = None,
                 cell_type: str = USE_DEFAULT, rnn_cell_fn: Callable[[], Any] | None = None,
                 return_sequences: bool = False, model_dir: str | os.PathLike | None = None, n_classes: int = 2,
                 weight_column: Any = None, label_vocabulary: Iterable[str] | None = None,
                 optimizer: Any = "Adagrad", loss_reduction: Any = "sum_over_batch_size",
                 sequence_mask: str = "sequence_mask", config: Any = None) -> None:
        head = classifier_head(n_classes, label_vocabulary, weight_column, loss_reduction)
        self.sequence_mask = sequence_mask
        _rnn_estimator(self, head, sequence_feature_columns=sequence_feature_columns,
                       context_feature_columns=context_feature_columns, units=units, cell_type=cell_type,
                       rnn_cell_fn=rnn_cell_fn, return_sequences=return_sequences, model_dir=model_dir,
                       optimizer=optimizer, config=config, sequence_mask=sequence_mask)
