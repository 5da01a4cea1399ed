"""The toolkit edit (plugins/module_utils/_host/toolkit_config.py) on generated config.toml files, judged by
``tomllib`` (toml_cases.py: Hypothesis, a fixed seed, at least CASES valid files per run): the edited text
reads, in tomllib, as the old file with exactly the requested settings, and an edit is refused only where
tomllib's reading of the file says that no text edit can do it (a setting's table is a value or an array of
tables, or the setting is a table)."""

from __future__ import annotations

import copy

from ansible_collections.gpusplit.k8s.plugins.module_utils._host import toolkit_config as tc

try:
    import tomllib

    from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._host.test_toml_read_differential import (
        same,
    )
    from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._host.toml_cases import (
        CASES,
        each_case,
        settings_for,
        toolkit_document,
    )
except ImportError:  # a managed-host Python without tomllib or Hypothesis: conftest.py deselects the tests
    tomllib = None


def expected_after(data, settings):
    """tomllib's data with ``settings`` set, or None where no edit can set them (tomllib's own reading)."""
    want = copy.deepcopy(data)
    for key, value in settings.items():
        *table, leaf = key.split(".")
        node = want
        for part in table:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                return None
        if isinstance(node.get(leaf), dict):
            return None
        node[leaf] = list(value) if isinstance(value, (list, tuple)) else value
    return want


def valid_toolkit_document(rnd):
    while True:
        text = toolkit_document(rnd)
        try:
            return text, tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            continue


def test_generated_edits_read_back_in_tomllib_as_requested():
    seen = {"edited": 0, "refused": 0, "unchanged": 0}

    def check(rnd):
        text, data = valid_toolkit_document(rnd)
        settings = settings_for(rnd)
        want = expected_after(data, settings)
        try:
            result = tc.edit_config(text, settings)
        except tc.TomlEditError as exc:
            assert want is None, f"{text!r} with {settings!r} refused: {exc}"
            seen["refused"] += 1
            return
        assert want is not None, f"{text!r} with {settings!r}: edited, although tomllib reads a conflict"
        after = tomllib.loads(result["text"])
        assert same(after, want), f"{text!r} with {settings!r} gave {result['text']!r}"
        assert result["changed"] == (result["text"] != text)
        # a second run with the same settings changes nothing
        again = tc.edit_config(result["text"], settings)
        assert not again["changed"], f"{result['text']!r} with {settings!r} changed again"
        seen["edited" if result["changed"] else "unchanged"] += 1

    assert each_case(check) >= CASES
    assert seen["edited"] >= CASES // 2, seen
