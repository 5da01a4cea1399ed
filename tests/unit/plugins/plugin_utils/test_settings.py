"""Settings over a table of defaults (plugins/plugin_utils/settings.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.settings import with_defaults

DEFAULTS = {"name": "x", "labels": {}, "count": 1}


class CallersError(GpusplitError):
    """A caller's own kind of refusal."""


def test_none_values_mean_the_default_and_the_defaults_stay_untouched():
    out = with_defaults({"name": "y", "count": None}, DEFAULTS, "t")
    assert out == {"name": "y", "labels": {}, "count": 1}
    out["labels"]["a"] = "b"
    assert DEFAULTS["labels"] == {} and with_defaults(None, DEFAULTS, "t") == DEFAULTS


def test_refuses_no_mapping_and_unknown_keys_with_the_callers_error():
    with pytest.raises(CallersError, match=r"^t: expected a mapping, got list$"):
        with_defaults([], DEFAULTS, "t", CallersError)
    with pytest.raises(CallersError) as exc:
        with_defaults({"b": 1, "a": 2, "name": "z"}, DEFAULTS, "guard settings", CallersError)
    assert exc.value.errors == ["guard settings: unknown key(s) a, b (allowed: name, labels, count)"]
