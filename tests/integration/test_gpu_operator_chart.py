"""playbooks/gpu_operator.yml installs the real GPU Operator chart (v26.7.0) on the lab, then configures its ClusterPolicy.

The chart is NVIDIA/gpu-operator's deployments/gpu-operator at v26.7.0, whole, with the
node-feature-discovery 0.19.0 subchart vendored (tests/integration/real_charts.py). Its Chart.yaml
says v1.0.0-devel / main-latest at the tag: NVIDIA's release job stamps the tag into both when it
publishes the chart, and this test does the same (``helm package --version v26.7.0 --app-version
v26.7.0``) and gives the role the .tgz (``gpusplit_operator_chart_path``); the folder as it is is
refused. Real: helm 4, the chart (its ClusterPolicy template, its CRDs from crds/, the NFD
subchart), the API server (the CRDs' schemas), the controllers and scheduler. Simulated: the
kubelets and every pod (kwok: the operator, NFD and hook Jobs do not run), the split device plugin
(lab/deviceplugin.py). Since no operator runs, its device-plugin DaemonSet does not exist: what
keeps it off a split node is its node selector nvidia.com/gpu.deploy.device-plugin=true (the
operator's state-device-plugin asset) against the label gpusplit sets to false.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import uuid
from pathlib import Path

import pytest
import real_charts
import yaml
from ansible_output import recap
from test_gpu_operator_lab import (
    DEPLOY_DP,
    HARDENING,
    PLUGIN_SELECTOR,
    Patient,
    api_ready,
    clusterpolicy_writes,
    run_playbook,
)

ROOT = Path(__file__).resolve().parents[2]
VERSION = "v26.7.0"
RUN = uuid.uuid4().hex[:5]
NS = f"gpoc-{RUN}"
RELEASE = "gpu-operator"
DGX, H200, FREE = f"gpoc-{RUN}-dgx", f"gpoc-{RUN}-h200", f"gpoc-{RUN}-free"
HOSTS = {
    DGX: {
        "gpusplit_lab_fixture": "dgx-h100",
        "gpusplit_mode": "gpu_operator",
        "gpusplit_mig_strategy": "single",
        "gpusplit_split": {"host_count": 2},
    },
    H200: {
        "gpusplit_lab_fixture": "h200",
        "gpusplit_mode": "gpu_operator",
        "gpusplit_mig_strategy": "single",
        "gpusplit_split": {"count": 1},
    },
}
# the CRDs the chart ships in crds/ (its own and the NFD subchart's); resource.nvidia.com ones are
# the DRA driver chart's too, so they are not checked here
CHART_CRDS = {
    "clusterpolicies.nvidia.com": "crds/nvidia.com_clusterpolicies.yaml",
    "nvidiadrivers.nvidia.com": "crds/nvidia.com_nvidiadrivers.yaml",
    "gpuclusters.nvidia.com": "crds/nvidia.com_gpuclusters.yaml",
}
NFD_CRDS = (
    "nodefeatures.nfd.k8s-sigs.io",
    "nodefeaturerules.nfd.k8s-sigs.io",
    "nodefeaturegroups.nfd.k8s-sigs.io",
)


@pytest.fixture(scope="module")
def kubectl(kubectl):
    return Patient(kubectl)


def inventory(tmp: Path, chart: Path) -> Path:
    dest = tmp / "inventory"
    shutil.copytree(ROOT / "inventory" / "lab" / "group_vars", dest / "group_vars")
    hosts = {n: {**h, "gpusplit_host_root": str(tmp / "hosts" / n)} for n, h in HOSTS.items()}
    (dest / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    settings = {
        "gpusplit_operator_chart_path": str(chart),
        "gpusplit_operator_namespace": NS,
        "gpusplit_operator_install": "helm",  # the release is checked on every run
        "gpusplit_plugin_settings": {"hardening": "volume-mounts"},  # the toolkit is hardened
        "gpusplit_out_dir": str(tmp / "out"),
    }
    group_vars = dest / "group_vars" / "all.yml"
    merged = {**yaml.safe_load(group_vars.read_text()), **settings}
    group_vars.write_text(
        "# the lab's group_vars/all.yml with this test's settings\n" + yaml.safe_dump(merged)
    )
    return dest


def package(tmp: Path) -> Path:
    """The chart as NVIDIA's release publishes it: the tag stamped into version and appVersion."""
    real_charts.helm(
        "package",
        str(real_charts.chart("gpu-operator")),
        "--version",
        VERSION,
        "--app-version",
        VERSION,
        "-d",
        str(tmp),
    )
    return tmp / f"gpu-operator-{VERSION}.tgz"


def finish_hook_jobs(kubectl, stop):
    """kwok's pods never end: mark the pods of the chart's hook Jobs Succeeded, as their containers would end."""
    while not stop.is_set():
        pods = kubectl.json("get", "pods", "-n", NS, "-l", "batch.kubernetes.io/job-name")["items"]
        for pod in pods:
            if pod["status"].get("phase") == "Running":
                status = {"phase": "Succeeded", "conditions": [{"type": "Ready", "status": "False"}]}
                kubectl(
                    "patch", "pod", pod["metadata"]["name"], "-n", NS, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": status}), check=False,
                )  # fmt: skip
        time.sleep(1)


def crd_from_chart(kubectl, name, path):
    live = kubectl.json("get", "crd", name, "--show-managed-fields")
    shipped = yaml.safe_load((real_charts.chart("gpu-operator") / path).read_text())
    return live, shipped


@pytest.fixture(scope="module")
def operator(lab, kubectl, core_api, tmp_path_factory):
    from lab import nodes as labnodes

    tmp = tmp_path_factory.mktemp("gpu-operator-chart")
    api_ready(kubectl)
    # the chart installs its CRDs from crds/ only where they are missing: start without them
    left = kubectl("get", "clusterpolicies", "-o", "name", check=False).stdout.split()
    if left:
        pytest.fail(f"ClusterPolicies are left in the lab from another test: {left}", pytrace=False)
    for crd in (*CHART_CRDS, *NFD_CRDS):
        kubectl("delete", "crd", crd, "--ignore-not-found")
    for name, host in {**HOSTS, FREE: {"gpusplit_lab_fixture": "workstation"}}.items():
        labnodes.ensure_node(core_api, name, host["gpusplit_lab_fixture"])
    state = {"tmp": tmp, "tgz": package(tmp)}
    state["inventory"] = inventory(tmp, state["tgz"])
    try:
        yield state
    finally:
        api_ready(kubectl)
        real_charts.helm("uninstall", RELEASE, "-n", NS, "--no-hooks", "--wait", check=False)
        kubectl("delete", "namespace", NS, "--wait=false", "--ignore-not-found")
        for name in (*HOSTS, FREE):
            kubectl("delete", "daemonset", "-n", "kube-system", f"gpusplit-dp-{name}", "--ignore-not-found")
            kubectl("delete", "node", name, "--wait=false", "--ignore-not-found")
        for crd in (*CHART_CRDS, *NFD_CRDS):
            kubectl("delete", "crd", crd, "--ignore-not-found", "--wait=false")


def play(kubectl, operator, *extra, check=True):
    return run_playbook(kubectl, "gpu_operator.yml", operator["inventory"], *extra, check=check)


def test_the_chart_folder_as_tagged_is_refused_before_any_change(operator, kubectl):
    folder = real_charts.chart("gpu-operator")
    proc = play(kubectl, operator, "-e", f"gpusplit_operator_chart_path={folder}", check=False)
    said = " ".join(proc.stdout.split())
    assert proc.returncode != 0
    assert f"the local chart {folder} is gpu-operator v1.0.0-devel (appVersion main-latest)" in said, said[
        -3000:
    ]
    assert f"helm package {folder} --version {VERSION} --app-version {VERSION}" in said
    assert kubectl("get", "ns", NS, check=False).returncode != 0 or real_charts.releases(NS) == []
    assert kubectl("get", "crd", "clusterpolicies.nvidia.com", check=False).returncode != 0
    labels = kubectl.json("get", "node", DGX)["metadata"]["labels"]
    assert DEPLOY_DP not in labels and "gpusplit.io/mode" not in labels  # nothing was changed


def test_the_chart_installs_with_gpusplits_values_and_one_clusterpolicy_carries_them(operator, kubectl):
    proc = play(kubectl, operator)
    said = " ".join(proc.stdout.split())
    assert "TASK [gpusplit.k8s.gpu_operator : Install the GPU Operator chart" in said
    [row] = real_charts.releases(NS)
    assert (
        row["chart"] == f"gpu-operator-{VERSION}"
        and row["app_version"] == VERSION
        and row["status"] == "deployed"
    )
    operator["revision"] = int(row["revision"])

    [cp] = kubectl.json("get", "clusterpolicies", "--show-managed-fields")[
        "items"
    ]  # exactly one: the chart's
    assert cp["metadata"]["name"] == "cluster-policy"
    assert cp["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE
    assert cp["spec"]["toolkit"]["env"] == HARDENING
    assert cp["spec"]["mig"]["strategy"] == "single"
    assert (
        cp["spec"]["cdi"]["enabled"] is True and "env" not in cp["spec"]["devicePlugin"]
    )  # CDI on: no plugin env
    assert "configures ClusterPolicy cluster-policy (active)" in said
    # the values carry gpusplit's settings, so that the site's own `helm upgrade` with them keeps them
    values = json.loads(real_charts.helm("get", "values", RELEASE, "-n", NS, "-o", "json"))
    assert values == {"toolkit": {"env": HARDENING}, "mig": {"strategy": "single"}}

    # the CRDs are the chart's own, from crds/, created by helm
    for name, path in CHART_CRDS.items():
        live, shipped = crd_from_chart(kubectl, name, path)
        assert {m["manager"] for m in live["metadata"]["managedFields"]} & {"helm", "Helm"}, name
        assert [v["schema"] for v in live["spec"]["versions"]] == [
            v["schema"] for v in shipped["spec"]["versions"]
        ]
    # the NFD subchart's objects
    for kind, name in (
        ("deployment", f"{RELEASE}-node-feature-discovery-master"),
        ("deployment", f"{RELEASE}-node-feature-discovery-gc"),
        ("daemonset", f"{RELEASE}-node-feature-discovery-worker"),
    ):
        assert kubectl("get", kind, name, "-n", NS, check=False).returncode == 0, (kind, name)
    for crd in NFD_CRDS:
        assert kubectl("get", "crd", crd, check=False).returncode == 0, crd

    # the operator's device plugin selects nvidia.com/gpu.deploy.device-plugin=true: false on every
    # split node, absent from every other node
    split = {DGX, H200}
    for item in kubectl.json("get", "nodes")["items"]:
        name, labels = item["metadata"]["name"], item["metadata"].get("labels") or {}
        if name in split:
            assert labels.get(DEPLOY_DP) == "false", name
        else:
            assert DEPLOY_DP not in labels, name
    dss = kubectl.json("get", "daemonsets", "-n", "kube-system", "-l", PLUGIN_SELECTOR)["items"]
    assert {f"gpusplit-dp-{n}" for n in split} <= {
        d["metadata"]["name"] for d in dss
    }  # the split plugin there
    report = json.loads((operator["tmp"] / "out" / "fleet-report.json").read_text())
    assert report["counts"].get("FAIL", 0) == 0 and report["counts"].get("DRIFT", 0) == 0, report["counts"]


def test_a_rerun_writes_nothing_and_the_sites_helm_upgrade_keeps_gpusplits_settings(operator, kubectl):
    if "revision" not in operator:
        pytest.skip("needs the install of the test before")
    before = kubectl.json("get", "clusterpolicy", "cluster-policy")["metadata"]["resourceVersion"]
    writes = clusterpolicy_writes(kubectl)
    again = play(kubectl, operator)
    assert recap(again.stdout)["localhost"]["changed"] == 0, again.stdout[-5000:]
    assert kubectl.json("get", "clusterpolicy", "cluster-policy")["metadata"]["resourceVersion"] == before
    assert clusterpolicy_writes(kubectl) == writes  # the apiserver got no write request for it
    assert int(real_charts.releases(NS)[0]["revision"]) == operator["revision"]

    # the site's pipeline: helm upgrade with the values gpusplit gave (its pre-upgrade hook Job included)
    values = operator["tmp"] / "site-values.yaml"
    values.write_text(real_charts.helm("get", "values", RELEASE, "-n", NS, "-o", "yaml"))
    stop = threading.Event()
    hooks = threading.Thread(target=finish_hook_jobs, args=(kubectl, stop), daemon=True)
    hooks.start()
    try:
        real_charts.helm(
            "upgrade",
            RELEASE,
            str(operator["tgz"]),
            "-n",
            NS,
            "--reset-values",
            "-f",
            str(values),
            "--timeout",
            "180s",
        )
    finally:
        stop.set()
        hooks.join()
    assert int(real_charts.releases(NS)[0]["revision"]) == operator["revision"] + 1
    cp = kubectl.json("get", "clusterpolicy", "cluster-policy")
    assert cp["spec"]["toolkit"]["env"] == HARDENING and cp["spec"]["mig"]["strategy"] == "single"
    after = play(kubectl, operator)
    assert recap(after.stdout)["localhost"]["changed"] == 0, after.stdout[-5000:]
