"""module_utils/_k8s/taints.py: the requests of node_taints checked before any request (every problem at
once), the taints a node ends with, and the patches: only changed nodes, each testing the resourceVersion
it was worked out from, read again where it moved. The module against the lab's apiserver:
tests/integration/test_node_taints_lab.py."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.taints import (
    apply_changes,
    check_requests,
    diff_entry,
    merged,
    node_changes,
    patch_ops,
)

GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
OTHER = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
EXEC = {"key": "maintenance", "effect": "NoExecute", "timeAdded": "2026-12-01T10:00:00Z"}


def node(name, taints=(), rv="1"):
    spec = {"taints": list(taints)} if taints else {}
    return {"metadata": {"name": name, "resourceVersion": rv}, "spec": spec}


def test_requests_in_order():
    assert check_requests(
        [{"name": "a", "present": [GPU]}, {"name": "b", "absent": [{"key": "k", "effect": "NoExecute"}]}]
    ) == [("a", [GPU], []), ("b", [], [{"key": "k", "effect": "NoExecute"}])]
    assert check_requests([]) == []


def test_every_bad_request_refused_at_once():
    with pytest.raises(GpusplitError) as caught:
        check_requests(
            [
                {"name": "a", "present": [{"key": "", "effect": "NoSchedul"}], "extra": 1},
                {"name": "a"},
                {"present": "k=v:NoSchedule"},
                "b",
                {"name": "c", "present": [GPU], "absent": [{"key": GPU["key"], "effect": "NoSchedule"}]},
                {"name": "d", "present": [{**GPU, "value": 3, "other": True}]},
            ]
        )
    errors = caught.value.errors
    assert errors == [
        "nodes[0]: unknown key(s) extra (known: name, present, absent)",
        "nodes[0] (a).present[0].key: expected the taint's key, a non-empty string, got ''",
        "nodes[0] (a).present[0].effect: expected one of NoSchedule, PreferNoSchedule, NoExecute, got 'NoSchedul'",
        "nodes[1].name: node a is named twice; give each node once with all its taints",
        "nodes[2].name: expected the node's name, a non-empty string, got None",
        "nodes[2].present: expected a list of taints, got string",
        "nodes[3]: expected a mapping with name, present and absent, got string",
        "nodes[4] (c): taint nvidia.com/gpu:NoSchedule is both in present and in absent",
        "nodes[5] (d).present[0]: unknown key(s) other (known: key, value, effect)",
        "nodes[5] (d).present[0].value: expected a string (or none), got integer",
    ]
    with pytest.raises(GpusplitError, match="nodes: expected a list"):
        check_requests({"name": "a"})


def test_merged_keeps_other_taints_and_their_order():
    # already there with the same value: unchanged, the server's timeAdded too
    assert merged([OTHER, EXEC, GPU], [GPU, EXEC], []) == [OTHER, EXEC, GPU]
    # the same key and effect with another value: replaced in place
    assert merged([{**GPU, "value": "old"}, OTHER], [GPU], []) == [GPU, OTHER]
    # a value left out equals an empty one
    assert (
        merged(
            [{"key": "k", "value": "", "effect": "NoSchedule"}], [{"key": "k", "effect": "NoSchedule"}], []
        )[0]["value"]
        == ""
    )
    # new ones go last
    assert merged([OTHER], [GPU], []) == [OTHER, GPU]
    # taken off by key and effect, whatever the value; another effect of the key stays
    gpu_exec = {**GPU, "effect": "NoExecute"}
    assert merged(
        [{**GPU, "value": "x"}, gpu_exec, OTHER], [], [{"key": GPU["key"], "effect": "NoSchedule"}]
    ) == [
        gpu_exec,
        OTHER,
    ]
    assert merged(None, [], [GPU]) == []


def test_changes_only_for_nodes_whose_taints_change():
    nodes = {"a": node("a", [GPU]), "b": node("b", [OTHER], rv="7"), "c": node("c")}
    checked = check_requests(
        [{"name": "a", "present": [GPU]}, {"name": "b", "present": [GPU]}, {"name": "c", "absent": [GPU]}]
    )
    assert node_changes(nodes, checked) == [
        {"name": "b", "before": [OTHER], "after": [OTHER, GPU], "resource_version": "7"}
    ]


def test_a_node_the_cluster_does_not_have_is_refused_before_any_patch():
    with pytest.raises(
        GpusplitError, match=r"node\(s\) not in the cluster: x, y; no node's taints were changed"
    ):
        node_changes({"a": node("a")}, check_requests([{"name": "x"}, {"name": "a"}, {"name": "y"}]))


def test_patch_tests_the_resource_version_then_sets_or_removes():
    set_ = {"name": "b", "before": [OTHER], "after": [OTHER, GPU], "resource_version": "7"}
    assert patch_ops(set_) == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "add", "path": "/spec/taints", "value": [OTHER, GPU]},
    ]
    assert patch_ops({**set_, "before": [GPU], "after": []})[1] == {"op": "remove", "path": "/spec/taints"}
    assert diff_entry(set_) == {
        "before_header": "node b taints",
        "after_header": "node b taints",
        "before": "dedicated=ml:NoSchedule\n",
        "after": "dedicated=ml:NoSchedule\nnvidia.com/gpu=present:NoSchedule\n",
    }


class Nodes:
    """The cluster's nodes as NodeTaintsApi shows them; ``moves`` edits a node the first times it is
    patched, as another writer would between the read and the patch."""

    def __init__(self, nodes, moves=None):
        self.live = {n["metadata"]["name"]: n for n in nodes}
        self.moves = moves or {}
        self.patches = []
        self.refuse = None  # the API server's answer to every patch, as for an invalid taint

    def nodes(self):
        return copy.deepcopy(self.live)

    def node(self, name):
        return copy.deepcopy(self.live[name])

    def patch(self, name, ops):
        self.patches.append((name, ops))
        live = self.live[name]
        if self.moves.get(name):
            self.moves[name].pop(0)(live)
            live["metadata"]["resourceVersion"] = str(int(live["metadata"]["resourceVersion"]) + 1)
        if self.refuse:
            return self.refuse
        if ops[0]["value"] != live["metadata"]["resourceVersion"]:
            return '{"kind":"Status","status":"Failure","reason":"Invalid","code":422}'
        if ops[1]["op"] == "add":
            live["spec"]["taints"] = ops[1]["value"]
        else:
            live["spec"].pop("taints")
        live["metadata"]["resourceVersion"] = str(int(live["metadata"]["resourceVersion"]) + 1)
        return None


def test_apply_patches_changed_nodes_and_nothing_in_check_mode():
    api = Nodes([node("a", [GPU]), node("b", [OTHER])])
    checked = check_requests([{"name": "a", "absent": [GPU]}, {"name": "b", "present": [GPU]}])
    assert [c["name"] for c in apply_changes(api, checked, check_mode=True)] == ["a", "b"]
    assert api.patches == []
    assert [c["name"] for c in apply_changes(api, checked)] == ["a", "b"]
    assert "taints" not in api.live["a"]["spec"] and api.live["b"]["spec"]["taints"] == [OTHER, GPU]
    assert apply_changes(api, checked) == []  # as asked now: no patch
    assert len(api.patches) == 2


def test_a_node_changed_in_between_is_read_again_and_keeps_the_other_taint():
    def someone_taints(live):
        live["spec"]["taints"] = [*live["spec"].get("taints", []), EXEC]

    api = Nodes([node("a", [OTHER])], moves={"a": [someone_taints]})
    done = apply_changes(api, check_requests([{"name": "a", "present": [GPU]}]))
    assert api.live["a"]["spec"]["taints"] == [OTHER, EXEC, GPU]
    assert [c["before"] for c in done] == [[OTHER, EXEC]]
    assert len(api.patches) == 2


def test_someone_else_making_the_same_change_in_between_is_no_change():
    def someone_untaints(live):
        live["spec"].pop("taints")

    api = Nodes([node("a", [GPU])], moves={"a": [someone_untaints]})
    assert apply_changes(api, check_requests([{"name": "a", "absent": [GPU]}])) == []


def test_a_node_that_keeps_changing_is_refused_after_the_attempts():
    def bump(live):
        live["metadata"]["labels"] = {"n": str(len(live["metadata"].get("labels", {})))}

    api = Nodes([node("z"), node("a")], moves={"a": [bump, bump, bump]})
    checked = check_requests([{"name": "z", "present": [GPU]}, {"name": "a", "present": [GPU]}])
    with pytest.raises(
        GpusplitError, match=r"node a: its taints kept changing .* \(3 attempts\).*already changed: z"
    ):
        apply_changes(api, checked)


def test_a_patch_refused_on_a_node_nobody_changed_is_raised_with_the_answer():
    api = Nodes([node("a")])
    api.refuse = "spec.taints[0].key: Invalid value"
    with pytest.raises(
        GpusplitError, match=r"node a: the API server refused the patch of its taints: spec.taints"
    ):
        apply_changes(api, check_requests([{"name": "a", "present": [GPU]}]))
    assert len(api.patches) == 1
