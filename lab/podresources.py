"""A stand-in for the kubelet's device manager and its pod-resources API on the lab's GPU nodes.

On a real node the kubelet gives each container that asks for `nvidia.com/gpu` (or a MIG resource)
that many of the device ids its device plugin advertises, keeps the assignment in a checkpoint
(`/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint`) for as long as the pod lives, even
when the plugin later stops advertising the device, and answers `v1.PodResourcesLister/List` on
`/var/lib/kubelet/pod-resources/kubelet.sock`. kwok plays the rest of the kubelet in the lab and does
none of this, so this module does, for every node labelled gpusplit.io/lab-fixture:

* the advertised devices are what lab.deviceplugin says the node's running plugin registers (the
  same visibility and MIG rules): GPU UUIDs for `nvidia.com/gpu`, MIG UUIDs for MIG resources;
* every pod bound to the node (spec.nodeName) that is not Succeeded or Failed gets, per container,
  the first free advertised ids in GPU index order for each GPU resource in its limits (or
  requests), once; a pod whose ids are not all free yet is tried again on the next tick (the real
  kubelet would refuse it at admission); init containers are not given devices;
* the assignment is kept while the pod object exists (a terminating pod keeps its devices) and is
  freed when the pod is gone or has terminated; it is written per node to
  `<host root>/var/lib/kubelet/device-plugins/gpusplit-lab-checkpoint.json` so that a restart of the
  lab's supervisor keeps it;
* a real gRPC server (grpcio) per node answers `List` on
  `<host root>/var/lib/kubelet/pod-resources/kubelet.sock` (the host root is `.lab/hosts/<node>`, the
  lab inventory's `gpusplit_host_root`) with that node's pods only and their devices (one
  ContainerDevices per device, with its GPU's NUMA node, as the kubelet sends them), and the devices
  of the allocated ResourceClaims reserved for them (`dynamic_resources`).

The answer's protobuf is written here by hand (`encode_list_response`); the unit tests of the
collection's client reuse it.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from lab import deviceplugin as dp
from lab.nodes import HOSTS_ROOT

SOCKET = Path("var/lib/kubelet/pod-resources/kubelet.sock")
CHECKPOINT = Path("var/lib/kubelet/device-plugins/gpusplit-lab-checkpoint.json")
SERVICE = "v1.PodResourcesLister"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
GONE_PHASES = ("Succeeded", "Failed")
SUN_PATH_MAX = 107


# --------------------------------------------------------------------------- protobuf encoding
# Field numbers of staging/src/k8s.io/kubelet/pkg/apis/podresources/v1/api.proto (see
# plugins/module_utils/_kubelet/pod_resources.py for the messages).


def varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def field_bytes(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def field_string(number: int, value: str) -> bytes:
    return field_bytes(number, value.encode()) if value else b""


def field_varint(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value) if value else b""


def encode_devices(devices: dict) -> bytes:
    topology = b"".join(field_bytes(1, field_varint(1, n)) for n in devices.get("numa_nodes") or [])
    return (
        field_string(1, devices["resource_name"])
        + b"".join(field_bytes(2, d.encode()) for d in devices.get("device_ids") or [])
        + (field_bytes(3, topology) if topology else b"")
    )


def encode_claim_device(device: dict) -> bytes:
    return (
        b"".join(field_bytes(1, field_string(1, c)) for c in device.get("cdi_devices") or [])
        + field_string(2, device.get("driver", ""))
        + field_string(3, device.get("pool", ""))
        + field_string(4, device.get("device", ""))
    )


def encode_dynamic(claim: dict) -> bytes:
    return (
        field_string(2, claim.get("claim_name", ""))
        + field_string(3, claim.get("claim_namespace", ""))
        + b"".join(field_bytes(4, encode_claim_device(d)) for d in claim.get("devices") or [])
    )


def encode_container(container: dict) -> bytes:
    return (
        field_string(1, container["name"])
        + b"".join(field_bytes(2, encode_devices(d)) for d in container.get("devices") or [])
        + b"".join(field_bytes(5, encode_dynamic(c)) for c in container.get("dynamic_resources") or [])
    )


def encode_pod(pod: dict) -> bytes:
    return (
        field_string(1, pod["name"])
        + field_string(2, pod["namespace"])
        + b"".join(field_bytes(3, encode_container(c)) for c in pod.get("containers") or [])
    )


def encode_list_response(pods: list[dict]) -> bytes:
    """A ListPodResourcesResponse of pods shaped as the module returns them:
    [{namespace, name, containers: [{name, devices: [{resource_name, device_ids, numa_nodes?}],
    dynamic_resources: [{claim_name, claim_namespace, devices: [{driver, pool, device, cdi_devices?}]}]}]}]."""
    return b"".join(field_bytes(1, encode_pod(p)) for p in pods)


# --------------------------------------------------------------------------- the device manager


def is_gpu_resource(name: str) -> bool:
    return name in (GPU_RESOURCE, GPU_RESOURCE + ".shared") or name.startswith(MIG_PREFIX)


def gpu_requests(container: dict) -> dict[str, int]:
    """{resource: count} of the GPU resources a container asks for (limits win over requests)."""
    resources = container.get("resources") or {}
    wanted = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    out = {}
    for name, value in wanted.items():
        if is_gpu_resource(name):
            try:
                count = int(str(value))
            except ValueError:
                continue
            if count > 0:
                out[name] = count
    return out


def live_pods(pods: list[dict], node: str) -> list[dict]:
    """The pods bound to ``node`` that have not terminated, in the order the kubelet admits them."""
    here = [
        p
        for p in pods
        if (p.get("spec") or {}).get("nodeName") == node
        and (p.get("status") or {}).get("phase") not in GONE_PHASES
    ]
    return sorted(here, key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))


def allocate(checkpoint: dict, pods: list[dict], available: dict[str, list[str]]) -> dict:
    """The new checkpoint {pod uid: {namespace, name, containers: {container: {resource: [ids]}}}}.

    Entries of pods no longer in ``pods`` are dropped; a container keeps what it has even when the
    plugin no longer advertises it; a container's resource that has no ids yet gets the first
    free ids of ``available`` (all it asks for, or none)."""
    uids = {p["metadata"]["uid"] for p in pods}
    out = {uid: entry for uid, entry in checkpoint.items() if uid in uids}
    held: dict[str, set] = {}
    for entry in out.values():
        for per_resource in entry["containers"].values():
            for resource, ids in per_resource.items():
                held.setdefault(resource, set()).update(ids)
    for pod in pods:
        meta = pod["metadata"]
        entry = out.get(meta["uid"]) or {
            "namespace": meta["namespace"],
            "name": meta["name"],
            "containers": {},
        }
        for container in pod["spec"].get("containers") or []:
            assigned = entry["containers"].get(container["name"], {})
            for resource, count in sorted(gpu_requests(container).items()):
                if assigned.get(resource):
                    continue
                taken = held.setdefault(resource, set())
                free = [i for i in available.get(resource, []) if i not in taken]
                if len(free) < count:
                    continue  # the real kubelet refuses the pod at admission; try again later
                assigned[resource] = free[:count]
                taken.update(free[:count])
            if assigned:
                entry["containers"][container["name"]] = assigned
        if entry["containers"]:
            out[meta["uid"]] = entry
    return out


def claim_devices(pod: dict, container: dict, claims: dict) -> list[dict]:
    """The container's dynamic_resources: for each claim it uses, the allocated devices of the
    ResourceClaim when it is reserved for this pod (only its request's, when it names one)."""
    spec_claims = {c["name"]: c for c in (pod["spec"].get("resourceClaims") or [])}
    statuses = {
        c["name"]: c.get("resourceClaimName")
        for c in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    namespace = pod["metadata"]["namespace"]
    out = []
    for ref in (container.get("resources") or {}).get("claims") or []:
        spec = spec_claims.get(ref.get("name"), {})
        claim_name = spec.get("resourceClaimName") or statuses.get(ref.get("name"))
        claim = claims.get((namespace, claim_name))
        if not claim:
            continue
        status = claim.get("status") or {}
        if not any(r.get("uid") == pod["metadata"]["uid"] for r in status.get("reservedFor") or []):
            continue
        request = ref.get("request")
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        devices = [
            {
                "driver": r.get("driver", ""),
                "pool": r.get("pool", ""),
                "device": r.get("device", ""),
                "cdi_devices": [],
            }
            for r in results
            if not request
            or r.get("request") == request
            or str(r.get("request", "")).startswith(f"{request}/")
        ]
        out.append({"claim_name": claim_name, "claim_namespace": namespace, "devices": devices})
    return out


def numa_of(gpus: list[dict]) -> dict[str, int]:
    """device id -> NUMA node, for GPUs and their MIG devices (what the plugin reports as topology)."""
    out = {}
    for g in gpus:
        numa = g.get("numa_node")
        if isinstance(numa, int) and numa >= 0:
            out[g["uuid"]] = numa
            for mig in g.get("mig_devices") or []:
                out[mig.get("uuid")] = numa
    return out


def container_devices(assigned: dict[str, list[str]], numa: dict[str, int]) -> list[dict]:
    """The kubelet's ContainerDevices of one container: one entry per device, with its NUMA node when
    known (pkg/kubelet/cm, containerDevicesFromResourceDeviceInstances)."""
    return [
        {"resource_name": resource, "device_ids": [i], "numa_nodes": [numa[i]] if i in numa else []}
        for resource, ids in sorted(assigned.items())
        for i in ids
    ]


def answer(
    pods: list[dict], checkpoint: dict, claims: dict, numa: dict[str, int] | None = None
) -> list[dict]:
    """The List answer for one node: every live pod, each container's devices and claims' devices."""
    out = []
    for pod in pods:
        entry = checkpoint.get(pod["metadata"]["uid"]) or {"containers": {}}
        containers = []
        for container in pod["spec"].get("containers") or []:
            assigned = entry["containers"].get(container["name"], {})
            containers.append(
                {
                    "name": container["name"],
                    "devices": container_devices(assigned, numa or {}),
                    "dynamic_resources": claim_devices(pod, container, claims),
                }
            )
        out.append(
            {
                "namespace": pod["metadata"]["namespace"],
                "name": pod["metadata"]["name"],
                "containers": containers,
            }
        )
    return out


# --------------------------------------------------------------------------- files and sockets


def host_root(node: str, hosts_root: Path = HOSTS_ROOT) -> Path:
    return hosts_root / node


def socket_path(node: str, hosts_root: Path = HOSTS_ROOT) -> Path:
    return host_root(node, hosts_root) / SOCKET


def load_checkpoint(path: Path) -> dict:
    try:
        return json.loads(path.read_text()).get("pods", {})
    except (OSError, ValueError, AttributeError):
        return {}


def save_checkpoint(path: Path, node: str, pods: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"node": node, "pods": pods}, indent=1, sort_keys=True))
    tmp.replace(path)


@contextlib.contextmanager
def bindable(path: Path):
    """``path`` as grpcio's `unix:` address; a path too long for a unix socket address is reached
    through /proc/self/fd/<fd of its directory> while the directory stays open."""
    if len(os.fsencode(str(path))) <= SUN_PATH_MAX:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def serve(path: Path, answer_of, workers: int = 2):
    """A started grpcio server answering List on the unix socket ``path`` with ``answer_of()`` (pods,
    encoded by encode_list_response). Returns the server; stop it with ``server.stop(0)``."""
    from concurrent import futures

    import grpc

    def list_pods(request, context):
        return answer_of()

    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {"List": grpc.unary_unary_rpc_method_handler(list_pods, response_serializer=encode_list_response)},
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), handlers=[handler])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    with bindable(path) as address:
        if server.add_insecure_port(f"unix:{address}") == 0:
            raise OSError(f"grpcio cannot listen on {path}")
        server.start()
    return server


def remove_sockets(hosts_root: Path = HOSTS_ROOT) -> list[Path]:
    """Remove every lab node's pod-resources socket (after the supervisor stopped)."""
    removed = []
    for path in sorted(hosts_root.glob(f"*/{SOCKET}")):
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    return removed


# --------------------------------------------------------------------------- the simulator


class PodResourcesSimulator(dp.TickedSimulator):
    """Ticked by the lab's supervisor like lab.deviceplugin.DevicePluginSimulator."""

    label = "pod-resources simulator"

    def __init__(self, interval: float = 2.0, hosts_root: Path = HOSTS_ROOT):
        super().__init__(interval)
        self.hosts_root = hosts_root
        self.answers: dict[str, list[dict]] = {}
        self.servers: dict[str, object] = {}

    def claims(self, pods: list[dict]) -> dict:
        """(namespace, name) -> ResourceClaim, only when a pod on a lab node uses claims."""
        if not any((p.get("spec") or {}).get("resourceClaims") for p in pods):
            return {}
        try:
            found = client.CustomObjectsApi(self.api()).list_cluster_custom_object(
                "resource.k8s.io", "v1", "resourceclaims"
            )
        except ApiException:
            return {}
        return {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in found.get("items") or []}

    def sync(self) -> None:
        api = self.api()
        view = dp.cluster_view(api)
        nodes = view["nodes"]
        names = {n["metadata"]["name"] for n in nodes}
        pods = [p for p in view["pods"] if (p.get("spec") or {}).get("nodeName") in names]
        running = dp.running_plugins(api, view)
        claims = self.claims(pods)
        for node in nodes:
            name = node["metadata"]["name"]
            available: dict[str, list[str]] = {}
            plugins = running.get(name, [])
            gpus = dp.node_gpus(node)
            if plugins:
                available = dp.plugin_devices(api, gpus, plugins[-1][1])
            here = live_pods(pods, name)
            path = host_root(name, self.hosts_root) / CHECKPOINT
            before = load_checkpoint(path)
            after = allocate(before, here, available)
            if after != before or not path.exists():
                save_checkpoint(path, name, after)
            self.answers[name] = answer(here, after, claims, numa_of(gpus))
            self.ensure_server(name)
        for gone in sorted(set(self.servers) - names):
            self.stop_server(gone)

    def ensure_server(self, node: str) -> None:
        path = socket_path(node, self.hosts_root)
        if node in self.servers and path.exists():
            return
        if node in self.servers:  # its socket was removed under it: serve it afresh
            self.stop_server(node)
        self.servers[node] = serve(path, lambda: self.answers.get(node, []))

    def stop_server(self, node: str) -> None:
        server = self.servers.pop(node, None)
        if server is not None:
            server.stop(0)
        socket_path(node, self.hosts_root).unlink(missing_ok=True)
        self.answers.pop(node, None)

    def stop(self) -> None:
        for node in sorted(self.servers):
            self.stop_server(node)
