"""module_utils/_k8s/read.py: the queries of cluster_read checked before any request (every problem at once),
and a failed request named by its query. The reads themselves run against the lab's apiserver in
tests/integration/test_cluster_read.py."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.read import (
    check_queries,
    project,
    read_queries,
)
from ansible_collections.gpusplit.k8s.tests.unit.fieldreads import field_paths


def test_queries_in_order_with_their_selectors_joined():
    assert check_queries(
        {
            "ds": {"api_version": "apps/v1", "kind": "DaemonSet", "label_selectors": ["a=b", "c"]},
            "pods": {"api_version": "v1", "kind": "Pod", "namespace": "kube-system"},
        }
    ) == [
        ("ds", "apps/v1", "DaemonSet", "a=b,c", None, None, None),
        ("pods", "v1", "Pod", None, "kube-system", None, None),
    ]
    [query] = check_queries(
        {"p": {"api_version": "v1", "kind": "Pod", "fields": ["status.phase", "metadata"]}}
    )
    assert query[6] == (("status", "phase"), ("metadata",))


@pytest.mark.parametrize(
    ("queries", "errors"),
    [
        ({}, ["queries: expected a mapping of name to query (at least one), got mapping"]),
        ([], ["queries: expected a mapping of name to query (at least one), got list"]),
        ({"x": "Pod"}, ["queries['x']: expected a mapping with api_version and kind, got string"]),
        (
            {"x": {"kind": "Pod", "selector": "a"}},
            [
                "queries['x']: unknown key(s) selector (known: api_version, kind, fields, label_selectors, namespace, field_manager)",
                "queries['x'].api_version: expected a non-empty string, got null",
            ],
        ),
        (
            {"x": {"api_version": "v1", "kind": " ", "label_selectors": "a=b", "namespace": 3}},
            [
                "queries['x'].kind: expected a non-empty string, got string",
                "queries['x'].label_selectors: expected a list of selectors such as 'app=x', got 'a=b'",
                "queries['x'].namespace: expected a namespace name, got integer",
            ],
        ),
        (
            {"x": {"api_version": "v1", "kind": "Pod", "fields": "metadata.name"}},
            [
                "queries['x'].fields: expected a non-empty list of paths such as 'metadata.name', got 'metadata.name'"
            ],
        ),
        (
            {"x": {"api_version": "v1", "kind": "Pod", "fields": []}},
            ["queries['x'].fields: expected a non-empty list of paths such as 'metadata.name', got []"],
        ),
        (
            {"x": {"api_version": "v1", "kind": "Pod", "fields": ["metadata..name", 3, "status.phase", " "]}},
            [
                "queries['x'].fields: 'metadata..name' is not a path of keys separated by dots, such as 'status.phase'",
                "queries['x'].fields: 3 is not a path of keys separated by dots, such as 'status.phase'",
                "queries['x'].fields: ' ' is not a path of keys separated by dots, such as 'status.phase'",
            ],
        ),
        (
            {
                "x": {
                    "api_version": "v1",
                    "kind": "Node",
                    "field_manager": "gpusplit",
                    "fields": ["metadata.name"],
                }
            },
            [
                "queries['x'].field_manager: keeps one manager's metadata.managedFields, which only a query whose "
                "fields name metadata.managedFields keeps; add it to fields or leave field_manager out"
            ],
        ),
        (
            {
                "x": {
                    "api_version": "v1",
                    "kind": "Node",
                    "field_manager": 3,
                    "fields": ["metadata.managedFields"],
                }
            },
            ["queries['x'].field_manager: expected the name of a field manager, got integer"],
        ),
    ],
)
def test_bad_queries_are_refused_with_every_reason(queries, errors):
    with pytest.raises(GpusplitError) as info:
        check_queries(queries)
    assert info.value.errors == errors


def test_a_failed_connection_or_request_is_named():
    def refused():
        raise ConnectionRefusedError("connection refused")

    with pytest.raises(GpusplitError, match="connecting to the cluster failed: connection refused"):
        read_queries(refused, check_queries({"pods": {"api_version": "v1", "kind": "Pod"}}))

    class Cluster:
        def list_items(self, api_version, kind, label_selector=None, namespace=None):
            raise OSError("network is unreachable")

    with pytest.raises(GpusplitError, match=r"^pods: reading Pod \(v1\) from the cluster failed: network"):
        read_queries(Cluster, check_queries({"pods": {"api_version": "v1", "kind": "Pod"}}))


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "p",
        "namespace": "ml",
        "labels": {"app": "x"},
        "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
    },
    "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
    "status": {"phase": "Running"},
}


def paths(*fields):
    return field_paths(list(fields))


def test_every_object_comes_back_without_its_managed_fields():
    kept = project(POD)
    assert kept["metadata"] == {"name": "p", "namespace": "ml", "labels": {"app": "x"}}
    assert kept["spec"] is POD["spec"] and kept["status"] == POD["status"]
    assert "managedFields" in POD["metadata"]  # the object read is not changed
    assert project({"kind": "Status"}) == {"kind": "Status"}
    assert project(POD, paths("metadata"))["metadata"] == kept["metadata"]


def test_fields_keep_only_their_paths_whole_and_leave_out_what_an_object_lacks():
    assert project(POD, paths("metadata.name", "status.phase", "spec.containers", "status.podIP")) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "status": {"phase": "Running"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    # a path through something that is not a mapping reaches nothing
    assert project(POD, paths("spec.nodeName.x")) == {"apiVersion": "v1", "kind": "Pod"}
    # a longer path after a shorter one changes a copy, not the object read
    assert project(POD, paths("spec", "spec.nodeName"))["spec"] == POD["spec"]
    assert POD["spec"] == {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}
    # naming them keeps the managedFields
    assert project(POD, paths("metadata.managedFields")) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"managedFields": POD["metadata"]["managedFields"]},
    }


def test_each_query_comes_back_with_its_own_fields():
    class Cluster:
        def list_items(self, api_version, kind, label_selector=None, namespace=None):
            return [dict(POD)]

    found = read_queries(
        Cluster,
        check_queries(
            {
                "whole": {"api_version": "v1", "kind": "Pod"},
                "phases": {"api_version": "v1", "kind": "Pod", "fields": ["metadata.name", "status.phase"]},
            }
        ),
    )
    assert found["whole"] == [project(POD)]
    assert found["phases"] == [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "status": {"phase": "Running"}}
    ]


def test_a_field_manager_keeps_only_its_own_managed_fields():
    entries = [
        {"manager": "gpusplit", "operation": "Apply", "fieldsV1": {"f:metadata": {"f:labels": {}}}},
        {"manager": "kwok", "operation": "Update", "subresource": "status"},
        {"manager": "gpusplit", "operation": "Update"},
    ]
    node = {"kind": "Node", "metadata": {"name": "n1", "managedFields": entries}}
    [(*_, manager, fields)] = check_queries(
        {
            "n": {
                "api_version": "v1",
                "kind": "Node",
                "field_manager": "gpusplit",
                "fields": ["metadata.managedFields"],
            }
        }
    )
    assert manager == "gpusplit"
    assert project(node, fields, manager)["metadata"]["managedFields"] == [entries[0], entries[2]]
    assert project(node, fields, "nobody")["metadata"]["managedFields"] == []
    assert project(node, fields)["metadata"]["managedFields"] == entries
    assert node["metadata"]["managedFields"] == entries  # the object read is not changed
