"""How far the lab tests stretch their waits: GPUSPLIT_LAB_WAIT_SCALE, else 3 in CI, else 1."""

from __future__ import annotations

import pytest

from lab import components as C


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({}, 1.0),
        ({"CI": "true"}, 3.0),
        ({"CI": "false"}, 1.0),
        ({"CI": "true", "GPUSPLIT_LAB_WAIT_SCALE": "1.5"}, 1.5),
        ({"GPUSPLIT_LAB_WAIT_SCALE": " 4 "}, 4.0),
    ],
)
def test_the_scale(monkeypatch, env, want):
    for name in ("CI", "GPUSPLIT_LAB_WAIT_SCALE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert C.wait_scale() == want


@pytest.mark.parametrize("given", ["0", "-2", "nan", "inf", "fast"])
def test_a_scale_that_is_no_positive_number_is_refused(monkeypatch, given):
    monkeypatch.setenv("GPUSPLIT_LAB_WAIT_SCALE", given)
    with pytest.raises(ValueError, match="GPUSPLIT_LAB_WAIT_SCALE must be a positive number"):
        C.wait_scale()
