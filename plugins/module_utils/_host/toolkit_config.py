# Copyright: gpusplit contributors
# Apache-2.0
"""Pure text editing of the nvidia-container-runtime ``config.toml``. Private to the collection.

The NVIDIA Container Toolkit reads ``/etc/nvidia-container-runtime/config.toml``. gpusplit sets a
few keys in it (``accept-nvidia-visible-devices-envvar-when-unprivileged = false`` and
``accept-nvidia-visible-devices-as-volume-mounts = true``, see docs/hardening.md) and must leave
everything else exactly as it was: the packaged file is a dpkg/rpm conffile full of commented
defaults, and operators edit it by hand. So the file is edited as text, line by line, never
re-serialised:

* an existing assignment of the key in the right table has its value replaced (the key's
  spelling, the whitespace around ``=`` and a trailing comment stay);
* otherwise a commented-out assignment (``#key = ...``, as the toolkit generates them) in the
  right table becomes the assignment;
* otherwise ``key = value`` is appended to the end of the table's section (for top-level keys:
  before the first ``[table]``), or a new ``[table]`` is appended to the file.

The input must parse, and the output is parsed again and checked to carry every requested value
(and nothing else changed) before it is returned. Parsing uses toml_read.py, a TOML 1.0 reader in
the standard library only, because managed hosts run Python 3.8 to 3.13 and ``tomllib`` is 3.11+
(the reason for a reader here rather than a controller-side edit is in docs/hardening.md).

Keys the toolkit knows are checked for the type it reads them as (``TOOLKIT_KEY_TYPES``): the string
``"false"`` for a boolean key would be written as a TOML string, which the toolkit does not read as
false, so the hardening would silently not apply. No I/O and no Ansible imports.
"""

from __future__ import annotations

import math
import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import (
    INT64_MAX,
    INT64_MIN,
    GpusplitError,
    a_type_name,
    check_number,
    type_name,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._host import toml_read

DEFAULT_PATH = "/etc/nvidia-container-runtime/config.toml"
ENVVAR_WHEN_UNPRIVILEGED = "accept-nvidia-visible-devices-envvar-when-unprivileged"
AS_VOLUME_MOUNTS = "accept-nvidia-visible-devices-as-volume-mounts"
# What gpusplit's hardening sets (docs/hardening.md).
HARDENING_SETTINGS = {ENVVAR_WHEN_UNPRIVILEGED: False, AS_VOLUME_MOUNTS: True}

# The type the toolkit reads each of its keys as (its internal/config package: Config, ContainerCLIConfig,
# RuntimeConfig, RuntimeHookConfig, CTKConfig; the default file in tests/fixtures/nvidia-container-toolkit).
# A setting of a key listed here must have that type; keys not listed (newer toolkits) take any value.
BOOL = "boolean"
STRING = "string"
STRING_LIST = "list of strings"
TOOLKIT_KEY_TYPES = {
    ENVVAR_WHEN_UNPRIVILEGED: BOOL,
    AS_VOLUME_MOUNTS: BOOL,
    "disable-require": BOOL,
    "supported-driver-capabilities": STRING,
    "swarm-resource": STRING,
    "nvidia-container-cli.root": STRING,
    "nvidia-container-cli.path": STRING,
    "nvidia-container-cli.environment": STRING_LIST,
    "nvidia-container-cli.debug": STRING,
    "nvidia-container-cli.ldcache": STRING,
    "nvidia-container-cli.load-kmods": BOOL,
    "nvidia-container-cli.no-pivot": BOOL,
    "nvidia-container-cli.no-cgroups": BOOL,
    "nvidia-container-cli.user": STRING,
    "nvidia-container-cli.ldconfig": STRING,
    "nvidia-container-runtime.debug": STRING,
    "nvidia-container-runtime.log-level": STRING,
    "nvidia-container-runtime.runtimes": STRING_LIST,
    "nvidia-container-runtime.mode": STRING,
    "nvidia-container-runtime.modes.csv.mount-spec-path": STRING,
    "nvidia-container-runtime.modes.cdi.default-kind": STRING,
    "nvidia-container-runtime.modes.cdi.annotation-prefixes": STRING_LIST,
    "nvidia-container-runtime.modes.cdi.spec-dirs": STRING_LIST,
    "nvidia-container-runtime.modes.legacy.cuda-compat-mode": STRING,
    "nvidia-container-runtime-hook.path": STRING,
    "nvidia-container-runtime-hook.skip-mode-detection": BOOL,
    "nvidia-ctk.path": STRING,
}
# Every key of these tables is read as a boolean (the toolkit's feature flags).
BOOL_TABLES = (("features",),)


def expected_type(table, name):
    """The type the toolkit reads ``table.name`` as (BOOL, STRING, STRING_LIST), or None when unknown."""
    if table in BOOL_TABLES:
        return BOOL
    return TOOLKIT_KEY_TYPES.get(".".join((*table, name)))


def _has_type(value, kind):
    if kind == BOOL:
        return isinstance(value, bool)
    if kind == STRING:
        return isinstance(value, str)
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)


def check_type(key, table, name, value):
    """Refuse a value of another type than the toolkit reads ``key`` as (TomlEditError naming key and reason)."""
    kind = expected_type(table, name)
    if kind is None or _has_type(value, kind):
        return
    word = value.strip().lower() if isinstance(value, str) else None
    if kind == BOOL and word in ("true", "false", "yes", "no", "on", "off"):
        hint = (
            f"write {'true' if word in ('true', 'yes', 'on') else 'false'} as a YAML boolean, without quotes"
        )
    elif kind == BOOL:
        hint = "give true or false"
    elif kind == STRING:
        hint = "quote the value"
    else:
        hint = "give a list of strings"
    raise TomlEditError(
        f"setting {key}: {value!r} is {a_type_name(value)}, but the NVIDIA Container Toolkit reads {key} as a "
        f"{kind}; written as given it would not take effect ({hint})"
    )


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_BARE_KEY_FULL = re.compile(r"^[A-Za-z0-9_-]+$")
_WS = " \t"


class TomlEditError(GpusplitError):
    """The file cannot be edited safely (does not parse, bad key or value, ambiguous table)."""


# --------------------------------------------------------------------------------------------
# keys and values


def split_key(key):
    """``"a.b.c"`` -> ``(("a", "b"), "c")``; a top-level key -> ``((), key)``.

    Every dot-separated part must be a TOML bare key (letters, digits, ``_``, ``-``).
    """
    if not isinstance(key, str) or not key.strip():
        raise TomlEditError(f"setting name {key!r} is not a non-empty string")
    parts = [p.strip() for p in key.strip().split(".")]
    for part in parts:
        if not _BARE_KEY_FULL.match(part):
            raise TomlEditError(
                f"setting name {key!r}: {part!r} is not a bare TOML key "
                "(letters, digits, '_' and '-'; write a key inside a table as table.key)"
            )
    return tuple(parts[:-1]), parts[-1]


# TOML basic-string escapes; other control characters are written \uXXXX, and so are the characters that
# other tools' line splitters (Python's str.splitlines) take for line ends, so that the file reads the same there
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_LINE_LIKE = frozenset("\x85\u2028\u2029")


def _format_string(value):
    out = []
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F or ch in _LINE_LIKE:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def format_value(value, key="value"):
    """A TOML literal for a bool, int, float, str or a list of those."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        # TOML integers are 64-bit (the toolkit's Go reader refuses a larger one: the whole file unread)
        return str(check_number(value, key, INT64_MIN, INT64_MAX, integer=True, error=TomlEditError))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TomlEditError(f"{key}: {value!r} is not a finite number")
        return repr(value)
    if isinstance(value, str):
        return _format_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v, key) for v in value) + "]"
    raise TomlEditError(f"{key}: {value!r} ({type_name(value)}) is not a boolean, number, string or list")


# whether two parsed TOML values are the same value (nan the same as nan, true not 1, -0.0 not 0.0)
_same = toml_read.same_value


_MISSING = object()


def lookup(data, table, name):
    """The value at ``table`` + ``name`` in parsed TOML, or the sentinel ``_MISSING``."""
    node = data
    for part in table:
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    if not isinstance(node, dict):
        return _MISSING
    return node.get(name, _MISSING)


def parse(text, name="config.toml"):
    """The parsed TOML ``text``; a TomlEditError naming the file (and line and column) when it is not valid."""
    try:
        return toml_read.loads(text)
    except toml_read.TomlReadError as exc:
        raise TomlEditError(f"{name} is not valid TOML: {exc}") from None


# --------------------------------------------------------------------------------------------
# a small scanner: which lines are headers, assignments, comments; where values end


class _Line:
    __slots__ = ("start", "end", "kind", "table", "keys", "array", "value_span", "indent")

    def __init__(self, start, end, kind, table):
        self.start = start  # first physical line (index)
        self.end = end  # last physical line (index), > start for multi-line values
        self.kind = kind  # "blank" | "comment" | "header" | "keyval"
        self.table = table  # the table the statement belongs to (header: the table it opens)
        self.keys = ()  # keyval: the (dotted) key parts; header: same as table
        self.array = False  # header: [[array of tables]]
        self.value_span = None  # keyval: (line, col, line, col) of the value text
        self.indent = ""


def _parse_key(line, pos, stop_chars):
    """Parse a (dotted, maybe quoted) key starting at ``pos``; return (parts, new_pos)."""
    parts = []
    n = len(line)
    while True:
        while pos < n and line[pos] in _WS:
            pos += 1
        if pos >= n:
            raise TomlEditError(f"cannot read a key in line {line!r}")
        ch = line[pos]
        if ch == '"':
            end = pos + 1
            buf = []
            while end < n and line[end] != '"':
                if line[end] == "\\" and end + 1 < n:
                    buf.append(line[end : end + 2])
                    end += 2
                    continue
                buf.append(line[end])
                end += 1
            parts.append(toml_read.decode_basic_string("".join(buf)))
            pos = end + 1
        elif ch == "'":
            end = line.index("'", pos + 1)
            parts.append(line[pos + 1 : end])
            pos = end + 1
        else:
            match = _BARE_KEY.match(line, pos)
            if not match:
                raise TomlEditError(f"cannot read a key in line {line!r}")
            parts.append(match.group(0))
            pos = match.end()
        while pos < n and line[pos] in _WS:
            pos += 1
        if pos < n and line[pos] == ".":
            pos += 1
            continue
        if pos < n and line[pos] in stop_chars:
            return tuple(parts), pos
        raise TomlEditError(f"cannot read a key in line {line!r}")


def _scan_value(lines, li, col):
    """Find the end of the value starting at ``lines[li][col]``; return (end line, end col).

    The end column is where the value text stops (before blanks and a trailing comment).
    """
    depth = 0
    last_line, last_col = li, col
    while li < len(lines):
        line = lines[li]
        n = len(line.rstrip("\r\n"))
        while col < n:
            ch = line[col]
            if line.startswith('"""', col) or line.startswith("'''", col):
                quote = line[col : col + 3]
                col += 3
                # find the closing triple quote, possibly lines later
                while True:
                    body = lines[li]
                    bn = len(body.rstrip("\r\n"))
                    found = -1
                    k = col
                    while k < bn:
                        if quote == '"""' and body[k] == "\\":
                            k += 2
                            continue
                        if body.startswith(quote, k):
                            found = k
                            break
                        k += 1
                    if found >= 0:
                        col = found + 3
                        # up to two extra quotes belong to the string
                        extra = 0
                        while extra < 2 and col < bn and body[col] == quote[0]:
                            col += 1
                            extra += 1
                        line = body
                        n = bn
                        break
                    li += 1
                    col = 0
                    if li >= len(lines):
                        raise TomlEditError("unterminated multi-line string")
                last_line, last_col = li, col
                continue
            if ch == '"':
                k = col + 1
                while k < n and line[k] != '"':
                    k += 2 if line[k] == "\\" else 1
                col = k + 1
                last_line, last_col = li, col
                continue
            if ch == "'":
                k = line.index("'", col + 1)
                col = k + 1
                last_line, last_col = li, col
                continue
            if ch == "#":
                break
            if ch in "[{":
                depth += 1
            elif ch in "]}":
                depth -= 1
            if ch not in _WS:
                last_line, last_col = li, col + 1
            col += 1
        if depth <= 0:
            return last_line, last_col
        li += 1
        col = 0
    raise TomlEditError("unterminated array or inline table")


def _scan(lines):
    """Classify the statements of the file."""
    out = []
    table = ()
    li = 0
    while li < len(lines):
        line = lines[li]
        body = line.rstrip("\r\n")
        stripped = body.lstrip(_WS)
        indent = body[: len(body) - len(stripped)]
        if not stripped:
            item = _Line(li, li, "blank", table)
        elif stripped.startswith("#"):
            item = _Line(li, li, "comment", table)
        elif stripped.startswith("["):
            array = stripped.startswith("[[")
            pos = len(indent) + (2 if array else 1)
            keys, pos = _parse_key(body, pos, "]")
            table = keys
            item = _Line(li, li, "header", table)
            item.keys = keys
            item.array = array
        else:
            keys, pos = _parse_key(body, len(indent), "=")
            pos += 1
            while pos < len(body) and body[pos] in _WS:
                pos += 1
            end_line, end_col = _scan_value(lines, li, pos)
            item = _Line(li, end_line, "keyval", table)
            item.keys = keys
            item.value_span = (li, pos, end_line, end_col)
        item.indent = indent
        out.append(item)
        li = item.end + 1
    return out


_COMMENTED = re.compile(r"^(?P<indent>[ \t]*)#[ \t]*(?P<key>[A-Za-z0-9_.\- \t\"']+?)[ \t]*=")


def _commented_key(line):
    """The key parts of a commented-out assignment ``# key = ...``, else None."""
    match = _COMMENTED.match(line)
    if not match:
        return None
    try:
        keys, _unused = _parse_key(match.group("key") + "=", 0, "=")
    except ValueError:  # TomlEditError and TomlReadError are GpusplitErrors, hence ValueErrors
        return None
    return keys


# --------------------------------------------------------------------------------------------
# editing


def _newline_of(text):
    if "\r\n" in text:
        return "\r\n"
    return "\n"


def _section_bounds(items, table):
    """Indexes into ``items`` of the statements in the section of ``table`` (() = top level).

    Returns (header item or None, [items of the section]) or None when no such header exists.
    """
    if not table:
        section = []
        for item in items:
            if item.kind == "header":
                break
            section.append(item)
        return None, section
    for idx, item in enumerate(items):
        if item.kind == "header" and item.keys == table:
            if item.array:
                raise TomlEditError(
                    f"[{'.'.join(table)}] is an array of tables ([[...]]); cannot pick one of its entries"
                )
            section = []
            for nxt in items[idx + 1 :]:
                if nxt.kind == "header":
                    break
                section.append(nxt)
            return item, section
    return None


def _insert_at_section_end(lines, header, section, new_line, nl):
    """Insert ``new_line`` after the last non-blank statement of the section."""
    content = [i for i in section if i.kind != "blank"]
    if content:
        at = content[-1].end + 1
    elif header is not None:
        at = header.end + 1
    else:
        at = 0
    if at > 0 and not lines[at - 1].endswith(("\n", "\r")):
        lines[at - 1] += nl
    insert = [new_line + nl]
    if header is None and at == 0 and lines and lines[0].strip() and lines[0].lstrip().startswith("["):
        insert.append(nl)  # keep a blank line between the new top-level key and the first table
    lines[at:at] = insert


def _apply_one(text, table, name, literal):
    """Return (new text, action) for one key; ``text`` must parse."""
    nl = _newline_of(text)
    lines = toml_read.split_lines(text)
    items = _scan(lines)
    full = table + (name,)

    # 1. an active assignment, possibly with a dotted key inside a parent table
    for item in items:
        if item.kind == "keyval" and item.table + item.keys == full:
            l0, c0, l1, c1 = item.value_span
            head = lines[l0][:c0]
            tail = lines[l1][c1:]
            lines[l0 : l1 + 1] = [head + literal + tail]
            return "".join(lines), "replaced"

    # 2. a commented-out assignment in the right table
    for item in items:
        if item.kind != "comment":
            continue
        keys = _commented_key(lines[item.start])
        if keys is None or item.table + keys != full:
            continue
        line = lines[item.start]
        ending = line[len(line.rstrip("\r\n")) :]
        key_text = ".".join(keys)
        lines[item.start] = f"{item.indent}{key_text} = {literal}{ending}"
        return "".join(lines), "uncommented"

    # 3. append to the table's section
    found = _section_bounds(items, table)
    if found is not None:
        header, section = found
        indent = ""
        for i in section:
            if i.kind == "keyval":
                indent = i.indent
                break
        _insert_at_section_end(lines, header, section, f"{indent}{name} = {literal}", nl)
        return "".join(lines), "inserted"

    # 4. the table is only defined through dotted keys of a parent section, or not at all
    for depth in range(len(table) - 1, -1, -1):
        parent = table[:depth]
        rest = table[depth:]
        defined_by_dots = any(
            i.kind == "keyval"
            and i.table == parent
            and i.keys[: len(rest)] == rest
            and len(i.keys) > len(rest)
            for i in items
        )
        if defined_by_dots:
            found = _section_bounds(items, parent)
            if found is None:
                break
            header, section = found
            key_text = ".".join((*rest, name))
            _insert_at_section_end(lines, header, section, f"{key_text} = {literal}", nl)
            return "".join(lines), "inserted"

    # a new table at the end of the file
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += nl
    block = []
    if lines and lines[-1].strip():
        block.append(nl)
    block.append(f"[{'.'.join(table)}]{nl}")
    block.append(f"{name} = {literal}{nl}")
    lines.extend(block)
    return "".join(lines), "inserted"


def edit_config(text, settings, name="config.toml"):
    """Set ``settings`` (``{"key" | "table.key": value}``) in the TOML ``text``.

    Returns ``{"text", "changed", "before", "after", "changes"}``: ``before``/``after`` map each
    setting to its parsed value (None when absent), ``changes`` lists
    ``{"key", "before", "after", "action"}`` with action ``unchanged``, ``replaced``,
    ``uncommented`` or ``inserted``. Raises TomlEditError (naming ``name``) when the input does not
    parse, a setting is malformed, or the edit would not yield exactly the requested values.
    """
    if not isinstance(settings, dict) or not settings:
        raise TomlEditError("settings must be a non-empty mapping of key -> value")
    data = parse(text, name)
    parsed = {}
    for key in sorted(settings, key=str):
        table, leaf = split_key(key)
        check_type(key, table, leaf, settings[key])
        literal = format_value(settings[key], key)
        full = table + (leaf,)
        if full in (p[0] + (p[1],) for p in parsed.values()):
            raise TomlEditError(f"setting {key!r} is given twice (with different spelling)")
        parsed[key] = (table, leaf, literal)

    before = {}
    changes = []
    current = text
    for key, (table, leaf, literal) in parsed.items():
        wanted = settings[key]
        old = lookup(data, table, leaf)
        before[key] = None if old is _MISSING else old
        if old is not _MISSING and isinstance(old, dict):
            raise TomlEditError(f"{name}: {key} is a table, not a value")
        if old is not _MISSING and _same(old, wanted):
            changes.append({"key": key, "before": old, "after": wanted, "action": "unchanged"})
            continue
        # an intermediate part of the key must be a table, not a value
        node = data
        for pos, part in enumerate(table):
            if isinstance(node, dict) and part in node and not isinstance(node[part], dict):
                raise TomlEditError(
                    f"{name}: cannot set {key}: {'.'.join(table[: pos + 1])} is a value, not a table"
                )
            node = node.get(part, {}) if isinstance(node, dict) else {}
        current, action = _apply_one(current, table, leaf, literal)
        changes.append({"key": key, "before": before[key], "after": wanted, "action": action})

    result = parse(current, f"{name} (after editing)")
    after = {}
    for key, (table, leaf, _literal) in parsed.items():
        got = lookup(result, table, leaf)
        if got is _MISSING or not _same(got, settings[key]):
            raise TomlEditError(
                f"{name}: editing {key} did not yield {settings[key]!r} (got "
                f"{'nothing' if got is _MISSING else repr(got)}); the file was left alone"
            )
        after[key] = got
    # nothing but the requested keys may change meaning
    _check_rest_unchanged(data, result, [p[0] + (p[1],) for p in parsed.values()], name)
    return {
        "text": current,
        "changed": current != text,
        "before": before,
        "after": after,
        "changes": changes,
    }


def _check_rest_unchanged(old, new, touched, name):
    def strip(tree, prefix=()):
        if not isinstance(tree, dict):
            return tree
        out = {}
        for k, v in tree.items():
            path = (*prefix, k)
            if path in touched:
                continue
            out[k] = strip(v, path)
        return out

    def prune(tree):
        # tables created only to hold a touched key are empty after strip
        if not isinstance(tree, dict):
            return tree
        out = {}
        for k, v in tree.items():
            v = prune(v)
            if isinstance(v, dict) and not v:
                continue
            out[k] = v
        return out

    if not _same(prune(strip(old)), prune(strip(new))):
        raise TomlEditError(f"{name}: the edit would change other settings too; the file was left alone")


def render_new(settings):
    """A new file holding only ``settings`` (for ``create: true`` on a host without the file)."""
    return edit_config("", settings, "new config.toml")["text"] if settings else ""
