# Copyright: gpusplit contributors
# Apache-2.0
"""One way for every gpusplit filter to turn a refusal into an AnsibleFilterError.

A refusal from module_utils is an exception with ``errors`` (a list of messages: the planner,
DRA, GPU Operator mode, host share, gang jobs) or a plain message. It becomes

    <title> refused:
    - <message 1>
    - <message 2>

so that a play stops with every reason at once. Every GpusplitError is caught (one the filter
file does not title is titled by the filter's name).

A filter that fails with a Python error (a TypeError, KeyError, ... inside it: a bug, or input
of a shape it did not check) is refused with the arguments that do not have the shape the
filter's own documentation gives them (``plugins/filter/<name>.yml``: ``type`` and ``elements``
of each option), naming each argument and its shape; when all have it, with every argument's
type and where the filter failed. Python's own text never reaches the user.
"""

from __future__ import annotations

import functools
import inspect
import os
import traceback
from pathlib import Path

from ansible.errors import AnsibleFilterError

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import (
    GpusplitError,
    refusal_text,
    type_name,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.gc_pause import gc_paused

FILTER_DIR = Path(__file__).resolve().parent.parent / "filter"
INPUT = "_input"
# what a bug inside a filter raises on input of a shape it did not expect
BUGS = (TypeError, AttributeError, KeyError, IndexError, ValueError, UnicodeError)
SHAPES = {
    "dict": "a mapping",
    "list": "a list",
    "str": "a string",
    "path": "a path (a string)",
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
}


@functools.cache
def documented_options(name):
    """The options of ``plugins/filter/<name>.yml`` ({} when it has none)."""
    path = FILTER_DIR / f"{name}.yml"
    if not path.is_file():
        return {}
    import yaml  # only when a filter failed

    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return (doc.get("DOCUMENTATION") or {}).get("options") or {}


def _is_mapping(value):
    return type_name(value) == "mapping"


def _fits(value, kind):
    """Whether ``value`` is of the documented ``kind`` (numbers may stand for strings, as in Ansible)."""
    checks = {
        "dict": _is_mapping,
        "list": lambda v: isinstance(v, (list, tuple)),
        "str": lambda v: isinstance(v, (str, int, float)) and not isinstance(v, bool),
        "path": lambda v: isinstance(v, str),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "bool": lambda v: isinstance(v, bool),
    }
    return checks.get(kind, lambda v: True)(value)


def _label(option):
    return "its input (the value before the |)" if option == INPUT else option


def argument_problems(name, bound):
    """What in ``bound`` ({argument: value}, the first one the input) does not have the documented shape."""
    options = documented_options(name)
    problems = []
    for position, (argument, value) in enumerate(bound.items()):
        option = INPUT if position == 0 else argument
        spec = options.get(option) or {}
        kind = spec.get("type")
        if kind not in SHAPES:
            continue
        if value is None:
            if spec.get("required") or option == INPUT:
                problems.append(f"{_label(option)}: expected {SHAPES[kind]}, got null")
            continue
        if not _fits(value, kind):
            problems.append(f"{_label(option)}: expected {SHAPES[kind]}, got {type_name(value)}")
            continue
        elements = spec.get("elements")
        if kind == "list" and elements in SHAPES:
            bad = [i for i, item in enumerate(value) if not _fits(item, elements)]
            if bad:
                problems.append(
                    f"{_label(option)}[{bad[0]}]: expected {SHAPES[elements]}, got {type_name(value[bad[0]])}"
                    f" (each item must be {SHAPES[elements]})"
                )
    return problems


def _where(exc):
    """``file:line`` where ``exc`` was raised (the innermost frame)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else "?"


def _why(name, signature, args, kwargs, exc):
    """The messages for a filter that failed with a Python error: the arguments that do not have
    their documented shape, else every argument's type and where the filter failed."""
    try:
        bound = signature.bind(*args, **kwargs).arguments
    except TypeError as wrong:
        return [f"arguments: {wrong} (see ansible-doc -t filter gpusplit.k8s.{name})"]
    problems = argument_problems(name, bound)
    if problems:
        return problems
    given = ", ".join(
        f"{_label(INPUT if i == 0 else a)}: {type_name(v)}" for i, (a, v) in enumerate(bound.items())
    )
    return [
        f"cannot read its arguments as given ({given}); see ansible-doc -t filter gpusplit.k8s.{name} for "
        f"the shape of each (a bug in the filter too: {type_name(exc)} at {_where(exc)})"
    ]


def wrap(func, refusals=None):
    """``func`` raising AnsibleFilterError for the exception types in ``refusals`` ({type: title},
    or a function that returns it: the filter files import their libraries at first use, so their
    exception types are looked up when a filter first fails, not when the file is loaded).

    The first matching type (in the order given) names the refusal; a title of None uses the
    filter's own name as a playbook spells it (``gpusplit.k8s.<name>``). Any other
    :class:`GpusplitError` is caught last, under the filter's own name, so that no refusal
    reaches a play unformatted. A Python error inside the filter (a bug, or input of a shape it did
    not check) is turned into the arguments that do not have their documented shape, or else every
    argument's type and where it failed; never Python's own text.
    """
    name = func.__name__
    signature = inspect.signature(func)
    paused = gc_paused(func)  # every filter with the garbage collector paused (_split/gc_pause.py)

    @functools.cache
    def titles():
        table = {**((refusals() if callable(refusals) else refusals) or {})}
        table.setdefault(GpusplitError, None)
        return table

    @functools.wraps(paused)
    def run(*args, **kwargs):
        fallback = f"gpusplit.k8s.{name}"
        try:
            return paused(*args, **kwargs)
        except Exception as exc:
            for kind, title in titles().items():
                if isinstance(exc, kind):
                    raise AnsibleFilterError(refusal_text(title or fallback, exc)) from None
            if isinstance(exc, BUGS):
                raise AnsibleFilterError(
                    refusal_text(fallback, GpusplitError(_why(name, signature, args, kwargs, exc)))
                ) from None
            raise

    return run


def filters(funcs, refusals=None):
    """{name: wrapped filter} for a FilterModule: each function's name is its filter's name."""
    return {f.__name__: wrap(f, refusals) for f in funcs}
