# Copyright: gpusplit contributors
# Apache-2.0
"""Kubernetes resource quantities ("2", "500m", "1Gi", "1e3") as exact numbers. Private to the collection."""

from __future__ import annotations

import re
from fractions import Fraction

# decimal suffixes are powers of 1000 (n = 1000**-3 ... E = 1000**6), binary ones powers of 1024
_SUFFIX = {suffix: Fraction(1000) ** power for power, suffix in enumerate(("n", "u", "m", ""), -3)}
_SUFFIX.update({suffix: Fraction(1000) ** power for power, suffix in enumerate("kMGTPE", 1)})
_SUFFIX.update({suffix + "i": Fraction(1024) ** power for power, suffix in enumerate("KMGTPE", 1)})
_QUANTITY = re.compile(
    r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$"
)


def parse_quantity(value):
    """A Kubernetes quantity ("2", 2, "500m", "1Gi", "1e3") as a Fraction; None when invalid."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(value).limit_denominator(10**9)
    m = _QUANTITY.match(str(value).strip())
    if not m:
        return None
    sign, number, exponent, suffix = m.groups()
    amount = Fraction(number)
    if exponent:
        amount *= Fraction(10) ** int(exponent[1:])
    else:
        amount *= _SUFFIX[suffix or ""]
    return -amount if sign == "-" else amount


def plain_number(amount):
    """An exact amount (int, Fraction) as an int when it is whole, else as a float (for JSON)."""
    amount = Fraction(amount)
    return int(amount) if amount.denominator == 1 else float(amount)


def quantity_number(value):
    """A quantity as a plain number (see :func:`plain_number`); 0 when missing or invalid."""
    return plain_number(parse_quantity(value) or 0)
