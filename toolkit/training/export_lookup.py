"""Exporting just the lookup of a sharded table: a SavedModel that maps ids to embedding rows.

A model's export (``export_model``, Keras ``model.save``) gathers every table whole into the
exporting process. For a table larger than a task's memory, export the lookup alone instead:

* ``export_table_lookup(table, export_dir)``: a live ``strategies.ShardedTable`` (e.g. a trained
  model's table, under parameter servers or in one process). Each shard is written by the task
  that holds it (the save runs on the shard's own device), so no task reads another's rows.
* ``export_checkpoint_lookup(checkpoint, export_dir, key=...)``: a table in a checkpoint: a
  ``tf.train.Checkpoint`` of a sharded table (``toolkit.fit``'s checkpoints), or an Estimator's
  partitioned variable (``embedding_column`` tables under a partitioner), read and written one
  shard's row range at a time.

The SavedModel holds one variable per shard (``shard_<i>``) and a ``serving_default``
signature: ``ids`` (int64, any shape) -> ``embeddings`` (``ids.shape + [dim]``). Each distinct id
is gathered once from its shard. An id outside ``[0, rows)`` fails the call with an error
naming the table. Load it with ``tf.saved_model.load(path).signatures["serving_default"]``
(or TF Serving): loading reads every shard into the serving process, so serve it from a task
with the table's memory, or export several tables to serve them from different tasks.

The variables are written as one tensor-bundle file per shard (``SaveV2``, then merged, as
TensorFlow's sharded savers do) and the graph is a TF1 ``MetaGraphDef`` whose restore op reads
them by name, so the exporter never holds more than one shard.
"""
from __future__ import annotations

import logging
import math
import os
import re
import shutil
import tempfile
from typing import Any

import tensorflow as tf

from strategies.sharding import ShardedTable, ShardLayout
from toolkit.training.config import TrainingError

__all__ = ["SIGNATURE_KEY", "export_checkpoint_lookup", "export_table_lookup"]

logger = logging.getLogger(__name__)
v1 = tf.compat.v1

#: the exported signature's name (``ids`` -> ``embeddings``)
SIGNATURE_KEY = "serving_default"
#: checkpoint tables without a layout of their own are re-split into shards of at most this size
_SHARD_BYTES = 256 << 20
#: a ``ShardedTable``'s checkpoint key: ``.../div_<rows>x<dim>`` or ``.../mod<shards>_<rows>x<dim>``
_TABLE_KEY = re.compile(r"(?:^|/)(div|mod(\d+))_(\d+)x(\d+)(?:/\.ATTRIBUTES/VARIABLE_VALUE)?$")


def _shard_bundles(write_shard: Any, layout: ShardLayout, variables_path: str) -> None:
    """Writes shard ``i`` (``write_shard(i, prefix, key)``) to its own bundle, then merges them into one."""
    tmp = tempfile.mkdtemp(prefix=".lookup-shards-", dir=os.path.dirname(variables_path))
    try:
        prefixes = []
        for i in range(layout.num_shards):
            prefix = os.path.join(tmp, f"shard_{i}")
            write_shard(i, prefix, _shard_key(i))
            prefixes.append(prefix)
        tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=prefixes, destination_prefix=variables_path,
                                      delete_old_dirs=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _shard_key(i: int) -> str:
    return f"shard_{i}"


class _WrittenSaver(v1.train.Saver):  # type: ignore[name-defined,misc]
    """A saver whose variables the exporter has already written shard by shard; ``save`` writes nothing."""

    def save(self, sess: Any, save_path: str, *args: Any, **kwargs: Any) -> str:  # noqa: ARG002
        return save_path


def _lookup_graph(name: str, layout: ShardLayout, dim: int, dtype: tf.DType) -> tuple[tf.Graph, Any, dict]:
    """The serving graph: shard variables (never initialised here) and ids -> rows, and its saver."""
    graph = tf.Graph()
    with graph.as_default():
        shards = {_shard_key(i): v1.get_variable(_shard_key(i), [size, dim], dtype=dtype,
                                                 initializer=v1.zeros_initializer(), trainable=False)
                  for i, size in enumerate(layout.sizes)}
        ids = v1.placeholder(tf.int64, shape=None, name="ids")
        flat = tf.reshape(ids, [-1])
        message = (f"table {name!r}: every id must be in [0, {layout.rows}) (the table's rows); an id outside "
                   "was looked up. Map ids into that range before the lookup.")
        with tf.control_dependencies([v1.assert_non_negative(flat, message=message),
                                      v1.assert_less(flat, tf.constant(layout.rows, tf.int64), message=message)]):
            unique, position = tf.unique(flat)
        shard, local = layout.route(unique)
        variables = [shards[_shard_key(i)] for i in range(layout.num_shards)]
        if layout.num_shards == 1:
            rows = tf.gather(variables[0], local)
        else:
            locals_ = tf.dynamic_partition(local, shard, layout.num_shards)
            places = tf.dynamic_partition(tf.range(tf.size(unique)), shard, layout.num_shards)
            rows = tf.dynamic_stitch(places, [tf.gather(v, r) for v, r in zip(variables, locals_, strict=True)])
        out = tf.reshape(tf.gather(rows, position), tf.concat([tf.shape(ids, out_type=tf.int32), [dim]], axis=0),
                         name="embeddings")
        signature = v1.saved_model.predict_signature_def({"ids": ids}, {"embeddings": out})
        saver = _WrittenSaver(shards, sharded=False, allow_empty=False)
    return graph, saver, {SIGNATURE_KEY: signature}


def _write(export_dir: str, name: str, layout: ShardLayout, dim: int, dtype: tf.DType, write_shard: Any) -> str:
    """Builds the SavedModel under a temporary name and renames it into place."""
    if os.path.exists(export_dir):
        raise TrainingError(f"`export_dir` is {export_dir!r}, which already exists; a lookup export is written "
                            "to a new directory. Pass a path that does not exist yet (e.g. with a version "
                            "number), or remove the old export.", field="export_dir")
    parent = os.path.dirname(os.path.abspath(export_dir))
    os.makedirs(parent, exist_ok=True)
    holder = tempfile.mkdtemp(prefix=".lookup-", dir=parent)  # a reader sees the whole export or none
    try:
        tmp = os.path.join(holder, "export")
        graph, saver, signatures = _lookup_graph(name, layout, dim, dtype)
        builder = v1.saved_model.Builder(tmp)
        variables_dir = os.path.join(tmp, "variables")
        os.makedirs(variables_dir)
        _shard_bundles(write_shard, layout, os.path.join(variables_dir, "variables"))
        with graph.as_default(), v1.Session(graph=graph) as session:  # nothing runs: the variables are written
            builder.add_meta_graph_and_variables(session, [v1.saved_model.tag_constants.SERVING],
                                                 signature_def_map=signatures, saver=saver, clear_devices=True,
                                                 strip_default_attrs=True)
        builder.save()
        os.replace(tmp, export_dir)
    finally:
        shutil.rmtree(holder, ignore_errors=True)
    nbytes = layout.rows * dim * dtype.size
    logger.info("exported the lookup of %r (%d x %d, %.1f MiB in %d shard(s)) to %s", name, layout.rows, dim,
                nbytes / 2**20, layout.num_shards, export_dir)
    return export_dir


def export_table_lookup(table: ShardedTable, export_dir: str | os.PathLike) -> str:
    """Writes a SavedModel serving ``ids -> rows`` of ``table``, each shard saved by the task holding it.

    Args:
        table: a ``ShardedTable`` (``toolkit.layers.sharded_tables(model)`` lists a model's).
        export_dir: a directory that does not exist yet.

    Returns:
        ``export_dir``.
    """
    if not isinstance(table, ShardedTable):
        raise TrainingError(f"`table` is a {type(table).__name__}; expected a strategies.ShardedTable. Pass one "
                            "of toolkit.layers.sharded_tables(model), or use export_checkpoint_lookup for a "
                            "table in a checkpoint.", field="table")

    def write_shard(i: int, prefix: str, key: str) -> None:
        shard = table.shards[i]
        with tf.device(shard.device):  # the shard's own task reads and writes it
            tf.raw_ops.SaveV2(prefix=prefix, tensor_names=[key], shape_and_slices=[""],
                              tensors=[shard.read_value()])

    return _write(os.fspath(export_dir), table.name, table.layout, table.dim, table.dtype, write_shard)


def _tables_in(reader: Any) -> list[str]:
    shapes = reader.get_variable_to_shape_map()
    return sorted(k for k, s in shapes.items() if len(s) == 2 and "/.OPTIMIZER_SLOT/" not in k)


def _checkpoint_layout(key: str, rows: int, dim: int, nbytes: int, num_shards: int | None) -> ShardLayout:
    match = _TABLE_KEY.search(key)
    if match and match.group(2):  # a mod table's checkpoint holds its shards one after the other
        saved = int(match.group(2))
        if num_shards not in (None, saved):
            raise TrainingError(f"`num_shards` is {num_shards} but {key!r} is a 'mod' table saved in {saved} "
                                f"shards, which export only as saved. Pass num_shards={saved} or leave it out.",
                                field="num_shards")
        return ShardLayout("mod", rows, saved)
    count = num_shards if num_shards is not None else max(1, math.ceil(nbytes / _SHARD_BYTES))
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= rows:
        raise TrainingError(f"`num_shards` is {num_shards!r}; expected an int in 1..{rows} (the table's rows). "
                            "Pass fewer shards, or leave it out for shards of at most 256 MiB.", field="num_shards")
    return ShardLayout("div", rows, count)


def export_checkpoint_lookup(checkpoint: str | os.PathLike, export_dir: str | os.PathLike, *, key: str,
                             num_shards: int | None = None) -> str:
    """Writes a SavedModel serving ``ids -> rows`` of the ``[rows, dim]`` tensor ``key`` of a checkpoint.

    The rows are read and written one shard's range at a time, so the exporter holds one shard.

    Args:
        checkpoint: a checkpoint prefix, or a directory (its latest checkpoint).
        export_dir: a directory that does not exist yet.
        key: the table's name in the checkpoint, e.g. an Estimator's
            ``dnn/input_from_feature_columns/input_layer/C1_embedding/embedding_weights``, or a
            ``tf.train.Checkpoint``'s ``model/.../div_2600000x16`` (``tf.train.list_variables`` lists them).
        num_shards: shards of the export (None: as many as keep each under 256 MiB). A ``mod``
            table of ``toolkit`` exports in the shard count it was saved with.

    Returns:
        ``export_dir``.
    """
    path = os.fspath(checkpoint)
    prefix = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
    if prefix is None:
        raise TrainingError(f"`checkpoint` is {path!r}, a directory with no checkpoint in it. Pass a checkpoint "
                            "prefix (e.g. model_dir/model.ckpt-1000) or the directory training wrote.",
                            field="checkpoint")
    try:
        reader = tf.train.load_checkpoint(prefix)
    except (tf.errors.NotFoundError, tf.errors.DataLossError, ValueError) as exc:
        raise TrainingError(f"`checkpoint` is {path!r}, which TensorFlow cannot read ({exc}). Pass a checkpoint "
                            "prefix or the directory training wrote.", field="checkpoint") from exc
    tables = _tables_in(reader)
    shape = reader.get_variable_to_shape_map().get(key)
    if shape is None or len(shape) != 2:
        listed = ", ".join(tables[:20]) + (" ..." if len(tables) > 20 else "")
        raise TrainingError(f"`key` is {key!r}, which is not a [rows, dim] tensor of {prefix}. Its tables: "
                            f"{listed or 'none'}. Pass one of them.", field="key")
    rows, dim = (int(n) for n in shape)
    dtype = tf.as_dtype(reader.get_variable_to_dtype_map()[key])
    layout = _checkpoint_layout(key, rows, dim, rows * dim * dtype.size, num_shards)
    starts = [sum(layout.sizes[:i]) for i in range(layout.num_shards)]

    def write_shard(i: int, shard_prefix: str, shard_key: str) -> None:
        part = f"{rows} {dim} {starts[i]},{layout.sizes[i]}:-"  # only this shard's rows are read
        (value,) = tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=[key], shape_and_slices=[part], dtypes=[dtype])
        tf.raw_ops.SaveV2(prefix=shard_prefix, tensor_names=[shard_key], shape_and_slices=[""], tensors=[value])

    return _write(os.fspath(export_dir), key, layout, dim, dtype, write_shard)
