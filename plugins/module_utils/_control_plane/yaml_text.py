# Copyright: gpusplit contributors
# Apache-2.0
"""YAML text helpers for editing control-plane files in place: scalars, line edits, composed nodes.

Private to the collection.

Editing keeps every byte that does not have to change.  The YAML is composed (not just loaded) to
learn where each node sits in the text, only the affected scalars/lines are replaced, inserted or
deleted, and the result is loaded again and compared with the intended document; any difference is
an error, never a silently rewritten file.

PyYAML is imported guarded: it ships with ansible-core on the controller, but a managed host may
lack it; a function that needs it then refuses with a message that names PyYAML.
"""

from __future__ import annotations

import json
import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.flag_values import FlagEditError
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError

try:
    import yaml
except ImportError:  # pragma: no cover - PyYAML ships with ansible-core
    yaml = None


def require_yaml():
    """The ``yaml`` module; a :class:`GpusplitError` naming PyYAML when this Python lacks it."""
    if yaml is None:
        raise GpusplitError(
            "PyYAML is required to read and edit control-plane YAML files but cannot be imported by this "
            "Python; install it on the host (python3-yaml, or pip install PyYAML)"
        )
    return yaml


def load_map(text: str | None, what: str, of: str = "options", error=FlagEditError) -> dict:
    """``text`` as a dict (empty text or document: ``{}``).

    Invalid YAML or anything but a map raises ``error`` naming ``what`` (the file), e.g.
    ``<what> must be a YAML map of <of>, not a list``.
    """
    if text is None or not str(text).strip():
        return {}
    yaml_ = require_yaml()
    try:
        data = yaml_.safe_load(text)
    except yaml_.YAMLError as exc:
        raise error(f"{what} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise error(f"{what} must be a YAML map of {of}, not a {type(data).__name__}")
    return data


def load(text: str):
    """``yaml.safe_load`` of ``text``."""
    return require_yaml().safe_load(text)


def load_all(text: str) -> list:
    """Every non-empty document of ``text`` (``yaml.safe_load_all``)."""
    return [d for d in require_yaml().safe_load_all(text) if d is not None]


def _plain_ok(value: str) -> bool:
    if value == "" or value != value.strip() or "\n" in value or "\r" in value:
        return False
    yaml_ = require_yaml()
    try:
        return yaml_.safe_load(f"k: {value}") == {"k": value}
    except yaml_.YAMLError:
        return False


def render_scalar(value: str, style: str | None = None) -> str:
    """A YAML scalar for ``value``: plain when that reads back as the same string, else quoted."""
    value = str(value)
    if style == "'":
        return "'" + value.replace("'", "''") + "'"
    if style == '"' or not _plain_ok(value):
        return json.dumps(value)
    return value


def newline_of(text: str) -> str:
    """The text's line ending: ``\\r\\n`` when it holds one, else ``\\n``."""
    return "\r\n" if "\r\n" in text else "\n"


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for m in re.finditer(r"\n", text):
        starts.append(m.end())
    return starts


class Editor:
    """Collects (start, end, replacement) edits on a text and applies them right to left."""

    def __init__(self, text: str):
        self.text = text
        self.starts = _line_starts(text)
        self.edits: list[tuple[int, int, str]] = []

    def line_start(self, line: int) -> int:
        return self.starts[line] if line < len(self.starts) else len(self.text)

    def line_end(self, line: int) -> int:
        """Index just past the newline of ``line`` (or end of text)."""
        return self.line_start(line + 1)

    def line_text(self, line: int) -> str:
        return self.text[self.line_start(line) : self.line_end(line)]

    def replace(self, start: int, end: int, new: str):
        self.edits.append((start, end, new))

    def apply(self) -> str:
        out = self.text
        for start, end, new in sorted(self.edits, key=lambda e: (e[0], e[1]), reverse=True):
            out = out[:start] + new + out[end:]
        return out


def compose_all(text: str, what: str) -> list:
    """The composed node of every non-empty document of ``text``; invalid YAML names ``what``."""
    yaml_ = require_yaml()
    try:
        return [d for d in yaml_.compose_all(text) if d is not None]
    except yaml_.YAMLError as exc:
        raise FlagEditError(f"{what} is not valid YAML: {exc}") from exc


def compose_and_load(text: str, what: str) -> list[tuple]:
    """[(node, data)] for every document of ``text`` (empty documents skipped)."""
    yaml_ = require_yaml()
    loader = yaml_.SafeLoader(text)
    pairs = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is not None:
                pairs.append((node, loader.construct_document(node)))
    except yaml_.YAMLError as exc:
        raise FlagEditError(f"{what} is not valid YAML: {exc}") from exc
    finally:
        loader.dispose()
    return pairs


def is_scalar(node) -> bool:
    return isinstance(node, yaml.ScalarNode)


def is_sequence(node) -> bool:
    return isinstance(node, yaml.SequenceNode)


def is_mapping(node) -> bool:
    return isinstance(node, yaml.MappingNode)


def mapping_get(node, key: str):
    """``(key node, value node)`` of ``key`` in a mapping node; ``(None, None)`` when absent."""
    if not is_mapping(node):
        return None, None
    for k, v in node.value:
        if is_scalar(k) and k.value == key:
            return k, v
    return None, None


def last_line(node) -> int:
    """Last text line that belongs to ``node``."""
    if is_scalar(node) or getattr(node, "flow_style", False):
        return node.end_mark.line
    children = node.value
    if not children:
        return node.start_mark.line
    last = children[-1]
    if is_mapping(node):
        last = last[1]
    return last_line(last)


def ensure_line_end(editor: Editor, line: int, nl: str) -> str:
    """If ``line`` is the text's last line without a newline, inserting after it needs one first."""
    return "" if editor.line_text(line).endswith("\n") else nl
