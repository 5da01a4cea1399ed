"""Control-plane flag values (plugins/module_utils/_control_plane/flag_values.py): parsing, merging,
and putting --feature-gates / --runtime-config into a command list."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.flag_values import (
    FlagEditError,
    command_flags,
    format_feature_gates,
    format_runtime_config,
    merge_flags,
    merge_map,
    parse_feature_gates,
    parse_runtime_config,
)

# ---------------------------------------------------------------------------------------------
# flag values


def test_parse_and_format_feature_gates():
    assert parse_feature_gates(" A=true, B=False ,,C=0") == {"A": True, "B": False, "C": False}
    assert format_feature_gates({"A": True, "B": "false"}) == "A=true,B=false"
    with pytest.raises(FlagEditError, match="missing bool value for A"):
        parse_feature_gates("A")
    with pytest.raises(FlagEditError, match="invalid value of A=yes"):
        parse_feature_gates("A=yes")


def test_parse_and_format_runtime_config():
    assert parse_runtime_config("a/v1=true, api/beta ,b/v1/r=false") == {
        "a/v1": "true",
        "api/beta": "",
        "b/v1/r": "false",
    }
    assert format_runtime_config({"a/v1": True, "api/beta": ""}) == "a/v1=true,api/beta"


def test_merge_map_order():
    merged = merge_map({"B": 1, "A": 2, "C": 3}, {"Z": 9, "A": 5, "M": 7}, remove={"C"})
    assert list(merged.items()) == [("B", 1), ("A", 5), ("M", 7), ("Z", 9)]


# ---------------------------------------------------------------------------------------------
# merge_flags


BASE = ["kube-apiserver", "--advertise-address=192.0.2.10", "--secure-port=6443"]


def test_merge_flags_appends_new_flags_at_the_end():
    new = merge_flags(BASE, {"GenericWorkload": True}, {"scheduling.k8s.io/v1beta1": True})
    assert new == BASE + [
        "--feature-gates=GenericWorkload=true",
        "--runtime-config=scheduling.k8s.io/v1beta1=true",
    ]


def test_merge_flags_replaces_in_place_keeps_others_appends_sorted():
    command = BASE[:2] + ["--feature-gates=Zeta=true,GenericWorkload=false,Alpha=true"] + BASE[2:]
    new = merge_flags(command, {"GenericWorkload": True, "Omega": True, "Beta": False})
    assert new[2] == "--feature-gates=Zeta=true,GenericWorkload=true,Alpha=true,Beta=false,Omega=true"
    assert new[:2] + new[3:] == BASE


def test_merge_flags_is_idempotent_and_keeps_foreign_spelling():
    command = BASE + ["--feature-gates=GenericWorkload=True"]
    assert merge_flags(command, {"GenericWorkload": True}) == command
    once = merge_flags(BASE, {"GenericWorkload": True}, {"scheduling.k8s.io/v1beta1": "true"})
    assert merge_flags(once, {"GenericWorkload": True}, {"scheduling.k8s.io/v1beta1": "true"}) == once


def test_merge_flags_two_token_form_and_repeats():
    command = BASE + [
        "--feature-gates",
        "A=true",
        "--feature-gates=B=true,A=false",
        "--runtime-config=x/v1=true",
    ]
    assert command_flags(command)["feature_gates"] == {"A": False, "B": True}  # later wins
    new = merge_flags(command, {"C": True})
    assert new == BASE + ["--feature-gates", "A=false,B=true,C=true", "--runtime-config=x/v1=true"]


def test_merge_flags_removals():
    command = BASE + [
        "--feature-gates=GangScheduling=true,GenericWorkload=true",
        "--runtime-config=s/v1alpha2=true",
    ]
    new = merge_flags(
        command,
        None,
        {"s/v1beta1": "true"},
        remove_feature_gates=["GangScheduling"],
        remove_runtime_config=["s/v1alpha2"],
    )
    assert new == BASE + ["--feature-gates=GenericWorkload=true", "--runtime-config=s/v1beta1=true"]
    emptied = merge_flags(command, remove_feature_gates=["GangScheduling", "GenericWorkload"])
    assert emptied == BASE + ["--runtime-config=s/v1alpha2=true"]
    assert merge_flags(BASE, remove_feature_gates=["Nothing"]) == BASE


def test_merge_flags_rejects_bad_values():
    with pytest.raises(FlagEditError):
        merge_flags(BASE, {"GenericWorkload": "sure"})
    with pytest.raises(FlagEditError):
        merge_flags(BASE + ["--feature-gates=Broken"], {"GenericWorkload": True})
