"""The error root (plugins/module_utils/_errors.py): GpusplitError and its messages, refusal_text,
fail_on_refusal, and GpusplitError.prefixed."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import (
    INT64_MAX,
    INT64_MIN,
    GpusplitError,
    a_type_name,
    ascii_int,
    check_number,
    fail_on_refusal,
    refusal_text,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.nvml import NvmlInitError


class Failed(Exception):
    pass


class FakeModule:
    def fail_json(self, **result):
        raise Failed(result)


class KindError(GpusplitError):
    """A subclass, as callers that tell kinds apart use."""


@pytest.mark.parametrize(
    ("given", "errors"),
    [
        ("one reason", ["one reason"]),
        (["first", "second"], ["first", "second"]),
        ((f"reason {i}" for i in range(3)), ["reason 0", "reason 1", "reason 2"]),
        (["kept", ""], ["kept"]),  # empty messages are dropped
        (42, ["42"]),  # not iterable: one message
    ],
)
def test_errors_from_a_string_a_list_or_a_generator(given, errors):
    exc = GpusplitError(given)
    assert exc.errors == errors
    assert str(exc) == "\n".join(errors)
    assert isinstance(exc, ValueError)  # callers validating input with `except ValueError` keep working


def test_refusal_text_with_and_without_a_title():
    one, two = GpusplitError("only"), GpusplitError(["a", "b"])
    assert refusal_text("gpusplit split plan", two) == "gpusplit split plan refused:\n- a\n- b"
    assert refusal_text("gpusplit split plan", one) == "gpusplit split plan refused:\n- only"
    assert refusal_text("", one) == "only"
    assert refusal_text("", two) == "a\nb"
    assert refusal_text("", ValueError("plain")) == "plain"  # no .errors: the exception text


def test_fail_on_refusal_fails_the_module_with_msg_errors_and_the_result():
    module = FakeModule()
    with pytest.raises(Failed) as failed, fail_on_refusal(module, "gpusplit DRA", changed=False, path="/x"):
        raise KindError(["a", "b"])
    assert failed.value.args[0] == {
        "msg": "gpusplit DRA refused:\n- a\n- b",
        "errors": ["a", "b"],
        "changed": False,
        "path": "/x",
    }
    with pytest.raises(Failed) as failed, fail_on_refusal(module):
        raise GpusplitError("only")
    assert failed.value.args[0] == {"msg": "only", "errors": ["only"]}


def test_fail_on_refusal_lets_everything_else_through():
    module = FakeModule()
    with pytest.raises(KeyError), fail_on_refusal(module):
        raise KeyError("a bug, not a refusal")
    with fail_on_refusal(module):
        pass  # nothing raised: nothing failed


def test_prefixed_keeps_the_class_and_prefixes_every_message():
    exc = KindError(["a", "b"])
    again = exc.prefixed("/etc/kubernetes/manifests/kube-apiserver.yaml: ")
    assert type(again) is KindError
    assert again.errors == [
        "/etc/kubernetes/manifests/kube-apiserver.yaml: a",
        "/etc/kubernetes/manifests/kube-apiserver.yaml: b",
    ]
    assert str(again) == "\n".join(again.errors)
    assert exc.errors == ["a", "b"]  # the original is left as it was


def test_prefixed_single_message_reads_as_the_hand_written_prefix():
    exc = GpusplitError("missing bool value for A")
    assert str(exc.prefixed("/x.yaml: ")) == f"/x.yaml: {exc}"
    assert str(exc.prefixed("restore_from /b is no manifest (", "); nothing was changed")) == (
        "restore_from /b is no manifest (missing bool value for A); nothing was changed"
    )
    assert GpusplitError().prefixed("/x.yaml").errors == ["/x.yaml"]


def test_prefixed_keeps_a_subclass_attributes_and_is_reported_whole():
    exc = NvmlInitError("driver not loaded", code=9, no_driver=True)
    again = exc.prefixed("host gpu-a: ")
    assert (type(again), again.code, again.no_driver) == (NvmlInitError, 9, True)
    module = FakeModule()
    with pytest.raises(Failed) as failed, fail_on_refusal(module):
        raise KindError(["a", "b"]).prefixed("f: ")
    assert failed.value.args[0] == {"msg": "f: a\nf: b", "errors": ["f: a", "f: b"]}


def test_a_type_name_reads_in_a_sentence():
    assert [a_type_name(v) for v in (None, True, 1, 2.5, "x", [1], {"a": 1})] == [
        "a null",
        "a boolean",
        "an integer",
        "a number",
        "a string",
        "a list",
        "a mapping",
    ]


def test_unknown_keys_one_wording_sorted():
    from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import unknown_keys

    assert unknown_keys("q", {"kind": 1, "zz": 2, "aa": 3}, ("kind", "name")) == [
        "q: unknown key(s) aa, zz (known: kind, name)"
    ]
    assert unknown_keys("q", {"kind": 1}, ("kind", "name")) == []


@pytest.mark.parametrize(
    ("text", "signed", "expected"),
    [
        ("12", False, 12),
        (" 7 ", False, 7),
        ("-3", True, -3),
        ("+3", True, 3),
        ("-3", False, None),
        ("²", False, None),  # str.isdigit() says yes, int() fails
        ("٣", False, None),  # str.isdigit() says yes, int() reads 3
        ("１２", False, None),  # full-width digits
        ("1_0", False, None),  # int() takes the underscore
        ("", False, None),
        ("-", True, None),
        (12, False, None),
    ],
)
def test_ascii_int(text, signed, expected):
    assert ascii_int(text, signed) == expected


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        (float("nan"), {"low": 0, "above": True}, "x: expected a number above 0, got nan"),
        (float("inf"), {"low": 0, "high": 10}, "x: expected a number from 0 to 10, got inf"),
        (
            1e300,
            {"low": 0, "high": 10, "unit": "seconds"},
            "x: expected a number of seconds from 0 to 10, got 1e+300",
        ),
        (True, {}, "x: expected a finite number, got a boolean"),
        (None, {}, "x: expected a finite number, got null"),
        ("5", {}, "x: expected a finite number, got '5'"),
        (2.5, {"integer": True}, "x: expected a finite whole number, got 2.5"),
        (
            10**30,
            {"low": INT64_MIN, "high": INT64_MAX, "integer": True},
            "x: expected a whole number from -9223372036854775808 to 9223372036854775807, got an integer of 31 digits",
        ),
        (0, {"low": 0, "high": 1, "above": True}, "x: expected a number above 0 and at most 1, got 0"),
        (-1, {"high": 0.5, "low": None}, None),
    ],
)
def test_check_number(value, kwargs, message):
    if message is None:
        assert check_number(value, "x", **kwargs) == value
        return
    with pytest.raises(GpusplitError) as caught:
        check_number(value, "x", **kwargs)
    assert caught.value.errors == [message]


def test_check_number_gives_whole_numbers_as_int():
    assert check_number(3.0, "x", integer=True) == 3 and isinstance(check_number(3.0, "x", integer=True), int)
    assert check_number(INT64_MAX, "x", INT64_MIN, INT64_MAX, integer=True) == INT64_MAX
