"""GPU Operator mode: ClusterPolicy fields, Helm values, MIG labels, collisions (plugin_utils/gpu_operator*.py).

The ClusterPolicy gpusplit renders is validated against the real CRD's openAPIV3Schema and every
Helm value it sets is looked up in the real chart values (NVIDIA/gpu-operator v26.7.0, copied into
the shared reference folder). Those tests skip, naming the path, when the folder is absent.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import jsonschema
import pytest
import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import MIG_STRATEGIES, plan_fleet
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import gpu_operator as G
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import gpu_operator_checks as C
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._steps import cluster_steps
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.role_steps import StepContext, run_step

ROOT = Path(__file__).resolve().parents[4]
FIXTURES = ROOT / "tests" / "fixtures" / "gpus"
REFERENCE_DIR = Path(
    os.environ.get("GPUSPLIT_REFERENCE_DIR") or Path(__file__).resolve().parents[5] / "shared" / "reference"
)
OPERATOR_REF = REFERENCE_DIR / "NVIDIA_gpu-operator"
CRD = OPERATOR_REF / "nvidia.com_clusterpolicies.yaml"
CHART_VALUES = OPERATOR_REF / "values.yaml"
SAMPLE = OPERATOR_REF / "v1_clusterpolicy.yaml"
ROLE_DEFAULTS = ROOT / "roles" / "gpu_operator" / "defaults" / "main.yml"

H100_0 = "GPU-d17388da-cce8-eb28-c8fa-9f8f1d69497d"
A100_0 = "GPU-9ac6c221-b7d0-5977-3f67-437835bad8c1"
A100_0_MIGS = ["MIG-94eb40e4-7a12-853d-1248-bca084ea36a6", "MIG-b98fa930-d262-5dfb-b2f5-93b596ace04a"]
HARDENING = [
    {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"},
    {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "value": "true"},
]
VM = {"plugin_hardening": "volume-mounts"}


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"reference file {path} is absent (the shared reference folder is not here)")
    return path


def load_yaml(path: Path):
    return yaml.safe_load(need(path).read_text())


@pytest.fixture(scope="module")
def crd():
    return load_yaml(CRD)


@pytest.fixture(scope="module")
def schema(crd):
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


def strict(node):
    """The schema with additionalProperties: false wherever properties are listed.

    The apiserver prunes unknown fields of a structural schema silently, so a misspelt field
    would vanish without an error; the tests want to hear about it.
    """
    if isinstance(node, dict):
        out = {k: strict(v) for k, v in node.items()}
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [strict(v) for v in node]
    return node


def drop_nulls(node):
    """Without null values: the sample's empty ``validator.plugin:`` is null, which the apiserver
    refuses ("spec.validator.plugin in body must be of type object", seen on the lab)."""
    if isinstance(node, dict):
        return {k: drop_nulls(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [drop_nulls(v) for v in node]
    return node


def validate(schema, obj, partial=False):
    """Raise jsonschema.ValidationError when obj does not fit the CRD schema (OpenAPI v3 = draft 4).

    partial: an apply patch, which need not carry the fields the CRD requires at the top of spec
    (the live object has them); every rule below them still holds (e.g. env[].name required).
    """
    s = strict(schema)
    if partial:
        s = copy.deepcopy(s)
        s.pop("required", None)
        s["properties"]["spec"].pop("required", None)
    jsonschema.Draft4Validator(s).validate(json.loads(json.dumps(obj)))


def facts(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())["gpus"]


def fleet(**overrides):
    hosts = {
        "op-a": {
            "facts": facts("dgx-h100"),
            "mode": "gpu_operator",
            "split": {"host_count": 2},
            "mig_strategy": "single",
        },
        "op-mig": {
            "facts": facts("a100-mig"),
            "mode": "gpu_operator",
            "split": {"uuids": [A100_0]},
            "mig_strategy": "single",
        },
        "dp-b": {"facts": facts("h200"), "mode": "device_plugin", "split": {"count": 1}},
    }
    for host, entry in overrides.items():
        if entry is None:
            hosts.pop(host)
        else:
            hosts[host] = entry
    return plan_fleet(hosts)


def live_policy(name="gpu-cluster-policy", created="2026-03-01T10:00:00Z", state=None, env=None, sample=None):
    cp = (
        copy.deepcopy(sample)
        if sample
        else {"apiVersion": G.API_VERSION, "kind": G.KIND, "metadata": {}, "spec": {}}
    )
    cp["metadata"]["name"] = name
    cp["metadata"]["creationTimestamp"] = created
    if env is not None:
        cp["spec"].setdefault("toolkit", {})["env"] = env
    if state:
        cp["status"] = {"state": state, "namespace": "gpu-operator"}
    return cp


# --------------------------------------------------------------------------------------------
# the real CRD and chart


def test_toolkit_env_is_an_atomic_list_in_the_crd(schema):
    """No x-kubernetes-list-type on spec.toolkit.env: atomic, so SSA owns the whole list (hence the merge)."""
    for section in ("toolkit", "devicePlugin"):
        env = schema["properties"]["spec"]["properties"][section]["properties"]["env"]
        assert env["type"] == "array"
        assert "x-kubernetes-list-type" not in env and "x-kubernetes-list-map-keys" not in env
        assert env["items"]["required"] == ["name"]
    assert schema["properties"]["spec"]["properties"]["mig"]["properties"]["strategy"]["enum"] == list(
        MIG_STRATEGIES
    )


def test_rendered_clusterpolicy_fits_the_crd_alone_and_merged_into_the_sample(schema):
    sample = load_yaml(SAMPLE)
    with pytest.raises(jsonschema.ValidationError, match="None is not of type 'object'"):
        validate(schema, sample)  # as the apiserver does: the sample's empty validator.plugin is refused
    sample = drop_nulls(sample)
    validate(schema, sample)
    live = live_policy(
        sample=sample, env=[{"name": "CONTAINERD_SOCKET", "value": "/run/k3s/containerd/containerd.sock"}]
    )
    live["spec"]["cdi"] = {"enabled": False}  # the operator's plugin then needs volume-mounts too
    out = G.operator_config(fleet(), {}, [live], VM)
    (obj,) = out["objects"]
    assert obj["apiVersion"] == "nvidia.com/v1" and obj["kind"] == "ClusterPolicy"
    assert set(obj["spec"]) == {"toolkit", "devicePlugin", "mig"}
    validate(schema, obj, partial=True)
    merged = copy.deepcopy(live)
    for key, value in obj["spec"].items():
        merged["spec"].setdefault(key, {}).update(value)
    merged["metadata"] = {"name": obj["metadata"]["name"]}
    validate(schema, merged)
    assert merged["spec"]["toolkit"]["env"][0]["name"] == "CONTAINERD_SOCKET"  # others' entry kept, first
    assert merged["spec"]["toolkit"]["env"][1:] == HARDENING
    assert merged["spec"]["devicePlugin"]["env"] == [
        {"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"}
    ]
    assert merged["spec"]["mig"]["strategy"] == "single"


def test_the_validator_rejects_what_the_crd_rejects(schema):
    """Control: the schema check is real (a bad enum, a misspelt field, a wrong type all fail)."""
    good = G.render_clusterpolicy("p", {"mig": {"strategy": "single"}})
    validate(schema, good, partial=True)
    for bad in (
        G.render_clusterpolicy("p", {"mig": {"strategy": "bogus"}}),
        {**good, "spec": {"mig": {"stratgy": "single"}}},
        {**good, "spec": {"toolkit": {"env": [{"value": "x"}]}}},
        {**good, "spec": {"toolkit": {"env": {"name": "x"}}}},
    ):
        with pytest.raises(jsonschema.ValidationError):
            validate(schema, bad, partial=True)


def test_every_helm_value_gpusplit_sets_exists_in_the_chart():
    chart = load_yaml(CHART_VALUES)

    def paths(node, prefix=()):
        if isinstance(node, dict) and node:
            for k, v in node.items():
                yield from paths(v, (*prefix, k))
        else:
            yield prefix

    for user_values in ({}, {"cdi": {"enabled": False}}):
        settings = G.resolve_settings({"helm_values": user_values})
        values, _ = G.helm_values(settings, "single")
        owned = {k: v for k, v in values.items() if k not in user_values}
        if "devicePlugin" in values:
            owned["devicePlugin"] = values["devicePlugin"]
        assert owned, values
        for path in paths(owned):
            node = chart
            for key in path:
                assert isinstance(node, dict) and key in node, f"{'.'.join(path)} is not a value of the chart"
                node = node[key]
            assert type(node) is type(_get(values, path)), f"{'.'.join(path)}: another type than the chart's"
    values, _ = G.helm_values(G.resolve_settings({"helm_values": {"cdi": {"enabled": False}}}), "single")
    assert values["devicePlugin"]["env"] == [{"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"}]
    assert chart["cdi"]["enabled"] is True  # the chart's default: no devicePlugin.env from gpusplit then
    values, _ = G.helm_values(G.resolve_settings({}), "single")
    assert "devicePlugin" not in values and values["toolkit"]["env"] == HARDENING


def _get(node, path):
    for key in path:
        node = node[key]
    return node


def test_the_chart_version_is_pinned_once_and_matches_the_reference():
    defaults = yaml.safe_load(ROLE_DEFAULTS.read_text())
    assert defaults["gpusplit_operator_chart_version"] == "v26.7.0"
    assert defaults["gpusplit_operator_chart_repo"] == "https://helm.ngc.nvidia.com/nvidia"
    hits = [
        p
        for p in ROOT.rglob("*")
        if p.is_file()
        and p.suffix in (".py", ".yml", ".yaml", ".j2")
        and not any(part.startswith(".") or part in ("out", "tests") for part in p.relative_to(ROOT).parts)
        and "v26.7.0" in p.read_text(errors="replace")
    ]
    assert [h.relative_to(ROOT).as_posix() for h in hits] == ["roles/gpu_operator/defaults/main.yml"]
    sources = need(REFERENCE_DIR / "SOURCES.md").read_text()
    assert "Tag: `v26.7.0`" in sources
    # the chart's own pin of the device plugin is the one gpusplit's split plugin uses
    assert load_yaml(CHART_VALUES)["devicePlugin"]["version"] == render.DEVICE_PLUGIN_VERSION


# --------------------------------------------------------------------------------------------
# env merge and field ownership


def test_merge_env_keeps_others_replaces_ours_in_place_and_appends_the_rest():
    existing = [
        {"name": "CONTAINERD_CONFIG", "value": "/etc/containerd/config.toml"},
        {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "value": "false"},
        {"name": "RUNTIME_CONFIG_SOURCE", "value": "file"},
        {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "value": "true"},
    ]
    merged, notes = G.merge_env(existing, G.TOOLKIT_HARDENING_ENV)
    assert merged == [
        existing[0],
        {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "value": "true"},
        existing[2],
        {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"},
    ]
    assert len(notes) == 2 and "'false' replaced by 'true'" in notes[0] and "second entry" in notes[1]
    again, notes = G.merge_env(merged, G.TOOLKIT_HARDENING_ENV)
    assert again == merged and notes == []
    assert G.merge_env(None, G.TOOLKIT_HARDENING_ENV)[0] == HARDENING
    from_secret = [
        {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "valueFrom": {"configMapKeyRef": {}}}
    ]
    merged, notes = G.merge_env(from_secret, G.TOOLKIT_HARDENING_ENV)
    assert merged[0] == HARDENING[1] and "(valueFrom)" in notes[0]


def managed(manager, fields, operation="Apply"):
    return {"manager": manager, "operation": operation, "fieldsType": "FieldsV1", "fieldsV1": fields}


def test_fields_gpusplit_owned_are_never_dropped_by_omission():
    live = live_policy(env=[{"name": "A", "value": "1"}, *HARDENING])
    live["spec"]["mig"] = {"strategy": "mixed"}
    live["metadata"]["managedFields"] = [
        managed("gpusplit", {"f:spec": {"f:toolkit": {"f:env": {}}, "f:mig": {"f:strategy": {}}}}),
        managed("helm", {"f:spec": {"f:driver": {"f:enabled": {}}}}, "Update"),
    ]
    assert ("spec", "toolkit", "env") in G.owned_field_paths(live, "gpusplit")
    assert ("spec", "driver", "enabled") not in G.owned_field_paths(live, "helm")  # Update is no apply
    settings = G.resolve_settings({"toolkit_hardening": False})
    spec, notes = G.owned_spec(live, settings, None, "gpusplit")
    # hardening off and no gpu_operator node: the live values are sent back, nothing is removed
    assert spec == {"toolkit": {"env": live["spec"]["toolkit"]["env"]}, "mig": {"strategy": "mixed"}}
    assert notes == []
    # a manager that owns nothing sends nothing
    assert G.owned_spec(live, settings, None, "someone-else") == ({}, [])


# --------------------------------------------------------------------------------------------
# which ClusterPolicy


def test_one_clusterpolicy_is_configured_and_none_means_install():
    assert G.select_clusterpolicy([]) is None
    sel = G.select_clusterpolicy([live_policy(state="ready")])
    assert sel["active"] == sel["managed"] == "gpu-cluster-policy" and sel["warnings"] == []
    with pytest.raises(G.OperatorError, match="does not exist"):
        G.select_clusterpolicy([live_policy()], "other")


def test_several_clusterpolicies_stop_and_say_which_is_active():
    items = [
        live_policy("zz-newer", "2026-05-01T00:00:00Z"),
        live_policy("cluster-policy", "2026-01-01T00:00:00Z"),
        live_policy("aa-newest", "2026-06-01T00:00:00Z"),
    ]
    with pytest.raises(G.OperatorError) as exc:
        G.select_clusterpolicy(items)
    (msg,) = exc.value.errors
    assert msg.startswith("3 ClusterPolicies in the cluster: cluster-policy (created 2026-01-01T00:00:00Z")
    assert "cluster-policy (created 2026-01-01T00:00:00Z, state unknown, ACTIVE)" in msg
    assert "The active one is cluster-policy (the oldest" in msg
    assert "gpusplit_operator_clusterpolicy" in msg and "Nothing was changed." in msg
    sel = G.select_clusterpolicy(items, "cluster-policy")
    assert sel["managed"] == sel["active"] == "cluster-policy"
    sel = G.select_clusterpolicy(items, "zz-newer")  # no status yet: allowed, with a warning
    assert sel["managed"] == "zz-newer" and "looks active" in sel["warnings"][0]


def test_the_operators_status_decides_which_is_active():
    items = [
        live_policy("old", "2026-01-01T00:00:00Z", state="ignored"),
        live_policy("new", "2026-02-01T00:00:00Z", state="ready"),
    ]
    with pytest.raises(G.OperatorError, match="The active one is new"):
        G.select_clusterpolicy(items)
    assert G.select_clusterpolicy(items, "new")["managed"] == "new"
    with pytest.raises(G.OperatorError, match="ignores it"):
        G.select_clusterpolicy(items, "old")


# --------------------------------------------------------------------------------------------
# MIG


def test_one_mig_strategy_for_the_gpu_operator_nodes():
    assert C.fleet_mig_strategy(fleet()) == ("single", [])
    mixed = fleet(**{"op-a": {"facts": facts("dgx-h100"), "mode": "gpu_operator", "split": {"count": 2}}})
    strategy, errors = C.fleet_mig_strategy(mixed)
    assert strategy is None
    assert "none: op-a; single: op-mig" in errors[0] and "same gpusplit_mig_strategy" in errors[0]
    _, errors = C.fleet_mig_strategy(fleet(), "mixed")
    assert "gpusplit_operator_mig_strategy is mixed" in errors[0]
    only_dp = fleet(**{"op-a": None, "op-mig": None})
    assert C.fleet_mig_strategy(only_dp) == (None, [])
    assert C.fleet_mig_strategy(only_dp, "single") == ("single", [])
    # the device_plugin node's own strategy (none) does not count
    assert fleet()["nodes"]["dp-b"]["mig_strategy"] == "none"


def test_mixed_strategies_are_refused_with_every_other_refusal_at_once():
    mixed = fleet(**{"op-a": {"facts": facts("dgx-h100"), "mode": "gpu_operator", "split": {"count": 2}}})
    items = [live_policy("a", "2026-01-01T00:00:00Z"), live_policy("b", "2026-01-02T00:00:00Z")]
    with pytest.raises(G.OperatorError) as exc:
        G.operator_config(mixed, {"dp-b": "all-1g.10gb"}, items, {"plugin_hardening": "envvar"})
    text = "\n".join(exc.value.errors)
    assert "one MIG strategy for the whole cluster" in text
    assert "2 ClusterPolicies in the cluster" in text
    assert "hardening 'envvar'" in text  # the split plugins would go blind
    assert "dp-b: gpusplit_mig_config 'all-1g.10gb' needs the GPU Operator's MIG manager" in text
    assert len(exc.value.errors) == 4


def test_the_default_plugin_hardening_is_the_split_plugins_own():
    """With no gpusplit_plugin_settings the split plugins use volume-mounts, which the hardened toolkit
    honours: the default settings are not refused as blind plugins."""
    assert G.DEFAULT_SETTINGS["plugin_hardening"] == render_defaults()["hardening"] == "volume-mounts"
    plan = fleet(**{"op-a": {"facts": facts("dgx-h100"), "mode": "gpu_operator", "split": {"count": 2}}})
    errors = C.check_plugin_hardening(plan, G.DEFAULT_SETTINGS["plugin_hardening"], True)
    assert errors == []


def render_defaults():
    from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render

    return render.DEFAULT_SETTINGS


# an H100 node whose GPUs all go to Kubernetes: a node-wide MIG layout touches no host GPU
WHOLE = {
    "facts": facts("dgx-h100"),
    "mode": "gpu_operator",
    "split": {"host_count": 0},
    "mig_strategy": "single",
}


def test_mig_config_labels_and_their_rules():
    plan = fleet(**{"op-a": WHOLE})
    labels, errors, warnings = C.mig_config_labels(plan, {"op-a": "all-disabled"})
    assert labels == {"op-a": "all-disabled"} and errors == warnings == []
    assert C.mig_config_labels(plan, {"op-a": "all-1g.10gb"})[:2] == ({"op-a": "all-1g.10gb"}, [])
    _, errors, _ = C.mig_config_labels(plan, {"op-a": "all-balanced"})
    assert "mig_strategy single needs" in errors[0]
    _, _, warnings = C.mig_config_labels(plan, {"op-a": "my-custom"})
    assert "not a stock all-<profile> config" in warnings[0]
    _, errors, _ = C.mig_config_labels(plan, {"op-a": "bad value!"})
    assert "not a valid label value" in errors[0]
    _, errors, _ = C.mig_config_labels(plan, {"op-a": "all-1g.10gb"}, migmanager_enabled=False)
    assert "migManager.enabled false" in errors[0]
    none_plan = fleet(
        **{
            "op-a": {"facts": facts("dgx-h100"), "mode": "gpu_operator", "split": {"count": 2}},
            "op-mig": None,
        }
    )
    _, errors, _ = C.mig_config_labels(none_plan, {"op-a": "all-1g.10gb"})
    assert "repartition the GPU(s) the host keeps" in errors[0]  # op-a keeps 6 GPUs for the host here
    whole_none = fleet(**{"op-a": {**WHOLE, "mig_strategy": "none"}, "op-mig": None})
    _, errors, _ = C.mig_config_labels(whole_none, {"op-a": "all-1g.10gb"})
    assert "gpusplit_mig_strategy is none" in errors[0]
    assert C.mig_config_labels(whole_none, {"op-a": "all-disabled"})[0] == {"op-a": "all-disabled"}
    assert C.mig_config_labels(plan, {"not-planned": "all-1g.10gb"})[0] == {}


def test_mig_split_selects_the_mig_devices_of_whole_gpus():
    """A GPU goes to one share with all its MIG devices: they are what the plugin advertises."""
    plan = fleet()
    node = plan["nodes"]["op-mig"]
    assert node["kubernetes_uuids"] == [A100_0]
    assert node["kubernetes_mig_uuids"] == A100_0_MIGS
    assert node["resources"] == {"nvidia.com/gpu": 2}
    ds = render.render_split_daemonset(node, {"hardening": "volume-mounts"})
    env = {e["name"]: e["value"] for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == A100_0 and env["MIG_STRATEGY"] == "single"
    out = G.operator_config(plan, {}, [live_policy()], VM, nodes=[])
    assert out["mig_strategy"] == "single"
    assert out["objects"][0]["spec"]["mig"] == {"strategy": "single"}
    whole = G.operator_config(
        fleet(**{"op-a": WHOLE}), {"op-a": "all-1g.10gb"}, [live_policy()], VM, nodes=[]
    )
    assert whole["mig_labels"] == [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "op-a", "labels": {"nvidia.com/mig.config": "all-1g.10gb"}},
        }
    ]
    no_label = out
    assert f"op-mig: Kubernetes gets MIG devices {', '.join(A100_0_MIGS)}" in no_label["summary"]
    # the same split named by the MIG UUIDs (from `nvidia-smi -L`) gives the same plan ...
    by_mig = fleet(
        **{
            "op-mig": {
                "facts": facts("a100-mig"),
                "mode": "gpu_operator",
                "split": {"uuids": A100_0_MIGS},
                "mig_strategy": "single",
            }
        }
    )
    assert by_mig["nodes"]["op-mig"]["kubernetes_uuids"] == [A100_0]
    assert by_mig["nodes"]["op-mig"]["resources"] == node["resources"]
    # ... and part of a GPU's MIG devices is refused: the plugin would advertise the rest too
    with pytest.raises(Exception, match=r"names 1 of the 2 MIG devices of GPU GPU-9ac6c221"):
        fleet(
            **{
                "op-mig": {
                    "facts": facts("a100-mig"),
                    "mode": "gpu_operator",
                    "split": {"uuids": A100_0_MIGS[:1]},
                    "mig_strategy": "single",
                }
            }
        )


def test_mig_state_and_labels_left_in_place_are_reported():
    plan = fleet(**{"op-a": WHOLE, "op-mig": {**WHOLE, "facts": facts("h200"), "split": {"count": 1}}})
    nodes = [
        {
            "metadata": {
                "name": "op-mig",
                "labels": {G.LABEL_MIG_CONFIG: "all-3g.40gb", G.LABEL_MIG_CONFIG_STATE: "pending"},
            }
        },
        {"metadata": {"name": "op-a", "labels": {"nvidia.com/gpu.present": "true"}}},
        {
            "metadata": {
                "name": "dp-b",
                "labels": {G.LABEL_MIG_CONFIG: "all-1g.10gb"},
                "managedFields": [
                    managed(
                        "gpusplit-gpu-operator", {"f:metadata": {"f:labels": {"f:nvidia.com/mig.config": {}}}}
                    )
                ],
            }
        },
        {"metadata": {"name": "free-1", "labels": {"nvidia.com/gpu.present": "true"}}},
    ]
    out = G.operator_config(
        plan, {"op-mig": "all-3g.40gb", "op-a": "all-1g.10gb"}, [live_policy()], VM, nodes=nodes
    )
    text = "\n".join(out["warnings"] + out["summary"])
    assert "op-mig: the MIG manager reports nvidia.com/mig.config.state=pending" in text
    assert (
        "op-a: nvidia.com/mig.config=all-1g.10gb asks for MIG but no GPU of the Kubernetes share has MIG enabled"
        in text
    )
    assert (
        "dp-b: nvidia.com/mig.config=all-1g.10gb was set by gpusplit and is no longer asked for; left in place"
        in text
    )
    assert "GPU nodes gpusplit does not plan keep the operator's device plugin: free-1" in text


# --------------------------------------------------------------------------------------------
# plugin hardening and collisions


def test_a_hardened_toolkit_needs_volume_mounts_split_plugins():
    plan = fleet()
    assert C.check_plugin_hardening(plan, "volume-mounts", True) == []
    assert C.check_plugin_hardening(plan, "envvar", False) == []
    (msg,) = C.check_plugin_hardening(plan, "cdi", True)
    assert "dp-b, op-a, op-mig" in msg and "volume-mounts" in msg and "toolkit_hardening: false" in msg


def operator_plugin_ds(
    selector=None, affinity=None, name="nvidia-device-plugin-daemonset", image="k8s-device-plugin"
):
    spec = {
        "containers": [
            {
                "name": "nvidia-device-plugin",
                "image": f"nvcr.io/nvidia/{image}:v0.20.0",
                "securityContext": {"privileged": True},
            }
        ]
    }
    if selector is not None:
        spec["nodeSelector"] = selector
    if affinity is not None:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": affinity}
            }
        }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "gpu-operator", "labels": {"app": name}},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def test_the_operators_plugin_is_no_collision_on_split_nodes():
    gated = operator_plugin_ds({"nvidia.com/gpu.deploy.device-plugin": "true"})
    gated_affinity = operator_plugin_ds(
        affinity=[
            {
                "matchExpressions": [
                    {"key": "nvidia.com/gpu.deploy.device-plugin", "operator": "In", "values": ["true"]}
                ]
            }
        ]
    )
    gfd = operator_plugin_ds(
        {"nvidia.com/gpu.deploy.gpu-feature-discovery": "true"}, name="gpu-feature-discovery"
    )
    stock = operator_plugin_ds(name="nvidia-device-plugin-daemonset-stock")
    excluded = operator_plugin_ds(affinity=render.exclusion_terms(None), name="excluded")
    pinned_elsewhere = operator_plugin_ds(
        affinity=[{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["free-1"]}]}],
        name="elsewhere",
    )
    pinned_here = operator_plugin_ds(
        affinity=[{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["op-a"]}]}],
        name="here",
    )
    ours = copy.deepcopy(stock)
    ours["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "gpusplit"
    all_ds = [gated, gated_affinity, gfd, stock, excluded, pinned_elsewhere, pinned_here, ours]

    def names(plan, operator_managed):
        return [d["metadata"]["name"] for d in C.colliding_plugin_daemonsets(all_ds, plan, operator_managed)]

    only_operator = fleet(**{"dp-b": None})
    assert names(only_operator, False) == ["nvidia-device-plugin-daemonset-stock", "here"]
    # a device_plugin node without operator_managed gets no false label: the operator's plugin would land there
    assert names(fleet(), False) == [
        "nvidia-device-plugin-daemonset",
        "nvidia-device-plugin-daemonset",
        "nvidia-device-plugin-daemonset-stock",
        "here",
    ]
    assert names(fleet(), True) == ["nvidia-device-plugin-daemonset-stock", "here"]


def test_may_run_on_follows_kubernetes_node_selection():
    labels = {"a": "1", "n": "5"}
    assert C.may_run_on({}, "x", labels)
    assert not C.may_run_on({"nodeSelector": {"a": "2"}}, "x", labels)
    assert C.may_run_on({"nodeSelector": {"unknown": "2"}}, "x", labels)

    def aff(*terms):
        return {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
                }
            }
        }

    assert not C.may_run_on(aff({}), "x", labels)  # an empty term matches nothing
    assert not C.may_run_on(
        aff({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}), "x", labels
    )
    assert C.may_run_on(
        aff({"matchExpressions": [{"key": "n", "operator": "Gt", "values": ["4"]}]}), "x", labels
    )
    assert not C.may_run_on(
        aff({"matchExpressions": [{"key": "n", "operator": "Lt", "values": ["4"]}]}), "x", labels
    )
    assert C.may_run_on(
        aff(
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["9"]}]},
            {"matchExpressions": [{"key": "a", "operator": "Exists"}]},
        ),
        "x",
        labels,
    )
    assert not C.may_run_on(
        aff({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["x"]}]}), "x", labels
    )


def test_operator_plugin_pods_left_on_split_nodes():
    plan = fleet()

    def pod(node, selector, labels=None, image="nvcr.io/nvidia/k8s-device-plugin:v0.20.0"):
        return {
            "metadata": {"name": f"p-{node}", "namespace": "gpu-operator", "labels": labels or {}},
            "spec": {
                "nodeName": node,
                "nodeSelector": selector,
                "containers": [{"name": "c", "image": image}],
            },
        }

    gate = {"nvidia.com/gpu.deploy.device-plugin": "true"}
    pods = [
        pod("op-a", gate),
        pod("free-1", gate),  # unsplit: keeps the operator's plugin
        pod("op-mig", {"nvidia.com/gpu.deploy.gpu-feature-discovery": "true"}),  # GFD
        pod("dp-b", {"kubernetes.io/hostname": "dp-b"}, {"app.kubernetes.io/managed-by": "gpusplit"}),
        pod("dp-b", gate, image="nvcr.io/nvidia/gpu-operator:v26.7.0"),
    ]
    assert [p["metadata"]["name"] for p in C.operator_plugin_pods_on_split_nodes(pods, plan)] == ["p-op-a"]


# --------------------------------------------------------------------------------------------
# operator_config: install decision, re-run, settings


def test_install_decision():
    plan = fleet()
    assert G.operator_config(plan, {}, [], VM)["helm"] is True
    assert G.operator_config(plan, {}, [], VM)["objects"] == []
    assert G.operator_config(plan, {}, [live_policy()], VM)["helm"] is False
    assert G.operator_config(plan, {}, [live_policy()], {**VM, "install": "helm"})["helm"] is True
    with pytest.raises(G.OperatorError, match="not installed .* gpusplit_operator_install is skip"):
        G.operator_config(plan, {}, [], {**VM, "install": "skip"})
    out = G.operator_config(plan, {}, [live_policy(state="ready")], {**VM, "install": "skip"})
    assert out["helm"] is False and out["operator_namespace"] == "gpu-operator"
    with pytest.raises(G.OperatorError, match="unknown key"):
        G.resolve_settings({"nope": 1})
    with pytest.raises(G.OperatorError) as exc:
        G.resolve_settings(
            {
                "install": "maybe",
                "mig_strategy": "half",
                "toolkit_hardening": "yes",
                "clusterpolicy": "Bad_Name",
            }
        )
    assert len(exc.value.errors) == 4


def test_a_clusterpolicy_already_as_wanted_gives_the_same_object_again():
    """cluster_apply sends nothing when the live object carries every rendered field (re-run = no write)."""
    from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.compare import is_subset

    plan = fleet()
    live = live_policy(env=[{"name": "X", "value": "1"}])
    (first,) = G.operator_config(plan, {}, [live], VM)["objects"]
    applied = copy.deepcopy(live)
    applied["spec"].update(copy.deepcopy(first["spec"]))
    applied["metadata"]["annotations"] = copy.deepcopy(first["metadata"]["annotations"])  # the record
    (second,) = G.operator_config(plan, {}, [applied], VM)["objects"]
    assert second == first
    assert is_subset(second, applied)
    assert not is_subset(first, live)


def test_colliding_plugins_refuse_only_with_refuse():
    plan = fleet()
    stock = operator_plugin_ds(name="stock")
    with pytest.raises(G.OperatorError, match="gpu-operator/stock"):
        G.operator_config(plan, {}, [live_policy()], VM, daemonsets=[stock])
    G.operator_config(plan, {}, [live_policy()], {**VM, "stock_plugin_action": "exclude"}, daemonsets=[stock])
    gated = operator_plugin_ds({"nvidia.com/gpu.deploy.device-plugin": "true"})
    G.operator_config(plan, {}, [live_policy()], VM, daemonsets=[gated])


def test_the_step_wraps_refusals_and_reads_hostvars():
    out = run_step(
        "operator_config",
        {
            "plan": fleet(),
            "settings": VM,
            "clusterpolicies": [live_policy("a"), live_policy("b")],
            "nodes": [],
        },
        StepContext(hostvars={h: {} for h in fleet()["nodes"]}),
    )
    assert out["failed"] and out["msg"].startswith("gpusplit GPU Operator mode refused:\n- 2 ClusterPolicies")
    hostvars = {"h1": {"gpusplit_mig_config": "all-1g.10gb"}, "h2": {}, "h3": {"gpusplit_mig_config": ""}}
    assert cluster_steps._mig_configs(hostvars, ["h1", "h2", "h3"]) == {"h1": "all-1g.10gb"}
    assert C.colliding_plugin_daemonsets([], fleet(), True) == []
    assert C.operator_plugin_pods_on_split_nodes([], fleet()) == []
