"""The roles' steps on the controller (plugins/plugin_utils/role_steps.py): what each computes from its inputs
and the inventory, and how a refusal or a bug comes back (a failed result, never Python's own text)."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.plugin_utils import role_steps
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._steps import cluster_steps
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.role_steps import StepContext, run_step
from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_split_render import (
    fleet,
    live_node,
)


def inventory(*hosts, **node_names):
    hostvars = {h: ({"gpusplit_node_name": node_names[h]} if h in node_names else {}) for h in hosts}
    return StepContext(hostvars=hostvars, groups={"all": list(hosts)})


def test_every_step_runs_with_the_collector_paused():
    assert all(getattr(func, "gc_paused", False) for func in role_steps.STEPS.values())


def test_a_refusal_is_titled_and_a_bug_is_named_without_python_text():
    refused = run_step("split_cluster", {"plan": fleet(), "prune_scope": "x"}, inventory())
    assert refused["failed"] and refused["msg"].startswith("gpusplit render refused:\n- gpusplit_prune_scope")
    assert refused["errors"] and refused["errors"][0].startswith("gpusplit_prune_scope")
    bug = run_step("split_cluster", {"plan": fleet(), "live": {"daemonsets": [7]}}, inventory())
    assert bug["failed"] and "cannot read its inputs as given" in bug["msg"], bug
    assert "live: mapping" in bug["msg"] and "object has no attribute" not in bug["msg"]
    assert run_step("split_cluster", [], inventory())["msg"] == "inputs: expected a mapping, got list"
    assert "no step 'nope'" in run_step("nope", {}, inventory())["msg"]
    not_mapping = run_step("split_cluster", {"plan": []}, inventory())
    assert not_mapping["failed"] and "plan: expected a mapping, got list" in not_mapping["msg"]


def test_split_cluster_names_every_inventory_node_and_scopes_the_prune():
    plan = fleet()
    context = inventory("a-dp", "gone-host", "b-dra", "c-op", "d-none", "e-zero", **{"gone-host": "gpu-gone"})
    out = run_step("split_cluster", {"plan": plan, "live": {"daemonsets": []}}, context)
    assert out["inventory_nodes"] == ["a-dp", "gpu-gone", "b-dra", "c-op", "d-none", "e-zero"]
    assert out["prune"] == render.prune_scope(
        cluster_steps.SPLIT_PLUGIN_SELECTOR, plan, out["inventory_nodes"]
    )
    assert out["split_nodes"] == [p["node"] for p in plan["nodes"].values() if p["split"]]
    assert out["foreign"] == out["helm"] == out["pod_queries"] == []


def test_split_cluster_objects_are_the_renderers_output():
    plan = fleet()
    inventory_nodes = [p["node"] for p in plan["nodes"].values()]
    live = [live_node("gpu-gone")]
    inputs = {
        "plan": plan,
        "live": {"labelled": live},
        "inventory_nodes": inventory_nodes,
        "prune": {"selector": "x", "kept": ["a-dp", "zz-outside"]},
        "gpu_taint": True,
        "gpu_hosts": ["a-dp", "b-dra"],
    }
    out = cluster_steps.split_cluster_objects(inputs, inventory("a-dp", "b-dra"))
    assert out["node_patches"] == render.render_node_patches(plan, False, True)
    # nothing read with gpusplit's managedFields: every patch needs the apply
    assert len(out["node_patches_needed"]) == len(out["node_patches"])
    assert out["departed"] == render.departed_nodes(live, plan, inventory_nodes) == ["gpu-gone"]
    assert out["release_patches"] == render.render_release_patches(["gpu-gone"])
    assert out["objects"] == render.render_fleet(plan, {})
    assert out["taint_nodes"] == render.gpu_taint_nodes(live, plan, True, inventory_nodes)
    # the kept nodes of the GPU groups' hosts only; the exclusions only with stock_plugin_action exclude
    assert out["unplanned"] == ["a-dp"]
    assert out["exclusions"] == []


def test_split_cluster_objects_exclude_each_foreign_plugin_keeping_its_terms():
    from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_stock_plugin import plugin_ds

    ds = plugin_ds("nvdp", "nvidia", selector={"app": "nvdp"})
    inputs = {"plan": fleet(), "foreign": [ds], "stock_plugin_action": "exclude", "plugin_settings": {}}
    (patch,) = cluster_steps.split_cluster_objects(inputs, inventory())["exclusions"]
    settings = {"stock_plugin_name": "nvdp", "stock_plugin_namespace": "nvidia"}
    assert patch == render.render_stock_plugin_exclusion(settings, ds)
    assert patch["metadata"]["name"] == "nvdp" and patch["metadata"]["namespace"] == "nvidia"


def helm_ds(name):
    from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_stock_plugin import plugin_ds

    ds = plugin_ds(name, "nvidia", selector={"app": name})
    ds["metadata"]["annotations"] = {
        "meta.helm.sh/release-name": name,
        "meta.helm.sh/release-namespace": "nvidia",
    }
    return ds


def test_split_cluster_renders_what_the_checks_let_through():
    from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_stock_plugin import plugin_ds

    plan = fleet()
    hosts = [p["host"] for p in plan["nodes"].values()]
    inputs = {
        "plan": plan,
        "live": {"daemonsets": [plugin_ds("nvdp", "nvidia", selector={"app": "nvdp"})], "labelled": []},
        "stock_plugin_action": "exclude",
        "gpu_hosts": hosts,
        "gpu_taint": True,
    }
    out = run_step("split_cluster", inputs, inventory(*hosts))
    checks = cluster_steps.split_cluster_checks(inputs, inventory(*hosts))
    taken = {key: checks[key] for key in ("inventory_nodes", "prune", "foreign")}
    objects = cluster_steps.split_cluster_objects({**inputs, **taken}, inventory(*hosts))
    assert [d["metadata"]["name"] for d in checks["foreign"]] == ["nvdp"]
    assert out == {**checks, "helm_refused": False, "foreign_refused": False, **objects}
    assert len(out["exclusions"]) == 1 and out["objects"] == render.render_fleet(plan, {})


@pytest.mark.parametrize(
    ("daemonset", "action", "refused"),
    [
        ("helm", "exclude", {"helm_refused": True, "foreign_refused": False}),
        ("helm", "refuse", {"helm_refused": True, "foreign_refused": True}),
        ("plain", "refuse", {"helm_refused": False, "foreign_refused": True}),
    ],
)
def test_split_cluster_renders_nothing_where_a_check_refuses(daemonset, action, refused):
    from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_stock_plugin import plugin_ds

    ds = helm_ds("nvdp") if daemonset == "helm" else plugin_ds("nvdp", "nvidia", selector={"app": "nvdp"})
    # settings the rendering refuses: the check's refusal is the one the role reports
    inputs = {
        "plan": fleet(),
        "live": {"daemonsets": [ds]},
        "stock_plugin_action": action,
        "plugin_settings": {"image": "not an image"},
    }
    out = run_step("split_cluster", inputs, inventory())
    assert not out.get("failed"), out
    assert {key: out[key] for key in refused} == refused
    assert "objects" not in out and "node_patches" not in out
    # nothing refused: the rendering's own refusal comes back
    failed = run_step("split_cluster", {**inputs, "live": {}}, inventory())
    assert failed["failed"] and "settings.image 'not an image' is not an image reference" in failed["msg"]


def test_split_cluster_refuses_nothing_without_a_split_node():
    checks = {"split_nodes": [], "helm": [{"release": "nvdp"}], "foreign": [{"metadata": {}}]}
    assert cluster_steps.split_cluster_refusals(checks, "refuse") == {
        "helm_refused": False,
        "foreign_refused": False,
    }
    assert cluster_steps.split_cluster_refusals({**checks, "split_nodes": ["a-dp"]}, "exclude") == {
        "helm_refused": True,
        "foreign_refused": False,
    }


# --------------------------------------------------------------------------------------------
# control_plane_gates: detection, versions, API versions, a component's own error


def step_ok(name, **inputs):
    out = run_step(name, inputs, StepContext())
    assert not out.get("failed"), out
    return out


def test_detect_and_version_steps():
    from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._control_plane.cp_testdata import (
        ROOT,
    )

    hints = {"static_pod_manifests": ["kube-apiserver.yaml", "etcd.yaml"]}
    assert step_ok("cp_detect", hints=hints)["kind"] == "kubeadm"
    assert step_ok("cp_detect", hints={"rancher": "rke2"})["kind"] == "rke2"
    managed = step_ok("cp_detect", hints={"node_labels": [{"eks.amazonaws.com/nodegroup": "gpu"}]})
    assert managed["kind"] == "managed" and "cannot be changed by gpusplit" in managed["message"]
    manifest = (ROOT / "tests" / "fixtures" / "kubeadm" / "v1beta4" / "kube-apiserver.yaml").read_text()
    assert step_ok("cp_version", kind="kubeadm", manifest=manifest)["version"] == "1.37.2"
    output = "k3s version v1.37.2+k3s1 (abcdef)\ngo version go1.26"
    assert step_ok("cp_version", kind="k3s", version_output=output)["version"] == "1.37.2"
    assert step_ok("cp_version", given="1.36.1", kind="kubeadm", manifest=manifest)["version"] == "1.36.1"
    refused = run_step("cp_version", {"kind": "kubeadm", "manifest": "kind: Service\n"}, StepContext())
    assert refused["failed"] and "not a Pod manifest" in refused["msg"]


def test_enabled_api_versions_step():
    def enabled(runtime_config):
        return step_ok("cp_runtime_config", requested=runtime_config)["api_versions"]

    # the role's own entries over the catalog's, as Ansible's combine
    planned = step_ok(
        "cp_runtime_config", requested={"a.io/v1": "true", "b.io/v1": "true"}, extra={"b.io/v1": "false"}
    )
    assert planned == {"runtime_config": {"a.io/v1": "true", "b.io/v1": "false"}, "api_versions": ["a.io/v1"]}

    assert enabled(
        {"scheduling.k8s.io/v1beta1": "true", "resource.k8s.io/v1beta2": "false", "api/alpha": "true"}
    ) == ["scheduling.k8s.io/v1beta1"]
    assert enabled({"scheduling.k8s.io/v1alpha3": True, "x.k8s.io/v1/things": "true"}) == [
        "scheduling.k8s.io/v1alpha3"
    ]
    assert enabled({}) == []
    # kube-apiserver's reading: no value is on, Go ParseBool otherwise (what it refuses is not on)
    assert enabled({"a.io/v1": None, "b.io/v1": "", "c.io/v1": "TRUE", "d.io/v1": "tRuE", "e.io/v1": 0}) == [
        "a.io/v1",
        "b.io/v1",
        "c.io/v1",
    ]


def test_component_error_step_reads_stdout_and_stderr():
    from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._control_plane.test_health import (
        APISERVER_CRASH_LOG,
    )

    def lines(texts, max_lines=6):
        return step_ok("cp_component_error", texts=texts, max_lines=max_lines)["lines"]

    assert lines(["", "Error: unknown flag: --runtime-config\n"]) == ["Error: unknown flag: --runtime-config"]
    assert lines([APISERVER_CRASH_LOG], 1)[0].endswith(
        'err="unrecognized feature gate: NoSuchGateForGpusplit"'
    )


@pytest.mark.parametrize("max_lines", ["y", None, 0, -2, 1.5, True])
def test_cp_component_error_refuses_a_max_lines_that_is_no_count(max_lines):
    out = run_step("cp_component_error", {"texts": ["E0101 boom"], "max_lines": max_lines}, StepContext())
    assert out["msg"] == (
        "gpusplit cp_component_error refused:\n"
        f"- max_lines: expected a whole number of lines (1 or more), got {max_lines!r}"
    )


def test_cp_component_error_reads_a_count_given_as_text():
    assert step_ok("cp_component_error", texts=["a\nb\nc"], max_lines="2")["lines"] == ["b", "c"]


def test_loading_the_steps_imports_no_library():
    """A worker that runs one step imports that step's libraries, not every step's (plugin_utils/lazy.py): the
    per-host steps (host_play, dra_host_report, the control plane's) run in a worker of their own per host."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from ansible_collections.gpusplit.k8s.plugins.plugin_utils import lazy as lazy_module

    collections = Path(lazy_module.__file__).parents[5]
    script = (
        "import json, sys\n"
        "from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder\n"
        "_AnsibleCollectionFinder(paths=[sys.argv[1]])._install()\n"
        "import ansible_collections.gpusplit.k8s.plugins.action.role_step\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('ansible_collections.gpusplit'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(collections)], capture_output=True, text=True, check=True
    )
    loaded = {m.rsplit(".plugins.", 1)[-1] for m in json.loads(out.stdout.splitlines()[-1])}
    libraries = {
        "plugin_utils.split_render",
        "plugin_utils.host_play",
        "module_utils._split.planner",
        "plugin_utils._dra.render",
    }
    assert loaded & libraries == set(), loaded


# --------------------------------------------------------------------------------------------
# refusals: titled as the filters title theirs, naming the host, field or object

HOSTVARS = {
    "gpu-a": {"ansible_facts": {"nvidia_gpus": [{"uuid": "GPU-a"}]}, "gpusplit_mig_config": "all-disabled"}
}


@pytest.mark.parametrize(
    ("step", "inputs"),
    [
        ("discovery_reports", lambda hosts: {"hosts": hosts}),
        ("split_cluster", lambda hosts: {"plan": {"nodes": {}}}),
        ("operator_config", lambda hosts: {"plan": {"nodes": {h: {} for h in hosts}}}),
    ],
)
def test_a_role_step_refuses_a_host_that_is_not_in_the_inventory_naming_it(step, inputs):
    title = {"operator_config": "gpusplit GPU Operator mode"}.get(step, f"gpusplit {step}")

    def run(hosts):
        return run_step(step, inputs(hosts), StepContext(hostvars=HOSTVARS, groups={"all": hosts}))

    if step != "operator_config":  # (an empty node plan is no plan the GPU Operator mode takes)
        assert not run(["gpu-a"]).get("failed")  # a known host: as before
    assert run(["gpu-a", "gpu-z"])["msg"] == (
        f"{title} refused:\n- host 'gpu-z' is not in the inventory (hostvars has no such host)"
    )


def test_the_dra_steps_title_their_refusals():
    located = {"host": "h", "node": "n", "minor_number": 1}
    refused = run_step("isolation_rules", {"located": located, "effect": "Evict"}, StepContext())
    assert "gpusplit DRA refused" in refused["msg"]
    assert "split plan refused" in run_step("dra_split_objects", {"plan": "not a plan"}, StepContext())["msg"]
    results = [{"source": "/a.toml", "content": "ZW5hYmxlX2NkaSA9IHRydWUK"}, {"skipped": True}]
    report = run_step("dra_host_report", {"slurped": results}, StepContext())
    assert report["imports"] == [{"path": "/a.toml", "text": "enable_cdi = true\n"}]


@pytest.mark.parametrize(
    ("inputs", "msg"),
    [
        (
            {"clusterpolicies": {"name": "cluster-policy"}},
            "clusterpolicies: expected a list of ClusterPolicy objects (k8s_info resources), got mapping",
        ),
        ({"daemonsets": ["ds"]}, "daemonsets[0]: expected a mapping (a Kubernetes object), got string"),
    ],
)
def test_operator_config_refuses_inputs_of_the_wrong_type(inputs, msg):
    from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet
    from ansible_collections.gpusplit.k8s.tests.unit.gpufacts import h100

    plan = plan_fleet({"gpu-a": {"facts": [h100(0), h100(1)], "mode": "gpu_operator", "split": {"count": 1}}})
    # the step reads each planned host's gpusplit_mig_config itself
    out = run_step("operator_config", {"plan": plan, **inputs}, StepContext(hostvars={"gpu-a": {}}))
    assert out["msg"] == f"gpusplit GPU Operator mode refused:\n- {msg}"
