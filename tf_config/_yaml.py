"""YAML read with limits: ``yaml.safe_load`` that refuses alias bombs, deep nesting and bad dates.

``yaml.safe_load`` is safe from code execution but not from size: a 400-byte
"billion laughs" document builds nine levels of shared lists that expand to
387 million strings as soon as anything walks them, and a few thousand ``[``
exhaust Python's recursion. This loader counts while it composes, before any
value is constructed: nesting, aliases, and the number of values the document
would have with every alias expanded. Timestamps stay text (``2001-13-45`` is
not a date anyone meant, and no tfdist field is a date).
"""
from __future__ import annotations

from typing import Any

from .limits import MAX_FILE_BYTES, MAX_NESTING, MAX_YAML_ALIASES, MAX_YAML_NODES

__all__ = ["YAMLInputError", "safe_load"]


class YAMLInputError(ValueError):
    """The text is not YAML tfdist will read; the message says why and what to change."""


def safe_load(text: str) -> Any:
    """Parses one YAML (or JSON) document within the limits of :mod:`tf_config.limits`.

    Raises:
        YAMLInputError: the syntax is wrong, a value cannot be built, or a limit is hit.

    Example:
        >>> safe_load("region: 2001-13-45")
        {'region': '2001-13-45'}
    """
    import yaml

    if len(text) > MAX_FILE_BYTES:
        raise YAMLInputError(f"it has {len(text):,} characters, more than the {MAX_FILE_BYTES:,} tfdist reads.")
    _check_brackets(text)
    loader = None
    try:
        loader = _loader_class()(text)
        return loader.get_single_data()
    except YAMLInputError:
        raise
    except yaml.YAMLError as exc:
        raise YAMLInputError(_one_line(exc).replace('"<unicode string>", ', "")) from None
    except RecursionError:
        raise YAMLInputError(f"it nests deeper than {MAX_NESTING} levels.") from None
    except (ValueError, TypeError, OverflowError) as exc:  # a value the constructor cannot build
        raise YAMLInputError(f"it has a value YAML cannot build: {_one_line(exc)}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _check_brackets(text: str) -> None:
    """Refuses flow nesting past the limit up front: PyYAML's scanner reads a deep ``[[[[`` run
    ahead of the composer (seconds for 100,000 of them), so counting while composing is too late.
    Quoted strings are skipped; brackets in a plain scalar may count, which only a document with
    more than ``MAX_NESTING`` of them unclosed could notice."""
    depth, quote = 0, ""
    for char in text:
        if quote:
            if char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
            if depth > MAX_NESTING:
                raise YAMLInputError(f"it nests deeper than {MAX_NESTING} levels.")
        elif char in "]}":
            depth = max(0, depth - 1)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300].rstrip(".") + "."


_LOADER: type | None = None


def _loader_class() -> type:
    """Built on first use, so importing tf_config never imports yaml."""
    global _LOADER
    if _LOADER is None:
        _LOADER = _make_loader()
    return _LOADER


def _make_loader() -> type:
    import yaml
    from yaml.nodes import MappingNode, SequenceNode

    class BoundedLoader(yaml.SafeLoader):
        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self._depth = 0
            self._aliases = 0
            self._sizes: dict[int, int] = {}

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                self._aliases += 1
                if self._aliases > MAX_YAML_ALIASES:
                    raise YAMLInputError(f"it uses more than {MAX_YAML_ALIASES} aliases (*name).")
                target = self.anchors.get(event.anchor)
                if target is not None and id(target) not in self._sizes:
                    raise YAMLInputError(f"the alias *{event.anchor} on line {event.start_mark.line + 1} "
                                         "is inside the value it names, which would make it infinite.")
                return super().compose_node(parent, index)
            self._depth += 1
            if self._depth > MAX_NESTING:
                raise YAMLInputError(f"it nests deeper than {MAX_NESTING} levels (line "
                                     f"{self.peek_event().start_mark.line + 1}).")
            try:
                node = super().compose_node(parent, index)
            finally:
                self._depth -= 1
            size = 1  # every child, alias or not, was composed (and sized) before its parent
            if isinstance(node, SequenceNode):
                size += sum(self._sizes[id(child)] for child in node.value)
            elif isinstance(node, MappingNode):
                size += sum(self._sizes[id(k)] + self._sizes[id(v)] for k, v in node.value)
            if size > MAX_YAML_NODES:
                raise YAMLInputError(
                    f"it expands to more than {MAX_YAML_NODES:,} values once its aliases are resolved "
                    f"(line {node.start_mark.line + 1}); an alias bomb, or a document too big for a job.")
            self._sizes[id(node)] = size
            return node

    timestamp = "tag:yaml.org,2002:timestamp"
    BoundedLoader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != timestamp]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    return BoundedLoader
