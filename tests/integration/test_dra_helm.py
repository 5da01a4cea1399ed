"""playbooks/dra.yml installs the real dra-driver-nvidia-gpu chart on the lab, from a local chart.

The chart is the upstream chart folder, whole (../shared/reference/charts/dra-driver-nvidia-gpu,
chart 0.4.1; GPUSPLIT_REFERENCE_DIR moves it), given to the role as ``gpusplit_dra_chart_path``
as an air-gapped site gives it: no registry is reachable here. What is real: helm 4 and the chart
(its templates/validation.yaml, its DeviceClasses, its kubelet-plugin DaemonSet), the API server,
the DaemonSet controller and the scheduler; the driver's pods are kwok's simulated pods and its
ResourceSlices the lab harness's (tests/integration/dra_harness.py).

Proven: what the chart refuses and a chart of another name are refused before the host share is
tainted; --check installs nothing; the install is accepted by the chart and its DeviceClasses are
the chart's; a re-run writes nothing (no resourceVersion moves); a site's own ``helm upgrade``
with the same values and a re-run from the packaged .tgz leave nothing for gpusplit to change.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from types import SimpleNamespace

import dra_harness as harness
import pytest
import yaml
from ansible_output import recap
from real_charts import CHARTS, KUBECONFIG, chart, helm, releases, uninstall
from test_dra_lab import run_playbook, write_inventory

CHART = CHARTS / "dra-driver-nvidia-gpu"
NODE = "gsdrh-dgx-01"
RULES = "resource.k8s.io/v1"
RELEASE = "dra-driver-nvidia-gpu"


def our_rules():
    client = harness.dynamic()
    res = client.resources.get(api_version=RULES, kind="DeviceTaintRule")
    items = harness.retry(lambda: client.get(res).to_dict()["items"])
    return {r["metadata"]["name"]: r for r in items if r["spec"]["deviceSelector"].get("pool") == NODE}


@pytest.fixture(scope="module")
def ctx(lab, tmp_path_factory):
    chart(CHART.name)
    base = tmp_path_factory.mktemp("drahelm")
    hosts = {
        NODE: {
            "gpusplit_lab_fixture": "dgx-h100",
            "gpusplit_mode": "dra",
            "gpusplit_split": {"host_count": 2},
        }
    }
    c = SimpleNamespace(
        ns=f"gsdrh-{uuid.uuid4().hex[:6]}", inventory=write_inventory(base / "inventory", hosts)
    )
    c.out, c.base = base / "out", base
    harness.publish(NODE, "dgx-h100")
    harness.write_host_file(NODE, "/etc/containerd/config.toml", harness.CONTAINERD_2_CONFIG)
    yield c
    uninstall(RELEASE, c.ns)
    harness.delete("v1", "Namespace", c.ns)
    for name in our_rules():
        harness.delete(RULES, "DeviceTaintRule", name)
    harness.unpublish(NODE)
    harness.delete("v1", "Node", NODE)


def dra(ctx, *extra, chart=CHART, settings=None, check=True):
    args = ["-e", f"gpusplit_dra_chart_path={chart}", "-e", f"gpusplit_dra_namespace={ctx.ns}"]
    args += ["-e", json.dumps({"gpusplit_dra_driver_settings": settings or {}})]
    return run_playbook(ctx, "dra.yml", *args, *extra, check=check)


def resource_versions(ctx):
    """resourceVersion of every object of the release and of gpusplit's rules; gpusplit's writes to the node."""
    manifest = ctx.base / "manifest.yaml"
    manifest.write_text(helm("get", "manifest", RELEASE, "-n", ctx.ns))
    out = subprocess.run(
        ["kubectl", "--kubeconfig", KUBECONFIG, "get", "-f", str(manifest), "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    items = json.loads(out)["items"]
    objs = {f"{o['kind']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"] for o in items}
    objs.update({f"DeviceTaintRule/{n}": r["metadata"]["resourceVersion"] for n, r in our_rules().items()})
    # the node's status moves with kwok's heartbeats: gpusplit's own writes are its managedFields entries
    fields = harness.get("v1", "Node", NODE)["metadata"]["managedFields"]
    objs[f"Node/{NODE}"] = sorted(
        json.dumps(f, sort_keys=True) for f in fields if f["manager"].startswith("gpusplit")
    )
    assert objs[f"Node/{NODE}"], fields
    return objs


def test_refusals_come_before_the_host_share_is_tainted(ctx):
    refused = dra(ctx, settings={"extra_values": {"gpuResourcesEnabledOverride": False}}, check=False)
    said = " ".join(refused.stdout.split())
    assert refused.returncode != 0
    assert "the dra-driver-nvidia-gpu chart would refuse these values: resources.gpus.enabled is true" in said
    other = dra(ctx, chart=CHARTS / "nvidia-device-plugin", check=False)
    said = " ".join(other.stdout.split())
    assert other.returncode != 0
    assert (
        f"the local chart {CHARTS / 'nvidia-device-plugin'} is nvidia-device-plugin 0.20.0, "
        "but gpusplit was built for dra-driver-nvidia-gpu 0.4.1"
    ) in said
    assert our_rules() == {} and releases(ctx.ns) == []  # nothing was changed


def test_dra_playbook_installs_the_real_chart_and_a_rerun_writes_nothing(ctx):
    checked = dra(ctx, "--check", "--diff")
    assert f"helm release {ctx.ns}/{RELEASE}: install (the release is not installed)" in " ".join(
        checked.stdout.split()
    )
    assert releases(ctx.ns) == []

    proc = dra(ctx)  # the chart's templates/validation.yaml accepts gpusplit's values, or helm fails here
    assert f"helm release {ctx.ns}/{RELEASE}: install" in " ".join(proc.stdout.split())
    [release] = releases(ctx.ns)
    assert release["chart"] == "dra-driver-nvidia-gpu-0.4.1" and release["status"] == "deployed"
    # the DeviceClasses are the chart's, owned by the release
    for name in ("gpu.nvidia.com", "mig.nvidia.com"):
        dc = harness.get(RULES, "DeviceClass", name)
        assert dc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm", dc["metadata"]
        assert dc["metadata"]["annotations"]["meta.helm.sh/release-namespace"] == ctx.ns
    assert (
        harness.get(RULES, "DeviceClass", "gpu.nvidia.com")["spec"]["extendedResourceName"]
        == "nvidia.com/gpu"
    )
    # its kubelet plugin targets the node in mode dra, and only that one
    ds = harness.get("apps/v1", "DaemonSet", f"{RELEASE}-kubelet-plugin", ctx.ns)
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {"gpusplit.io/mode": "dra"}
    assert harness.get("v1", "Node", NODE)["metadata"]["labels"]["gpusplit.io/mode"] == "dra"
    assert len(our_rules()) == 2  # the host share of 2 GPUs, tainted
    before = resource_versions(ctx)

    again = dra(ctx)
    assert recap(again.stdout)["localhost"]["changed"] == 0, again.stdout[-4000:]
    assert "(chart, version and values as wanted)" in " ".join(again.stdout.split())
    assert resource_versions(ctx) == before  # no write request reached any of them
    assert releases(ctx.ns)[0]["revision"] == release["revision"]

    # the site's own pipeline upgrades the release with the values gpusplit wrote ...
    helm(
        "upgrade",
        RELEASE,
        str(CHART),
        "-n",
        ctx.ns,
        "--reset-values",
        "-f",
        str(ctx.out / "dra-driver-values.yaml"),
    )
    assert int(releases(ctx.ns)[0]["revision"]) == int(release["revision"]) + 1
    # ... and gpusplit, now given the packaged chart, finds nothing to change
    package = ctx.base / "pkg"
    helm("package", str(CHART), "-d", str(package))
    [tgz] = package.glob("*.tgz")
    assert tgz.name == "dra-driver-nvidia-gpu-0.4.1.tgz"
    after = dra(ctx, chart=tgz)
    assert recap(after.stdout)["localhost"]["changed"] == 0, after.stdout[-4000:]
    values = yaml.safe_load(helm("get", "values", RELEASE, "-n", ctx.ns, "-o", "yaml"))
    assert values["gpuResourcesEnabledOverride"] is True and values["kubeletPlugin"]["nodeSelector"] == {
        "gpusplit.io/mode": "dra"
    }
