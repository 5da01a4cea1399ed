# Copyright: gpusplit contributors
# Apache-2.0
"""Who holds each GPU of a node: the kubelet's pod-resources API. Private to the collection.

The kubelet serves ``v1.PodResourcesLister`` on the unix socket
``/var/lib/kubelet/pod-resources/kubelet.sock``; ``List`` answers, for every pod it runs, each
container's devices by resource name (what device plugins allocated) and, for DRA, each claim's
devices (driver, pool, device). It is the authority on which pod holds a GPU: a pod keeps a device
after its plugin stops advertising it.

The call goes through ``grpc_unix.call`` (HTTP/2 over the unix socket, standard library only)
and the answer is decoded here by hand, field numbers from the kubelet's own
``staging/src/k8s.io/kubelet/pkg/apis/podresources/v1/api.proto`` (Kubernetes 1.31 and later):

    ListPodResourcesResponse { repeated PodResources pod_resources = 1; }
    PodResources { string name = 1; string namespace = 2; repeated ContainerResources containers = 3; }
    ContainerResources { string name = 1; repeated ContainerDevices devices = 2; repeated int64 cpu_ids = 3;
                         repeated ContainerMemory memory = 4; repeated DynamicResource dynamic_resources = 5; }
    ContainerDevices { string resource_name = 1; repeated string device_ids = 2; TopologyInfo topology = 3; }
    TopologyInfo { repeated NUMANode nodes = 1; }    NUMANode { int64 ID = 1; }
    DynamicResource { string claim_name = 2; string claim_namespace = 3; repeated ClaimResource claim_resources = 4; }
    ClaimResource { repeated CDIDevice cdi_devices = 1; string driver_name = 2; string pool_name = 3;
                    string device_name = 4; }
    CDIDevice { string name = 1; }

Fields not listed (CPU ids, memory, fields of later releases, groups) are skipped, as protobuf readers do;
what protobuf's own reader refuses is refused here too (a string that is not UTF-8, a tag beyond 32 bits,
field number 0, a varint of more than 10 octets, a group that does not end), and a varint is cut to 64 bits
as protobuf cuts it (tests/unit/plugins/module_utils/_kubelet/test_pod_resources_differential.py compares
the two). The answer's size is bounded by the gRPC client (grpc_unix.MAX_ANSWER); what it may list is
bounded here, each limit named when it is passed: MAX_PODS pods, MAX_DEVICES device ids and claim
devices, MAX_FIELDS protobuf fields in all (an answer of millions of empty entries is refused early,
rather than ending in MemoryError).
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import (
    MAX_SECONDS,
    GpusplitError,
    check_number,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._kubelet import grpc_unix

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_METHOD = "/v1.PodResourcesLister/List"
DEFAULT_PREFIXES = ("nvidia.com/",)
DEFAULT_TIMEOUT = 10.0
VARINT, FIXED64, LENGTH, START_GROUP, END_GROUP, FIXED32 = 0, 1, 2, 3, 4, 5
MAX_PODS = 10000  # a kubelet runs at most a few hundred (--max-pods, 110 by default)
MAX_DEVICES = 100000  # device ids and DRA claim devices, all pods together
MAX_FIELDS = 1000000  # protobuf fields of the whole answer, at every depth
MAX_DEPTH = 64  # nested groups (protobuf's own limit is 100)
UINT64 = (1 << 64) - 1


class PodResourcesError(GpusplitError):
    """The pod-resources API could not be read, or its answer does not decode."""


# ---- protobuf ---------------------------------------------------------------------------------


class Budget:
    """What one answer may still list: pods, devices and fields, each limit named when it is passed."""

    def __init__(self, pods=MAX_PODS, devices=MAX_DEVICES, fields=MAX_FIELDS):
        self.left = {"pods": pods, "devices": devices, "fields": fields}
        self.limits = dict(self.left)

    def take(self, kind, count=1):
        self.left[kind] -= count
        if self.left[kind] < 0:
            raise PodResourcesError(
                f"the answer lists more than {self.limits[kind]} {kind} (the limit of this client: "
                f"MAX_{kind.upper()}); refusing to read more"
            )


def read_varint(buf, pos, what):
    """(value, next position) of the varint at ``pos``: at most 10 octets, cut to 64 bits as protobuf does."""
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise PodResourcesError(f"the answer is cut off inside a number of {what}")
        octet = buf[pos]
        pos += 1
        value |= (octet & 0x7F) << shift
        if not octet & 0x80:
            return value & UINT64, pos
        shift += 7
        if shift >= 70:
            raise PodResourcesError(f"the answer holds a number of {what} longer than 10 octets")


def read_field(buf, pos, what, depth=0):
    """(number, wire type, value, next position) of the field at ``pos``; a group is skipped whole (its
    value None)."""
    key, pos = read_varint(buf, pos, what)
    number, wire = key >> 3, key & 7
    if key > 0xFFFFFFFF:
        raise PodResourcesError(f"the answer holds a field tag beyond 32 bits in {what}")
    if number == 0:
        raise PodResourcesError(f"the answer holds field number 0 in {what}")
    if wire == VARINT:
        value, pos = read_varint(buf, pos, what)
    elif wire in (FIXED64, FIXED32, LENGTH):
        if wire == LENGTH:
            size, pos = read_varint(buf, pos, what)
        else:
            size = 8 if wire == FIXED64 else 4
        if pos + size > len(buf):
            raise PodResourcesError(f"the answer is cut off inside field {number} of {what}")
        value = buf[pos : pos + size]
        pos += size
    elif wire == START_GROUP:
        if depth >= MAX_DEPTH:
            raise PodResourcesError(f"the answer nests groups deeper than {MAX_DEPTH} in {what}")
        while True:
            if pos >= len(buf):
                raise PodResourcesError(f"the answer is cut off inside group {number} of {what}")
            inner, inner_wire, _value, pos = read_field(buf, pos, what, depth + 1)
            if inner_wire == END_GROUP:
                if inner != number:
                    raise PodResourcesError(f"group {number} of {what} ends as group {inner}")
                break
        value = None
    elif wire == END_GROUP:
        if depth == 0:
            raise PodResourcesError(f"the answer ends group {number} that never began, in {what}")
        value = None
    else:
        raise PodResourcesError(
            f"the answer holds wire type {wire} (field {number} of {what}), which protobuf does not have"
        )
    return number, wire, value, pos


def fields(buf, what, budget=None):
    """(field number, wire type, value) of each field of the message ``buf``: an int for varints,
    a memoryview for length-delimited and fixed-size fields; groups are skipped. Each field is taken
    from ``budget`` (a :class:`Budget`) when one is given."""
    buf = memoryview(buf)
    pos = 0
    while pos < len(buf):
        if budget is not None:
            budget.take("fields")
        number, wire, value, pos = read_field(buf, pos, what)
        if wire not in (START_GROUP, END_GROUP):
            yield number, wire, value


def text(value, what="a string"):
    """A protobuf string: UTF-8, as protobuf's own reader demands (replacing bad octets could make two
    device ids one)."""
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise PodResourcesError(f"the answer holds {what} that is not UTF-8: {bytes(value)[:40]!r}") from None


def signed64(value):
    return value - (1 << 64) if value >= 1 << 63 else value


def decode_devices(buf, budget):
    out = {"resource_name": "", "device_ids": [], "numa_nodes": []}
    for number, wire, value in fields(buf, "ContainerDevices", budget):
        if number == 1 and wire == LENGTH:
            out["resource_name"] = text(value, "a resource name")
        elif number == 2 and wire == LENGTH:
            budget.take("devices")
            out["device_ids"].append(text(value, "a device id"))
        elif number == 3 and wire == LENGTH:
            out["numa_nodes"].extend(numa_nodes(value, budget))
    return out


def decode_claim_resource(buf, budget):
    out = {"driver": "", "pool": "", "device": "", "cdi_devices": []}
    for number, wire, value in fields(buf, "ClaimResource", budget):
        if wire != LENGTH:
            continue
        if number == 1:
            name = None
            for n, w, v in fields(value, "CDIDevice", budget):
                if n == 1 and w == LENGTH:
                    name = text(v, "a CDI device name")
            out["cdi_devices"].append(name or "")
        elif number == 2:
            out["driver"] = text(value, "a driver name")
        elif number == 3:
            out["pool"] = text(value, "a pool name")
        elif number == 4:
            out["device"] = text(value, "a device name")
    return out


def decode_dynamic_resource(buf, budget):
    out = {"claim_name": "", "claim_namespace": "", "devices": []}
    for number, wire, value in fields(buf, "DynamicResource", budget):
        if wire != LENGTH:
            continue
        if number == 2:
            out["claim_name"] = text(value, "a claim name")
        elif number == 3:
            out["claim_namespace"] = text(value, "a claim namespace")
        elif number == 4:
            budget.take("devices")
            out["devices"].append(decode_claim_resource(value, budget))
    return out


def merge_devices(entries):
    """One entry per resource name, in the order they first come: the kubelet sends one
    ContainerDevices per device and NUMA node (a device on two NUMA nodes comes twice)."""
    merged = {}
    for entry in entries:
        into = merged.setdefault(
            entry["resource_name"],
            {"resource_name": entry["resource_name"], "device_ids": [], "numa_nodes": []},
        )
        into["device_ids"].extend(d for d in entry["device_ids"] if d not in into["device_ids"])
        into["numa_nodes"] = sorted(set(into["numa_nodes"]) | set(entry["numa_nodes"]))
    return list(merged.values())


def numa_nodes(buf, budget):
    """The NUMA node ids of a TopologyInfo message."""
    out = []
    for number, wire, node in fields(buf, "TopologyInfo", budget):
        if number == 1 and wire == LENGTH:
            numa = 0
            for i_number, i_wire, ident in fields(node, "NUMANode", budget):
                if i_number == 1 and i_wire == VARINT:
                    numa = signed64(ident)
            out.append(numa)
    return out


def check_packed_varints(buf, what):
    """A packed repeated integer field (cpu_ids): read only to refuse what protobuf refuses."""
    pos = 0
    while pos < len(buf):
        _value, pos = read_varint(buf, pos, what)


def check_memory(buf, budget):
    """A ContainerMemory message: not used, but read as protobuf reads it, so that what protobuf refuses
    (a memory type that is not UTF-8) is refused here too."""
    for number, wire, value in fields(buf, "ContainerMemory", budget):
        if number == 1 and wire == LENGTH:
            text(value, "a memory type")
        elif number == 3 and wire == LENGTH:
            numa_nodes(value, budget)


def decode_container(buf, budget):
    out = {"name": "", "devices": [], "dynamic_resources": []}
    for number, wire, value in fields(buf, "ContainerResources", budget):
        if wire != LENGTH:
            continue
        if number == 1:
            out["name"] = text(value, "a container name")
        elif number == 2:
            out["devices"].append(decode_devices(value, budget))
        elif number == 3:
            check_packed_varints(value, "ContainerResources.cpu_ids")
        elif number == 4:
            check_memory(value, budget)
        elif number == 5:
            out["dynamic_resources"].append(decode_dynamic_resource(value, budget))
    out["devices"] = merge_devices(out["devices"])
    return out


def decode_pod(buf, budget):
    out = {"namespace": "", "name": "", "containers": []}
    for number, wire, value in fields(buf, "PodResources", budget):
        if wire != LENGTH:
            continue
        if number == 1:
            out["name"] = text(value, "a pod name")
        elif number == 2:
            out["namespace"] = text(value, "a namespace")
        elif number == 3:
            out["containers"].append(decode_container(value, budget))
    return out


def decode_list_response(buf, budget=None):
    """The pods of a ``ListPodResourcesResponse`` message: [{namespace, name, containers}]; at most what
    ``budget`` (by default a new :class:`Budget`) allows."""
    budget = Budget() if budget is None else budget
    pods = []
    for number, wire, value in fields(buf, "ListPodResourcesResponse", budget):
        if number == 1 and wire == LENGTH:
            budget.take("pods")
            pods.append(decode_pod(value, budget))
    return pods


# ---- the answer ---------------------------------------------------------------------------------


def holders(pods, prefixes=DEFAULT_PREFIXES):
    """One entry per held device: each device id of a resource whose name starts with one of
    ``prefixes``, and each device of a DRA claim (``resource_name`` null there). Every entry has the
    same keys, null where they do not apply."""
    out = []
    for pod in pods:
        for container in pod["containers"]:
            base = {"namespace": pod["namespace"], "pod": pod["name"], "container": container["name"]}
            for devices in container["devices"]:
                if not any(devices["resource_name"].startswith(p) for p in prefixes):
                    continue
                for device_id in devices["device_ids"]:
                    out.append(
                        dict(
                            base,
                            resource_name=devices["resource_name"],
                            device_id=device_id,
                            claim_name=None,
                            claim_namespace=None,
                            driver=None,
                            pool=None,
                            device=None,
                        )
                    )
            for claim in container["dynamic_resources"]:
                for device in claim["devices"]:
                    out.append(
                        dict(
                            base,
                            resource_name=None,
                            device_id=None,
                            claim_name=claim["claim_name"],
                            claim_namespace=claim["claim_namespace"],
                            driver=device["driver"],
                            pool=device["pool"],
                            device=device["device"],
                        )
                    )
    return out


def check_prefixes(prefixes):
    if isinstance(prefixes, str) or not isinstance(prefixes, (list, tuple)):
        raise PodResourcesError("resource_prefixes: expected a list of strings")
    bad = [p for p in prefixes if not isinstance(p, str) or not p]
    if bad:
        raise PodResourcesError(f"resource_prefixes: every entry must be a non-empty string, got {bad!r}")
    return tuple(prefixes)


def read_pod_resources(
    socket_path=DEFAULT_SOCKET, timeout=DEFAULT_TIMEOUT, missing_ok=False, prefixes=DEFAULT_PREFIXES
):
    """``{available, socket, pods, holders}`` from the kubelet's pod-resources API at ``socket_path``.

    With ``missing_ok``, a socket that does not exist gives ``available: false`` and no pods (a node
    without a kubelet yet); every other failure is a PodResourcesError that says what to fix."""
    prefixes = check_prefixes(prefixes)
    timeout = check_number(
        timeout, "timeout", 0, MAX_SECONDS, above=True, unit="seconds", error=PodResourcesError
    )
    try:
        answer = grpc_unix.call(socket_path, LIST_METHOD, b"", timeout=float(timeout))
    except grpc_unix.SocketMissingError as exc:
        if missing_ok:
            return {"available": False, "socket": socket_path, "pods": [], "holders": []}
        raise PodResourcesError(
            f"{socket_path} does not exist: no kubelet serves its pod-resources API here (is the kubelet "
            "installed and running, with --root-dir /var/lib/kubelet?); set missing_ok to read such a node as "
            "holding nothing"
        ) from exc
    except grpc_unix.GrpcStatusError as exc:
        hint = ""
        if exc.code == 12:
            hint = " (a kubelet before 1.20 serves only v1alpha1 of this API; upgrade the kubelet)"
        elif exc.code in (7, 16):
            hint = " (run the task as root: become: true)"
        raise PodResourcesError(f"{exc}{hint}") from None
    except grpc_unix.GrpcCallError as exc:
        raise PodResourcesError(exc.errors) from None
    try:
        pods = decode_list_response(answer)
    except PodResourcesError as exc:
        raise exc.prefixed(f"{socket_path}: the List answer does not decode: ") from None
    return {"available": True, "socket": socket_path, "pods": pods, "holders": holders(pods, prefixes)}
