"""plugins/plugin_utils/filter_errors.py: refusals become AnsibleFilterError, a GpusplitError the
filter file does not title is caught last under the filter's own name, and a Python error inside a
filter is shown as its arguments' shapes, never as Python's text; other exceptions pass."""

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


def failing(exc, name="some_filter"):
    """A filter with an input and one option that fails with ``exc`` (a bug)."""

    def some_filter(data, option=None):
        raise exc

    some_filter.__name__ = name
    return some_filter


@pytest.mark.parametrize(
    "exc", [KeyError("bug"), TypeError("'int' object is not iterable"), AttributeError("get")]
)
def test_a_bug_inside_a_filter_names_the_filter_and_arguments_not_python(exc):
    """Issue 18: internal exception text never reaches the user; the arguments' types and where it
    failed do."""
    refusals = {TitledError: "gpusplit thing"}
    f = wrap(failing(exc), refusals)
    with pytest.raises(AnsibleFilterError) as err:
        f({"a": 1}, option="x")
    line = failing.__code__.co_firstlineno + 4
    assert str(err.value) == (
        "gpusplit.k8s.some_filter refused:\n"
        "- cannot read its arguments as given (its input (the value before the |): mapping, option: string); "
        "see ansible-doc -t filter gpusplit.k8s.some_filter for the shape of each (a bug in the filter too: "
        f"{type(exc).__name__} at test_filter_errors.py:{line})"
    )
    assert refusals == {TitledError: "gpusplit thing"}


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (("gang",), "its input (the value before the |): expected a mapping, got string"),
        ((None,), "its input (the value before the |): expected a mapping, got null"),
    ],
)
def test_a_bug_on_input_of_the_wrong_shape_names_the_documented_shape(args, msg):
    """When the filter fails on an argument its documentation types otherwise, that argument and
    its shape are named (plugins/filter/gang_job.yml: _input is a dict)."""
    f = wrap(failing(AttributeError("'str' object has no attribute 'get'"), name="gang_job"))
    with pytest.raises(AnsibleFilterError) as err:
        f(*args)
    assert str(err.value) == f"gpusplit.k8s.gang_job refused:\n- {msg}"


def test_other_exceptions_still_pass_and_names_stay():
    f = wrap(raising(RuntimeError("not input")))
    with pytest.raises(RuntimeError):
        f()
    assert filters([raising(ValueError("x"))])["some_filter"].__name__ == "some_filter"


def filter_modules():
    for path in sorted((ROOT / "plugins" / "filter").glob("*.py")):
        yield importlib.import_module(f"ansible_collections.gpusplit.k8s.plugins.filter.{path.stem}")


@pytest.mark.parametrize("module", list(filter_modules()), ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_every_filter_of_the_collection_goes_through_the_wrapper(module):
    for name, func in module.FilterModule().filters().items():
        assert func.__module__ == module.__name__ and hasattr(func, "__wrapped__"), name
        assert func.__wrapped__.__name__ == name
