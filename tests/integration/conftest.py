"""Every test in this folder runs against the lab control plane (fixtures in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if Path(str(item.fspath)).parent.name == "integration":
            item.add_marker(pytest.mark.integration)
