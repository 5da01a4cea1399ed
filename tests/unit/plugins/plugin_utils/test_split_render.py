"""The split renderers: DaemonSets, node labels, the stock-plugin exclusion, names."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.read import project
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.taints import check_requests
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet, plan_node
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.split_render import RenderError
from ansible_collections.gpusplit.k8s.tests.unit.fieldreads import (
    field_paths,
    query,
    query_fields,
    recorded,
    uncovered,
)

K8S = "1.37"
REFERENCE_DIR = Path(
    os.environ.get("GPUSPLIT_REFERENCE_DIR") or Path(__file__).resolve().parents[5] / "shared" / "reference"
)
STATIC_DS = REFERENCE_DIR / "NVIDIA_k8s-device-plugin" / "nvidia-device-plugin.yml"
CHART_VALUES = REFERENCE_DIR / "NVIDIA_k8s-device-plugin" / "values.yaml"

# Environment variables read by nvidia-device-plugin v0.20.0 (cmd/nvidia-device-plugin/main.go,
# `EnvVars:` of its flags) and by nvidia-container-toolkit in the plugin's own container.
PLUGIN_ENV = {
    "MIG_STRATEGY",
    "FAIL_ON_INIT_ERROR",
    "NVIDIA_DRIVER_ROOT",
    "NVIDIA_DEV_ROOT",
    "PASS_DEVICE_SPECS",
    "DEVICE_LIST_STRATEGY",
    "DEVICE_ID_STRATEGY",
    "CDI_ANNOTATION_PREFIX",
    "NVIDIA_CDI_HOOK_PATH",
    "NVIDIA_CTK_PATH",
    "DRIVER_ROOT_CTR_PATH",
    "CONTAINER_DRIVER_ROOT",
    "DEVICE_DISCOVERY_STRATEGY",
    "CONFIG_FILE",
}
TOOLKIT_ENV = {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_MIG_MONITOR_DEVICES"}
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def gpu(i, host_no=1, mig=False, migs=()):
    return {
        "uuid": f"GPU-{host_no:08x}-{i:04x}-4000-8000-{host_no * 16 + i:012x}",
        "index": i,
        "minor_number": i,
        "pci_bus_id": f"0000:{0x18 + 0x10 * i:02x}:00.0",
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total_mib": 81559,
        "mig_mode": {"current": "enabled" if mig else "disabled", "pending": None},
        "mig_devices": list(migs),
        "health": {"status": "ok", "reasons": []},
        "processes": [],
    }


def node_plan(host="gpu-a", count=2, mode="device_plugin", n=4, **kwargs):
    return plan_node(host, [gpu(i) for i in range(n)], mode, {"count": count}, **kwargs)


def env_of(ds):
    [container] = ds["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


def container_of(ds):
    return ds["spec"]["template"]["spec"]["containers"][0]


def validate(obj):
    assert kubernetes_validate.validate(obj, K8S, strict=True) == K8S


@pytest.fixture(scope="module")
def static_ds():
    if not STATIC_DS.is_file():
        pytest.skip(f"reference DaemonSet not found ({STATIC_DS.name}); set GPUSPLIT_REFERENCE_DIR")
    return yaml.safe_load(STATIC_DS.read_text())


# --------------------------------------------------------------------------------------------
# the split DaemonSet


@pytest.mark.parametrize("hardening", sorted(render.HARDENING))
@pytest.mark.parametrize("mig_strategy", ["none", "single", "mixed"])
def test_daemonset_validates_and_is_never_privileged(hardening, mig_strategy):
    ds = render.render_split_daemonset(node_plan(mig_strategy=mig_strategy), {"hardening": hardening})
    validate(ds)
    sc = container_of(ds)["securityContext"]
    assert sc.get("privileged") is False
    assert "ALL" in sc["capabilities"]["drop"]
    added = sc["capabilities"].get("add", [])
    assert set(added) <= {"SYS_ADMIN"}
    if added:
        # Kubernetes refuses allowPrivilegeEscalation=false together with CAP_SYS_ADMIN
        assert "allowPrivilegeEscalation" not in sc
    else:
        assert sc["allowPrivilegeEscalation"] is False
    env = env_of(ds)
    assert set(env) <= PLUGIN_ENV | TOOLKIT_ENV
    assert env["MIG_STRATEGY"] == mig_strategy
    assert ds["spec"]["template"]["spec"].get("hostPID") is None


def test_daemonset_core_fields():
    plan = node_plan("gpu-a", count=2)
    ds = render.render_split_daemonset(plan)
    assert ds["apiVersion"] == "apps/v1" and ds["kind"] == "DaemonSet"
    assert ds["metadata"]["name"] == "gpusplit-dp-gpu-a"
    assert ds["metadata"]["namespace"] == "kube-system"
    labels = {
        "app.kubernetes.io/managed-by": "gpusplit",
        "app.kubernetes.io/name": "gpusplit-device-plugin",
        "gpusplit.io/node": "gpu-a",
    }
    assert ds["metadata"]["labels"] == labels
    assert ds["spec"]["template"]["metadata"]["labels"] == labels
    selector = ds["spec"]["selector"]["matchLabels"]
    assert selector.items() <= labels.items()
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "gpu-a"}
    assert pod["priorityClassName"] == "system-node-critical"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert {"key": "CriticalAddonsOnly", "operator": "Exists"} in pod["tolerations"]
    assert "runtimeClassName" not in pod
    assert pod["automountServiceAccountToken"] is False
    container = container_of(ds)
    assert container["image"] == render.DEVICE_PLUGIN_IMAGE == "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
    env = env_of(ds)
    assert env["NVIDIA_VISIBLE_DEVICES"] == ",".join(plan["kubernetes_uuids"])
    assert env["NVIDIA_VISIBLE_DEVICES"].count("GPU-") == 2
    assert env["DEVICE_ID_STRATEGY"] == "uuid"
    assert env["FAIL_ON_INIT_ERROR"] == "true"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    # default: the toolkit is hardened (gpu_host role), so the plugin reads its list as volume mounts
    assert env["DEVICE_LIST_STRATEGY"] == "volume-mounts"
    assert env["PASS_DEVICE_SPECS"] == "false"
    assert "NVIDIA_MIG_MONITOR_DEVICES" not in env


def test_daemonset_matches_the_upstream_static_daemonset(static_ds):
    ds = render.render_split_daemonset(node_plan(), {"hardening": "envvar"})
    validate(static_ds)  # the reference itself is valid for 1.37
    ref_pod = static_ds["spec"]["template"]["spec"]
    pod = ds["spec"]["template"]["spec"]
    ref_ctr = ref_pod["containers"][0]
    ctr = pod["containers"][0]
    assert ctr["name"] == ref_ctr["name"] == render.CONTAINER_NAME
    assert ctr["image"] == ref_ctr["image"]  # the one pin equals upstream's v0.20.0 static manifest
    assert ctr["volumeMounts"] == ref_ctr["volumeMounts"]
    assert pod["volumes"] == ref_pod["volumes"]
    for toleration in ref_pod["tolerations"]:
        assert toleration in pod["tolerations"]
    assert pod["priorityClassName"] == ref_pod["priorityClassName"]
    assert ds["spec"]["updateStrategy"] == static_ds["spec"]["updateStrategy"]
    assert ds["metadata"]["namespace"] == static_ds["metadata"]["namespace"]
    # the upstream envvar security context, plus an explicit privileged: false
    assert {k: v for k, v in ctr["securityContext"].items() if k != "privileged"} == ref_ctr[
        "securityContext"
    ]


def test_chart_values_name_the_same_options():
    if not CHART_VALUES.is_file():
        pytest.skip("reference chart values not found")
    values = yaml.safe_load(CHART_VALUES.read_text())
    for key in (
        "migStrategy",
        "failOnInitError",
        "deviceListStrategy",
        "deviceIDStrategy",
        "compatWithCPUManager",
    ):
        assert key in values  # -> MIG_STRATEGY, FAIL_ON_INIT_ERROR, DEVICE_LIST_STRATEGY, ... in the chart
    assert values["priorityClassName"] == "system-node-critical"
    assert {"key": "CriticalAddonsOnly", "operator": "Exists"} in values["tolerations"]


def test_hardening_volume_mounts():
    ds = render.render_split_daemonset(node_plan(), {"hardening": "volume-mounts"})
    env = env_of(ds)
    assert env["DEVICE_LIST_STRATEGY"] == "volume-mounts"
    assert container_of(ds)["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert "runtimeClassName" not in ds["spec"]["template"]["spec"]


@pytest.mark.parametrize(("hardening", "strategy"), [("cdi", "cdi-annotations"), ("cdi-cri", "cdi-cri")])
def test_hardening_cdi(hardening, strategy):
    ds = render.render_split_daemonset(
        node_plan(), {"hardening": hardening, "nvidia_cdi_hook_path": "/usr/bin/x"}
    )
    pod = ds["spec"]["template"]["spec"]
    env = env_of(ds)
    assert env["DEVICE_LIST_STRATEGY"] == strategy
    assert env["NVIDIA_DRIVER_ROOT"] == "/"
    assert env["NVIDIA_CDI_HOOK_PATH"] == "/usr/bin/x"
    assert pod["runtimeClassName"] == "nvidia"
    assert {"name": "cdi-root", "hostPath": {"path": "/var/run/cdi", "type": "DirectoryOrCreate"}} in pod[
        "volumes"
    ]
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts == {"/var/lib/kubelet/device-plugins", "/var/run/cdi", "/driver-root"}
    assert container_of(ds)["securityContext"]["allowPrivilegeEscalation"] is False
    no_rc = render.render_split_daemonset(node_plan(), {"hardening": hardening, "runtime_class_name": ""})
    assert "runtimeClassName" not in no_rc["spec"]["template"]["spec"]


def test_mig_strategy_adds_monitor_and_sys_admin_like_the_chart():
    migs = [
        {"uuid": f"MIG-0000000{g}-0000-4000-8000-00000000000{g}", "profile": "1g.10gb", "gpu_instance_id": g}
        for g in (1, 2)
    ]
    plan = plan_node(
        "a100", [gpu(0, mig=True, migs=migs), gpu(1)], "device_plugin", {"count": 2}, mig_strategy="mixed"
    )
    ds = render.render_split_daemonset(plan)
    env = env_of(ds)
    assert env["MIG_STRATEGY"] == "mixed"
    assert env["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
    assert env["NVIDIA_VISIBLE_DEVICES"] == ",".join(plan["kubernetes_uuids"])  # parent GPUs
    assert container_of(ds)["securityContext"]["capabilities"]["add"] == ["SYS_ADMIN"]
    validate(ds)


def test_settings_are_applied():
    settings = {
        "namespace": "gpusplit-system",
        "image": "registry.local/nvidia/k8s-device-plugin:v0.20.0",
        "image_pull_policy": "Always",
        "image_pull_secrets": ["regcred"],
        "pass_device_specs": True,
        "resources": {"limits": {"memory": "128Mi"}, "requests": {"cpu": "10m"}},
        "extra_tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
        ],
        "priority_class_name": "gpu-critical",
    }
    ds = render.render_split_daemonset(node_plan(), settings)
    validate(ds)
    pod = ds["spec"]["template"]["spec"]
    assert ds["metadata"]["namespace"] == "gpusplit-system"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["containers"][0]["resources"] == settings["resources"]
    assert pod["containers"][0]["imagePullPolicy"] == "Always"
    assert settings["extra_tolerations"][0] in pod["tolerations"]
    assert pod["priorityClassName"] == "gpu-critical"
    assert env_of(ds)["PASS_DEVICE_SPECS"] == "true"


@pytest.mark.parametrize(
    ("settings", "text"),
    [
        ({"hardening": "privileged"}, "settings.hardening 'privileged' is not one of envvar"),
        ({"namespace": "Kube_System"}, "settings.namespace 'Kube_System' is not a DNS-1123 label"),
        ({"nodes": 1}, "settings: unknown key(s) nodes"),
        ({"pass_device_specs": "yes"}, "settings.pass_device_specs 'yes' is not a boolean"),
        ({"image": "a b"}, "settings.image 'a b' is not an image reference"),
        ({"node_pinning": "label"}, "settings.node_pinning 'label'"),
    ],
)
def test_bad_settings_are_refused(settings, text):
    with pytest.raises(RenderError) as exc:
        render.render_split_daemonset(node_plan(), settings)
    assert text in str(exc.value)


def test_none_settings_mean_defaults():
    ds = render.render_split_daemonset(node_plan(), {"namespace": None, "hardening": None})
    assert ds["metadata"]["namespace"] == "kube-system"


@pytest.mark.parametrize("mode", ["none", "dra"])
def test_no_daemonset_for_mode_none_or_dra(mode):
    with pytest.raises(RenderError, match="runs no split device plugin"):
        render.render_split_daemonset(node_plan(mode=mode))


def test_no_daemonset_for_an_empty_kubernetes_share():
    with pytest.raises(RenderError, match="gpu-a: the Kubernetes share is empty"):
        render.render_split_daemonset(node_plan(count=0))


def test_per_node_rendering_equals_a_direct_render():
    for host in ("gpu-a", "x" * 253, "Node.Example.COM"):
        plan = node_plan(host, node_name=host.lower())  # a host name that is no node name needs one
        s = render.resolve_settings({"hardening": "cdi"})
        variables, invariants = render._daemonset_context(plan, s)
        direct = render.render_template("daemonset.yaml.j2", **variables, **invariants)
        assert render.render_split_daemonset(plan, s) == direct
        assert "@@gpusplit" not in repr(direct)


def test_rendered_objects_are_independent_copies():
    a = render.render_split_daemonset(node_plan("gpu-a"))
    a["spec"]["template"]["spec"]["containers"][0]["env"].clear()
    b = render.render_split_daemonset(node_plan("gpu-b"))
    assert env_of(b)["DEVICE_ID_STRATEGY"] == "uuid"


# --------------------------------------------------------------------------------------------
# names


def long_name(i, length=253):
    base = ".".join(["a" * 63, "b" * 63, "c" * 63])
    tail = f"n{i}"
    return (base + "." + "d" * 60)[: length - len(tail)] + tail


def test_daemonset_names_for_253_char_node_names_are_dns_labels_and_unique():
    nodes = [long_name(i) for i in range(300)]
    assert all(len(n) == 253 for n in nodes)
    names = [render.daemonset_name(n) for n in nodes]
    assert len(set(names)) == len(nodes)
    for name in names:
        assert len(name) <= 63 and DNS_LABEL.match(name) and name.startswith("gpusplit-dp-")
    assert render.daemonset_name(nodes[0]) == names[0]  # stable


def test_short_names_are_kept_and_lossy_ones_hashed():
    assert render.daemonset_name("gpu-a") == "gpusplit-dp-gpu-a"
    dotted = render.daemonset_name("gpu-a.example")
    dashed = render.daemonset_name("gpu-a-example")
    assert dashed == "gpusplit-dp-gpu-a-example"
    assert dotted != dashed and dotted.startswith("gpusplit-dp-gpu-a-example-")
    assert (
        DNS_LABEL.match(render.daemonset_name("GPU_A"))
        and render.daemonset_name("GPU_A") != "gpusplit-dp-gpu-a"
    )
    assert DNS_LABEL.match(render.daemonset_name("---"))


def test_label_values():
    assert render.label_value("gpu-a.example") == "gpu-a.example"
    values = {render.label_value(long_name(i)) for i in range(50)}
    assert len(values) == 50
    assert all(len(v) <= 63 and LABEL_VALUE.match(v) for v in values)
    assert LABEL_VALUE.match(render.label_value('we"ird: name'))


def test_long_node_name_daemonset_validates_and_pins_by_metadata_name():
    node = long_name(7)
    plan = node_plan("h7", node_name=node)
    ds = render.render_split_daemonset(plan)
    validate(ds)
    pod = ds["spec"]["template"]["spec"]
    assert "nodeSelector" not in pod
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    assert ds["metadata"]["annotations"]["gpusplit.io/node-name"] == node
    assert len(ds["metadata"]["labels"]["gpusplit.io/node"]) <= 63


def test_node_name_pinning_setting():
    ds = render.render_split_daemonset(node_plan(), {"node_pinning": "node_name"})
    assert "nodeSelector" not in ds["spec"]["template"]["spec"]
    validate(ds)


def test_hostile_names_stay_data():
    plan = node_plan('evil"\n  privileged: true #', node_name="evil")
    ds = render.render_split_daemonset(plan)
    validate(ds)
    assert ds["metadata"]["annotations"]["gpusplit.io/host"] == 'evil"\n  privileged: true #'
    assert container_of(ds)["securityContext"]["privileged"] is False


# --------------------------------------------------------------------------------------------
# node labels, taints, fleet


def test_node_labels_per_mode():
    labels = render.node_labels(node_plan(count=1, n=3))
    assert labels == {
        "nvidia.com/gpu.present": "true",
        "gpusplit.io/split": "true",
        "gpusplit.io/mode": "device_plugin",
        "gpusplit.io/kubernetes-gpus": "1",
        "gpusplit.io/host-gpus": "2",
    }
    op = render.node_labels(node_plan(mode="gpu_operator"))
    assert op["nvidia.com/gpu.deploy.device-plugin"] == "false"
    dra = render.node_labels(node_plan(mode="dra"))
    assert "nvidia.com/gpu.deploy.device-plugin" not in dra
    assert render.node_labels(node_plan(mode="dra"), operator_managed=True)[
        "nvidia.com/gpu.deploy.device-plugin"
    ] == ("false")
    none = render.node_labels(node_plan(mode="none"))
    assert none["gpusplit.io/kubernetes-gpus"] == "0" and none["gpusplit.io/host-gpus"] == "4"
    empty = render.node_labels(
        plan_node("cpu", [], "device_plugin", {"host_count": 0}), operator_managed=True
    )
    assert empty == {
        "gpusplit.io/split": "false",
        "gpusplit.io/mode": "device_plugin",
        "gpusplit.io/kubernetes-gpus": "0",
        "gpusplit.io/host-gpus": "0",
    }
    for value in labels.values():
        assert LABEL_VALUE.match(value)


def test_node_taints():
    assert render.node_taints(node_plan(), True) == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ]
    assert render.node_taints(node_plan(), False) == []
    assert render.node_taints(node_plan(count=0), True) == []


def test_node_patch_validates():
    patch = render.render_node_patch(node_plan(mode="gpu_operator"))
    assert patch["kind"] == "Node" and patch["metadata"]["name"] == "gpu-a"
    assert patch["metadata"]["labels"]["gpusplit.io/split"] == "true"
    validate(patch)


def fleet():
    def entry(mode, count, n=4):
        return {"facts": [gpu(i, host_no=n) for i in range(n)], "mode": mode, "split": {"count": count}}

    return plan_fleet(
        {
            "d-none": entry("none", 0),
            "b-dra": entry("dra", 2),
            "a-dp": entry("device_plugin", 2),
            "c-op": entry("gpu_operator", 3),
            "e-zero": entry("device_plugin", 0),
        }
    )


def test_render_fleet_one_daemonset_per_node_with_kubernetes_gpus():
    objects = render.render_fleet(fleet())
    assert [o["metadata"]["name"] for o in objects] == ["gpusplit-dp-a-dp", "gpusplit-dp-c-op"]
    for obj in objects:
        validate(obj)
    assert env_of(objects[1])["NVIDIA_VISIBLE_DEVICES"].count("GPU-") == 3
    assert render.render_daemonsets(fleet()) == objects


def test_render_fleet_namespace_first_when_not_kube_system():
    objects = render.render_fleet(fleet(), {"namespace": "gpusplit-system"})
    assert objects[0]["kind"] == "Namespace" and objects[0]["metadata"]["name"] == "gpusplit-system"
    assert objects[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    validate(objects[0])
    assert all(o["metadata"]["namespace"] == "gpusplit-system" for o in objects[1:])
    assert render.render_fleet(fleet(), {"namespace": "gpusplit-system", "create_namespace": False})[0][
        "kind"
    ] == ("DaemonSet")


def test_render_fleet_accepts_node_plan_lists():
    plans = list(fleet()["nodes"].values())
    assert len(render.render_fleet(plans)) == 2
    assert len(render.render_node_patches(fleet())) == 5


# --------------------------------------------------------------------------------------------
# the stock plugin's exclusion


def strategic_merge(base, patch):
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = strategic_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def test_exclusion_patch_on_the_static_daemonset(static_ds):
    patch = render.render_stock_plugin_exclusion(existing=static_ds)
    assert patch["metadata"] == {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system"}
    patched = strategic_merge(static_ds, patch)
    validate(patched)
    terms = patched["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "gpusplit.io/split", "operator": "NotIn", "values": ["true"]}]}
    ]


def test_exclusion_keeps_existing_terms_and_is_idempotent():
    existing = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "spec": {
            "template": {
                "spec": {
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {
                                                "key": "feature.node.kubernetes.io/pci-10de.present",
                                                "operator": "In",
                                                "values": ["true"],
                                            }
                                        ]
                                    },
                                    {
                                        "matchExpressions": [
                                            {
                                                "key": "nvidia.com/gpu.present",
                                                "operator": "In",
                                                "values": ["true"],
                                            }
                                        ]
                                    },
                                ]
                            }
                        }
                    }
                }
            }
        },
    }
    terms = render.exclusion_terms(existing)
    assert len(terms) == 2
    for term in terms:
        assert term["matchExpressions"][-1] == render.EXCLUSION_EXPRESSION
        assert len(term["matchExpressions"]) == 2
    again = copy.deepcopy(existing)
    again["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"] = terms
    assert render.exclusion_terms(again) == terms
    patch = render.render_stock_plugin_exclusion(
        {"stock_plugin_name": "nvdp", "stock_plugin_namespace": "nvidia"}, existing
    )
    assert patch["metadata"] == {"name": "nvdp", "namespace": "nvidia"}
    assert (
        existing["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"][0]["matchExpressions"][-1]["key"]
        != "gpusplit.io/split"
    )  # input not mutated


# --------------------------------------------------------------------------------------------
# the filter plugin


def test_filter_plugin_exposes_the_functions_and_wraps_errors():
    from ansible.errors import AnsibleFilterError

    from ansible_collections.gpusplit.k8s.plugins.filter.split import FilterModule

    filters = FilterModule().filters()
    for name in ("node_plan", "fleet_plan", "render_daemonsets", "plan_table"):
        assert name in filters
    plan = filters["node_plan"]([gpu(i) for i in range(2)], "gpu-a", "device_plugin", {"count": 1})
    assert plan["kubernetes_count"] == 1
    assert len(filters["render_daemonsets"](plan)) == 1
    assert "gpu-a" in filters["plan_table"](plan)
    with pytest.raises(AnsibleFilterError) as exc:
        filters["fleet_plan"]({"h1": {"facts": [], "mode": "all", "split": {}}})
    assert "h1: mode 'all' is not one of" in str(exc.value)
    with pytest.raises(AnsibleFilterError, match="settings.hardening"):
        filters["render_daemonsets"](plan, {"hardening": "x"})


def test_prune_scope_keeps_nodes_outside_the_run():
    plan = fleet()
    planned = [p["node"] for p in plan["nodes"].values()]
    base = "app.kubernetes.io/managed-by=gpusplit"
    # every inventory host planned: the plain selector, nothing kept
    assert render.prune_scope(base, plan, planned) == {"selector": base, "kept": []}
    # a host left out by --limit (or unreachable) keeps its objects; a long node name is matched
    # by the label value its objects carry
    long_name = "rack-42-" + "x" * 70
    out = render.prune_scope(base, plan, [*planned, "gpu-z", long_name])
    assert out["kept"] == ["gpu-z", long_name]
    assert out["selector"] == f"{base},gpusplit.io/node notin (gpu-z,{render.label_value(long_name)})"
    assert len(render.label_value(long_name)) <= 63


def test_departed_nodes_are_labelled_nodes_nobody_plans_or_lists():
    plan = fleet()
    planned = [p["node"] for p in plan["nodes"].values()]

    def live(name, labels):
        return {"metadata": {"name": name, "labels": labels}}

    nodes = [
        live(planned[0], {"gpusplit.io/split": "true"}),  # planned: relabelled by the run
        live("gpu-outside", {"gpusplit.io/split": "true"}),  # in the inventory, not in this run
        live("gpu-gone", {"gpusplit.io/split": "false"}),  # host removed from the inventory
        live("cpu-1", {}),  # never labelled by gpusplit
    ]
    assert render.departed_nodes(nodes, plan, [*planned, "gpu-outside"]) == ["gpu-gone"]
    assert render.render_release_patches(["gpu-gone"]) == [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-gone"}}
    ]


# --------------------------------------------------------------------------------------------
# the optional GPU taint: gpusplit takes off only the taint it set


def test_node_patch_marks_the_gpu_taint_gpusplit_sets():
    patch = render.render_node_patch(node_plan(), gpu_taint=True)
    assert patch["metadata"]["annotations"] == {
        "gpusplit.io/host": "gpu-a",
        "gpusplit.io/gpu-taint": "nvidia.com/gpu=present:NoSchedule",
    }
    validate(patch)
    assert "gpusplit.io/gpu-taint" not in render.render_node_patch(node_plan())["metadata"]["annotations"]
    # no Kubernetes share: no taint, no mark
    zero = render.render_node_patch(node_plan(count=0), gpu_taint=True)
    assert "gpusplit.io/gpu-taint" not in zero["metadata"]["annotations"]
    marked = [
        p["metadata"]["name"]
        for p in render.render_node_patches(fleet(), gpu_taint=True)
        if "gpusplit.io/gpu-taint" in p["metadata"]["annotations"]
    ]
    assert marked == ["a-dp", "b-dra", "c-op"]  # d-none and e-zero have no share


def live_node(name, taints=(), marked=True, labels=None):
    annotations = {"gpusplit.io/gpu-taint": "nvidia.com/gpu=present:NoSchedule"} if marked else {}
    return {
        "metadata": {
            "name": name,
            "labels": labels or {"gpusplit.io/split": "true"},
            "annotations": annotations,
        },
        "spec": {"taints": list(taints)},
    }


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
OTHER_TAINT = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}


def test_gpu_taint_removals():
    plan = fleet()  # a-dp (2), b-dra (2), c-op (3) have a share; d-none, e-zero none
    planned = [p["node"] for p in plan["nodes"].values()]
    nodes = [
        live_node("a-dp", [GPU_TAINT, OTHER_TAINT]),
        live_node("c-op", [GPU_TAINT], marked=False),  # someone else's taint: never ours to remove
        live_node("e-zero", [GPU_TAINT]),  # its share dropped to 0
        live_node("b-dra", []),  # marked but the taint is already gone
        live_node("gpu-outside", [GPU_TAINT]),  # inventory host outside this run (--limit)
        live_node("gpu-gone", [GPU_TAINT]),  # host left the inventory
        live_node("d-none", [{**GPU_TAINT, "effect": "NoExecute"}]),  # another effect: not the GPU taint
    ]
    inventory = [*planned, "gpu-outside"]
    # taint on: only the node without a share loses it, and the departed one
    assert render.gpu_taint_removals(nodes, plan, True, inventory) == ["e-zero", "gpu-gone"]
    # taint off: every node where gpusplit set it and still finds it
    assert render.gpu_taint_removals(nodes, plan, False, inventory) == ["a-dp", "e-zero", "gpu-gone"]
    assert render.gpu_taint_removals([], plan, False, inventory) == []
    assert render.has_gpu_taint(nodes[0]) and not render.has_gpu_taint(nodes[-1])
    assert render.taint_text({"key": "k", "effect": "NoSchedule"}) == "k:NoSchedule"


def test_gpu_taint_nodes_one_request_for_the_fleet():
    """node_taints' nodes: present where a planned node gets the taint and this run's read does not show it
    yet, absent where gpu_taint_removals takes it off; nothing at all for a fleet already as planned."""
    plan = fleet()  # a-dp, b-dra, c-op have a share; d-none, e-zero none
    planned = [p["node"] for p in plan["nodes"].values()]
    inventory = [*planned, "gpu-outside"]
    taint = [GPU_TAINT]
    nodes = [
        live_node("a-dp", [OTHER_TAINT, GPU_TAINT]),  # has it: left out
        live_node("b-dra", [{**GPU_TAINT, "value": "other"}]),  # another value: set again
        live_node("e-zero", [GPU_TAINT]),  # its share dropped to 0
        live_node("gpu-gone", [GPU_TAINT]),  # host left the inventory
    ]
    assert render.gpu_taint_nodes(nodes, plan, True, inventory) == [
        {"name": "b-dra", "present": taint},
        {"name": "c-op", "present": taint},  # not labelled yet (first run): not in the read
        {"name": "e-zero", "absent": taint},
        {"name": "gpu-gone", "absent": taint},
    ]
    assert render.gpu_taint_nodes(nodes, plan, False, inventory) == [
        {"name": name, "absent": taint} for name in ("a-dp", "e-zero", "gpu-gone")
    ]
    done = [live_node(n, [GPU_TAINT]) for n in ("a-dp", "b-dra", "c-op")]
    assert render.gpu_taint_nodes(done, plan, True, inventory) == []
    assert render.gpu_taint_nodes([], plan, False, inventory) == []
    # the requests are what the module takes
    check_requests(render.gpu_taint_nodes(nodes, plan, True, inventory))


def full_node(node):
    """``node`` with what a live Node carries besides: gpu_split_cluster's query keeps only part of it."""
    meta = node["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            **meta,
            "uid": f"uid-{meta['name']}",
            "resourceVersion": "4242",
            "creationTimestamp": "2026-12-01T10:00:00Z",
            "labels": {**meta["labels"], "kubernetes.io/hostname": meta["name"]},
            "annotations": {**meta["annotations"], "node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": [{"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {**node["spec"], "podCIDR": "10.0.0.0/24", "providerID": "kwok://x"},
        "status": {
            "capacity": {"nvidia.com/gpu": "8", "cpu": "64"},
            "allocatable": {"nvidia.com/gpu": "6", "cpu": "64"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kubeletVersion": "v1.35.0"},
        },
    }


LABELLED_FIELDS = query_fields("roles/gpu_split_cluster/tasks/cluster.yml", "labelled")


def test_the_labelled_nodes_query_keeps_every_field_its_filters_read():
    """gpu_split_cluster reads the labelled nodes with only the query's fields (cluster_read ``fields``):
    the filters given those nodes read nothing else, and decide as they do on whole nodes."""
    plan = fleet()
    planned = [p["node"] for p in plan["nodes"].values()]
    inventory = [*planned, "gpu-outside"]
    nodes = [
        full_node(n)
        for n in (
            live_node("a-dp", [GPU_TAINT, OTHER_TAINT]),
            live_node("c-op", [GPU_TAINT], marked=False),
            live_node("e-zero", [GPU_TAINT]),
            live_node("gpu-outside", [GPU_TAINT]),
            live_node("gpu-gone", [GPU_TAINT]),
            live_node("gpu-gone-2", [], labels={"gpusplit.io/split": "false"}),
            live_node("cpu-1", [], marked=False, labels={"kubernetes.io/os": "linux"}),
        )
    ]

    def decide(live):
        return (
            render.gpu_taint_removals(live, plan, True, inventory),
            render.gpu_taint_removals(live, plan, False, inventory),
            render.departed_nodes(live, plan, inventory),
            render.gpu_taint_nodes(live, plan, True, inventory),
        )

    watched, reads = recorded(nodes)
    whole = decide(watched)
    assert whole[:3] == (["e-zero", "gpu-gone"], ["a-dp", "e-zero", "gpu-gone"], ["gpu-gone", "gpu-gone-2"])
    assert [n["name"] for n in whole[3]] == ["b-dra", "e-zero", "gpu-gone"]  # a-dp and c-op have it
    assert uncovered(reads, LABELLED_FIELDS) == []
    kept = [project(n, field_paths(LABELLED_FIELDS), "gpusplit") for n in nodes]
    assert not any("status" in n for n in kept)
    assert [n["metadata"]["managedFields"] for n in kept] == [[]] * len(
        kept
    )  # (the kubelet's entry left out)
    assert decide(kept) == whole


def applied_by_gpusplit(patch):
    """``patch`` (a node patch of the plan) as a live Node after gpusplit's apply of it, with the kubelet's fields."""
    meta = patch["metadata"]
    owned = {
        "f:metadata": {
            f"f:{part}": {f"f:{key}": {} for key in meta[part] or {}} for part in ("labels", "annotations")
        }
    }
    node = full_node({"metadata": {**meta, "annotations": dict(meta["annotations"] or {})}, "spec": {}})
    node["metadata"]["managedFields"].append({"manager": "gpusplit", "operation": "Apply", "fieldsV1": owned})
    return node


def test_the_labelled_nodes_read_tells_whether_the_labels_need_an_apply():
    """The labels task of gpu_split_cluster is skipped where its read shows every planned node labelled by gpusplit's
    apply (role step split_cluster on the query's projection with gpusplit's managedFields): it decides as the module does on
    whole nodes, and a node that lost a label, carries one gpusplit no longer sends, or was never labelled needs it."""
    from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.compare import needing_apply

    assert (
        query("roles/gpu_split_cluster/tasks/cluster.yml", "labelled")["field_manager"]
        == "{{ gpusplit_field_manager }}"
    )
    patches = render.render_node_patches(fleet(), False, True)
    nodes = [applied_by_gpusplit(p) for p in patches]
    nodes[1]["metadata"]["labels"]["gpusplit.io/split"] = "edited"
    nodes[2]["metadata"]["labels"]["gpusplit.io/old"] = "x"
    nodes[2]["metadata"]["managedFields"][-1]["fieldsV1"]["f:metadata"]["f:labels"]["f:gpusplit.io/old"] = {}
    unlabelled = nodes.pop(3)["metadata"]["name"]
    kept = [project(n, field_paths(LABELLED_FIELDS), "gpusplit") for n in nodes]
    names = [o["metadata"]["name"] for o in needing_apply(patches, kept, "gpusplit")]
    assert names == [unlabelled, nodes[1]["metadata"]["name"], nodes[2]["metadata"]["name"]]
    assert needing_apply(patches, kept, "gpusplit") == needing_apply(patches, nodes, "gpusplit")
    same = [applied_by_gpusplit(p) for p in patches]
    assert (
        needing_apply(
            patches, [project(n, field_paths(LABELLED_FIELDS), "gpusplit") for n in same], "gpusplit"
        )
        == []
    )
