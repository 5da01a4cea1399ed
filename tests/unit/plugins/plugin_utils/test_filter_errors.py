"""plugins/plugin_utils/filter_errors.py: refusals become AnsibleFilterError, a GpusplitError the
filter file does not title is caught last under the filter's own name, nothing else is caught."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters, wrap

ROOT = Path(__file__).resolve().parents[4]


class TitledError(GpusplitError):
    pass


class OtherError(GpusplitError):
    pass


def raising(exc):
    def some_filter(*_args, **_kwargs):
        raise exc

    return some_filter


def test_a_titled_kind_uses_its_title():
    f = wrap(raising(TitledError(["a", "b"])), {TitledError: "gpusplit thing"})
    with pytest.raises(AnsibleFilterError) as err:
        f()
    assert str(err.value) == "gpusplit thing refused:\n- a\n- b"


def test_a_title_of_none_is_the_filter_name():
    f = wrap(raising(TitledError("a")), {TitledError: None})
    with pytest.raises(AnsibleFilterError) as err:
        f()
    assert str(err.value) == "gpusplit.k8s.some_filter refused:\n- a"


@pytest.mark.parametrize("exc", [GpusplitError("plain"), OtherError("plain")])
def test_any_other_gpusplit_error_is_caught_last_under_the_filter_name(exc):
    for refusals in ({TitledError: "gpusplit thing"}, {}, None):
        f = wrap(raising(exc), refusals)
        with pytest.raises(AnsibleFilterError) as err:
            f()
        assert str(err.value) == "gpusplit.k8s.some_filter refused:\n- plain"


def test_a_catch_all_title_given_by_the_file_wins():
    f = wrap(raising(OtherError("plain")), {GpusplitError: "gpusplit split modes"})
    with pytest.raises(AnsibleFilterError, match=r"^gpusplit split modes refused:\n- plain$"):
        f()


def test_other_exceptions_are_not_caught_and_the_refusals_are_not_changed():
    refusals = {TitledError: "gpusplit thing"}
    f = wrap(raising(KeyError("bug")), refusals)
    with pytest.raises(KeyError):
        f()
    assert refusals == {TitledError: "gpusplit thing"}
    assert filters([raising(ValueError("x"))], refusals)["some_filter"].__name__ == "some_filter"


def filter_modules():
    for path in sorted((ROOT / "plugins" / "filter").glob("*.py")):
        yield importlib.import_module(f"ansible_collections.gpusplit.k8s.plugins.filter.{path.stem}")


@pytest.mark.parametrize("module", list(filter_modules()), ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_every_filter_of_the_collection_goes_through_the_wrapper(module):
    for name, func in module.FilterModule().filters().items():
        assert func.__module__ == module.__name__ and hasattr(func, "__wrapped__"), name
        assert func.__wrapped__.__name__ == name
