"""A program of tools/ imported by a test as a module (tools/ is no package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def load_tool(name):
    """tools/<name>.py, imported as the module ``gpusplit_tool_<name>``."""
    spec = importlib.util.spec_from_file_location(f"gpusplit_tool_{name}", TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
