# Copyright: gpusplit contributors
# Apache-2.0
"""DRA device selectors evaluated with a real CEL library. Private to the collection.

DeviceClass and ResourceClaim selectors are CEL expressions over one variable, ``device``. They
are compiled and evaluated by the PyPI package ``common-expression-language`` (module ``cel``,
Python bindings of the Rust ``cel`` crate; pinned in ``pyproject.toml``). It is imported on first
use, guarded: without it every selector "cannot be evaluated" (below) with a message that names
the package to install, and nothing else changes. The library implements CEL itself; what the
Kubernetes DRA environment adds on top is bridged here:

- ``device`` is a map ``{driver, attributes, capacity, allowMultipleAllocations}`` that
  :func:`device_view` builds from a published ResourceSlice device the way Kubernetes does: an
  attribute or capacity name without a domain belongs to the driver's domain (``uuid`` published
  by driver ``gpu.nvidia.com`` is ``device.attributes["gpu.nvidia.com"].uuid``); an attribute's
  value is its ``int``, ``bool``, ``string`` or ``version`` field, in that order.
- Unknown domain: Kubernetes answers ``device.attributes[<domain>]`` (and ``capacity``) with an
  empty map for a domain the device lacks; the library has no map with a default, so before
  compiling every ``device.attributes[k]`` is rewritten to
  ``((k) in device.attributes ? device.attributes[k] : {})`` (the same for ``capacity``).
- Missing attribute: ``device.attributes[d].missing`` is CEL's "no such key" error in both. It
  propagates the CEL way (``error || true`` is true, ``false && error`` is false); where it decides
  the result, the device is not selected (:func:`cel_matches` returns False; the scheduler fails the
  allocation with that error).
- ``semver``: the library cannot carry a Python object as a CEL value, so a semantic version is
  the one-key map ``{"kubernetes.Semver": "<version without build metadata>"}`` (``version``
  attributes, ``semver(s)``, ``semver(s, true)`` which normalizes ``v1.2`` to ``1.2.0``).
  ``isSemver``, ``major``, ``minor``, ``patch``, ``isGreaterThan``, ``isLessThan`` and
  ``compareTo`` are Python functions over it (semver 2.0 precedence: numbers, then pre-release
  identifiers); ``==`` of two versions compares the canonical text (build metadata ignored).
- ``quantity``: likewise ``{"kubernetes.Quantity": "<numerator>/<denominator>"}``, the exact value
  parsed by ``_k8s/quantity.py``, for every capacity and for ``quantity(s)``. ``isQuantity``,
  ``compareTo``, ``isGreaterThan``, ``isLessThan``, ``sign``, ``isInteger``, ``asInteger``,
  ``asApproximateFloat``, ``add`` and ``sub`` are Python functions; ``==`` compares exact values
  (``quantity("1Gi") == quantity("1024Mi")``).
- ``cel.bind(v, init, body)`` (enabled in the DRA environment) is rewritten before compiling to
  ``[init].map(v, body)[0]``, which binds ``v`` to ``init`` in ``body`` the same way.
- The strings and sets extensions of the Kubernetes environment (``lowerAscii``, ``split``,
  ``sets.contains``, ...) are the library's own ``cel.stdlib`` functions.

Both rewrites work on the code outside string literals and leave anything they cannot read to
the library. What still differs from Kubernetes: a version or quantity compared with ``==`` to a
value of another type is false here (an error there), and ``size()`` of one is 1; the API server's
type checker rejects some expressions when the object is created (not a boolean, unknown
function, ``device.<unknown field>``), here they cannot be evaluated. The quantity functions
``mul``, ``div``, ``divInt`` and the regex, URL, IP and CIDR libraries are not bridged: a selector
that calls them cannot be evaluated.

:func:`cel_matches` answers True or False, or raises :class:`CelUnsupported` when the selector
cannot be evaluated here: the library is missing, the expression does not compile, it calls a
function that neither the library nor this bridge has, its result is not a boolean, or it fails
with an error other than a missing key. Callers list such a selector as not evaluated and do not
filter on it. Compiled programs are cached per expression, the library's evaluation context per
device and the verdict per device and expression, so each (selector, device) pair is evaluated
once per diagnosis.
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
from fractions import Fraction

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.quantity import parse_quantity

PACKAGE = "common-expression-language"
PACKAGE_VERSION = "0.10.0"
MISSING_LIBRARY = (
    f"CEL selectors are evaluated with the Python package {PACKAGE}, which is not installed where "
    f"this runs (pip install {PACKAGE}=={PACKAGE_VERSION})"
)
SEMVER = "kubernetes.Semver"
QUANTITY = "kubernetes.Quantity"
DEVICE_FIELDS = ("driver", "attributes", "capacity", "allowMultipleAllocations")
_INT64 = (-(2**63), 2**63 - 1)


class CelUnsupported(GpusplitError):
    """The selector cannot be evaluated here (no CEL library, or it cannot compile or evaluate it)."""


# --------------------------------------------------------------------------------------------
# the library, imported on first use


_LIBRARY = []  # [(cel module, functions)] or [None], once imported


def _library():
    """(the ``cel`` module, the functions of every context) or None when it is not installed."""
    if not _LIBRARY:
        try:
            import cel
            from cel import stdlib
        except ImportError:
            _LIBRARY.append(None)
        else:
            functions = {}
            for name in ("strings", "sets"):
                functions.update(stdlib.EXTENSIONS[name])
            functions.update(BRIDGED_FUNCTIONS)
            _LIBRARY.append((cel, functions))
    return _LIBRARY[0]


# --------------------------------------------------------------------------------------------
# Kubernetes' semver and quantity libraries, over one-key maps

_SEMVER_RE = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)


@functools.lru_cache(maxsize=512)
def _semver_parts(text):
    """(major, minor, patch, pre-release key) of a strict semantic version; ValueError otherwise."""
    m = _SEMVER_RE.match(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"{text!r} is not a semantic version")
    pre = m.group(4)
    # a release sorts after its pre-releases; numeric identifiers before alphanumeric ones
    key = (1,) if not pre else (0, *((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split(".")))
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), key


def _no_leading_zeros(part):
    if len(part) > 1:
        part = part.lstrip("0")
        if not part[:1].isdigit():
            part = "0" + part
    return part


def _normalized(text):
    """Kubernetes' ``semver(s, true)``: no ``v`` prefix, no leading zeros, missing parts are 0."""
    parts = text[1:].split(".", 2) if text.startswith("v") else text.split(".", 2)
    parts = [_no_leading_zeros(p) for p in parts]
    if len(parts) < 3 and any(c in parts[-1] for c in "+-"):
        raise ValueError(f"{text!r}: a short version cannot carry pre-release or build data")
    return ".".join(parts + ["0"] * (3 - len(parts)))


def _semver(text, normalize=False):
    if not isinstance(text, str) or not isinstance(normalize, bool):
        raise TypeError("no such overload: semver(string[, bool])")
    if normalize:
        text = _normalized(text)
    _semver_parts(text)
    return {SEMVER: text.split("+", 1)[0]}


def _is_semver(text, normalize=False):
    try:
        _semver(text, normalize)
    except ValueError:
        return False
    return True


def _quantity(text):
    if not isinstance(text, str):
        raise TypeError("no such overload: quantity(string)")
    value = parse_quantity(text)
    if value is None:
        raise ValueError(f"{text!r} is not a quantity")
    return {QUANTITY: str(value)}


def _is_quantity(text):
    return isinstance(text, str) and parse_quantity(text) is not None


def _typed(value):
    """(kind, comparable value) of a bridged version or quantity; TypeError for anything else."""
    if isinstance(value, dict) and len(value) == 1:
        if SEMVER in value:
            major, minor, patch, pre = _semver_parts(value[SEMVER])
            return SEMVER, (major, minor, patch, pre)
        if QUANTITY in value:
            return QUANTITY, Fraction(value[QUANTITY])
    raise TypeError("no such overload: not a semver or quantity")


def _compare(a, b):
    kind_a, va = _typed(a)
    kind_b, vb = _typed(b)
    if kind_a != kind_b:
        raise TypeError(f"no such overload: {kind_a} compared with {kind_b}")
    return (va > vb) - (va < vb)


def _of_kind(kind, value):
    got, v = _typed(value)
    if got != kind:
        raise TypeError(f"no such overload: {got} where {kind} is needed")
    return v


def _amount(value):
    if isinstance(value, int) and not isinstance(value, bool):
        return Fraction(value)
    return _of_kind(QUANTITY, value)


def _as_integer(value):
    v = _of_kind(QUANTITY, value)
    if v.denominator != 1 or not _INT64[0] <= v <= _INT64[1]:
        raise ValueError("cannot convert value to integer")
    return int(v)


def _is_integer(value):
    v = _of_kind(QUANTITY, value)
    return v.denominator == 1 and _INT64[0] <= v <= _INT64[1]


BRIDGED_FUNCTIONS = {
    "semver": _semver,
    "isSemver": _is_semver,
    "major": lambda v: _of_kind(SEMVER, v)[0],
    "minor": lambda v: _of_kind(SEMVER, v)[1],
    "patch": lambda v: _of_kind(SEMVER, v)[2],
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "sign": lambda q: (_of_kind(QUANTITY, q) > 0) - (_of_kind(QUANTITY, q) < 0),
    "isInteger": _is_integer,
    "asInteger": _as_integer,
    "asApproximateFloat": lambda q: float(_of_kind(QUANTITY, q)),
    "add": lambda q, other: {QUANTITY: str(_of_kind(QUANTITY, q) + _amount(other))},
    "sub": lambda q, other: {QUANTITY: str(_of_kind(QUANTITY, q) - _amount(other))},
    "isGreaterThan": lambda a, b: _compare(a, b) == 1,
    "isLessThan": lambda a, b: _compare(a, b) == -1,
    "compareTo": _compare,
}


# --------------------------------------------------------------------------------------------
# the device variable


class DeviceView(dict):
    """The ``device`` variable of one published device, with the caches of its evaluations.

    ``problem`` says why the device cannot be evaluated at all (an attribute without a value, a
    version or capacity that does not parse), as Kubernetes refuses such a device.
    """

    def __init__(self, value, problem=None):
        super().__init__(value)
        self.problem = problem
        self.context = None  # the library's evaluation context, built on first use
        self.verdicts = {}  # expression -> True, False or the "cannot evaluate" message


def _attribute_value(name, attr):
    attr = attr or {}
    for key in ("int", "bool", "string"):
        if key in attr:
            return attr[key]
    if "version" in attr:
        try:
            return _semver(attr["version"])
        except (TypeError, ValueError):
            raise ValueError(f"attribute {name}: {attr['version']!r} is not a semantic version") from None
    raise ValueError(f"attribute {name} has no int, bool, string or version value")


def device_view(driver, device):
    """The ``device`` variable of a ResourceSlice device of ``driver``, as a :class:`DeviceView`."""
    value = {
        "driver": driver,
        "attributes": {},
        "capacity": {},
        "allowMultipleAllocations": bool(device.get("allowMultipleAllocations")),
    }
    problems = []
    for name, attr in (device.get("attributes") or {}).items():
        domain, _unused, short = name.rpartition("/")
        try:
            value["attributes"].setdefault(domain or driver, {})[short] = _attribute_value(name, attr)
        except ValueError as exc:
            problems.append(str(exc))
    for name, cap in (device.get("capacity") or {}).items():
        domain, _unused, short = name.rpartition("/")
        raw = (cap or {}).get("value")
        amount = parse_quantity(raw)
        if amount is None:
            problems.append(f"capacity {name}: {raw!r} is not a quantity")
            continue
        value["capacity"].setdefault(domain or driver, {})[short] = {QUANTITY: str(amount)}
    return DeviceView(value, "; ".join(problems) or None)


# --------------------------------------------------------------------------------------------
# compiling: two rewrites (cel.bind, unknown domains), unknown device fields

_LITERAL = re.compile(
    r"(?:[rR][bB]?|[bB][rR])(?:'''[\s\S]*?'''|\"\"\"[\s\S]*?\"\"\"|'[^'\n]*'|\"[^\"\n]*\")"
    r"|[bB]?(?:'''(?:\\[\s\S]|[\s\S])*?'''|\"\"\"(?:\\[\s\S]|[\s\S])*?\"\"\""
    r"|'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\")"
)
_BIND = re.compile(r"(?<![\w.])cel\s*\.\s*bind\s*\(")
_DOMAIN_INDEX = re.compile(r"(?<![\w.])device\s*\.\s*(attributes|capacity)\s*\[")
_DEVICE_FIELD = re.compile(r"(?<![\w.])device\s*\.\s*([A-Za-z_]\w*)")
_VARIABLE = re.compile(r"\s*[A-Za-z_]\w*\s*")
_PROGRAMS = {}  # expression -> compiled program, or the "cannot compile" message
_PROGRAMS_MAX = 1024


def _masked(text):
    """``text`` with every string literal replaced by zeros of the same length (code only)."""
    return _LITERAL.sub(lambda m: "0" * len(m.group(0)), text)


def _arguments(masked, start, closer):
    """[(start, end)] of the top-level, comma-separated parts up to ``closer``, and the end after it."""
    depth, spans, begin = 0, [], start
    for i in range(start, len(masked)):
        ch = masked[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                if ch != closer:
                    return None, None
                spans.append((begin, i))
                return spans, i + 1
            depth -= 1
        elif ch == "," and depth == 0:
            spans.append((begin, i))
            begin = i + 1
    return None, None


def _expand_bind(text):
    """``cel.bind(v, init, body)`` -> ``([init].map(v, body)[0])``; other text unchanged."""
    masked = _masked(text)
    m = _BIND.search(masked)
    if not m:
        return text
    spans, end = _arguments(masked, m.end(), ")")
    if not spans or len(spans) != 3 or not _VARIABLE.fullmatch(text[slice(*spans[0])]):
        return text  # the library reports what is wrong with it
    var, init, body = (text[s:e].strip() for s, e in spans)
    bound = f"([{_expand_bind(init)}].map({var}, {_expand_bind(body)})[0])"
    return text[: m.start()] + bound + _expand_bind(text[end:])


def _default_domains(text):
    """``device.attributes[k]`` -> ``((k) in device.attributes ? device.attributes[k] : {})`` (and capacity)."""
    masked = _masked(text)
    m = _DOMAIN_INDEX.search(masked)
    if not m:
        return text
    spans, end = _arguments(masked, m.end(), "]")
    if not spans or len(spans) != 1:
        return text  # the library reports what is wrong with it
    key, field = _default_domains(text[slice(*spans[0])]).strip(), m.group(1)
    lookup = f"(({key}) in device.{field} ? device.{field}[{key}] : {{}})"
    return text[: m.start()] + lookup + _default_domains(text[end:])


def _first_line(exc):
    text = str(exc).strip().splitlines()
    return (text[0] if text else type_name(exc))[:200]


def _compiled(expression, cel):
    entry = _PROGRAMS.get(expression)
    if entry is not None:
        return entry
    unknown = sorted({f for f in _DEVICE_FIELD.findall(_masked(expression)) if f not in DEVICE_FIELDS})
    if unknown:
        entry = f"device.{unknown[0]} is not a field of the device ({', '.join(DEVICE_FIELDS)})"
    else:
        try:
            entry = cel.compile(_default_domains(_expand_bind(expression)))
        except Exception as exc:  # the library raises ValueError, and more for odd input
            entry = f"CEL does not compile: {_first_line(exc)}"
    if len(_PROGRAMS) >= _PROGRAMS_MAX:
        _PROGRAMS.clear()
    _PROGRAMS[expression] = entry
    return entry


# --------------------------------------------------------------------------------------------
# evaluating


def _verdict(expression, view):
    lib = _library()
    if lib is None:
        return MISSING_LIBRARY
    cel, functions = lib
    program = _compiled(expression, cel)
    if isinstance(program, str):
        return program
    if view.problem:
        return f"the device cannot be evaluated: {view.problem}"
    if view.context is None:
        view.context = cel.Context(variables={"device": dict(view)}, functions=functions)
    try:
        # the library prints a line on stderr when a Python function raises; the error is ours
        with contextlib.redirect_stderr(io.StringIO()):
            result = program.execute(view.context)
    except KeyError:
        return False  # "no such key": a missing attribute, the device is not selected
    except Exception as exc:  # the library raises RuntimeError, TypeError, ValueError, ...
        return f"CEL evaluation error: {_first_line(exc)}"
    if not isinstance(result, bool):
        return f"the result is a {type_name(result)}, not a boolean"
    return result


def cel_matches(expression, view):
    """True/False: does the device (a :func:`device_view`) meet the selector ``expression``?

    A missing attribute that decides the result is a non-match. Raises :class:`CelUnsupported`
    when the selector cannot be evaluated here (see the module docstring).
    """
    verdict = view.verdicts.get(expression)
    if verdict is None:
        verdict = view.verdicts[expression] = _verdict(expression, view)
    if isinstance(verdict, str):
        raise CelUnsupported(f"selector {expression!r}: {verdict}")
    return verdict
