"""The DRA filters (plugins/filter/dra.py): their names, and refusals turned into AnsibleFilterError."""

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
        filters["dra_isolation_rule"]({"host": "h", "node": "n", "minor_number": 1}, "Evict")
    with pytest.raises(AnsibleFilterError, match="split plan refused"):
        filters["dra_host_rules"]("not a plan")
    results = [{"source": "/a.toml", "content": "ZW5hYmxlX2NkaSA9IHRydWUK"}, {"skipped": True}]
    assert filters["dra_slurped_files"](results) == [{"path": "/a.toml", "text": "enable_cdi = true\n"}]
