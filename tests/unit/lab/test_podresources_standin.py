"""The lab's stand-in for the kubelet's device manager (lab/podresources.py): which pod gets which
device, what it keeps, and the List answer it serves (no cluster needed)."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._kubelet import pod_resources as pr
from lab import deviceplugin as dp
from lab import podresources as ps

DGX = dp.fixture_gpus("dgx-h100")
UUIDS = [g["uuid"] for g in sorted(DGX, key=lambda g: g["index"])]
A100 = dp.fixture_gpus("a100-mig")


def gpu_pod(
    name, uid, gpus=1, created="2026-01-01T00:00:00Z", resource="nvidia.com/gpu", phase="Running", **extra
):
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": uid, "creationTimestamp": created},
        "spec": {
            "nodeName": "node-a",
            "containers": [
                {"name": "main", "resources": {"limits": {resource: str(gpus)}}},
                {"name": "log", "resources": {"requests": {"cpu": "1"}}},
            ],
            **extra,
        },
        "status": {"phase": phase},
    }


def held(checkpoint):
    return {entry["name"]: entry["containers"]["main"] for entry in checkpoint.values()}


def test_ids_are_what_the_plugin_advertises_in_index_order():
    container = {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": ",".join(reversed(UUIDS[2:]))}]}
    ids = dp.advertised_ids(dp.visible_gpus(DGX, container), dp.mig_strategy(container))
    assert ids == {"nvidia.com/gpu": UUIDS[2:]}
    mixed = {"env": [{"name": "MIG_STRATEGY", "value": "mixed"}]}
    mig = dp.advertised_ids(dp.visible_gpus(A100, mixed), "mixed")
    assert mig["nvidia.com/mig-1g.10gb"] == [
        m["uuid"] for m in A100[1]["mig_devices"] if m["profile"] == "1g.10gb"
    ]
    assert all(i.startswith("MIG-") for i in mig["nvidia.com/mig-3g.40gb"])
    assert dp.advertised(dp.visible_gpus(A100, mixed), "mixed") == {k: len(v) for k, v in mig.items()}


def test_first_free_in_index_order_and_kept_while_the_pod_lives():
    available = {"nvidia.com/gpu": UUIDS[2:]}
    first = gpu_pod("a", "uid-a", 2, created="2026-01-01T00:00:00Z")
    second = gpu_pod("b", "uid-b", 1, created="2026-01-01T00:00:01Z")
    checkpoint = ps.allocate({}, ps.live_pods([second, first], "node-a"), available)
    assert held(checkpoint) == {"a": {"nvidia.com/gpu": UUIDS[2:4]}, "b": {"nvidia.com/gpu": [UUIDS[4]]}}
    assert "log" not in checkpoint["uid-a"]["containers"]
    # the plugin stops advertising pod a's GPUs (they moved to the host): a keeps them, as a kubelet does
    again = ps.allocate(checkpoint, [first, second], {"nvidia.com/gpu": UUIDS[4:]})
    assert again == checkpoint
    # a new pod gets the first id nobody holds, even with fewer advertised
    third = gpu_pod("c", "uid-c", 1, created="2026-01-01T00:00:02Z")
    after = ps.allocate(again, [first, second, third], {"nvidia.com/gpu": UUIDS[4:]})
    assert held(after)["c"] == {"nvidia.com/gpu": [UUIDS[5]]}


def test_freed_when_the_pod_is_gone_or_terminated():
    available = {"nvidia.com/gpu": UUIDS[:2]}
    a, b = gpu_pod("a", "uid-a", 2), gpu_pod("b", "uid-b", 1, created="2026-01-02T00:00:00Z")
    checkpoint = ps.allocate({}, [a, b], available)
    assert held(checkpoint) == {"a": {"nvidia.com/gpu": UUIDS[:2]}}  # b waits: nothing free
    done = dict(a, status={"phase": "Succeeded"})
    live = ps.live_pods([done, b], "node-a")
    assert [p["metadata"]["name"] for p in live] == ["b"]
    checkpoint = ps.allocate(checkpoint, live, available)
    assert held(checkpoint) == {"b": {"nvidia.com/gpu": [UUIDS[0]]}}
    assert ps.allocate(checkpoint, [], available) == {}


def test_mig_resources_and_requests_without_limits():
    pod = gpu_pod("m", "uid-m", 2, resource="nvidia.com/mig-1g.10gb")
    ids = ["MIG-1", "MIG-2", "MIG-3"]
    checkpoint = ps.allocate({}, [pod], {"nvidia.com/mig-1g.10gb": ids})
    assert held(checkpoint) == {"m": {"nvidia.com/mig-1g.10gb": ids[:2]}}
    assert ps.gpu_requests({"resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "2"}}}) == {
        "nvidia.com/gpu": 1
    }
    assert ps.gpu_requests({"resources": {"limits": {"example.com/fpga": "1"}}}) == {}
    # the device plugin's time-sliced resource renamed by renameByDefault is a GPU resource too
    assert ps.gpu_requests({"resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}) == {
        "nvidia.com/gpu.shared": 1
    }


def test_the_answer_round_trips_through_the_collections_client_decoder():
    pods = [gpu_pod("a", "uid-a", 2), gpu_pod("idle", "uid-i", 0)]
    checkpoint = ps.allocate({}, pods, {"nvidia.com/gpu": UUIDS[3:]})
    numa = ps.numa_of(DGX)
    answer = ps.answer(pods, checkpoint, {}, numa)
    # one ContainerDevices per device with its NUMA node, as the kubelet sends them
    assert answer[0]["containers"] == [
        {
            "name": "main",
            "devices": [
                {"resource_name": "nvidia.com/gpu", "device_ids": [UUIDS[3]], "numa_nodes": [numa[UUIDS[3]]]},
                {"resource_name": "nvidia.com/gpu", "device_ids": [UUIDS[4]], "numa_nodes": [numa[UUIDS[4]]]},
            ],
            "dynamic_resources": [],
        },
        {"name": "log", "devices": [], "dynamic_resources": []},
    ]
    assert answer[1]["containers"][0]["devices"] == []
    # the client merges them by resource name
    decoded = pr.decode_list_response(ps.encode_list_response(answer))
    assert decoded[0]["containers"][0]["devices"] == [
        {
            "resource_name": "nvidia.com/gpu",
            "device_ids": UUIDS[3:5],
            "numa_nodes": sorted({numa[UUIDS[3]], numa[UUIDS[4]]}),
        }
    ]
    assert [p["name"] for p in decoded] == ["a", "idle"]


def claim(name, uid, results, reserved=True):
    return {
        "metadata": {"name": name, "namespace": "ml"},
        "status": {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": "a", "uid": uid}] if reserved else [],
        },
    }


def test_claims_reserved_for_the_pod_name_their_devices():
    results = [
        {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-3"},
        {"request": "nic", "driver": "nic.example.com", "pool": "node-a", "device": "eth1"},
    ]
    pod = gpu_pod(
        "a",
        "uid-a",
        0,
        resourceClaims=[
            {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
            {"name": "other", "resourceClaimName": "shared"},
        ],
    )
    pod["spec"]["containers"][0]["resources"]["claims"] = [
        {"name": "gpu", "request": "gpus"},
        {"name": "other"},
    ]
    pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "a-gpu-x7k2p"}]
    claims = {
        ("ml", "a-gpu-x7k2p"): claim("a-gpu-x7k2p", "uid-a", results),
        ("ml", "shared"): claim("shared", "uid-a", results[:1], reserved=False),
    }
    got = ps.claim_devices(pod, pod["spec"]["containers"][0], claims)
    assert got == [
        {
            "claim_name": "a-gpu-x7k2p",
            "claim_namespace": "ml",
            "devices": [{"driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-3", "cdi_devices": []}],
        }
    ]
    holders = pr.holders(pr.decode_list_response(ps.encode_list_response(ps.answer([pod], {}, claims))))
    assert [(h["claim_name"], h["device"], h["resource_name"]) for h in holders] == [
        ("a-gpu-x7k2p", "gpu-3", None)
    ]


def test_the_checkpoint_survives_a_restart(tmp_path):
    path = tmp_path / "node-a" / ps.CHECKPOINT
    assert ps.load_checkpoint(path) == {}
    checkpoint = ps.allocate({}, [gpu_pod("a", "uid-a", 1)], {"nvidia.com/gpu": UUIDS})
    ps.save_checkpoint(path, "node-a", checkpoint)
    assert ps.load_checkpoint(path) == checkpoint
    path.write_text("{not json")
    assert ps.load_checkpoint(path) == {}


@pytest.mark.parametrize("long_path", [False, True])
def test_served_on_the_nodes_socket_and_removed(tmp_path, long_path):
    hosts = tmp_path / ("h" * 80 if long_path else "hosts")
    path = ps.socket_path("node-a", hosts)
    pods = ps.answer(
        [gpu_pod("a", "uid-a", 1)], ps.allocate({}, [gpu_pod("a", "uid-a", 1)], {"nvidia.com/gpu": UUIDS}), {}
    )
    server = ps.serve(path, lambda: pods)
    try:
        got = pr.read_pod_resources(str(path))
        assert [h["device_id"] for h in got["holders"]] == [UUIDS[0]]
    finally:
        server.stop(0)
    assert ps.remove_sockets(hosts) in ([path], [])
    assert not path.exists()
