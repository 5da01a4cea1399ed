"""The pod-resources decoding (plugins/module_utils/_kubelet/pod_resources.py) against ``protobuf`` (the oracle, a
test dependency only), with the message types of the kubelet's
``staging/src/k8s.io/kubelet/pkg/apis/podresources/v1/api.proto`` built here as descriptors (no protoc).

Random ListPodResourcesResponse messages are written by protobuf itself, then some are given unknown fields
(varints, fixed, length-delimited, groups) at any depth or spoiled by one octet. Either both refuse the
octets, or our decoding equals protobuf's parse seen through the same projection (pods, containers,
devices merged by resource name, NUMA nodes, DRA claims). A fixed seed and at least CASES messages per run
(GPUSPLIT_DIFF_CASES raises it)."""

from __future__ import annotations

import contextlib
import os
import random

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from ansible_collections.gpusplit.k8s.plugins.module_utils._kubelet import pod_resources as pr

CASES = max(2000, int(os.environ.get("GPUSPLIT_DIFF_CASES", "2000")))
SEED = 43
F = descriptor_pb2.FieldDescriptorProto

# api.proto (v1), field by field: (message, [(name, number, type, repeated, message type)])
PROTO = {
    "ListPodResourcesResponse": [("pod_resources", 1, "PodResources", True)],
    "PodResources": [("name", 1, "string", False), ("namespace", 2, "string", False),
                     ("containers", 3, "ContainerResources", True)],
    "ContainerResources": [("name", 1, "string", False), ("devices", 2, "ContainerDevices", True),
                           ("cpu_ids", 3, "int64", True), ("memory", 4, "ContainerMemory", True),
                           ("dynamic_resources", 5, "DynamicResource", True)],
    "ContainerMemory": [("memory_type", 1, "string", False), ("size", 2, "uint64", False),
                        ("topology", 3, "TopologyInfo", False)],
    "ContainerDevices": [("resource_name", 1, "string", False), ("device_ids", 2, "string", True),
                         ("topology", 3, "TopologyInfo", False)],
    "TopologyInfo": [("nodes", 1, "NUMANode", True)],
    "NUMANode": [("ID", 1, "int64", False)],
    "DynamicResource": [("claim_name", 2, "string", False), ("claim_namespace", 3, "string", False),
                        ("claim_resources", 4, "ClaimResource", True)],
    "ClaimResource": [("cdi_devices", 1, "CDIDevice", True), ("driver_name", 2, "string", False),
                      ("pool_name", 3, "string", False), ("device_name", 4, "string", False)],
    "CDIDevice": [("name", 1, "string", False)],
}  # fmt: skip
TYPES = {"string": F.TYPE_STRING, "int64": F.TYPE_INT64, "uint64": F.TYPE_UINT64}


def message_classes():
    proto = descriptor_pb2.FileDescriptorProto(name="api.proto", package="v1", syntax="proto3")
    for name, fields in PROTO.items():
        message = proto.message_type.add(name=name)
        for field, number, kind, repeated in fields:
            entry = message.field.add(name=field, number=number)
            entry.label = F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
            if kind in TYPES:
                entry.type = TYPES[kind]
            else:
                entry.type, entry.type_name = F.TYPE_MESSAGE, f".v1.{kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"v1.{name}")) for name in PROTO}


M = message_classes()
WORDS = [
    "",
    "a",
    "nvidia.com/gpu",
    "nvidia.com/mig-1g.5gb",
    "example.com/nic",
    "GPU-1",
    "gpu-0",
    "é",
    "\u2028",
    "x" * 130,
]


def word(rnd):
    return (
        rnd.choice(WORDS) if rnd.random() < 0.8 else "".join(chr(rnd.randrange(32, 0x3000)) for _ in range(3))
    )


def fill(rnd, message, depth=0):
    """Random values in every field of ``message`` (protobuf's own object)."""
    for field, _number, kind, repeated in PROTO[message.DESCRIPTOR.name]:
        count = rnd.randint(0, 3 if depth < 3 else 1) if repeated else 1
        for _ in range(count):
            if rnd.random() < 0.25:
                continue
            if kind in TYPES:
                v = (
                    word(rnd)
                    if kind == "string"
                    else rnd.choice([0, 1, -1, 2**63 - 1, -(2**63), rnd.randint(0, 9)])
                )
                if kind == "uint64":
                    v = abs(v) % 2**64
                if repeated:
                    getattr(message, field).append(v)
                else:
                    setattr(message, field, v)
            else:
                child = getattr(message, field).add() if repeated else getattr(message, field)
                fill(rnd, child, depth + 1)
                if not repeated and rnd.random() < 0.3:
                    child.SetInParent()
    if rnd.random() < 0.2:  # an unknown field protobuf keeps and writes again, at this depth
        with contextlib.suppress(DecodeError):
            message.MergeFromString(unknown_field(rnd))


def varint(n):
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def unknown_field(rnd, depth=0):
    number = rnd.choice([6, 7, 15, 99, 2**29 - 1, 1, 2, 3])
    wire = rnd.choice([0, 1, 2, 3, 5])
    key = varint(number << 3 | wire)
    if wire == 0:
        return key + varint(rnd.choice([0, 1, 2**64 - 1, 2**70 - 1]))[:10]
    if wire == 1:
        return key + bytes(8)
    if wire == 5:
        return key + bytes(4)
    if wire == 2:
        payload = bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 5)))
        return key + varint(len(payload)) + payload
    inner = unknown_field(rnd, depth + 1) if depth < 2 and rnd.random() < 0.5 else b""
    return key + inner + varint(number << 3 | 4)


def with_unknown_fields(rnd, message):
    """``message`` (protobuf's object) serialized with unknown fields added at this level and, through
    its sub-messages' own serialisation, below it."""
    parts = [message.SerializeToString()]
    for _ in range(rnd.randint(0, 2)):
        parts.insert(rnd.randint(0, len(parts)), unknown_field(rnd))
    return b"".join(parts)


def spoiled(rnd, raw):
    if not raw:
        return bytes([rnd.randrange(256)])
    pos = rnd.randrange(len(raw))
    how = rnd.randrange(3)
    if how == 0:
        return raw[:pos] + bytes([raw[pos] ^ (1 << rnd.randrange(8))]) + raw[pos + 1 :]
    if how == 1:
        return raw[:pos] + raw[pos + 1 :]
    return raw[:pos] + bytes([rnd.randrange(256)]) + raw[pos:]


def projected(answer):
    """protobuf's parse as pod_resources.decode_list_response gives it."""
    pods = []
    for p in answer.pod_resources:
        containers = []
        for c in p.containers:
            devices = [
                {"resource_name": d.resource_name, "device_ids": list(d.device_ids),
                 "numa_nodes": [n.ID for n in d.topology.nodes]}
                for d in c.devices
            ]  # fmt: skip
            dynamic = [
                {
                    "claim_name": r.claim_name,
                    "claim_namespace": r.claim_namespace,
                    "devices": [
                        {"driver": cr.driver_name, "pool": cr.pool_name, "device": cr.device_name,
                         "cdi_devices": [d.name for d in cr.cdi_devices]}
                        for cr in r.claim_resources
                    ],
                }
                for r in c.dynamic_resources
            ]  # fmt: skip
            containers.append(
                {"name": c.name, "devices": pr.merge_devices(devices), "dynamic_resources": dynamic}
            )
        pods.append({"namespace": p.namespace, "name": p.name, "containers": containers})
    return pods


def parse_both(raw):
    try:
        answer = M["ListPodResourcesResponse"]()
        answer.ParseFromString(raw)
        expected = projected(answer)
    except DecodeError:
        expected = "refused"
    try:
        got = pr.decode_list_response(raw)
    except pr.PodResourcesError:
        got = "refused"
    return expected, got


def test_answers_decode_like_protobuf():
    rnd = random.Random(SEED)
    seen = {"read": 0, "refused": 0}
    for case in range(CASES):
        answer = M["ListPodResourcesResponse"]()
        fill(rnd, answer)
        style = rnd.randrange(4)
        raw = answer.SerializeToString() if style == 0 else with_unknown_fields(rnd, answer)
        if style == 3:
            raw = spoiled(rnd, raw)
        expected, got = parse_both(raw)
        assert got == expected, f"case {case}: {raw.hex()}: protobuf {expected!r}, ours {got!r}"
        seen["refused" if expected == "refused" else "read"] += 1
    assert seen["read"] >= CASES // 2 and seen["refused"] >= CASES // 20, seen


def test_the_oracle_sees_what_the_old_decoder_got_wrong():
    """Each of these was read by the old decoder and is refused, or read otherwise, by protobuf."""
    bad_utf8 = b"\x0a\x03\x0a\x01\xff"  # a pod name of one octet 0xff: protobuf refuses it
    assert parse_both(bad_utf8) == ("refused", "refused")
    group = b"\x0b\x08\x01\x0c"  # an unknown group at the top: protobuf skips it
    assert parse_both(group) == ([], [])
