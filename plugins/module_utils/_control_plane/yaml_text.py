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
import traceback

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.flag_values import FlagEditError
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, a_type_name

try:
    import yaml
except ImportError:  # PyYAML ships with ansible-core on the controller; a managed host may lack it
    yaml = None
    #: The traceback of the failed import (None when PyYAML imports), for ``missing_required_lib``.
    YAML_IMPORT_ERROR = traceback.format_exc()
else:
    YAML_IMPORT_ERROR = None

#: How to get PyYAML onto a managed host, said after Ansible's ``missing_required_lib`` text.
YAML_INSTALL_HINT = (
    "Install PyYAML for that Python: the python3-yaml package (Debian, Ubuntu, RHEL and derivatives) "
    "or pip install PyYAML."
)


def require_yaml():
    """The ``yaml`` module; a :class:`GpusplitError` naming PyYAML when this Python lacks it."""
    if yaml is None:
        raise GpusplitError(
            "PyYAML is required to read and edit control-plane YAML files but cannot be imported by this "
            "Python. " + YAML_INSTALL_HINT
        )
    return yaml


def yaml_problem(exc) -> str:
    """Where and what a PyYAML error is, in one line: ``line 2, column 1: expected ... (while parsing ...)``.

    PyYAML's own text spans several lines and names the input as ``"<unicode string>"``; the
    caller names the file.
    """
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    if not problem:
        text = " ".join(str(exc).split())
        return f"line {mark.line + 1}, column {mark.column + 1}: {text}" if mark else text
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    return f"{where}{problem}" + (f" ({context})" if context else "")


def invalid_yaml(what: str, exc) -> str:
    """The refusal for a file that is not YAML: the file, where, what, and what to do."""
    return f"{what} is not valid YAML ({yaml_problem(exc)}); fix the syntax there"


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
        raise error(invalid_yaml(what, exc)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise error(f"{what} must be a YAML map of {of}, not {a_type_name(data)}")
    return data


def load(text: str, what: str = "the text"):
    """``yaml.safe_load`` of ``text``; invalid YAML is a :class:`FlagEditError` naming ``what``."""
    yaml_ = require_yaml()
    try:
        return yaml_.safe_load(text)
    except yaml_.YAMLError as exc:
        raise FlagEditError(invalid_yaml(what, exc)) from None


def load_all(text: str, what: str = "the text") -> list:
    """Every non-empty document of ``text`` (``yaml.safe_load_all``); invalid YAML names ``what``."""
    yaml_ = require_yaml()
    try:
        return [d for d in yaml_.safe_load_all(text) if d is not None]
    except yaml_.YAMLError as exc:
        raise FlagEditError(invalid_yaml(what, exc)) from None


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
        raise FlagEditError(invalid_yaml(what, exc)) from None


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
        raise FlagEditError(invalid_yaml(what, exc)) from None
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
