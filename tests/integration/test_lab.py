"""The lab control plane itself: health, static-pod restarts, crash reports, the simulated plugin."""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import time
from datetime import UTC, datetime
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
    # the lab's own loopback address as /proc/net/tcp writes it (127.0.0.1 is 0100007F)
    loopback_v4 = ipaddress.ip_address(C.HOST).packed[::-1].hex().upper()
    assert ipaddress.ip_address(C.HOST).is_loopback, C.HOST
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
    # the restart count lives as long as the supervisor: other tests may have crashed it before
    restarts = labctl.read_state()["kube-scheduler"]["restarts"]
    original = _edit_scheduler(["--feature-gates=NoSuchGateForTheLab=true"])
    try:
        _wait(lambda: labctl.read_state()["kube-scheduler"]["restarts"] > restarts, what="scheduler crash")
        # between two crashes the supervisor may just have started it again: ask until it is down
        report = _wait(
            lambda: (r := labctl.report_unhealthy(labctl.health())) and "NoSuchGateForTheLab" in r and r,
            what="the crash report with the scheduler's own error",
        )
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


# kube-controller-manager's defaults where its flags do not say (Kubernetes 1.37:
# pkg/controller/nodelifecycle/config/v1alpha1/defaults.go and kube-controller-manager --help)
NODE_MONITOR_GRACE_DEFAULT = "50s"
NODE_MONITOR_PERIOD_DEFAULT = "5s"
DEAD_NODE_TAINTS = {"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"}


def _go_seconds(duration: str) -> float:
    """A Go duration as the component flags take it (50s, 1m0s, 500ms) in seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"not a Go duration: {duration!r}")
    return sum(float(n) * units[u] for n, u in parts)


def _controller_manager_flag(name: str, default: str) -> str:
    argv = C.command_from_manifest(C.MANIFESTS / "kube-controller-manager.yaml")
    values = [a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")]
    return values[-1] if values else default


def _node_health(core_api, names: list[str]) -> dict[str, str]:
    """node -> what is wrong with it ("" when Ready and free of the dead-node taints)."""
    found = {}
    for name in names:
        node = core_api.read_node(name)
        ready = [c.status for c in node.status.conditions or [] if c.type == "Ready"]
        taints = sorted(t.key for t in node.spec.taints or [] if t.key in DEAD_NODE_TAINTS)
        problems = []
        if ready != ["True"]:
            problems.append(f"Ready={ready}")
        if taints:
            problems.append(f"taints {taints}")
        found[name] = ", ".join(problems)
    return found


def test_simulated_nodes_stay_alive_past_the_node_monitor_grace_period(lab, core_api):
    """kwok keeps the lab nodes alive: past the controller's grace period none is unreachable."""
    from kubernetes import client

    from lab import nodes

    names = sorted(nodes.lab_hosts())
    assert names, "inventory/lab names no simulated GPU node"
    grace = _go_seconds(_controller_manager_flag("node-monitor-grace-period", NODE_MONITOR_GRACE_DEFAULT))
    period = _go_seconds(_controller_manager_flag("node-monitor-period", NODE_MONITOR_PERIOD_DEFAULT))
    leases = client.CoordinationV1Api(core_api.api_client)

    def renewed() -> dict[str, datetime]:
        return {n: leases.read_namespaced_lease(n, "kube-node-lease").spec.renew_time for n in names}

    before = renewed()
    # A node whose heartbeats stopped before this point is marked unknown (and tainted) by the
    # node lifecycle controller within one grace period plus one monitor period.
    deadline = time.time() + grace + period + 2
    while True:
        health = _node_health(core_api, names)
        assert not any(health.values()), f"lab nodes not alive: { {k: v for k, v in health.items() if v} }"
        if time.time() > deadline:
            break
        time.sleep(5)
    now = datetime.now(UTC)
    for name in names:
        lease = leases.read_namespaced_lease(name, "kube-node-lease")
        renew = lease.spec.renew_time
        assert renew > before[name], f"{name}: its Lease was not renewed in {grace + period:.0f} s"
        age = (now - renew).total_seconds()
        assert age < lease.spec.lease_duration_seconds, (
            f"{name}: Lease renewed {age:.0f} s ago, longer than its {lease.spec.lease_duration_seconds} s"
        )
        node = core_api.read_node(name)
        assert node.status.node_info.kubelet_version == f"v{C.lab_kube_version()}-lab", name


BUILT = {
    "etcd": ("ETCD_VERSION", ["etcd"]),
    "kwok": ("KWOK_VERSION", ["kwok"]),
}
KUBE_BINARIES = ["kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubeadm"]


def kube_built(version: str) -> list:
    """The binaries lab/build.sh builds of a release: kubectl too for every release but the default."""
    extra = ["kubectl"] if C.kubectl_dirs(version) else []
    return [C.kube_bin(version) / b for b in KUBE_BINARIES + extra]


def test_a_second_build_is_cached_and_leaves_the_binaries_alone():
    # the default release always (make test builds it); the other releases of KUBE_VERSIONS where built
    # (make lab-build, make test-matrix)
    default = C.versions()["KUBE_VERSION"]
    missing = labctl.missing_binaries(default)
    assert not missing, f"lab binaries missing ({', '.join(missing)}): run `make lab-build-default`"
    # (a Kubernetes leg of make test builds a release's control plane and kubectl only: not a whole release)
    others = [v for v in C.kube_versions() if v != default]
    releases = [default] + [v for v in others if all(f.exists() for f in kube_built(v))]
    pins = C.versions()
    files = [C.BIN / b for _key, binaries in BUILT.values() for b in binaries]
    files += [f for version in releases for f in kube_built(version)]
    files += [f.with_name(f".{f.name}.version") for f in files]
    before = {str(f): f.stat().st_mtime_ns for f in files}
    runs = [(target, key, None) for target, (key, _binaries) in BUILT.items()]
    runs += [("kube", None, version) for version in releases]
    for target, key, version in runs:
        env = {**os.environ, "K8S": version or ""}
        proc = subprocess.run(
            [str(C.ROOT / "lab" / "build.sh"), target], capture_output=True, text=True, timeout=300, env=env
        )
        assert proc.returncode == 0, proc.stderr
        if version:
            where = C.shown(C.kube_bin(version))
            cached = f"kubernetes v{version} binaries cached ({where})"
        else:
            cached = f"{target} v{pins[key]} cached"
        assert f"[lab-build] {cached}" in proc.stderr.splitlines(), proc.stderr
        assert "building" not in proc.stderr, proc.stderr
        for f in kube_built(version) if version else [C.BIN / b for b in BUILT[target][1]]:
            assert f.with_name(f".{f.name}.version").read_text().strip() == (version or pins[key]), f
    assert {str(f): f.stat().st_mtime_ns for f in files} == before


def test_zz_down_stops_exactly_the_lab_and_up_again(lab):
    state = labctl.read_state()
    pids = [v["pid"] for v in state.values() if v.get("pid")]
    assert labctl.down() == 0
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    assert labctl.supervisor_pid() is None
    assert labctl.up(timeout=180) == 0
