"""The differential tests need Hypothesis and tomllib (the project's venv, Python 3.11+); under a managed-host
Python without them (tools/multi_python_tests.py) those files are not collected at all, rather than skipped.
tests/unit/plugins/module_utils/_kubelet/test_hpack_differential.py fails where the project's venv lacks them."""

from __future__ import annotations

import importlib.util

collect_ignore_glob = []
if importlib.util.find_spec("hypothesis") is None or importlib.util.find_spec("tomllib") is None:
    collect_ignore_glob.append("test_*_differential.py")
