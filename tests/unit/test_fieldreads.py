"""tests/unit/fieldreads.py, the check that a cluster_read query keeps every field its filters read: it
must find a read outside the fields, or the tests that use it prove nothing."""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.tests.unit.fieldreads import query_fields, recorded, uncovered

NODE = {
    "metadata": {"name": "n", "labels": {"a": "b"}, "annotations": {}},
    "spec": {"taints": [{"key": "k"}], "podCIDR": "10.0.0.0/24"},
}


def test_reads_by_key_are_covered_by_a_field_or_on_the_way_to_one():
    [node], reads = recorded([NODE])
    assert (node.get("metadata") or {}).get("name") == "n"
    assert "a" in node["metadata"]["labels"]
    assert [t.get("key") for t in node["spec"]["taints"]] == ["k"]
    assert uncovered(reads, ["metadata.name", "metadata.labels", "spec.taints"]) == []
    assert uncovered(reads, ["metadata.name"]) == [
        "metadata.labels",
        "metadata.labels.a",
        "spec",
        "spec.taints",
        "spec.taints.key",
    ]
    node["spec"].get("podCIDR")
    assert uncovered(reads, ["metadata.name", "metadata.labels", "spec.taints"]) == ["spec.podCIDR"]


def test_a_mapping_read_whole_needs_a_field_that_keeps_it_whole():
    [node], reads = recorded([NODE])
    assert dict(node["metadata"]["labels"].items()) == {"a": "b"}
    assert uncovered(reads, ["metadata.labels"]) == []
    assert uncovered(reads, ["metadata.labels.a"]) == ["metadata.labels"]
    len(node)
    assert uncovered(reads, ["metadata"]) == ["(the object)"]


def test_the_fields_come_from_the_roles_task_file():
    assert "status.phase" in query_fields("roles/gpu_resplit/tasks/resplit.yml", "pods")
    assert "spec.taints" in query_fields("roles/gpu_split_cluster/tasks/cluster.yml", "labelled")
