"""The DRA filters (plugins/filter/dra.py): their names, and refusals turned into AnsibleFilterError (and the\nroles' DRA steps' into a failed result)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpusplit.k8s.plugins.filter import dra as dra_filters

ROOT = Path(__file__).resolve().parents[4]


def test_filters_are_named_and_wrap_refusals():
    filters = dra_filters.FilterModule().filters()
    assert all(name.startswith("dra_") for name in filters)
    others = set()
    for path in (ROOT / "plugins" / "filter").glob("*.py"):
        if path.name != "dra.py":
            others |= set(re.findall(r"^def (\w+)\(", path.read_text(), re.M))
    assert not set(filters) & others
    with pytest.raises(AnsibleFilterError, match="gpusplit DRA refused"):
        filters["dra_diagnostic_claim"]({"host": "h", "node": "n", "minor_number": 1}, "diag", "ops", "Pod")
