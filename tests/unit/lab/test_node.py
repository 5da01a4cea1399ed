"""The lab's real node (lab/node.py), without starting it: the images it builds, the configuration
it writes for containerd, the CNI plugins and the kubelet, what it says a machine lacks, and its
reading of the CRI's answers."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
import tomllib
from pathlib import Path

import yaml

from lab import components as C
from lab import node


def members(data: bytes) -> dict[str, tarfile.TarInfo | bytes]:
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for info in tar.getmembers():
            out[info.name] = tar.extractfile(info).read() if info.isfile() else info
            if info.isfile():
                out[info.name + "#info"] = info
    return out


def test_an_image_is_an_oci_layout_whose_digests_hold(tmp_path):
    program = tmp_path / "prog"
    program.write_bytes(b"\x7fELF not really")
    archive = node.oci_archive("gpusplit.lab/thing:1", program, ["/thing"])
    assert archive == node.oci_archive("gpusplit.lab/thing:1", program, ["/thing"])  # reproducible
    files = members(archive)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}

    def blob(descriptor):
        data = files["blobs/sha256/" + descriptor["digest"].removeprefix("sha256:")]
        assert "sha256:" + hashlib.sha256(data).hexdigest() == descriptor["digest"]
        assert len(data) == descriptor["size"]
        return data

    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "gpusplit.lab/thing:1"
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == "1"
    assert entry["platform"] == {"architecture": "amd64", "os": "linux"}
    manifest = json.loads(blob(entry))
    config = json.loads(blob(manifest["config"]))
    assert config["config"]["Entrypoint"] == ["/thing"]
    (layer_desc,) = manifest["layers"]
    layer = blob(layer_desc)
    assert config["rootfs"]["diff_ids"] == [layer_desc["digest"]]  # an uncompressed layer
    content = members(layer)
    assert content["thing"] == program.read_bytes()
    assert content["thing#info"].mode == 0o755 and content["thing#info"].uid == 0


def test_containerd_runs_with_the_settings_this_machine_needs():
    conf = tomllib.loads(node.containerd_config())
    assert conf["version"] == 3
    assert conf["root"] == str(node.CONTAINERD_ROOT) and conf["state"] == str(node.CONTAINERD_STATE)
    assert conf["grpc"]["address"] == "/run/containerd/containerd.sock"  # in the node's mount namespace
    assert node.FIXED_PATHS[Path("/run/containerd")] == node.CONTAINERD_STATE
    cri = conf["plugins"]["io.containerd.cri.v1.runtime"]
    assert cri["restrict_oom_score_adj"] is True  # no CAP_SYS_RESOURCE
    assert cri["netns_mounts_under_state_dir"] is True  # every mount under the node's dirs
    runtimes = cri["containerd"]["runtimes"]
    # the NVIDIA runtime is the default, as on a GPU node that NVIDIA's device plugin runs on
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert runtimes["runc"]["options"]["BinaryName"] == str(C.BIN / "runc")
    assert runtimes["nvidia"]["options"]["BinaryName"] == str(C.BIN / "nvidia-container-runtime")
    assert cri["cni"]["bin_dirs"] == [str(node.CNI_BIN)]
    images = conf["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == node.PAUSE_IMAGE
    assert "io.containerd.nri.v1.nri" in conf["disabled_plugins"]


def test_the_kubelet_runs_with_cgroupfs_on_v1_under_its_own_cgroup_root():
    conf = node.kubelet_config()
    assert conf["failCgroupV1"] is False and conf["cgroupDriver"] == "cgroupfs"
    assert conf["cgroupRoot"] == node.CGROUP_ROOT
    assert conf["address"] == C.HOST and conf["healthzBindAddress"] == C.HOST
    assert conf["containerRuntimeEndpoint"] == "unix:///run/containerd/containerd.sock"
    assert conf["localStorageCapacityIsolation"] is False
    argv = node.kubelet_command()
    # its root dir and pod logs as it sees them, in the node's mount namespace: the node's own dirs
    assert "--root-dir=/var/lib/kubelet" in argv and f"--hostname-override={node.NAME}" in argv
    assert node.FIXED_PATHS[Path("/var/lib/kubelet")] == node.KUBELET_DIR
    assert conf["podLogsDir"] == "/var/log/pods" and node.FIXED_PATHS[Path("/var/log/pods")] == node.POD_LOGS
    assert node.DEVICE_PLUGIN_SOCKET == node.KUBELET_DIR / "device-plugins" / "kubelet.sock"
    assert node.POD_RESOURCES_SOCKET == node.KUBELET_DIR / "pod-resources" / "kubelet.sock"


def test_each_lab_gets_its_own_cgroup_root_bridge_and_subnet(monkeypatch):
    seen = set()
    for host, lab in (
        ("127.0.0.1", "/a/.lab"),
        ("127.1.0.1", "/a/.lab/workers/gw1"),
        ("127.0.0.1", "/b/.lab"),
    ):
        monkeypatch.setattr(C, "HOST", host)
        monkeypatch.setattr(C, "LAB", Path(lab))
        seen.add(node.lab_id())
        assert len(f"gsl{node.lab_id()}") <= 15
        assert node.pod_subnet().subnet_of(node.ipaddress.ip_network("10.244.0.0/16"))
    assert len(seen) == 3


def test_the_cni_network_is_a_bridge_with_host_local_addresses_under_the_node():
    conf = node.cni_config()
    (bridge,) = conf["plugins"]
    assert bridge["type"] == "bridge" and bridge["bridge"] == node.BRIDGE and bridge["ipMasq"] is False
    assert bridge["ipam"]["type"] == "host-local"
    assert Path(bridge["ipam"]["dataDir"]).is_relative_to(node.ROOTDIR)
    assert bridge["ipam"]["ranges"] == [
        [{"subnet": str(node.pod_subnet()), "gateway": str(node.pod_subnet()[1])}]
    ]


def test_what_a_machine_lacks_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(C, "BIN", tmp_path)
    monkeypatch.setattr(node, "CNI_BIN", tmp_path / "cni")
    monkeypatch.setattr(node, "IMAGE_PROGRAMS", tmp_path / "images")
    monkeypatch.setattr(C, "lab_kube_version", lambda: C.versions()["KUBE_VERSION"])
    lacking = "\n".join(node.missing())
    for name in ("kubelet", "containerd", "runc", "cni/bridge", "cni/host-local", "images/pause"):
        assert f"{tmp_path}/{name} (run `make lab-build`: lab/build_node.sh)" in lacking, lacking


def test_the_cri_answer_is_read_for_the_sandbox_ids():
    def field(number, payload):
        return bytes([(number << 3) | 2, len(payload)]) + payload

    ids = ["a" * 64, "b" * 64]
    # PodSandbox {id = 1, metadata = 2 {name = 1}, state = 3 (varint)}
    sandboxes = [field(1, i.encode()) + field(2, field(1, b"pod")) + bytes([3 << 3, 1]) for i in ids]
    answer = b"".join(field(1, s) for s in sandboxes)
    got = [
        v.decode()
        for n, w, item in node._fields(answer)
        if n == 1
        for m, _, v in node._fields(item)
        if m == 1
    ]
    assert got == ids
    assert node._string_field(1, ids[0]) == field(1, ids[0].encode())


def test_a_node_that_cannot_start_leaves_its_reason_for_the_tests(monkeypatch, tmp_path):
    monkeypatch.setattr(node, "STATE", tmp_path)
    monkeypatch.setattr(node, "missing", lambda: ["capability CAP_SYS_ADMIN", "the overlay filesystem"])
    monkeypatch.setenv("GPUSPLIT_LAB_REAL_NODE", "1")
    ok, said = node.lab_up()
    assert not ok
    assert said == (
        "the real node lab-node-01 cannot run: this machine lacks: capability CAP_SYS_ADMIN; the overlay filesystem"
    )
    # what the real-node tests fail with (status()['error'])
    assert (
        tmp_path / "error"
    ).read_text() == "this machine lacks: capability CAP_SYS_ADMIN; the overlay filesystem"
    monkeypatch.setenv("GPUSPLIT_LAB_REAL_NODE", "0")
    assert node.lab_up() == (True, "lab-node-01 left out (GPUSPLIT_LAB_REAL_NODE=0)")


def test_the_plugin_image_holds_the_node_fixture_and_the_program(tmp_path):
    program, files = node.IMAGES[node.DEVICE_PLUGIN_IMAGE][0], node.IMAGES[node.DEVICE_PLUGIN_IMAGE][2]
    assert program == "device-plugin" and "k8s-device-plugin" in node.DEVICE_PLUGIN_IMAGE
    assert not node.DEVICE_PLUGIN_IMAGE.startswith("nvcr.io/")  # never named as NVIDIA's
    binary = tmp_path / "device-plugin"
    binary.write_bytes(b"\x7fELF not really")
    archive = members(node.oci_archive(node.DEVICE_PLUGIN_IMAGE, binary, ["/device-plugin"], files))
    (entry,) = json.loads(archive["index.json"])["manifests"]
    manifest = json.loads(archive["blobs/sha256/" + entry["digest"].removeprefix("sha256:")])
    (layer,) = manifest["layers"]
    content = members(archive["blobs/sha256/" + layer["digest"].removeprefix("sha256:")])
    assert content[node.PLUGIN_FIXTURE_PATH.lstrip("/")] == node.NODE_FIXTURE.read_bytes()
    assert content["device-plugin"] == binary.read_bytes()


def test_the_nvidia_container_cli_makes_the_selected_gpus_device_nodes(monkeypatch, tmp_path):
    """The node's nvidia-container-cli: the stand-in records the call, then each selected GPU's device
    node (major 195, its fixture minor) is made in the container's /dev, in its mount namespace."""
    monkeypatch.setattr(node, "STATE", tmp_path)
    monkeypatch.setattr(node, "CLI_WRAPPER", tmp_path / "nvidia-container-cli")
    monkeypatch.setattr(node, "HOOK_WRAPPER", tmp_path / "hook")
    monkeypatch.setattr(node, "CLI_RECORD", tmp_path / "calls.jsonl")
    node.write_wrappers()
    # its own nsenter and sh record what would run in the container's namespace
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    (fakes / "nsenter").write_text('#!/bin/sh\nprintf "%s\\n" "$*" >> "$(dirname "$0")/nsenter.log"\n')
    (fakes / "nsenter").chmod(0o755)
    gpus = json.loads(node.NODE_FIXTURE.read_text())["gpus"]
    rootfs = tmp_path / "rootfs"
    proc = subprocess.run(
        [str(node.CLI_WRAPPER), "configure", f"--device={gpus[1]['uuid']}", "--pid=4242", str(rootfs)],
        capture_output=True,
        text=True,
        env={"PATH": f"{fakes}:/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    (call,) = [json.loads(x) for x in node.CLI_RECORD.read_text().splitlines()]
    assert call["devices"] == [gpus[1]["uuid"]] and call["rootfs"] == str(rootfs)
    (made,) = (fakes / "nsenter.log").read_text().splitlines()
    assert made.startswith("--mount=/proc/4242/ns/mnt -- sh -c ")
    assert made.endswith(f"mknod {rootfs}/dev/nvidia{gpus[1]['minor_number']} 195 {gpus[1]['minor_number']}")
    # an unknown device: the stand-in's error, nothing made
    proc = subprocess.run(
        [str(node.CLI_WRAPPER), "configure", "--device=GPU-nope", "--pid=4242", str(rootfs)],
        capture_output=True,
        text=True,
        env={"PATH": f"{fakes}:/usr/bin:/bin"},
    )
    assert proc.returncode == 1 and "unknown device" in proc.stderr
    assert len((fakes / "nsenter.log").read_text().splitlines()) == 1


def test_the_node_inventory_puts_it_among_the_gpu_nodes_with_its_host_vars():
    assert node.inventory() == {"all": {"children": {"gpu_nodes": {"hosts": {node.NAME: None}}}}}
    host_vars = yaml.safe_load((C.ROOT / "inventory" / "lab" / "host_vars" / f"{node.NAME}.yml").read_text())
    assert host_vars["gpusplit_lab_fixture"] == node.NODE_FIXTURE.stem
    assert host_vars["gpusplit_mode"] == "device_plugin"
    # not a host of hosts.yml: the kwok fleet's runs see the inventory they always saw
    assert node.NAME not in (C.ROOT / "inventory" / "lab" / "hosts.yml").read_text()
