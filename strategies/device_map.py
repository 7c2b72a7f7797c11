"""Model parallelism: put each part of a Keras 3 model on its own device.

The seeds' first strategy, "when the model is too big for one machine, assign
different parts of the graph to different machines", is manual in TF 2 +
Keras 3, and the obvious way of doing it fails silently: a ``tf.device`` scope
around layer *construction* places nothing, because Keras builds layers lazily
on the first call and everything lands on CPU:0.

A :class:`DeviceMap` maps layer-name patterns to devices, builds the model so
that every layer is built inside its device scope, pins each layer's forward
ops and its optimizer slots to the same device, and then *checks* where every
variable really is. Devices can be local (logical CPUs, GPUs) or tasks of a
cluster this process connected to with
``tf.config.experimental_connect_to_cluster`` (in-graph replication).

Example:
    >>> dm = DeviceMap({"encoder/.*": "/device:CPU:1", "head": "/device:CPU:2"})  # doctest: +SKIP
    >>> model = dm.build(make_model, input_shape=(None, 32), optimizer=optimizer)  # doctest: +SKIP
    >>> print(dm.explain(model))  # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import json
import logging
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from strategies import _placement_keras as pk
from strategies._device_map_report import LayerPlacement, placements, render_placements
from strategies._placement import device_matches, parse_device, resolve_device, variable_device
from strategies._placement_cluster import (
    connect_devices,
    in_graph_session,
    release_devices,
    run_in_graph_role,
    serve_devices,
)
from strategies._placement_errors import DeviceMapError
from tf_config import Problem

if TYPE_CHECKING:
    import keras

__all__ = [
    "DeviceMap",
    "DeviceMapError",
    "LayerPlacement",
    "SYNTAXES",
    "connect_devices",
    "in_graph_session",
    "release_devices",
    "run_in_graph_role",
    "serve_devices",
]

logger = logging.getLogger(__name__)


def _regex(pattern: str) -> Callable[[str], bool] | None:
    try:
        compiled = re.compile(pattern)
    except re.error:
        return None
    return lambda key: compiled.fullmatch(key) is not None


def _glob(pattern: str) -> Callable[[str], bool]:
    return lambda key: fnmatch.fnmatchcase(key, pattern)


def _auto(pattern: str) -> Callable[[str], bool]:
    regex, glob = _regex(pattern), _glob(pattern)
    return lambda key: glob(key) or (regex is not None and regex(key))


# pattern syntax -> builder of a matcher (key -> bool)
SYNTAXES: dict[str, Callable[[str], Callable[[str], bool] | None]] = {
    "auto": _auto,  # a pattern matches if it matches as a glob or as a regex
    "glob": _glob,
    "regex": _regex,
}


def _normalise_rules(rules: Mapping[str, str] | Sequence[tuple[str, str]] | None) -> tuple[tuple[str, str], ...]:
    items = list(rules.items()) if isinstance(rules, Mapping) else list(rules or ())
    if not items:
        raise DeviceMapError([Problem("error", "rules", (
            f"`rules` must map at least one layer pattern to a device. Received: rules={rules!r}. "
            "Pass e.g. {'encoder/.*': '/device:CPU:1'}."))])
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2 and all(isinstance(x, str) for x in item)):
            raise DeviceMapError([Problem("error", "rules", (
                f"each rule must be a (pattern, device) pair of strings. Received: {item!r}. "
                "Pass a dict such as {'head': '/device:CPU:1'}."))])
    return tuple(items)


@dataclasses.dataclass(frozen=True)
class DeviceMap:
    """An ordered mapping of layer-name patterns to devices.

    A pattern is matched against a layer's name and against its path (``name``
    of nested layers prefixed by their parents', e.g. ``encoder/dense``). The
    first matching rule wins; a layer no rule matches follows its nearest
    mapped parent, else ``default``.

    Attributes:
        rules: ``{pattern: device}`` in priority order (stored as pairs).
        default: device of unmapped layers; ``None`` leaves them to TensorFlow.
        syntax: ``"auto"`` (glob or regex), ``"glob"`` or ``"regex"``.
        place_gradients: also run each layer's backward ops on its device
            (TensorFlow would put them all where ``tape.gradient`` runs).
    """

    rules: tuple[tuple[str, str], ...]
    default: str | None = dataclasses.field(default=None, kw_only=True)
    syntax: str = dataclasses.field(default="auto", kw_only=True)
    place_gradients: bool = dataclasses.field(default=True, kw_only=True)
    _matchers: tuple[Callable[[str], bool], ...] = dataclasses.field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", _normalise_rules(self.rules))
        if not isinstance(self.place_gradients, bool):
            raise DeviceMapError([Problem("error", "place_gradients", (
                f"`place_gradients` is {self.place_gradients!r}; expected True or False."))])
        builder = SYNTAXES.get(self.syntax)
        if builder is None:
            raise DeviceMapError([Problem("error", "syntax", (
                f"`syntax` is {self.syntax!r}; expected one of {sorted(SYNTAXES)}. "
                "Use 'auto' unless a pattern is ambiguous."))])
        matchers, problems = [], []
        for pattern, device in self.rules:
            field = f"rules[{pattern!r}]"
            matcher = builder(pattern)
            if matcher is None:
                problems.append(Problem("error", field, (
                    f"pattern {pattern!r} is not a valid regular expression. "
                    "Fix it, or use syntax='glob'.")))
            matchers.append(matcher)
            self._collect_parse_error(problems, device, field=field)
        if self.default is not None:
            self._collect_parse_error(problems, self.default, field="default")
        if problems:
            raise DeviceMapError(problems)
        object.__setattr__(self, "_matchers", tuple(matchers))

    # ---------------------------------------------------------------- as data
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeviceMap:
        """``{"rules": {pattern: device} or [[pattern, device], ...], "default": ..., ...}``."""
        fields = ("rules", "default", "syntax", "place_gradients")
        unknown = sorted(set(data) - set(fields)) if isinstance(data, Mapping) else ["(not a mapping)"]
        if unknown or "rules" not in data:
            raise DeviceMapError([Problem("error", "device map", (
                f"a device map is a mapping with keys {list(fields)} ('rules' required). Received: {data!r}. "
                'Write e.g. {"rules": {"head": "/device:CPU:1"}, "default": "/device:CPU:0"}.'))])
        rules = data["rules"]
        if not isinstance(rules, Mapping):
            rules = [tuple(rule) if isinstance(rule, list) else rule for rule in rules or ()]
        return cls(rules, **{key: data[key] for key in fields[1:] if key in data})

    @classmethod
    def from_json(cls, text: str) -> DeviceMap:
        """Parses :meth:`to_json` output (e.g. a file next to a training script)."""
        try:
            data = json.loads(text)
        except (TypeError, json.JSONDecodeError) as exc:
            raise DeviceMapError([Problem("error", "device map", (
                f"the device map is not valid JSON ({exc}). Received: {str(text)[:80]!r}."))]) from exc
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        return {"rules": [list(rule) for rule in self.rules], "default": self.default,
                "syntax": self.syntax, "place_gradients": self.place_gradients}

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @staticmethod
    def _collect_parse_error(problems: list[Problem], device: str, *, field: str) -> None:
        try:
            parse_device(device, field=field)
        except ValueError as exc:
            problems.append(Problem("error", field, str(exc)))

    # ---------------------------------------------------------------- matching
    def matching_rules(self, keys: Sequence[str]) -> list[int]:
        """Indexes of the rules matching any of ``keys`` (a name and a path)."""
        return [i for i, m in enumerate(self._matchers) if any(m(k) for k in keys)]

    def _assign(self, keys_chain: Sequence[Sequence[str]]) -> tuple[str | None, str]:
        """(device, why) for the innermost layer of a chain of layer keys."""
        for depth, keys in enumerate(reversed(keys_chain)):
            hits = self.matching_rules(keys)
            if hits:
                pattern, device = self.rules[hits[0]]
                return device, (f"rule {pattern!r}" if depth == 0 else f"parent via {pattern!r}")
        return self.default, "default"

    def device_for(self, node: pk.LayerNode) -> tuple[str | None, str]:
        """Device of a layer of a model, and which rule decided it."""
        return self._assign([n.keys for n in node.ancestors + (node,)])

    # -------------------------------------------------------------- validation
    def problems(self, model: keras.Model | None = None) -> list[Problem]:
        """Everything wrong with this map, before anything runs.

        Errors: a device that does not exist (the message lists those that do).
        Warnings (only with ``model``): a pattern that matches no layer; two
        patterns matching one layer (the first wins).
        """
        found: list[Problem] = []
        devices = [(f"rules[{p!r}]", d) for p, d in self.rules]
        if self.default is not None:
            devices.append(("default", self.default))
        for field, device in devices:
            try:
                resolve_device(device, field=field)
            except ValueError as exc:
                found.append(Problem("error", field, str(exc)))
        if model is not None:
            found.extend(self._layer_warnings(model))
        return found

    def _layer_warnings(self, model: keras.Model) -> list[Problem]:
        nodes = pk.layer_tree(model)
        used: set[int] = set()
        warnings = []
        for node in nodes:
            hits = self.matching_rules(node.keys)
            used.update(hits)
            if len(hits) > 1:
                winner = self.rules[hits[0]]
                others = ", ".join(repr(self.rules[i][0]) for i in hits[1:])
                warnings.append(Problem("warning", f"rules[{winner[0]!r}]", (
                    f"layer {node.path!r} is matched by {winner[0]!r} and by {others}; "
                    f"the first wins: {winner[1]}. Reorder or narrow the patterns.")))
        names = ", ".join(n.path for n in nodes) or "(none)"
        for i, (pattern, _) in enumerate(self.rules):
            if i not in used:
                warnings.append(Problem("warning", f"rules[{pattern!r}]", (
                    f"pattern {pattern!r} matches no layer of model {model.name!r} "
                    f"(layers: {names}). Fix the pattern or remove the rule.")))
        return warnings

    def check(self, model: keras.Model | None = None) -> DeviceMap:
        """Raises :class:`DeviceMapError` on errors, logs warnings; returns self."""
        found = self.problems(model)
        for problem in found:
            if not problem.is_error:
                logger.warning("device map: %s", problem)
        if any(p.is_error for p in found):
            raise DeviceMapError(found)
        return self

    # ---------------------------------------------------------------- building
    @contextlib.contextmanager
    def scope(self, *, root: keras.Model | None = None) -> Iterator[DeviceMap]:
        """Inside, every Keras layer variable is created on its mapped device."""
        with pk.placing_variables(lambda keys: self._assign(keys)[0], root=root):
            yield self

    def build(
        self,
        model_fn: Callable[[], keras.Model],
        *,
        sample_input: Any = None,  # any batch the model takes
        input_shape: Sequence[int | None] | None = None,
        optimizer: keras.optimizers.Optimizer | None = None,
    ) -> keras.Model:
        """Builds ``model_fn()`` with every layer on its device, then checks it.

        Args:
            model_fn: returns a Keras 3 model (functional, sequential or
                subclassed); it may build layers itself (functional models do).
            sample_input: a batch to call the model on, to build lazy layers.
            input_shape: alternatively, the shape for ``model.build``.
            optimizer: a Keras optimizer whose slots must follow the map.

        Returns:
            The built model; its layers' forward ops are pinned to their devices.

        Raises:
            DeviceMapError: a device does not exist, a layer is still unbuilt,
                or a variable ended up on another device than its layer's.
        """
        self.check()
        with self.scope():
            model = model_fn()
        self._pin_calls(model)
        if sample_input is not None or input_shape is not None:
            with self.scope(root=model):
                if sample_input is not None:
                    model(sample_input)
                else:
                    model.build(input_shape)
        return self.apply(model, optimizer=optimizer)

    def builder(self, model_fn: Callable[[], keras.Model], *, sample_input: Any = None,
                input_shape: Sequence[int | None] | None = None) -> Callable[[], keras.Model]:
        """A zero-argument model_fn that builds through this map.

        For training functions that take a ``model_fn``, such as
        ``toolkit.fit(device_map.builder(make_model), ...)``, where ``make_model``
        builds the model and compiles it.
        """
        return lambda: self.build(model_fn, sample_input=sample_input, input_shape=input_shape)

    def apply(self, model: keras.Model, *, optimizer: keras.optimizers.Optimizer | None = None) -> keras.Model:
        """Pins calls and optimizer slots of a model built in :meth:`scope`, and verifies it."""
        self._pin_calls(model)
        if optimizer is not None:
            self.place_optimizer(optimizer)
        self.verify(model, optimizer=optimizer)
        self.check(model)
        return model

    @staticmethod
    def place_optimizer(optimizer: keras.optimizers.Optimizer) -> keras.optimizers.Optimizer:
        """Makes a Keras optimizer create each slot on its variable's device; returns it.

        Keras asks the strategy to colocate slots with their variables. That
        holds when the optimizer is built eagerly (``optimizer.build(vars)``),
        but Keras ``model.fit`` builds it while tracing, where the colocation
        is lost and every slot lands on CPU:0.
        """
        return pk.pin_optimizer_slots(optimizer)

    def _pin_calls(self, model: keras.Model) -> None:
        if self.default is not None:
            pk.pin_call(model, resolve_device(self.default, field="default"), gradients=self.place_gradients)
        for node in pk.layer_tree(model):
            device, _ = self.device_for(node)
            parent = self.device_for(node.ancestors[-1])[0] if node.ancestors else self.default
            if device is not None and device != parent:
                pk.pin_call(node.layer, resolve_device(device, field=node.path), gradients=self.place_gradients)

    # ------------------------------------------------------------ verification
    def verify(self, model: keras.Model, *, optimizer: keras.optimizers.Optimizer | None = None) -> None:
        """Checks that every mapped variable (and slot) is where the map says.

        Raises:
            DeviceMapError: listing each layer that is unbuilt or misplaced.
        """
        found, expected = [], {}
        for node in pk.layer_tree(model):
            device, why = self.device_for(node)
            if device is None or getattr(node.layer, pk.OWN_PLACEMENT_ATTR, False):
                continue
            wanted = tf.DeviceSpec.from_string(resolve_device(device, field=node.path))
            if not node.layer.built:
                found.append(Problem("error", node.path, (
                    f"layer {node.path!r} is not built, so its variables would be created "
                    f"later, outside the map, on the default device instead of {device}. "
                    "Pass sample_input= or input_shape= to DeviceMap.build.")))
            for variable in pk.own_variables(node.layer):
                expected[id(variable)] = (variable, wanted)
                self._check_variable(found, node.path, variable, wanted, why)
        if optimizer is not None:
            refs = [v for v, _ in expected.values()]
            for slot in optimizer.variables:
                owner = pk.slot_owner(slot, refs)
                if owner is not None:
                    self._check_variable(found, f"{optimizer.name}/{slot.name}", slot,
                                         expected[id(owner)][1], f"slot of {owner.path}")
        if found:
            raise DeviceMapError(found)

    @staticmethod
    def _check_variable(found: list[Problem], field: str, variable: keras.Variable,
                        wanted: tf.DeviceSpec, why: str) -> None:
        actual = variable_device(variable)
        if not device_matches(wanted, tf.DeviceSpec.from_string(actual or "/job:unknown")):
            found.append(Problem("error", field, (
                f"variable {variable.path!r} is on {actual or '(unplaced)'} but the map "
                f"({why}) puts it on {wanted.to_string()}. Build the model with "
                "DeviceMap.build(model_fn, ...) or inside `with device_map.scope():` "
                "so each layer is built inside its device scope.")))

    # --------------------------------------------------------------- reporting
    def placements(self, model: keras.Model) -> list[LayerPlacement]:
        """One row per layer that owns variables: where it is and how big."""
        return placements(model, lambda node: self.device_for(node))

    def explain(self, model: keras.Model) -> str:
        """A placement table (layer, device, params, bytes) and per-device totals."""
        return render_placements(self.placements(model), self.problems(model))
