"""Taking split nodes over from a stock device plugin (plugins/plugin_utils/stock_plugin.py).

The Helm-managed DaemonSet is the real nvidia-device-plugin 0.20.0 chart rendered by ``helm
template`` (the reference copy, ../shared/reference/charts), and the values gpusplit asks the site
to add are fed back into the same chart: the DaemonSet it renders then keeps off every split node.
"""

from __future__ import annotations

import copy
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import LABEL_MANAGED_BY, MANAGED_BY
from ansible_collections.gpusplit.k8s.plugins.module_utils._split import verify
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import gpu_operator_checks, stock_plugin
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.role_steps import StepContext, run_step
from ansible_collections.gpusplit.k8s.tests.unit.fieldreads import query
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._dra.dra_testdata import REFERENCE_DIR
from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_split_render import fleet, gpu

CHART_DIR = REFERENCE_DIR / "charts" / "nvidia-device-plugin"
EXCLUDE = {"key": "gpusplit.io/split", "operator": "NotIn", "values": ["true"]}


def chart_daemonset(tmp_path, values=None, release="site-dp", namespace="nvidia"):
    """The device plugin DaemonSet the real chart renders with ``values`` (None: its defaults)."""
    helm = shutil.which("helm")
    if not helm or not (CHART_DIR / "Chart.yaml").is_file():
        pytest.skip(f"helm or the chart ({CHART_DIR}) is missing")
    args = [helm, "template", release, str(CHART_DIR), "-n", namespace]
    if values is not None:
        path = tmp_path / "values.yaml"
        path.write_text(values if isinstance(values, str) else yaml.safe_dump(values))
        args += ["-f", str(path)]
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    daemonsets = {
        d["metadata"]["name"]: d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "DaemonSet"
    }
    # the chart also renders its MPS control daemon, gated by nvidia.com/mps.capable=true
    assert set(daemonsets) == {
        f"{release}-nvidia-device-plugin",
        f"{release}-nvidia-device-plugin-mps-control-daemon",
    }
    return daemonsets[f"{release}-nvidia-device-plugin"]


def gpu_plan():
    """One split node in mode device_plugin."""
    return plan_fleet(
        {"gpu-a": {"facts": [gpu(i) for i in range(4)], "mode": "device_plugin", "split": {"count": 2}}}
    )


def terms_of(ds):
    affinity = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    return affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def test_the_charts_default_daemonset_collides_and_is_named_with_its_release(tmp_path):
    ds = chart_daemonset(tmp_path)
    plan = gpu_plan()
    # its default affinity selects nvidia.com/gpu.present=true, which gpusplit itself sets
    assert gpu_operator_checks.colliding_plugin_daemonsets([ds], plan) == [ds]
    [entry] = stock_plugin.helm_managed([ds])
    assert entry["daemonsets"] == [f"nvidia/{ds['metadata']['name']}"]
    # helm template has no release annotation: the chart's instance label names the release
    assert (entry["release"], entry["namespace"], entry["chart"]) == (
        "site-dp",
        "nvidia",
        "nvidia-device-plugin-0.20.0",
    )
    # the values are the chart's own terms, each with gpusplit's expression
    terms = entry["values"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert [t["matchExpressions"][:-1] for t in terms] == [t["matchExpressions"] for t in terms_of(ds)]
    assert all(t["matchExpressions"][-1] == EXCLUDE for t in terms) and len(terms) == 3
    # the one-line snippet is the same values
    assert "\n" not in entry["values_yaml"] and yaml.safe_load(entry["values_yaml"]) == entry["values"]


def test_the_snippet_in_the_release_values_keeps_the_chart_off_split_nodes(tmp_path):
    [entry] = stock_plugin.helm_managed([chart_daemonset(tmp_path)])
    again = chart_daemonset(tmp_path, entry["values_yaml"])  # the site pastes the line into its values file
    assert all(EXCLUDE in t["matchExpressions"] for t in terms_of(again))
    assert gpu_operator_checks.colliding_plugin_daemonsets([again], gpu_plan()) == []
    # a non-split GPU node still gets the stock plugin: only split nodes are excluded
    from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import matches_node

    pod = {"spec": again["spec"]["template"]["spec"]}
    other = {"metadata": {"name": "gpu-b", "labels": {"nvidia.com/gpu.present": "true"}}}
    split = {
        "metadata": {
            "name": "gpu-a",
            "labels": {"nvidia.com/gpu.present": "true", "gpusplit.io/split": "true"},
        }
    }
    assert matches_node(pod, other) and not matches_node(pod, split)
    # the values are idempotent: asked again, the same
    assert stock_plugin.helm_values(again) == entry["values"]


def test_helm_release_from_helms_annotations_and_other_affinity_kept():
    ds = {
        "metadata": {
            "name": "nvdp",
            "namespace": "kube-system",
            "labels": {"app.kubernetes.io/instance": "label-name"},
            "annotations": {
                "meta.helm.sh/release-name": "nvdp",
                "meta.helm.sh/release-namespace": "nvidia-system",
            },
        },
        "spec": {
            "template": {
                "spec": {
                    "affinity": {
                        "nodeAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "weight": 1,
                                    "preference": {"matchExpressions": [{"key": "z", "operator": "Exists"}]},
                                }
                            ]
                        },
                        "podAntiAffinity": {"x": 1},
                    }
                }
            }
        },
    }
    before = copy.deepcopy(ds)
    [entry] = stock_plugin.helm_managed([ds])
    assert (entry["release"], entry["namespace"], entry["chart"]) == ("nvdp", "nvidia-system", "")
    affinity = entry["values"]["affinity"]
    assert affinity["podAntiAffinity"] == {"x": 1}
    assert affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 1
    # no required terms yet: one term with the expression alone
    assert affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchExpressions": [EXCLUDE]}]
    }
    assert ds == before  # the live object is not changed


def test_a_daemonset_not_installed_by_helm_is_not_listed():
    plain = {"metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system", "labels": {}}}
    other = {
        "metadata": {"name": "x", "namespace": "y", "labels": {"app.kubernetes.io/managed-by": "kustomize"}}
    }
    assert stock_plugin.helm_managed([plain, other]) == [] and stock_plugin.helm_managed(None) == []


def plugin_ds(name, namespace, labels=None, selector=None, image="nvcr.io/nvidia/k8s-device-plugin:v0.20.0"):
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "selector": {"matchLabels": selector or {}},
            "template": {"spec": {"containers": [{"name": "ctr", "image": image}]}},
        },
    }


def test_pod_queries_list_each_unmanaged_plugin_daemonset_by_its_selector():
    daemonsets = [
        plugin_ds("nvdp", "nvidia", selector={"app.kubernetes.io/name": "nvidia-device-plugin", "a": "b"}),
        plugin_ds("gpusplit-dp-x", "kube-system", labels={"app.kubernetes.io/managed-by": "gpusplit"}),
        plugin_ds("web", "default", image="nginx:1"),  # no device plugin
        plugin_ds("bare", "kube-system"),  # no matchLabels: every pod of the namespace, filtered after
    ]
    assert stock_plugin.pod_queries(daemonsets) == [
        {
            "daemonset": "nvidia/nvdp",
            "namespace": "nvidia",
            "label_selectors": ["a=b", "app.kubernetes.io/name=nvidia-device-plugin"],
        },
        {"daemonset": "kube-system/bare", "namespace": "kube-system", "label_selectors": []},
    ]


def test_the_daemonsets_query_leaves_out_only_the_daemonsets_the_checks_skip():
    """gpu_split_cluster asks the apiserver only for the DaemonSets gpusplit does not own (a selector
    managed-by!=gpusplit, which also matches a DaemonSet without the label): exactly those that the
    collision checks and the pod queries look at, so the hundreds of split DaemonSets of a fleet are not
    read for nothing."""
    [selector] = query("roles/gpu_split_cluster/tasks/cluster.yml", "daemonsets")["label_selectors"]
    assert selector == f"{LABEL_MANAGED_BY}!={MANAGED_BY}"
    key, value = selector.split("!=")
    daemonsets = [
        plugin_ds("nvdp", "nvidia", selector={"app": "nvdp"}),
        plugin_ds("helm", "nvidia", labels={LABEL_MANAGED_BY: "Helm"}, selector={"app": "h"}),
        plugin_ds("gpusplit-dp-x", "kube-system", labels={LABEL_MANAGED_BY: MANAGED_BY}, selector={"a": "x"}),
    ]
    served = [ds for ds in daemonsets if ds["metadata"]["labels"].get(key) != value]  # the selector's meaning
    assert verify.unmanaged_plugin_daemonsets(served) == verify.unmanaged_plugin_daemonsets(daemonsets)
    assert stock_plugin.pod_queries(served) == stock_plugin.pod_queries(daemonsets)
    assert [ds["metadata"]["name"] for ds in served] == ["nvdp", "helm"]


def pod(
    name, node, labels=None, image="nvcr.io/nvidia/k8s-device-plugin:v0.20.0", terminating=False, args=()
):
    meta = {"name": name, "namespace": "nvidia", "labels": labels or {}}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": image, "args": list(args)}]},
    }


def test_pods_on_split_nodes_count_terminating_ones_and_skip_gpusplits_and_others():
    plan = fleet()  # a-dp, b-dra, c-op, d-none, e-zero: every planned node with GPUs is split
    pods = [
        pod("stock-a", "a-dp"),
        pod("stock-e", "e-zero", terminating=True),  # still there until the kubelet confirms
        pod("stock-cpu", "cpu-1"),  # not a split node
        pod("ours", "a-dp", labels={"app.kubernetes.io/managed-by": "gpusplit"}),
        pod("ours-name", "a-dp", labels={"app.kubernetes.io/name": "gpusplit-device-plugin"}),
        pod("gfd", "a-dp", args=["gpu-feature-discovery"]),  # same image, no device plugin
        pod("web", "a-dp", image="nginx:1"),
        {"metadata": {"name": "pending"}, "spec": {"containers": []}},  # not bound yet
    ]
    assert [p["metadata"]["name"] for p in stock_plugin.pods_on_split_nodes(pods, plan)] == [
        "stock-a",
        "stock-e",
    ]
    assert stock_plugin.pods_on_split_nodes(None, plan) == []


def test_the_steps_are_the_functions():
    ds = plugin_ds("nvdp", "nvidia", selector={"app": "nvdp"})
    checks = run_step("split_cluster", {"plan": fleet(), "live": {"daemonsets": [ds]}}, StepContext())
    assert checks["pod_queries"] == stock_plugin.pod_queries([ds])
    assert checks["helm"] == []
    calls = []

    def run_module(name, args):
        calls.append((name, args))
        return {"resources": [pod("p", "a-dp")]}

    left = run_step(
        "split_cluster_stock_wait",
        {"plan": fleet(), "pod_queries": checks["pod_queries"], "wait_seconds": 4},
        StepContext(run_module=run_module),
    )["left"]
    assert left[0]["metadata"]["name"] == "p"
    # up to wait_seconds // 2 retries after the first listing, as the loop's until did
    assert len(calls) == 3 and calls[0][0] == "kubernetes.core.k8s_info"
