"""A stock nvidia-device-plugin installed with the real chart (0.20.0), then the split on its node, then the site's helm upgrade.

The chart is NVIDIA/k8s-device-plugin's deployments/helm/nvidia-device-plugin at v0.20.0, whole
(tests/integration/real_charts.py), installed by helm 4 as a site would. kwok runs its pods; the
lab's device-plugin simulator (lab/deviceplugin.py) advertises for them as for any plugin pod.

What is shown (docs/split.md, "A stock plugin installed with Helm"):

1. gpusplit does not patch a Helm-managed DaemonSet (a server-side-apply patch of its affinity
   breaks the release's next ``helm upgrade``, or is taken back by it with ``--force-conflicts``):
   split.yml refuses, with ``refuse`` and with ``exclude`` alike, before any change, naming the
   release, its namespace and the values to add; those values are the chart's own terms with
   gpusplit's expression.
2. With those values in the release (``helm upgrade``), split.yml takes the node over in order:
   the node's labels first, then the stock plugin's pod gone from it, then the split DaemonSet
   (the writes' resourceVersions, one etcd, say so). verify.yml says OK, and the site's next
   ``helm upgrade`` with the same values leaves it OK.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap
import threading
import uuid
from pathlib import Path

import pytest
import real_charts
import yaml
from test_gpu_operator_lab import Patient, api_ready, run_playbook

from lab import components as C

ROOT = Path(__file__).resolve().parents[2]
RUN = uuid.uuid4().hex[:5]
NS = f"gsstock-{RUN}"
RELEASE = "nvidia-device-plugin"
DS = RELEASE  # the chart's fullname when the release is named after the chart
NODE = f"gsstock-{RUN}-dgx"
SPLIT_DS = f"gpusplit-dp-{NODE}"
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


def daemonset(kubectl):
    return kubectl.json("get", "daemonset", DS, "-n", NS, "--show-managed-fields")


def terms(kubectl):
    ds = daemonset(kubectl)
    affinity = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    managers = {m["manager"] for m in ds["metadata"]["managedFields"]}
    return affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"], managers


def stock_pods_on_node(kubectl):
    """The stock plugin's pods bound to the node, terminating ones included (their plugin may still run)."""
    return kubectl.json("get", "pods", "-n", NS, "--field-selector", f"spec.nodeName={NODE}")["items"]


def stock_pod_after_rollout(kubectl, timeout=120):
    """The one stock plugin pod on the node once a helm upgrade's rollout has put it back: the DaemonSet
    controller deletes the old pod before it creates the new one, so for a moment the node has none."""

    def one_pod():
        pods = stock_pods_on_node(kubectl)
        return pods[0] if len(pods) == 1 else None

    return kubectl.wait_for(
        one_pod, timeout=timeout, what="one stock plugin pod on the node after the rollout"
    )


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
        kubectl("delete", "daemonset", "-n", "kube-system", SPLIT_DS, "--ignore-not-found")
        kubectl("delete", "node", NODE, "--wait=false", "--ignore-not-found")


def verify(kubectl, stock):
    """verify.yml over the test's one node: its verdict (OK, DRIFT or FAIL)."""
    run_playbook(kubectl, "verify.yml", stock["inventory"], check=False)
    report = json.loads((stock["tmp"] / "out" / "fleet-report.json").read_text())
    [entry] = report["nodes"]
    return entry["verdict"], entry


def refusal(output: str) -> str:
    """The message of the failed assert in ansible-playbook's output (results printed as YAML, ansible.cfg)."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("fatal: [localhost]: FAILED! =>"):
            block = []
            for follow in lines[i + 1 :]:
                if follow.strip() and not follow.startswith(" "):
                    break
                block.append(follow)
            return yaml.safe_load(textwrap.dedent("\n".join(block)))["msg"]
    raise AssertionError(f"no failed task in:\n{output[-4000:]}")


class Writes:
    """Watch events on the test node, the stock plugin's pods on it and its split DaemonSet, in etcd order.

    The lab's apiserver has one etcd, so resourceVersions are etcd revisions: one number line for
    every object, whichever watch delivered the event (DELETED events carry the deletion's revision).
    """

    def __init__(self, core_api, apps_api, since: str):
        from kubernetes import watch

        self.events: list[tuple[int, str, str, dict]] = []
        self.stop = threading.Event()
        sources = [
            ("node", core_api.list_node, {"field_selector": f"metadata.name={NODE}"}),
            (
                "stock-pod",
                core_api.list_namespaced_pod,
                {"namespace": NS, "field_selector": f"spec.nodeName={NODE}"},
            ),
            (
                "split-ds",
                apps_api.list_namespaced_daemon_set,
                {"namespace": "kube-system", "field_selector": f"metadata.name={SPLIT_DS}"},
            ),
        ]
        self.sources = sources
        self.last = dict.fromkeys((source[0] for source in sources), since)
        self.threads = [
            threading.Thread(target=self._watch, args=(watch, what, fn, kw), daemon=True)
            for what, fn, kw in sources
        ]
        for t in self.threads:
            t.start()

    def _stream(self, watch, what, fn, kwargs, timeout):
        for event in watch.Watch().stream(
            fn, resource_version=self.last[what], timeout_seconds=timeout, **kwargs
        ):
            obj = event["raw_object"]
            self.last[what] = obj["metadata"]["resourceVersion"]
            self.events.append((int(self.last[what]), what, event["type"], obj))

    def _watch(self, watch, what, fn, kwargs):
        while not self.stop.is_set():
            try:
                self._stream(watch, what, fn, kwargs, 3)
            except Exception:  # the watch was cut (apiserver restart): go on from the last revision
                self.stop.wait(1)

    def close(self):
        """Every event up to now: the watchers stop, then each one's events since its last revision are read
        once more (a stream that ended just before the stop would otherwise miss the last writes)."""
        from kubernetes import watch

        self.stop.set()
        for t in self.threads:
            t.join(timeout=15)
        for what, fn, kwargs in self.sources:
            self._stream(watch, what, fn, kwargs, 2)
        return sorted(self.events, key=lambda e: e[0])


def test_split_refuses_a_helm_managed_stock_plugin_naming_its_release_and_values(stock, kubectl):
    verdict, entry = verify(kubectl, stock)
    assert verdict != "OK", entry  # control: the stock plugin on the node, no split yet
    before = daemonset(kubectl)
    for extra in ((), ("-e", "gpusplit_stock_plugin_action=exclude")):
        proc = run_playbook(kubectl, "split.yml", stock["inventory"], *extra, check=False)
        assert proc.returncode != 0
        msg = refusal(proc.stdout)
        # the chart's two DaemonSets (the MPS control daemon's selector is on a label gpusplit cannot
        # rule out), one release, one set of values
        assert (
            f"DaemonSet(s) {NS}/{DS}, {NS}/{DS}-mps-control-daemon belong to the Helm release '{RELEASE}' "
            f"in namespace '{NS}'" in msg
        ), msg
        assert msg.count("belong to the Helm release") == 1, msg
        assert "chart nvidia-device-plugin-0.20.0" in msg and msg.endswith("Nothing was changed."), msg
        # the values to add: exactly the chart's terms, each with gpusplit's expression
        snippet = re.search(r"then run this again: (\{.*\}) Split nodes: ", msg).group(1)
        assert yaml.safe_load(snippet) == site_values(), snippet
        stock["snippet"] = snippet
    # nothing was changed: the DaemonSet as it was, the node without gpusplit's labels, no split plugin
    after = daemonset(kubectl)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert "gpusplit" not in {m["manager"] for m in after["metadata"]["managedFields"]}
    labels = kubectl.json("get", "node", NODE)["metadata"]["labels"]
    assert "gpusplit.io/split" not in labels and "gpusplit.io/mode" not in labels, labels
    assert kubectl("get", "daemonset", "-n", "kube-system", SPLIT_DS, check=False).returncode != 0
    assert stock_pods_on_node(kubectl)


def test_with_the_values_the_take_over_is_ordered_and_survives_the_sites_helm_upgrade(
    stock, kubectl, core_api
):
    from kubernetes import client, config

    values = stock["tmp"] / "site-values.yaml"
    values.write_text(stock.get("snippet") or yaml.safe_dump(site_values()))  # the line, pasted as it is
    real_charts.helm("upgrade", RELEASE, str(stock["chart"]), "-n", NS, "-f", str(values))
    found, managers = terms(kubectl)
    assert all(EXCLUDE in t["matchExpressions"] for t in found) and "gpusplit" not in managers
    # the node is not labelled split yet: the stock plugin still runs there (once the upgrade's rollout is done)
    pod = stock_pod_after_rollout(kubectl)

    apps_api = client.AppsV1Api(config.new_client_from_config(str(C.KUBECONFIG)))
    since = core_api.list_node(field_selector=f"metadata.name={NODE}").metadata.resource_version
    writes = Writes(core_api, apps_api, since)
    try:
        proc = run_playbook(kubectl, "split.yml", stock["inventory"])  # refuse (default): no collision left
    finally:
        events = writes.close()
    labelled = [
        rv
        for rv, what, _, obj in events
        if what == "node" and obj["metadata"]["labels"].get("gpusplit.io/split") == "true"
    ]
    pod_events = [
        (rv, kind, obj)
        for rv, what, kind, obj in events
        if what == "stock-pod" and obj["metadata"]["uid"] == pod["metadata"]["uid"]
    ]
    deleting = [rv for rv, _, obj in pod_events if obj["metadata"].get("deletionTimestamp")]
    gone = [rv for rv, kind, _ in pod_events if kind == "DELETED"]
    created = [rv for rv, what, kind, _ in events if what == "split-ds" and kind == "ADDED"]
    assert labelled and deleting and gone and created, [(rv, what, kind) for rv, what, kind, _ in events]
    # the order of the writes: the label, then the stock pod's deletion asked and done, then the split plugin
    assert min(labelled) < min(deleting) <= gone[0] < created[0], [
        (rv, what, kind) for rv, what, kind, _ in events
    ]
    assert (
        "Wait until no device plugin that gpusplit does not own has a pod left on a split node" in proc.stdout
    )

    verdict, entry = verify(kubectl, stock)
    assert verdict == "OK", entry

    revision = int(real_charts.releases(NS)[0]["revision"])
    real_charts.helm("upgrade", RELEASE, str(stock["chart"]), "-n", NS, "-f", str(values))
    assert int(real_charts.releases(NS)[0]["revision"]) == revision + 1
    found, _ = terms(kubectl)
    assert all(EXCLUDE in t["matchExpressions"] for t in found)
    assert not stock_pods_on_node(kubectl)
    verdict, entry = verify(kubectl, stock)
    assert verdict == "OK", entry
