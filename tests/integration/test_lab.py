"""The lab control plane itself: health, static-pod restarts, crash reports, the simulated plugin."""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from lab import components as C
from lab import lab as labctl

GPU = "nvidia.com/gpu"


def _listening_addresses(pid: int) -> set[str]:
    """Local addresses of LISTEN sockets owned by pid, from /proc (no extra tools needed)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            parts = line.split()
            if parts[3] == "0A" and parts[9] in inodes:  # 0A = LISTEN
                hex_ip = parts[1].split(":")[0]
                found.add(hex_ip)
    return found


def test_all_components_healthy_and_loopback_only(lab):
    health = labctl.health()
    assert all(v["healthy"] for v in health.values()), health
    state = labctl.read_state()
    loopback_v4 = "0100007F"  # 127.0.0.1 as /proc/net/tcp writes it
    for name in ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"):
        addrs = _listening_addresses(state[name]["pid"])
        assert addrs, name
        assert addrs <= {loopback_v4}, (name, addrs)


def test_up_twice_is_harmless(lab):
    before = labctl.supervisor_pid()
    pids = {k: v["pid"] for k, v in labctl.read_state().items()}
    assert labctl.up(timeout=60) == 0
    assert labctl.supervisor_pid() == before
    assert {k: v["pid"] for k, v in labctl.read_state().items()} == pids


def _wait(predicate, timeout=90, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _edit_scheduler(extra: list[str]) -> str:
    path = C.MANIFESTS / "kube-scheduler.yaml"
    original = path.read_text()
    doc = yaml.safe_load(original)
    doc["spec"]["containers"][0]["command"] += extra
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return original


def test_manifest_change_restarts_the_component(lab):
    before = labctl.read_state()["kube-scheduler"]
    original = _edit_scheduler(["--v=1"])
    try:
        after = _wait(
            lambda: (s := labctl.read_state()["kube-scheduler"])["generation"] > before["generation"] and s,
            what="scheduler restart",
        )
        assert after["pid"] != before["pid"]
        _wait(lambda: labctl.health()["kube-scheduler"]["healthy"], what="scheduler health")
    finally:
        (C.MANIFESTS / "kube-scheduler.yaml").write_text(original)
    _wait(lambda: labctl.health()["kube-scheduler"]["healthy"], what="scheduler health after restore")


def test_crashed_component_is_reported_with_its_log_tail(lab):
    original = _edit_scheduler(["--feature-gates=NoSuchGateForTheLab=true"])
    try:
        _wait(lambda: labctl.read_state()["kube-scheduler"]["restarts"] >= 1, what="scheduler crash")
        report = labctl.report_unhealthy(labctl.health())
        assert "kube-scheduler: not healthy" in report
        assert "NoSuchGateForTheLab" in report  # the component's own error, from its log
    finally:
        (C.MANIFESTS / "kube-scheduler.yaml").write_text(original)
    _wait(lambda: labctl.health()["kube-scheduler"]["healthy"], timeout=120, what="scheduler recovery")


def _plugin_ds(name: str, node: str, visible: str | None, privileged: bool = False) -> str:
    container = {"name": "plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"}
    if visible is not None:
        container["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": visible}]
    if privileged:
        container["securityContext"] = {"privileged": True}
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [container]},
                },
            },
        }
    )


def test_simulated_device_plugin_advertises_what_the_runtime_would_show(lab, kubectl, core_api):
    from lab import deviceplugin, nodes

    node = "lab-sim-probe"
    nodes.ensure_node(core_api, node, "dgx-h100")
    uuids = [g["uuid"] for g in deviceplugin.fixture_gpus("dgx-h100")]

    def advertised():
        return kubectl.json("get", "node", node)["status"]["allocatable"].get(GPU)

    try:
        kubectl("apply", "-f", "-", stdin=_plugin_ds("sim-probe", node, ",".join(uuids[:3])))
        kubectl.wait_for(lambda: advertised() == "3", what="3 GPUs advertised")
        kubectl("apply", "-f", "-", stdin=_plugin_ds("sim-probe", node, ",".join(uuids[:3]), privileged=True))
        kubectl.wait_for(lambda: advertised() == str(len(uuids)), what="privileged plugin sees all")
        kubectl("delete", "daemonset", "sim-probe", "-n", "default")
        kubectl.wait_for(lambda: advertised() == "0", what="nothing advertised without a plugin")
    finally:
        kubectl("delete", "daemonset", "sim-probe", "-n", "default", "--ignore-not-found")
        kubectl("delete", "node", node, "--ignore-not-found")


def test_zz_down_stops_exactly_the_lab_and_up_again(lab):
    state = labctl.read_state()
    pids = [v["pid"] for v in state.values() if v.get("pid")]
    assert labctl.down() == 0
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    assert labctl.supervisor_pid() is None
    assert labctl.up(timeout=180) == 0
