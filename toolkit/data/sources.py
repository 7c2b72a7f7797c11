"""Datasets that work offline: embedded digits, prepared TFDS data, mock data.

``load(name)`` dispatches through ``_SOURCES``. TFDS datasets are only read from
files already prepared in ``data_dir``: on a machine without internet a TFDS
download attempt spends minutes before failing, so downloads are opt-in and a
missing dataset fails at once with instructions.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib.machinery
import logging
import math
import os
import re
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from tf_config.checks import check_int
from toolkit.data.pipeline import DataError, DatasetFn, make_dataset_fn

__all__ = ["ArrayData", "TfdsData", "load", "mock", "SPLITS"]

logger = logging.getLogger(__name__)

SPLITS = ("train", "test")
_DIGITS_TEST_FRACTION = 0.2
_DIGITS_SPLIT_SEED = 0
_TFDS_NAME = re.compile(r"^[a-z0-9_]+(/[a-zA-Z0-9_.]+)?(:[0-9]+\.[0-9]+\.[0-9]+)?$")


@dataclasses.dataclass(frozen=True, eq=False)
class ArrayData:
    """In-memory examples: float32 images in [0, 1] and int64 labels.

    Attributes:
        name: where the data came from (``digits``, ``mock:mnist``...).
        features: array of shape ``(num_examples, *input_shape)``.
        labels: array of shape ``(num_examples,)``.
        num_classes: number of distinct labels the model should predict.
    """

    name: str
    features: np.ndarray
    labels: np.ndarray
    num_classes: int

    def __post_init__(self) -> None:
        if len(self.features) != len(self.labels):
            raise DataError(
                f"`features` has {len(self.features)} examples but `labels` has {len(self.labels)}. "
                "Pass arrays with one label per example.",
                field="labels",
            )

    @property
    def num_examples(self) -> int:
        return len(self.labels)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.features.shape[1:])

    def steps_per_epoch(self, global_batch_size: int) -> int:
        """Full global batches in one pass over the data."""
        return max(1, self.num_examples // global_batch_size)

    def dataset_fn(self, global_batch_size: int, **options) -> DatasetFn:
        """A sharded ``dataset_fn``; ``options`` are those of ``make_dataset_fn``."""
        features, labels = self.features, self.labels
        return make_dataset_fn(lambda: tf.data.Dataset.from_tensor_slices((features, labels)), global_batch_size,
                               **options)


@dataclasses.dataclass(frozen=True, eq=False)
class TfdsData:
    """A TFDS split already prepared on disk, read file by file in each pipeline."""

    name: str
    split: str
    data_dir: str
    num_examples: int
    num_classes: int
    input_shape: tuple[int, ...]

    def steps_per_epoch(self, global_batch_size: int) -> int:
        return max(1, self.num_examples // global_batch_size)

    def dataset_fn(self, global_batch_size: int, **options) -> DatasetFn:
        import tensorflow_datasets as tfds

        name, split, data_dir = self.name, self.split, self.data_dir

        def build() -> tf.data.Dataset:
            ds = tfds.load(name, split=split, data_dir=data_dir, download=False, as_supervised=True,
                           shuffle_files=False)
            return ds.map(_scale, num_parallel_calls=tf.data.AUTOTUNE)

        return make_dataset_fn(build, global_batch_size, **options)


def _scale(image: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    return tf.cast(image, tf.float32) / 255.0, tf.cast(label, tf.int64)


def _check_split(split: str, *, valid: tuple[str, ...] = SPLITS) -> None:
    if split not in valid:
        raise DataError(
            f"`split` is {split!r} but this dataset has splits {', '.join(valid)}. Pass one of those.", field="split"
        )


def _load_digits(split: str) -> ArrayData:
    """scikit-learn's 1,797 real 8x8 digits, split 80/20 (stratified) the same way every time.

    The digits are read from the file scikit-learn ships, without importing scikit-learn:
    its import brings SciPy, which a trainer otherwise never needs.
    """
    _check_split(split)
    images, labels = _digits_arrays()
    rng = np.random.RandomState(_DIGITS_SPLIT_SEED)
    test = _stratified_sample(labels, _DIGITS_TEST_FRACTION, rng)
    chosen = rng.permutation(np.flatnonzero(test if split == "test" else ~test))
    return ArrayData(name="digits", features=images[chosen], labels=labels[chosen], num_classes=10)


@functools.lru_cache(maxsize=1)
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """All 1,797 digits, parsed once per process (both splits index into them; read-only)."""
    data = np.loadtxt(_digits_file(), delimiter=",")
    images = (data[:, :-1].reshape(-1, 8, 8) / 16.0).astype(np.float32)[..., np.newaxis]
    labels = data[:, -1].astype(np.int64)
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels


def _digits_file() -> str:
    spec = importlib.machinery.PathFinder.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("`name` is 'digits', which is read from scikit-learn's package data, and scikit-learn is "
                        "not installed. Install it (pip install scikit-learn) or pass another dataset.", field="name")
    path = os.path.join(list(spec.submodule_search_locations)[0], "datasets", "data", "digits.csv.gz")
    if not os.path.isfile(path):
        raise DataError(f"`name` is 'digits', but the scikit-learn installed has no {path}. Install a "
                        "scikit-learn that ships it (1.0 or later) or pass another dataset.", field="name")
    return path


def _stratified_sample(labels: np.ndarray, fraction: float, rng: np.random.RandomState) -> np.ndarray:
    """A mask of ceil(fraction * n) examples, each class in proportion (largest remainders get the rest)."""
    classes, counts = np.unique(labels, return_counts=True)
    size = math.ceil(fraction * len(labels))
    exact = counts * size / len(labels)
    quota = np.floor(exact).astype(int)
    quota[np.argsort(quota - exact, kind="stable")[: size - quota.sum()]] += 1
    mask = np.zeros(len(labels), dtype=bool)
    for cls, take in zip(classes, quota, strict=True):
        mask[rng.permutation(np.flatnonzero(labels == cls))[:take]] = True
    return mask


def _default_tfds_dir() -> str:
    return os.environ.get("TFDS_DATA_DIR") or os.path.join(os.path.expanduser("~"), "tensorflow_datasets")


def _load_tfds(name: str, split: str, *, data_dir: str | None, download: bool) -> TfdsData:
    import tensorflow_datasets as tfds

    if not _TFDS_NAME.match(name):
        raise DataError(
            f"`name` is 'tfds:{name}', which is not a TFDS dataset name. Use e.g. 'tfds:mnist' or 'tfds:mnist:3.0.1'.",
            field="name",
        )
    root = data_dir or _default_tfds_dir()
    try:
        builder = tfds.builder(name, data_dir=root)
    except tfds.core.registered.DatasetNotFoundError as exc:
        close = difflib.get_close_matches(name.split("/")[0].split(":")[0], tfds.list_builders(), n=3)
        hint = f" Did you mean: {', '.join(close)}?" if close else " `tfds.list_builders()` lists the valid names."
        raise DataError(f"`name` is 'tfds:{name}' but TFDS has no such dataset.{hint}", field="name") from exc
    prepared = os.path.exists(os.path.join(builder.data_dir, "dataset_info.json"))
    if not prepared and not download:
        raise DataError(
            f"TFDS dataset {name!r} is not prepared in data_dir={root!r} (looked for {builder.data_dir}) and "
            "downloads are off. Fix: on a machine with internet run "
            f"`python -c \"import tensorflow_datasets as tfds; tfds.load('{name}', data_dir='DIR')\"` and copy DIR "
            "here, then pass data_dir=DIR; or pass download=True if this machine has internet; "
            "or use the embedded offline dataset 'digits'.",
            field="data_dir",
        )
    if not prepared:
        logger.warning("downloading TFDS dataset %s into %s (offline machines fail after minutes)", name, root)
        builder.download_and_prepare()
    splits, features = builder.info.splits, builder.info.features
    _check_split(split, valid=tuple(splits.keys()))
    if not {"image", "label"} <= set(features.keys()):
        raise DataError(
            f"TFDS dataset {name!r} has features {', '.join(features.keys())}; toolkit.data reads image "
            "classification datasets with 'image' and 'label' features. Build your own dataset_fn with "
            "toolkit.data.make_dataset_fn for other datasets.", field="name")
    image_shape = tuple(features["image"].shape)
    num_classes = features["label"].num_classes
    return TfdsData(
        name=name, split=split, data_dir=root, num_examples=splits[split].num_examples,
        num_classes=num_classes, input_shape=image_shape,
    )


_SOURCES: dict[str, Callable[..., ArrayData]] = {"digits": _load_digits}


def load(name: str, *, split: str = "train", data_dir: str | None = None, download: bool = False):
    """Loads a dataset by name without touching the network unless asked.

    Args:
        name: ``"digits"`` (embedded, offline) or ``"tfds:<name>"`` for a TFDS
            dataset prepared in ``data_dir``.
        split: ``"train"`` or ``"test"``.
        data_dir: TFDS data directory (default ``$TFDS_DATA_DIR`` or ``~/tensorflow_datasets``).
        download: let TFDS download a missing dataset (needs internet).

    Returns:
        ``ArrayData`` or ``TfdsData``; both offer ``dataset_fn(global_batch_size)``.

    Raises:
        DataError: unknown name or split, or TFDS data missing with downloads off.

    Example:
        >>> train = load("digits")
        >>> dataset_fn = train.dataset_fn(64)
        >>> train.steps_per_epoch(64)
        22
    """
    if name.startswith("tfds:"):
        return _load_tfds(name[len("tfds:"):], split, data_dir=data_dir, download=download)
    source = _SOURCES.get(name)
    if source is None:
        valid = ", ".join([*sorted(_SOURCES), "tfds:<name>"])
        raise DataError(f"`name` is {name!r}, which is not a known dataset. Valid: {valid}.", field="name")
    return source(split)


def mock(name: str = "mnist", *, num_examples: int = 256, split: str = "train") -> ArrayData:
    """Random examples shaped like a TFDS dataset, via ``tfds.testing.mock_data``.

    Never touches the network or the disk; for tests and smoke runs only.
    """
    import tensorflow_datasets as tfds

    check_int(num_examples, field="num_examples", error=DataError, example=64)
    with tfds.testing.mock_data(num_examples=num_examples):
        builder = tfds.builder(name)
        ds = tfds.load(name, split=split, as_supervised=True, download=False)
        images, labels = zip(*tfds.as_numpy(ds), strict=False)
    features = (np.stack(images).astype(np.float32) / 255.0)
    return ArrayData(
        name=f"mock:{name}", features=features, labels=np.asarray(labels, dtype=np.int64),
        num_classes=builder.info.features["label"].num_classes,
    )
