"""The standard-library TOML reader (plugins/module_utils/_host/toml_read.py) against ``tomllib``, on generated
documents (toml_cases.py, Hypothesis, a fixed seed, at least CASES of each kind per run): every document either
both refuse or both read to the same data, value for value and type for type."""

from __future__ import annotations

import datetime as dt
import math

from ansible_collections.gpusplit.k8s.plugins.module_utils._host import toml_read

try:
    import tomllib

    from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._host.toml_cases import (
        CASES,
        document,
        each_case,
        spoil,
    )
except ImportError:  # a managed-host Python without tomllib or Hypothesis: conftest.py deselects the tests
    tomllib = None


def same(a, b):
    """Equal as TOML values: types included (``true`` is not ``1``), nan equal to nan, the sign of zero and
    a date-time's offset kept."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, (dt.datetime, dt.time)):
        return a == b and a.utcoffset() == b.utcoffset() and (a.tzinfo is None) == (b.tzinfo is None)
    return a == b


def read_both(text):
    """(ours, tomllib's): each the data or the exception's class name."""
    try:
        ours = toml_read.loads(text)
    except toml_read.TomlReadError as exc:
        assert "(at line " in str(exc), exc
        ours = "refused"
    try:
        theirs = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        theirs = "refused"
    return ours, theirs


def run_differential(make):
    seen = {"valid": 0, "refused": 0}

    def check(rnd):
        text = make(rnd)
        ours, theirs = read_both(text)
        if theirs == "refused":
            assert ours == "refused", f"tomllib refuses {text!r}, toml_read reads {ours!r}"
            seen["refused"] += 1
        else:
            assert ours != "refused", f"tomllib reads {text!r}, toml_read refuses it"
            assert same(ours, theirs), f"{text!r}: toml_read {ours!r}, tomllib {theirs!r}"
            seen["valid"] += 1

    assert each_case(check) >= CASES
    return seen


def test_generated_documents_read_like_tomllib():
    seen = run_differential(document)
    assert seen["valid"] >= CASES // 2, seen  # the generator writes mostly valid documents


def test_spoiled_documents_are_refused_like_tomllib():
    seen = run_differential(lambda rnd: spoil(rnd, document(rnd)))
    assert seen["refused"] >= CASES // 5, seen


def test_comparison_itself_can_fail():
    """The oracle comparison sees what a reader could get wrong: a type, nan, the sign of zero, an offset."""
    assert not same({"a": 1}, {"a": True})
    assert not same({"a": 1}, {"a": 1.0})
    assert not same(0.0, -0.0)
    assert same(float("nan"), float("nan"))
    utc = dt.UTC
    assert not same(
        dt.datetime(1979, 5, 27, 7, 32, tzinfo=utc),
        dt.datetime(1979, 5, 27, 0, 32, tzinfo=dt.timezone(dt.timedelta(hours=-7))),
    )
