"""The ClusterPolicy fields gpusplit sets in mode gpu_operator, recorded when it first sets them (gpu_operator.py,
original_record) and put back by ``gpusplit_unsplit_cluster: true`` (unsplit_cluster.py, clusterpolicy_plan): against
the objects site.yml renders, applied by a small server-side-apply model of the API server."""

from __future__ import annotations

import copy
import json

from ansible_collections.gpusplit.k8s.plugins.plugin_utils import gpu_operator as G
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import unsplit_cluster as W
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.role_steps import StepContext, run_step
from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_gpu_operator import (
    HARDENING,
    VM,
    fleet,
    live_policy,
)
from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_unsplit import one_node_plan

OTHERS = {"name": "CONTAINERD_SOCKET", "value": "/run/containerd/containerd.sock"}
LEAVES = [("spec", *path) for path, _env in G.OWNED_FIELDS]


def _get(obj, path):
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _set(obj, path, value):
    for key in path[:-1]:
        obj = obj.setdefault(key, {})
    obj[path[-1]] = copy.deepcopy(value)


def _drop(obj, path):
    """Takes the field out, and the maps it leaves empty (as the API server does with a manager's emptied maps)."""
    parent = _get(obj, path[:-1])
    if isinstance(parent, dict):
        parent.pop(path[-1], None)
        if not parent and len(path) > 2:
            _drop(obj, path[:-1])


def _leaves(obj):
    out = [p for p in LEAVES if _get(obj, p) is not None]
    out += [("metadata", "annotations", k) for k in (_get(obj, ("metadata", "annotations")) or {})]
    return out


def _fields_v1(paths):
    root = {}
    for path in paths:
        node = root
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return root


class Server:
    """One ClusterPolicy under server-side apply, at the granularity gpusplit uses: a field is owned by every manager
    that applied its current value; an apply that changes it takes it from the others; a manager that stops sending
    a field lets go of it, and the field goes where nobody else holds it."""

    def __init__(self, obj, manager="helm"):
        self.obj = copy.deepcopy(obj)
        self.owners = {p: {manager} for p in _leaves(self.obj)}
        self.writes = 0

    def apply(self, obj, manager):
        sent = _leaves(obj)
        before = copy.deepcopy(self.obj)
        for path in sent:
            value = _get(obj, path)
            if _get(self.obj, path) != value:
                self.owners[path] = set()
            _set(self.obj, path, value)
            self.owners.setdefault(path, set()).add(manager)
        for path, owners in list(self.owners.items()):
            if manager in owners and path not in sent:
                owners.discard(manager)
                if not owners:
                    _drop(self.obj, path)
                    del self.owners[path]
        self.writes += self.obj != before

    def live(self):
        out = copy.deepcopy(self.obj)
        managers = sorted({m for owners in self.owners.values() for m in owners})
        out["metadata"]["managedFields"] = [
            {
                "manager": m,
                "operation": "Apply",
                "fieldsV1": _fields_v1(p for p, owners in self.owners.items() if m in owners),
            }
            for m in managers
        ]
        return out

    def managers(self):
        return {m for owners in self.owners.values() for m in owners}


def site(server, **settings):
    """What site.yml (role gpu_operator) applies to the ClusterPolicy, applied as gpusplit."""
    out = G.operator_config(fleet(), {}, [server.live()], {**VM, **settings})
    (obj,) = [o for o in out["objects"] if o["kind"] == "ClusterPolicy"]
    server.apply(obj, "gpusplit")
    return obj


def unsplit(server):
    """What unsplit.yml with gpusplit_unsplit_cluster: true does to it (role gpu_unsplit, cluster_wide.yml)."""
    plan = W.clusterpolicy_plan([server.live()], "gpusplit")
    for obj in plan["restore"]:
        server.apply(obj, plan["manager"])
    for obj in plan["release"]:
        server.apply(obj, "gpusplit")
    return plan


def chart_policy(**spec):
    cp = live_policy(env=[OTHERS], state="ready")
    cp["spec"].update(copy.deepcopy(spec))
    cp["spec"]["cdi"] = {
        "enabled": False
    }  # the operator's own plugin then gets gpusplit's devicePlugin.env too
    return cp


def record(server):
    return json.loads(server.obj["metadata"]["annotations"][G.ANNOTATION_ORIGINAL])


def test_the_first_apply_records_what_each_field_held_and_later_applies_keep_it():
    server = Server(chart_policy(mig={"strategy": "mixed"}))
    obj = site(server)
    rec = record(server)
    assert set(rec) == {"toolkit.env", "devicePlugin.env", "mig.strategy"}
    assert rec["toolkit.env"] == {"before": [OTHERS], "wrote": [OTHERS, *HARDENING]}
    assert rec["devicePlugin.env"]["before"] is None  # it had none
    assert rec["mig.strategy"] == {"before": "mixed", "wrote": "single"}
    assert (
        obj["metadata"]["annotations"][G.ANNOTATION_ORIGINAL]
        == server.obj["metadata"]["annotations"][G.ANNOTATION_ORIGINAL]
    )
    # a second run keeps what the fields held before gpusplit, not what gpusplit wrote, and writes nothing
    writes = server.writes
    site(server)
    assert record(server) == rec and server.writes == writes


def test_unsplit_puts_every_field_back_and_leaves_nothing_of_gpusplits():
    original = chart_policy(mig={"strategy": "mixed"})
    server = Server(original)
    site(server)
    assert "gpusplit" in server.managers()
    plan = unsplit(server)
    assert server.obj["spec"] == original["spec"]  # env list, MIG strategy back; devicePlugin.env gone again
    assert G.ANNOTATION_ORIGINAL not in (server.obj["metadata"].get("annotations") or {})
    assert "gpusplit" not in server.managers()
    [line] = plan["lines"]
    assert "spec.toolkit.env put back to" in line and "spec.devicePlugin.env put back to no value" in line
    assert "spec.mig.strategy put back to 'mixed'" in line
    # the second run finds nothing of gpusplit's: nothing to do
    again = W.clusterpolicy_plan([server.live()], "gpusplit")
    assert again == {"restore": [], "release": [], "manager": W.RESTORE_MANAGER, "lines": []}


def test_a_field_that_held_gpusplits_value_before_keeps_it():
    original = chart_policy(mig={"strategy": "single"})
    original["spec"]["toolkit"]["env"] = [OTHERS, *HARDENING]  # hardened by its owner already
    server = Server(original)
    site(server)
    unsplit(server)
    assert server.obj["spec"] == original["spec"] and "gpusplit" not in server.managers()


def test_a_field_changed_since_loses_only_gpusplits_entries_and_a_scalar_is_left():
    original = chart_policy(mig={"strategy": "mixed"})
    server = Server(original)
    site(server)
    changed = {"name": "RUNTIME", "value": "containerd"}
    env = [*server.obj["spec"]["toolkit"]["env"], changed]
    edit = {"toolkit": {"env": env}, "mig": {"strategy": "none"}}
    server.apply(G.render_clusterpolicy(server.obj["metadata"]["name"], edit), "admin")
    plan = unsplit(server)
    assert server.obj["spec"]["toolkit"]["env"] == [OTHERS, changed]
    assert server.obj["spec"]["mig"]["strategy"] == "none"  # someone else's now: left
    assert "devicePlugin" not in server.obj["spec"] or "env" not in server.obj["spec"]["devicePlugin"]
    assert "gpusplit" not in server.managers()
    text = " ".join(plan["lines"])
    assert (
        "spec.toolkit.env changed since gpusplit wrote it: only gpusplit's entries taken out "
        "(ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED, ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS)"
    ) in text
    assert "spec.mig.strategy changed since gpusplit wrote it: left as it is ('none')" in text


def test_an_entry_gpusplit_replaced_gets_its_old_value_back_when_the_list_changed_since():
    original = chart_policy()
    original["spec"]["toolkit"]["env"] = [
        OTHERS,
        {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "value": "false"},
    ]
    server = Server(original)
    site(server)
    extra = {"name": "X", "value": "1"}
    server.apply(
        G.render_clusterpolicy(
            "gpu-cluster-policy", {"toolkit": {"env": [*server.obj["spec"]["toolkit"]["env"], extra]}}
        ),
        "admin",
    )
    unsplit(server)
    assert server.obj["spec"]["toolkit"]["env"] == [*original["spec"]["toolkit"]["env"], extra]


def test_fields_gpusplit_set_before_it_kept_a_record_lose_only_its_entries():
    server = Server(chart_policy(mig={"strategy": "mixed"}))
    site(server)
    del server.obj["metadata"]["annotations"]  # as gpusplit left a ClusterPolicy before it kept the record
    server.owners = {p: o for p, o in server.owners.items() if p[0] != "metadata"}
    plan = unsplit(server)
    assert server.obj["spec"]["toolkit"]["env"] == [OTHERS]
    assert server.obj["spec"]["mig"]["strategy"] == "single"  # nothing says what it was: left
    assert "gpusplit" not in server.managers()
    assert "spec.toolkit.env no record of it before: only gpusplit's entries taken out" in plan["lines"][0]
    # and a new site.yml run records such a field as unknown, not gpusplit's own value as the original
    server2 = Server(chart_policy())
    site(server2)
    del server2.obj["metadata"]["annotations"]
    server2.owners = {p: o for p, o in server2.owners.items() if p[0] != "metadata"}
    site(server2)
    assert record(server2)["toolkit.env"]["unknown"] is True


def test_an_unreadable_record_is_said_and_only_gpusplits_entries_go():
    server = Server(chart_policy())
    site(server)
    server.obj["metadata"]["annotations"][G.ANNOTATION_ORIGINAL] = "{not json"
    plan = unsplit(server)
    assert "is not JSON" in plan["lines"][0]
    assert server.obj["spec"]["toolkit"]["env"] == [OTHERS]
    assert G.ANNOTATION_ORIGINAL not in (server.obj["metadata"].get("annotations") or {})


def test_a_clusterpolicy_gpusplit_never_set_is_not_touched():
    untouched = live_policy(env=[OTHERS], state="ready")
    assert W.clusterpolicy_plan([untouched], "gpusplit")["release"] == []


def test_the_cluster_step_says_what_goes_back_only_for_the_whole_cluster():
    server = Server(chart_policy(mig={"strategy": "mixed"}))
    site(server)
    plan = one_node_plan("a-dp")
    inputs = {
        "plan": plan,
        "to": "kubernetes",
        "nodes": [],
        "daemonsets": [],
        "clusterpolicies": [server.live()],
    }
    assert run_step("unsplit_cluster", inputs, StepContext())["cluster"]["wide"] is None
    out = run_step("unsplit_cluster", {**inputs, "cluster_wide": True}, StepContext())["cluster"]
    assert [o["metadata"]["name"] for o in out["wide"]["clusterpolicy"]["release"]] == ["gpu-cluster-policy"]
    assert any(line.startswith("whole cluster: ClusterPolicy gpu-cluster-policy:") for line in out["lines"])
