# Copyright: gpusplit contributors
# Apache-2.0
"""The one error root of gpusplit. Private to the collection.

Every refusal that gpusplit's logic raises is a :class:`GpusplitError` (or a subclass, where a
caller needs to tell kinds apart). It carries ``errors``, the list of every message, each naming
the file, field or object it is about, so that a run stops with all reasons at once.

Modules turn it into ``fail_json`` in one place (:func:`fail_on_refusal`); filters turn it into
``AnsibleFilterError`` in ``plugin_utils/filter_errors.py``. Both use :func:`refusal_text`.
"""

from __future__ import annotations

import contextlib
import copy
import math


class GpusplitError(ValueError):
    """One or more refusals; ``errors`` holds every message.

    Built from one message or a list of them. It stays a ``ValueError`` so that callers that
    validate input with ``except ValueError`` keep working. ``result``: what the work had already
    done when it refused (keys of the module's result, ``changed`` among them), for the failed answer;
    None before any change.
    """

    result = None

    def __init__(self, errors="", *args):
        if isinstance(errors, str) or not hasattr(errors, "__iter__"):
            errors = [errors]
        self.errors = [str(e) for e in errors if str(e)]
        super().__init__("\n".join(self.errors), *args)

    def prefixed(self, prefix, suffix=""):
        """This refusal again, of the same class, each message read as ``<prefix><message><suffix>``.

        For a caller that knows what the refusal is about (a file, a release) and re-raises it:
        ``raise exc.prefixed(f"{path}: ") from None``. Every message keeps its own line in
        ``errors``; other attributes a subclass carries are kept.
        """
        again = copy.copy(self)
        again.errors = [f"{prefix}{message}{suffix}" for message in self.errors or [""]]
        again.args = ("\n".join(again.errors),) + tuple(self.args[1:])
        return again


def refusal_text(title, exc):
    """``<title> refused:`` and one ``- message`` line each; without a title, the messages alone."""
    errors = getattr(exc, "errors", None) or [str(exc)]
    if not title:
        return "\n".join(errors) if len(errors) > 1 else errors[0]
    return f"{title} refused:\n- " + "\n- ".join(errors)


@contextlib.contextmanager
def fail_on_refusal(module, title="", **result):
    """Run the body; a :class:`GpusplitError` ends the module with ``fail_json``.

    ``msg`` is :func:`refusal_text`, ``errors`` every message, and ``result`` whatever the module
    already knows (``changed``, ``path``, ...), updated with the refusal's own ``result``. Other
    exceptions are not caught: they are bugs.
    """
    try:
        yield
    except GpusplitError as exc:
        answer = dict(result, **(exc.result or {}))
        answer.update(msg=refusal_text(title, exc), errors=list(exc.errors))
        module.fail_json(**answer)


def type_name(value):
    """The JSON/YAML name of ``value``'s type for a message: ``null``, ``boolean``, ``integer``,
    ``number``, ``string``, ``list`` or ``mapping`` (never a Python class name such as
    Ansible's ``_AnsibleTaggedStr``); other objects by their class name."""
    if value is None:
        return "null"
    for kind, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string")):
        if isinstance(value, kind):
            return name
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    if isinstance(value, dict) or hasattr(value, "keys") and hasattr(value, "__getitem__"):
        return "mapping"
    if isinstance(value, (list, tuple, set, frozenset)) or hasattr(value, "__iter__"):
        return "list"
    return type(value).__name__.lstrip("_")


def a_type_name(value):
    """:func:`type_name` with its article, for the middle of a sentence: ``a string``, ``an integer``."""
    name = type_name(value)
    return ("an " if name[:1] in "aeiou" else "a ") + name


def unknown_keys(where, mapping, known):
    """``["<where>: unknown key(s) a, b (known: ...)"]`` for the keys of ``mapping`` not in ``known``, sorted;
    ``[]`` when there are none. One wording for every refusal of a key no one reads."""
    unknown = sorted(set(map(str, mapping)) - set(known))
    return [f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(known)})"] if unknown else []


# the longest wait any option of the collection takes (timeouts, intervals, delays): a day
MAX_SECONDS = 86400
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
_ASCII_DIGITS = frozenset("0123456789")


def ascii_int(text, signed=False):
    """The integer that ``text`` spells in ASCII digits 0-9 (blanks around it allowed, a leading ``-`` or
    ``+`` only when ``signed``), else None. ``str.isdigit()`` and ``int()`` also take ``²``, ``٣`` or
    full-width digits; a number the collection reads from text goes through here."""
    if not isinstance(text, str):
        return None
    body = text.strip(" \t")
    sign = 1
    if signed and body[:1] in ("-", "+"):
        sign = -1 if body[0] == "-" else 1
        body = body[1:]
    if not body or not set(body) <= _ASCII_DIGITS:
        return None
    return sign * int(body)


def _shown(number):
    if isinstance(number, float) and number == int(number) and abs(number) < 1e16:
        return str(int(number))
    return f"{number:g}" if isinstance(number, float) else str(number)


def check_number(value, name, low=None, high=None, integer=False, above=False, unit="", error=GpusplitError):
    """``value`` when it is a finite number (an integer where ``integer``) from ``low`` to ``high`` (above
    ``low`` where ``above``), else ``error`` naming ``name``, the range and what was given: the one number
    check of every module option and inventory field that takes a number. NaN, infinity, booleans,
    strings and numbers out of range (a 1e300 timeout, an integer beyond 64 bits) are refused here, before
    they fail later with Python's words or after a change was made."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float))
    if ok and isinstance(value, float):
        ok = math.isfinite(value)
    if ok and integer and not isinstance(value, int):
        ok = isinstance(value, float) and value == int(value)
    if ok and low is not None:
        ok = value > low if above else value >= low
    if ok and high is not None:
        ok = value <= high
    if ok:
        return int(value) if integer else value
    raise error(number_text(value, name, low, high, integer, above, unit))


def number_text(value, name, low=None, high=None, integer=False, above=False, unit=""):
    """The message of :func:`check_number` for ``value``: the field, the number it takes, what was given."""
    kind = ("a whole number" if integer else "a number") + (f" of {unit}" if unit else "")
    if low is not None and high is not None:
        want = f"{kind} {'above' if above else 'from'} {_shown(low)} {'and at most' if above else 'to'} {_shown(high)}"
    elif low is not None:
        want = f"{kind} {'above' if above else 'of at least'} {_shown(low)}"
    elif high is not None:
        want = f"{kind} of at most {_shown(high)}"
    else:
        want = f"a finite {kind[2:]}"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        given = "null" if value is None else a_type_name(value)
    elif isinstance(value, int) and abs(value) >= 10**30:
        given = f"an integer of {len(str(abs(value)))} digits"
    else:
        given = repr(value)
    return f"{name}: expected {want}, got {given}"
