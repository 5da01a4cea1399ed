# Copyright: gpusplit contributors
# Apache-2.0
"""A TOML 1.0 reader for managed hosts, standard library only. Private to the collection.

``loads(text)`` returns what the standard library's ``tomllib.loads`` returns (Python 3.11+):
dicts, lists, str, int, float, bool and ``datetime`` / ``date`` / ``time`` objects, and refuses
every document TOML 1.0 calls invalid (redefined tables or keys, inline tables extended later,
bad escapes, control characters, leading zeros, ...) with a TomlReadError naming the line and
column. Managed hosts run Python 3.8 to 3.13, where ``tomllib`` is missing before 3.11; this
reader lets ``nvidia_toolkit_config`` check, on the host, that the file parses before and after its
text edit and carries exactly the wanted values. It reads; it never writes TOML (the edit is done on
the text, see toolkit_config.py). The unit tests compare it with ``tomllib`` on every Python that
has it.
"""

from __future__ import annotations

import datetime as _dt
import re
from math import copysign as _copysign
from math import isnan as _isnan

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name


class TomlReadError(GpusplitError):
    """The text is not valid TOML 1.0; the message names the line and column."""


_BARE_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_WS = " \t"
# control characters TOML forbids in comments and strings (tab is allowed)
_ILLEGAL = frozenset(chr(c) for c in range(0x20) if c != 0x09) | {"\x7f"}
_ILLEGAL_MULTILINE = _ILLEGAL - {"\n"}
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}

_TIME = r"([01][0-9]|2[0-3]):([0-5][0-9]):([0-5][0-9])(?:\.([0-9]+))?"
_RE_DATETIME = re.compile(
    r"([0-9]{4})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    r"(?:[Tt ]" + _TIME + r"(?:([Zz])|([+-])([01][0-9]|2[0-3]):([0-5][0-9]))?)?"
)
_RE_TIME = re.compile(_TIME)
_RE_NUMBER = re.compile(
    r"0x[0-9A-Fa-f](?:_?[0-9A-Fa-f])*"
    r"|0o[0-7](?:_?[0-7])*"
    r"|0b[01](?:_?[01])*"
    r"|[+-]?(?:0|[1-9](?:_?[0-9])*)(?:\.[0-9](?:_?[0-9])*)?(?:[eE][+-]?[0-9](?:_?[0-9])*)?"
)
_RE_SPECIAL_FLOAT = re.compile(r"[+-]?(?:inf|nan)")


class _Flags:
    """What may still happen to each table path: tomllib's two rules, kept the same way.

    FROZEN: an inline table or array (nothing may be added to it later); EXPLICIT: a table defined by
    a [header] or by dotted keys (it may not be defined again).
    """

    FROZEN = 0
    EXPLICIT = 1

    def __init__(self):
        self._tree = {}
        self._pending = []

    def _node(self, key, create):
        node = {"children": self._tree}
        for part in key:
            children = node["children"]
            if part not in children:
                if not create:
                    return None
                children[part] = {"flags": set(), "recursive": set(), "children": {}}
            node = children[part]
        return node

    def add_pending(self, key, flag):
        self._pending.append((key, flag))

    def finalize_pending(self):
        for key, flag in self._pending:
            self.set(key, flag)
        self._pending = []

    def unset_all(self, key):
        if not key:
            return
        parent = self._node(key[:-1], create=False)
        if parent is not None:
            parent["children"].pop(key[-1], None)

    def set(self, key, flag, recursive=False):
        node = self._node(key, create=True)
        node["recursive" if recursive else "flags"].add(flag)

    def is_(self, key, flag):
        if not key:
            return False
        children = self._tree
        for part in key[:-1]:
            if part not in children:
                return False
            node = children[part]
            if flag in node["recursive"]:
                return True
            children = node["children"]
        last = children.get(key[-1])
        if last is None:
            return False
        return flag in last["flags"] or flag in last["recursive"]


class _Parser:
    def __init__(self, text):
        if not isinstance(text, str):
            raise TomlReadError(f"TOML text must be a string, got {type_name(text)}")
        self.src = text
        self.pos = 0
        self.data = {}
        self.flags = _Flags()

    # ---- errors and position

    def error(self, message, pos=None):
        line, col = line_and_column(self.src, self.pos if pos is None else pos)
        return TomlReadError(f"{message} (at line {line}, column {col})")

    def peek(self, n=1):
        return self.src[self.pos : self.pos + n]

    # ---- whitespace, comments, newlines

    def skip_ws(self):
        src, pos, n = self.src, self.pos, len(self.src)
        while pos < n and src[pos] in _WS:
            pos += 1
        self.pos = pos

    def skip_comment(self):
        if self.peek() != "#":
            return
        pos = self.pos + 1
        src, n = self.src, len(self.src)
        while pos < n and src[pos] != "\n":
            ch = src[pos]
            if ch == "\r" and src[pos : pos + 2] == "\r\n":
                break
            if ch in _ILLEGAL:
                raise self.error(f"control character {ch!r} in a comment", pos)
            pos += 1
        self.pos = pos

    def at_newline(self):
        return self.peek() == "\n" or self.peek(2) == "\r\n"

    def skip_newline(self):
        if self.peek() == "\n":
            self.pos += 1
            return True
        if self.peek(2) == "\r\n":
            self.pos += 2
            return True
        return False

    def skip_ws_comments_newlines(self):
        """Inside arrays: blanks, comments and newlines in any order."""
        while True:
            self.skip_ws()
            self.skip_comment()
            if not self.skip_newline():
                return

    # ---- document

    def parse(self):
        header = ()
        n = len(self.src)
        while True:
            self.skip_ws()
            if self.pos >= n:
                break
            ch = self.src[self.pos]
            if ch == "#" or self.at_newline():
                pass
            elif ch == "[":
                self.flags.finalize_pending()
                if self.peek(2) == "[[":
                    header = self.array_header()
                else:
                    header = self.table_header()
            else:
                self.key_value(header)
            self.skip_ws()
            self.skip_comment()
            if self.pos >= n:
                break
            if not self.skip_newline():
                raise self.error("expected a newline or the end of the document after a statement")
        return self.data

    def table_header(self):
        self.pos += 1
        self.skip_ws()
        key = self.key()
        self.skip_ws()
        if self.peek() != "]":
            raise self.error("expected ']' to close the table header")
        self.pos += 1
        if self.flags.is_(key, _Flags.EXPLICIT) or self.flags.is_(key, _Flags.FROZEN):
            raise self.error(f"table [{'.'.join(key)}] is defined twice")
        self.flags.set(key, _Flags.EXPLICIT)
        self.nest(key)
        return key

    def array_header(self):
        self.pos += 2
        self.skip_ws()
        key = self.key()
        self.skip_ws()
        if self.peek(2) != "]]":
            raise self.error("expected ']]' to close the array-of-tables header")
        self.pos += 2
        if self.flags.is_(key, _Flags.FROZEN):
            raise self.error(f"[[{'.'.join(key)}]]: cannot append to a static array or inline table")
        self.flags.unset_all(key)
        self.flags.set(key, _Flags.EXPLICIT)
        parent = self.nest(key[:-1])
        if key[-1] not in parent:
            parent[key[-1]] = [{}]
        else:
            existing = parent[key[-1]]
            if not isinstance(existing, list):
                raise self.error(f"[[{'.'.join(key)}]]: {'.'.join(key)} is already a value or a table")
            existing.append({})
        return key

    def nest(self, key):
        """The table at ``key`` (created on the way); the last entry of an array of tables."""
        node = self.data
        for part in key:
            if part not in node:
                node[part] = {}
            node = node[part]
            if isinstance(node, list):
                if not node or not isinstance(node[-1], dict):
                    raise self.error(f"{'.'.join(key)}: {part} is an array, not a table")
                node = node[-1]
            if not isinstance(node, dict):
                raise self.error(f"{'.'.join(key)}: {part} is already a value, not a table")
        return node

    def key_value(self, header):
        key = self.key()
        self.skip_ws()
        if self.peek() != "=":
            raise self.error("expected '=' after a key")
        self.pos += 1
        self.skip_ws()
        start = self.pos
        value = self.value()
        abs_key = header + key
        parent, stem = abs_key[:-1], abs_key[-1]
        for i in range(1, len(key)):
            cont = header + key[:i]
            if self.flags.is_(cont, _Flags.EXPLICIT):
                raise self.error(f"cannot add to table {'.'.join(cont)} through a dotted key", start)
            self.flags.add_pending(cont, _Flags.EXPLICIT)
        if self.flags.is_(parent, _Flags.FROZEN):
            raise self.error(f"cannot add {'.'.join(abs_key)} to an inline table or array", start)
        node = self.nest(parent)
        if stem in node:
            raise self.error(f"key {'.'.join(abs_key)} is defined twice", start)
        if isinstance(value, (dict, list)):
            self.flags.set(abs_key, _Flags.FROZEN, recursive=True)
        node[stem] = value

    # ---- keys

    def key(self):
        parts = [self.simple_key()]
        while True:
            self.skip_ws()
            if self.peek() != ".":
                return tuple(parts)
            self.pos += 1
            self.skip_ws()
            parts.append(self.simple_key())

    def simple_key(self):
        ch = self.peek()
        if ch == '"':
            if self.peek(3) == '"""':
                raise self.error("a key cannot be a multi-line string")
            return self.basic_string()
        if ch == "'":
            if self.peek(3) == "'''":
                raise self.error("a key cannot be a multi-line string")
            return self.literal_string()
        start = self.pos
        src, n = self.src, len(self.src)
        pos = start
        while pos < n and src[pos] in _BARE_KEY_CHARS:
            pos += 1
        if pos == start:
            raise self.error("expected a key")
        self.pos = pos
        return src[start:pos]

    # ---- values

    def value(self):
        ch = self.peek()
        if ch == '"':
            if self.peek(3) == '"""':
                return self.multiline_basic_string()
            return self.basic_string()
        if ch == "'":
            if self.peek(3) == "'''":
                return self.multiline_literal_string()
            return self.literal_string()
        if ch == "[":
            return self.array()
        if ch == "{":
            return self.inline_table()
        if self.src.startswith("true", self.pos):
            self.pos += 4
            return True
        if self.src.startswith("false", self.pos):
            self.pos += 5
            return False
        match = _RE_DATETIME.match(self.src, self.pos)
        if match:
            value = self.datetime(match)
            self.pos = match.end()
            return value
        match = _RE_TIME.match(self.src, self.pos)
        if match:
            value = self.time(match.group(1), match.group(2), match.group(3), match.group(4), match.start())
            self.pos = match.end()
            return value
        match = _RE_SPECIAL_FLOAT.match(self.src, self.pos)
        if match:
            self.pos = match.end()
            return float(match.group(0))
        match = _RE_NUMBER.match(self.src, self.pos)
        if match:
            self.pos = match.end()
            return self.number(match.group(0))
        raise self.error("invalid value")

    @staticmethod
    def number(text):
        clean = text.replace("_", "")
        if clean[:2] == "0x":
            return int(clean[2:], 16)
        if clean[:2] == "0o":
            return int(clean[2:], 8)
        if clean[:2] == "0b":
            return int(clean[2:], 2)
        if "." in clean or "e" in clean or "E" in clean:
            return float(clean)
        return int(clean)

    def time(self, hour, minute, second, fraction, pos):
        micro = int(fraction[:6].ljust(6, "0")) if fraction else 0
        try:
            return _dt.time(int(hour), int(minute), int(second), micro)
        except ValueError as exc:
            raise self.error(f"invalid time: {exc}", pos) from None

    def datetime(self, match):
        year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
        try:
            date = _dt.date(int(year), int(month), int(day))
        except ValueError as exc:
            raise self.error(f"invalid date: {exc}", match.start()) from None
        if hour is None:
            return date
        clock = self.time(hour, minute, second, fraction, match.start())
        tz = None
        if zulu:
            tz = _dt.timezone.utc  # noqa: UP017 - datetime.UTC is 3.11+, hosts run 3.8+
        elif sign:
            delta = _dt.timedelta(hours=int(off_h), minutes=int(off_m))
            tz = _dt.timezone(-delta if sign == "-" else delta)
        return _dt.datetime.combine(date, clock).replace(tzinfo=tz)

    def array(self):
        self.pos += 1
        out = []
        while True:
            self.skip_ws_comments_newlines()
            if self.peek() == "]":
                self.pos += 1
                return out
            out.append(self.value())
            self.skip_ws_comments_newlines()
            ch = self.peek()
            if ch == ",":
                self.pos += 1
                continue
            if ch == "]":
                self.pos += 1
                return out
            raise self.error("expected ',' or ']' in an array")

    def inline_table(self):
        self.pos += 1
        table = {}
        flags = _Flags()
        self.skip_ws()
        if self.peek() == "}":
            self.pos += 1
            return table
        while True:
            self.skip_ws()
            start = self.pos
            key = self.key()
            self.skip_ws()
            if self.peek() != "=":
                raise self.error("expected '=' after a key in an inline table")
            self.pos += 1
            self.skip_ws()
            value = self.value()
            parent, stem = key[:-1], key[-1]
            if flags.is_(key, _Flags.FROZEN):
                raise self.error(f"key {'.'.join(key)} is defined twice in an inline table", start)
            if flags.is_(parent, _Flags.FROZEN):
                raise self.error(f"cannot add {'.'.join(key)} to an inline table or array", start)
            node = table
            for part in parent:
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    raise self.error(f"{'.'.join(key)}: {part} is already a value, not a table", start)
            if stem in node:
                raise self.error(f"key {'.'.join(key)} is defined twice in an inline table", start)
            node[stem] = value
            if isinstance(value, (dict, list)):
                flags.set(key, _Flags.FROZEN, recursive=True)
            self.skip_ws()
            ch = self.peek()
            if ch == "}":
                self.pos += 1
                return table
            if ch != ",":
                raise self.error("expected ',' or '}' in an inline table")
            self.pos += 1

    # ---- strings

    def basic_string(self):
        self.pos += 1
        out = []
        src, n = self.src, len(self.src)
        while True:
            if self.pos >= n:
                raise self.error("unterminated string")
            ch = src[self.pos]
            if ch == '"':
                self.pos += 1
                return "".join(out)
            if ch == "\\":
                out.append(self.escape(multiline=False))
                continue
            if ch in _ILLEGAL:
                raise self.error(f"control character {ch!r} in a string")
            out.append(ch)
            self.pos += 1

    def multiline_basic_string(self):
        self.pos += 3
        self.skip_newline()
        out = []
        src, n = self.src, len(self.src)
        while True:
            if self.pos >= n:
                raise self.error('unterminated multi-line string (""")')
            if src.startswith('"""', self.pos):
                # up to two more quotes belong to the content
                extra = 0
                while extra < 2 and src.startswith('"', self.pos + 3 + extra):
                    extra += 1
                out.append('"' * extra)
                self.pos += 3 + extra
                return "".join(out)
            ch = src[self.pos]
            if ch == "\\":
                out.append(self.escape(multiline=True))
                continue
            if ch == "\r":
                if src[self.pos : self.pos + 2] != "\r\n":
                    raise self.error("carriage return without a line feed in a string")
                out.append("\n")
                self.pos += 2
                continue
            if ch in _ILLEGAL_MULTILINE:
                raise self.error(f"control character {ch!r} in a string")
            out.append(ch)
            self.pos += 1

    def escape(self, multiline):
        src = self.src
        start = self.pos
        ch = src[self.pos + 1 : self.pos + 2]
        if ch in _ESCAPES:
            self.pos += 2
            return _ESCAPES[ch]
        if ch in ("u", "U"):
            width = 4 if ch == "u" else 8
            digits = src[self.pos + 2 : self.pos + 2 + width]
            if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise self.error(f"\\{ch} needs {width} hex digits", start)
            code = int(digits, 16)
            if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                raise self.error(f"\\{ch}{digits} is not a Unicode scalar value", start)
            self.pos += 2 + width
            return chr(code)
        if multiline:
            # a line-ending backslash: drop it, the newline and the blanks and newlines after it
            pos = self.pos + 1
            while pos < len(src) and src[pos] in _WS:
                pos += 1
            if src[pos : pos + 1] == "\n" or src[pos : pos + 2] == "\r\n":
                self.pos = pos
                while True:
                    self.skip_ws()
                    if not self.skip_newline():
                        return ""
        raise self.error(f"invalid escape {src[start : start + 2]!r}", start)

    def literal_string(self):
        self.pos += 1
        src, n = self.src, len(self.src)
        start = self.pos
        while True:
            if self.pos >= n:
                raise self.error("unterminated literal string")
            ch = src[self.pos]
            if ch == "'":
                self.pos += 1
                return src[start : self.pos - 1]
            if ch in _ILLEGAL:
                raise self.error(f"control character {ch!r} in a string")
            self.pos += 1

    def multiline_literal_string(self):
        self.pos += 3
        self.skip_newline()
        out = []
        src, n = self.src, len(self.src)
        while True:
            if self.pos >= n:
                raise self.error("unterminated multi-line literal string (''')")
            if src.startswith("'''", self.pos):
                extra = 0
                while extra < 2 and src.startswith("'", self.pos + 3 + extra):
                    extra += 1
                out.append("'" * extra)
                self.pos += 3 + extra
                return "".join(out)
            ch = src[self.pos]
            if ch == "\r":
                if src[self.pos : self.pos + 2] != "\r\n":
                    raise self.error("carriage return without a line feed in a string")
                out.append("\n")
                self.pos += 2
                continue
            if ch in _ILLEGAL_MULTILINE:
                raise self.error(f"control character {ch!r} in a string")
            out.append(ch)
            self.pos += 1


def split_lines(text):
    """The lines of TOML ``text``, each with its ending: the one line splitter for TOML text (this reader's
    line numbers, the toolkit edit). TOML ends a line at LF or CRLF only; ``str.splitlines()`` also
    breaks at CR, VT, FF, FS, GS, RS, U+0085, U+2028 and U+2029, ordinary characters in TOML strings and
    comments, and would cut a string or a comment in two."""
    lines = text.split("\n")
    out = [line + "\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


def line_and_column(text, pos):
    """(line, column), both from 1, of the offset ``pos`` in ``text``, lines as :func:`split_lines` has them."""
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def same_value(a, b):
    """Whether two parsed TOML values are the same value: Python's ``==`` with what it gets wrong for TOML
    put right. ``nan`` is the same as ``nan`` (``nan != nan`` in Python: one ``nan`` anywhere in the file
    would make every edit look as if it changed other settings); ``true`` is not ``1`` and ``1`` not
    ``1.0``; ``-0.0`` is not ``0.0``; a date-time keeps its offset (``07:32:00Z`` and
    ``00:32:00-07:00`` are the same instant, but not the same setting). Tables and arrays compare by
    their members."""
    if isinstance(a, dict) or isinstance(b, dict):
        return (
            isinstance(a, dict)
            and isinstance(b, dict)
            and a.keys() == b.keys()
            and all(same_value(a[k], b[k]) for k in a)
        )
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (
            isinstance(a, (list, tuple))
            and isinstance(b, (list, tuple))
            and len(a) == len(b)
            and all(same_value(x, y) for x, y in zip(a, b))  # noqa: B905 - runs on 3.8+
        )
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if _isnan(a) or _isnan(b):
            return _isnan(a) and _isnan(b)
        return a == b and _copysign(1.0, a) == _copysign(1.0, b)
    if isinstance(a, (_dt.datetime, _dt.time)):
        return a == b and a.tzinfo == b.tzinfo and a.utcoffset() == b.utcoffset()
    return a == b


def loads(text):
    """Parse TOML 1.0 ``text``; a TomlReadError (naming line and column) when it is not valid."""
    return _Parser(text).parse()


def decode_basic_string(body):
    """The value of the basic string whose text between the quotes is ``body`` (escapes decoded)."""
    parser = _Parser('"' + body + '"')
    value = parser.basic_string()
    if parser.pos != len(parser.src):
        raise TomlReadError(f"not one basic string: {body!r}")
    return value
