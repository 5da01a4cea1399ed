"""module_utils/_k8s/read.py: the queries of cluster_read checked before any request (every problem at once),
and a failed request named by its query. The reads themselves run against the lab's apiserver in
tests/integration/test_cluster_read.py."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.read import check_queries, read_queries


def test_queries_in_order_with_their_selectors_joined():
    assert check_queries(
        {
            "ds": {"api_version": "apps/v1", "kind": "DaemonSet", "label_selectors": ["a=b", "c"]},
            "pods": {"api_version": "v1", "kind": "Pod", "namespace": "kube-system"},
        }
    ) == [("ds", "apps/v1", "DaemonSet", "a=b,c", None), ("pods", "v1", "Pod", None, "kube-system")]


@pytest.mark.parametrize(
    ("queries", "errors"),
    [
        ({}, ["queries: expected a mapping of name to query (at least one), got mapping"]),
        ([], ["queries: expected a mapping of name to query (at least one), got list"]),
        ({"x": "Pod"}, ["queries['x']: expected a mapping with api_version and kind, got string"]),
        (
            {"x": {"kind": "Pod", "selector": "a"}},
            [
                "queries['x']: unknown key(s) selector (known: api_version, kind, label_selectors, namespace)",
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
