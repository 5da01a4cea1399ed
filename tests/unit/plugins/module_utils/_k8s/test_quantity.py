"""Kubernetes quantities as exact numbers."""

from __future__ import annotations

from fractions import Fraction

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.quantity import (
    parse_quantity,
    plain_number,
    quantity_number,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2", 2),
        (3, 3),
        ("500m", 0.5),
        ("1k", 1000),
        ("1Ki", 1024),
        ("1e3", 1000),
        (".5", 0.5),
        ("x", None),
        ("1.5Gi", 1.5 * 2**30),
    ],
)
def test_parse_quantity(text, value):
    q = parse_quantity(text)
    assert (None if q is None else float(q)) == value


def test_plain_numbers_for_json():
    assert plain_number(Fraction(4, 2)) == 2 and isinstance(plain_number(Fraction(4, 2)), int)
    assert plain_number(Fraction(1, 2)) == 0.5
    assert plain_number(3) == 3 and plain_number(0.25) == 0.25
    assert quantity_number("1500m") == 1.5
    assert quantity_number("2") == 2
    assert quantity_number(None) == 0 and quantity_number("nonsense") == 0
