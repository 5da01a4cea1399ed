"""Deciding what cluster_apply must send, from plain data (the lab proves the apply itself)."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s import apply, compare
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import LABEL_MANAGED_BY


def node(labels, managed=None):
    meta = {"name": "n1", "labels": labels}
    if managed is not None:
        meta["managedFields"] = managed
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta}


def applied(manager, labels, operation="Apply"):
    fields = {"f:metadata": {"f:labels": {".": {}, **{f"f:{k}": {} for k in labels}}}}
    return {"manager": manager, "operation": operation, "fieldsV1": fields}


def test_stopped_sending_finds_owned_map_fields_missing_from_desired():
    fields = {
        "f:metadata": {"f:labels": {".": {}, "f:a": {}, "f:b": {}}},
        "f:spec": {
            "f:template": {"f:spec": {"f:runtimeClassName": {}, "f:containers": {'k:{"name":"c"}': {}}}}
        },
    }
    desired = {"metadata": {"labels": {"a": "1"}}, "spec": {"template": {"spec": {"containers": []}}}}
    assert compare.stopped_sending(desired, fields) == [
        "metadata.labels.b",
        "spec.template.spec.runtimeClassName",
    ]
    desired["metadata"]["labels"]["b"] = "2"
    desired["spec"]["template"]["spec"]["runtimeClassName"] = "nvidia"
    assert compare.stopped_sending(desired, fields) == []


def test_decide_updates_an_object_that_still_carries_a_label_gpusplit_dropped():
    desired = node({"gpusplit.io/split": "true"})
    live = node(
        {"gpusplit.io/split": "true", "nvidia.com/gpu.deploy.device-plugin": "false", "other": "x"},
        [
            applied("gpusplit", ["gpusplit.io/split", "nvidia.com/gpu.deploy.device-plugin"]),
            applied("kubectl-label", ["other"], operation="Update"),
        ],
    )
    index = {apply.object_key(live): live}
    assert compare.decide([desired], index, "gpusplit")["update"] == [desired]
    # without the field manager (or when another manager owns the label) nothing is sent
    assert compare.decide([desired], index)["unchanged"] == [desired]
    assert compare.decide([desired], index, "someone")["unchanged"] == [desired]


def test_decide_leaves_an_object_alone_once_the_label_is_gone():
    desired = node({"gpusplit.io/split": "true"})
    live = node({"gpusplit.io/split": "true", "other": "x"}, [applied("gpusplit", ["gpusplit.io/split"])])
    assert compare.decide([desired], {apply.object_key(live): live}, "gpusplit")["unchanged"] == [desired]


def test_needing_apply_names_what_an_apply_would_create_or_change_from_a_read_alone():
    """The controller's skip of an apply task (role step split_cluster) decides as the module does, from a read that kept
    the manager's managedFields; a node read without them, or not read at all, needs the apply."""
    same = node({"gpusplit.io/split": "true"})
    changed = {
        **node({"gpusplit.io/split": "false"}),
        "metadata": {"name": "n2", "labels": {"gpusplit.io/split": "false"}},
    }
    dropped = {
        **node({"gpusplit.io/split": "true"}),
        "metadata": {"name": "n3", "labels": {"gpusplit.io/split": "true"}},
    }
    new = {
        **node({"gpusplit.io/split": "true"}),
        "metadata": {"name": "n4", "labels": {"gpusplit.io/split": "true"}},
    }
    live = [
        node({"gpusplit.io/split": "true", "other": "x"}, [applied("gpusplit", ["gpusplit.io/split"])]),
        {**changed, "metadata": {"name": "n2", "labels": {"gpusplit.io/split": "true"}, "managedFields": []}},
        {**dropped, "metadata": {**dropped["metadata"], "labels": {"gpusplit.io/split": "true", "gpusplit.io/mode": "x"},
                                  "managedFields": [applied("gpusplit", ["gpusplit.io/split", "gpusplit.io/mode"])]}},
    ]  # fmt: skip
    assert compare.needing_apply([same], live, "gpusplit") == []
    assert compare.needing_apply([same, changed, dropped, new], live, "gpusplit") == [new, changed, dropped]
    # read without managedFields: a dropped label could not show, so it is applied
    assert compare.needing_apply([same], [node({"gpusplit.io/split": "true"})], "gpusplit") == [same]


# --------------------------------------------------------------------------------------------
# apply order and check mode with a namespace the batch creates


def daemonset(ns, name):
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": ns, "labels": {LABEL_MANAGED_BY: "gpusplit"}},
        "spec": {"selector": {"matchLabels": {"n": name}}},
    }


def namespace(name):
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


class FakeApiserver(apply.Cluster):
    """Cluster's apply_many and run against an in-memory store that, like the apiserver, refuses
    a namespaced object whose namespace does not exist (also in a dry-run)."""

    def __init__(self, namespaces=("kube-system",)):  # no kubeconfig, no client
        self.writes = 0
        self.store = {apply.object_key(namespace(n)): namespace(n) for n in namespaces}
        self.sent = []

    def live_for(self, desired_objects):
        return dict(self.store)

    def list_index(self, api_version, kind, label_selector=None, namespace=None):
        return {k: v for k, v in self.store.items() if k[:2] == (api_version, kind)}

    def apply(self, obj, field_manager, force=True, dry_run=False):
        self.sent.append((apply.key_text(apply.object_key(obj)), dry_run))
        ns = obj["metadata"].get("namespace")
        if ns and apply.object_key(namespace(ns)) not in self.store:
            raise RuntimeError(f'namespaces "{ns}" not found')
        if not dry_run:
            self.writes += 1
            self.store[apply.object_key(obj)] = obj
        return obj


def test_apply_phases_put_namespaces_then_cluster_scoped_then_namespaced():
    objs = [
        daemonset("gpu", "a"),
        node({"x": "1"}),
        namespace("gpu"),
        daemonset("gpu", "b"),
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "c"},
        },
    ]
    assert apply.apply_phases(objs) == [[2, 4], [1], [0, 3]]
    assert apply.apply_phases([daemonset("gpu", "a")]) == [[0]]
    assert apply.apply_phases([]) == []


def test_a_namespace_is_applied_before_the_daemonsets_that_live_in_it():
    # many DaemonSets first in the list and a wide pool: without phases some would race the Namespace
    objs = [daemonset("gpusplit-system", f"ds-{i}") for i in range(40)] + [namespace("gpusplit-system")]
    cluster = FakeApiserver()
    result = apply.run(cluster, objs, parallel=16)
    assert cluster.sent[0] == ("Namespace/gpusplit-system (v1)", False)
    assert len(result["created"]) == 41 and result["api_writes"] == 41
    assert result["not_dry_run"] == [] and "warnings" not in result


def test_check_mode_reports_objects_of_a_new_namespace_without_a_failing_dry_run():
    objs = [namespace("gpusplit-system"), daemonset("gpusplit-system", "a"), daemonset("kube-system", "b")]
    cluster = FakeApiserver()
    result = apply.run(cluster, objs, check_mode=True)
    # the Namespace and the DaemonSet of an existing namespace are dry-run; the other is not sent
    assert sorted(cluster.sent) == [
        ("DaemonSet/kube-system/b (apps/v1)", True),
        ("Namespace/gpusplit-system (v1)", True),
    ]
    assert result["changed"] is True and result["api_writes"] == 0
    assert sorted(result["created"]) == [
        "DaemonSet/gpusplit-system/a (apps/v1)",
        "DaemonSet/kube-system/b (apps/v1)",
        "Namespace/gpusplit-system (v1)",
    ]
    assert result["not_dry_run"] == ["DaemonSet/gpusplit-system/a (apps/v1)"]
    assert "gpusplit-system" in result["warnings"][0] and "without a server dry-run" in result["warnings"][0]
    assert any(d["after_header"] == "DaemonSet/gpusplit-system/a (apps/v1)" for d in result["diff"])
    assert cluster.store.keys() == {apply.object_key(namespace("kube-system"))}  # nothing stored


def test_check_mode_still_dry_runs_into_a_namespace_that_is_missing_and_not_in_the_batch():
    with pytest.raises(RuntimeError, match='namespaces "elsewhere" not found'):
        apply.run(FakeApiserver(), [daemonset("elsewhere", "a")], check_mode=True)


@pytest.mark.parametrize(
    ("objects", "prune", "needle"),
    [
        ([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}], [], "objects[0] lacks metadata.name"),
        ([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": "x"}], [], "objects[0] metadata is a string"),
        ([{"apiVersion": 1, "kind": "ConfigMap", "metadata": {"name": "a"}}], [], "apiVersion (integer)"),
        (
            [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": ["n"]}}],
            [],
            "metadata.namespace (list)",
        ),
        (["x"], [], "objects[0] is a string, not a mapping"),
        ([namespace("a"), namespace("a")], [], "objects[1] Namespace/a (v1) appears more than once"),
        ([namespace("a")], [{"kind": "DaemonSet"}], "prune[0] needs api_version, label_selector"),
        ([namespace("a")], [{"api_version": "v1", "kind": "X", "label_selector": 3}], "needs label_selector"),
        (
            [namespace("a")],
            [{"api_version": "apps/v1", "kind": "DaemonSet", "label_selector": "app=x"}],
            "prune selector for DaemonSet must include app.kubernetes.io/managed-by",
        ),
    ],
)
def test_bad_objects_and_prune_specs_are_refused_before_any_request(objects, prune, needle):
    cluster = FakeApiserver()
    with pytest.raises(apply.ApplyError) as caught:
        apply.run(cluster, objects, prune=prune)
    assert str(caught.value).startswith("nothing was applied: ")
    assert needle in str(caught.value)
    assert cluster.sent == [] and cluster.writes == 0


def test_every_reason_is_given_at_once():
    objs = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}, "x"]
    with pytest.raises(apply.ApplyError) as caught:
        apply.run(FakeApiserver(), objs, prune=[{"kind": "DaemonSet"}])
    assert str(caught.value) == (
        "nothing was applied: objects[0] lacks metadata.name; objects[1] is a string, not a mapping; "
        "prune[0] needs api_version, label_selector as non-empty string(s)"
    )


def test_the_module_reports_a_refusal_without_a_traceback(monkeypatch, capsys):
    import json

    from ansible.module_utils.testing import patch_module_args

    from ansible_collections.gpusplit.k8s.plugins.modules import cluster_apply

    monkeypatch.setattr(cluster_apply, "Cluster", lambda kubeconfig, context: FakeApiserver())
    args = {"objects": [namespace("a")], "prune": [{"kind": "DaemonSet"}]}
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        cluster_apply.main()
    out = json.loads(capsys.readouterr().out)
    assert exc.value.code == 1 and "exception" not in out
    assert (
        out["msg"] == "nothing was applied: prune[0] needs api_version, label_selector as non-empty string(s)"
    )
    assert out["errors"] == [out["msg"]]


def test_check_mode_shows_an_object_of_a_new_namespace_whatever_its_annotations():
    odd = daemonset("gpusplit-system", "a")
    odd["metadata"]["annotations"] = "not a mapping"  # the real run's apiserver refuses it, naming it
    result = apply.run(FakeApiserver(), [namespace("gpusplit-system"), odd], check_mode=True)
    assert result["not_dry_run"] == ["DaemonSet/gpusplit-system/a (apps/v1)"]
