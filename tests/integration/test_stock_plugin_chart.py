"""A stock nvidia-device-plugin installed with the real chart (0.20.0), then the split on its node, then the site's helm upgrade.

The chart is NVIDIA/k8s-device-plugin's deployments/helm/nvidia-device-plugin at v0.20.0, whole
(tests/integration/real_charts.py), installed by helm 4 as a site would. kwok runs its pods; the
lab's device-plugin simulator (lab/deviceplugin.py) advertises for them as for any plugin pod.

What is shown (docs/split.md, "A stock plugin installed with Helm"):

1. gpusplit's exclusion as a server-side-apply patch (``gpusplit_stock_plugin_action=exclude``) takes
   the node affinity from the field manager ``helm``; the site's next ``helm upgrade`` with its
   original values then fails on the conflict, and with ``--force-conflicts`` it removes the
   exclusion. So a Helm-managed stock plugin must be kept off split nodes by its values.
2. With the exclusion in the release's values, the split needs no patch: split.yml finds no
   colliding plugin, the stock plugin leaves the split node, verify.yml says OK, and the site's
   ``helm upgrade`` with those values leaves it OK.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest
import real_charts
import yaml
from test_gpu_operator_lab import Patient, api_ready, run_playbook

ROOT = Path(__file__).resolve().parents[2]
RUN = uuid.uuid4().hex[:5]
NS = f"gsstock-{RUN}"
RELEASE = "nvidia-device-plugin"
DS = RELEASE  # the chart's fullname when the release is named after the chart
NODE = f"gsstock-{RUN}-dgx"
EXCLUDE = {"key": "gpusplit.io/split", "operator": "NotIn", "values": ["true"]}


@pytest.fixture(scope="module")
def kubectl(kubectl):
    return Patient(kubectl)


def site_values():
    """The chart's default affinity terms, each with gpusplit's expression (docs/split.md)."""
    chart = yaml.safe_load((real_charts.chart("nvidia-device-plugin") / "values.yaml").read_text())
    terms = chart["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    for term in terms:
        term["matchExpressions"].append(dict(EXCLUDE))
    return {"affinity": chart["affinity"]}


def terms(kubectl):
    ds = kubectl.json("get", "daemonset", DS, "-n", NS, "--show-managed-fields")
    affinity = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    managers = {m["manager"] for m in ds["metadata"]["managedFields"]}
    return affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"], managers


def stock_pods_on_node(kubectl):
    pods = kubectl.json("get", "pods", "-n", NS, "--field-selector", f"spec.nodeName={NODE}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


@pytest.fixture(scope="module")
def stock(lab, kubectl, core_api, tmp_path_factory):
    from lab import nodes as labnodes

    tmp = tmp_path_factory.mktemp("stock-plugin")
    api_ready(kubectl)
    labnodes.ensure_node(core_api, NODE, "dgx-h100")
    kubectl(
        "label", "node", NODE, "nvidia.com/gpu.present=true", "--overwrite"
    )  # as GFD/NFD label a GPU node
    dest = tmp / "inventory"
    shutil.copytree(ROOT / "inventory" / "lab" / "group_vars", dest / "group_vars")
    host = {
        "gpusplit_lab_fixture": "dgx-h100",
        "gpusplit_mode": "device_plugin",
        "gpusplit_split": {"host_count": 2},
        "gpusplit_host_root": str(tmp / "hosts" / NODE),
    }
    (dest / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {NODE: host}}}}})
    )
    group_vars = dest / "group_vars" / "all.yml"
    merged = {**yaml.safe_load(group_vars.read_text()), "gpusplit_out_dir": str(tmp / "out")}
    group_vars.write_text(yaml.safe_dump(merged))
    chart = real_charts.chart("nvidia-device-plugin")
    real_charts.install(RELEASE, NS, chart, {}, tmp)  # the site's release: the chart's defaults
    kubectl.wait_for(
        lambda: stock_pods_on_node(kubectl), timeout=120, what="the stock plugin on the GPU node"
    )
    try:
        yield {"tmp": tmp, "inventory": dest, "chart": chart}
    finally:
        api_ready(kubectl)
        real_charts.uninstall(RELEASE, NS)
        kubectl("delete", "namespace", NS, "--wait=false", "--ignore-not-found")
        kubectl("delete", "daemonset", "-n", "kube-system", f"gpusplit-dp-{NODE}", "--ignore-not-found")
        kubectl("delete", "node", NODE, "--wait=false", "--ignore-not-found")


def verify(kubectl, stock):
    """verify.yml over the test's one node: its verdict (OK, DRIFT or FAIL)."""
    run_playbook(kubectl, "verify.yml", stock["inventory"], check=False)
    report = json.loads((stock["tmp"] / "out" / "fleet-report.json").read_text())
    [entry] = report["nodes"]
    return entry["verdict"], entry


def test_an_apply_patch_on_the_helm_managed_daemonset_breaks_the_sites_helm_upgrade(stock, kubectl):
    verdict, entry = verify(kubectl, stock)
    assert verdict != "OK", entry  # control: the stock plugin on the node, no split yet
    run_playbook(kubectl, "split.yml", stock["inventory"], "-e", "gpusplit_stock_plugin_action=exclude")
    found, managers = terms(kubectl)
    assert all(EXCLUDE in t["matchExpressions"] for t in found) and {"helm", "gpusplit"} <= managers
    kubectl.wait_for(lambda: not stock_pods_on_node(kubectl), timeout=120, what="the stock plugin to leave")

    # the site's pipeline upgrades its release with its original values: helm 4 refuses the conflict ...
    proc = real_charts.helm_proc("upgrade", RELEASE, str(stock["chart"]), "-n", NS, "--reuse-values")
    assert proc.returncode != 0 and 'conflict with "gpusplit"' in proc.stderr, proc.stderr
    assert real_charts.releases(NS)[0]["status"] == "failed"
    # ... and forced, it takes the field back: the exclusion is gone, the stock plugin returns
    real_charts.helm("upgrade", RELEASE, str(stock["chart"]), "-n", NS, "--reuse-values", "--force-conflicts")
    found, managers = terms(kubectl)
    assert not any(EXCLUDE in t["matchExpressions"] for t in found) and "gpusplit" not in managers
    kubectl.wait_for(
        lambda: stock_pods_on_node(kubectl), timeout=120, what="the stock plugin back on the split node"
    )


def test_with_the_exclusion_in_the_releases_values_the_split_survives_the_sites_helm_upgrade(stock, kubectl):
    values = stock["tmp"] / "site-values.yaml"
    values.write_text(yaml.safe_dump(site_values()))
    real_charts.helm("upgrade", RELEASE, str(stock["chart"]), "-n", NS, "--reset-values", "-f", str(values))
    kubectl.wait_for(lambda: not stock_pods_on_node(kubectl), timeout=120, what="the stock plugin to leave")
    run_playbook(kubectl, "split.yml", stock["inventory"])  # refuse (default): no colliding plugin left
    verdict, entry = verify(kubectl, stock)
    assert verdict == "OK", entry

    revision = int(real_charts.releases(NS)[0]["revision"])
    real_charts.helm("upgrade", RELEASE, str(stock["chart"]), "-n", NS, "--reset-values", "-f", str(values))
    assert int(real_charts.releases(NS)[0]["revision"]) == revision + 1
    found, _ = terms(kubectl)
    assert all(EXCLUDE in t["matchExpressions"] for t in found)
    assert not stock_pods_on_node(kubectl)
    verdict, entry = verify(kubectl, stock)
    assert verdict == "OK", entry
