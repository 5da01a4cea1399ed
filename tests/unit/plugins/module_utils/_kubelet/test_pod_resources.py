"""The pod-resources client (plugins/module_utils/_kubelet/pod_resources.py and grpc_unix.py).

Against a real gRPC server (grpcio, in this process, on a unix socket under tmp_path) that answers
``v1.PodResourcesLister/List`` with a protobuf written by the lab's stand-in encoder
(lab/podresources.py), and against servers that are not gRPC. The tests that need grpcio skip
when it is not importable (the Pythons 3.8-3.10 of tools/multi_python_tests.py do not have it);
the others run everywhere the client runs.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import re
import socket
import socketserver
import struct
import threading
import time

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._kubelet import grpc_unix, hpack
from ansible_collections.gpusplit.k8s.plugins.module_utils._kubelet import pod_resources as pr

try:
    import grpc
except ImportError:  # the older Pythons' test environments
    grpc = None

needs_grpc = pytest.mark.skipif(grpc is None, reason="needs grpcio (a real gRPC server), not installed here")

GPU_A = "GPU-3d5c1f8e-6a4b-4a1e-9f0a-2b7c8d9e0f13"
GPU_B = "GPU-8a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
MIG_A = "MIG-5e6f7a8b-9c0d-5e1f-a2b3-c4d5e6f7a8b9"


def standin():
    """lab/podresources.py (imported by name, so that the older Pythons never collect it)."""
    return importlib.import_module("lab.podresources")


def container(name, devices=(), dynamic=()):
    return {
        "name": name,
        "devices": [
            {"resource_name": r, "device_ids": list(ids), "numa_nodes": list(numa)}
            for r, ids, numa in devices
        ],
        "dynamic_resources": list(dynamic),
    }


def pod(namespace, name, *containers):
    return {"namespace": namespace, "name": name, "containers": list(containers)}


@pytest.fixture
def grpc_server(tmp_path):
    """serve(answer, path=None, handlers=None) -> socket path: a grpcio server on a unix socket."""
    if grpc is None:
        pytest.skip("needs grpcio (a real gRPC server), not installed here")
    lab = standin()
    servers, release = [], threading.Event()

    def serve(answer=None, path=None, handler=None):
        path = path or tmp_path / f"kubelet-{len(servers)}.sock"
        if handler is None:
            server = lab.serve(path, lambda: answer)
        else:
            from concurrent import futures

            server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
            with lab.bindable(path) as address:
                server.add_insecure_port(f"unix:{address}")
                server.start()
        servers.append(server)
        return str(path)

    serve.release = release
    yield serve
    release.set()
    for server in servers:
        server.stop(0)


def list_handler(behaviour, serializer=lambda message: message):
    return grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister",
        {"List": grpc.unary_unary_rpc_method_handler(behaviour, response_serializer=serializer)},
    )


# ---- against a real gRPC server ---------------------------------------------------------------


@needs_grpc
def test_an_empty_answer(grpc_server):
    path = grpc_server([])
    assert pr.read_pod_resources(path) == {"available": True, "socket": path, "pods": [], "holders": []}


@needs_grpc
def test_several_pods_containers_and_devices(grpc_server):
    pods = [
        pod(
            "ml",
            "trainer-0",
            container(
                "main", [("nvidia.com/gpu", [GPU_A, GPU_B], [0, 1]), ("example.com/fpga", ["fpga-0"], [])]
            ),
            container("sidecar"),
        ),
        pod("ml", "infer-0", container("main", [("nvidia.com/mig-1g.10gb", [MIG_A], [])])),
        pod("kube-system", "coredns-1", container("coredns")),
    ]
    got = pr.read_pod_resources(grpc_server(pods))
    assert got["pods"] == pods
    assert [(h["pod"], h["container"], h["resource_name"], h["device_id"]) for h in got["holders"]] == [
        ("trainer-0", "main", "nvidia.com/gpu", GPU_A),
        ("trainer-0", "main", "nvidia.com/gpu", GPU_B),
        ("infer-0", "main", "nvidia.com/mig-1g.10gb", MIG_A),
    ]
    assert all(h["claim_name"] is None and h["driver"] is None for h in got["holders"])
    other = pr.read_pod_resources(grpc_server(pods), prefixes=["example.com/"])
    assert [h["device_id"] for h in other["holders"]] == ["fpga-0"]


@needs_grpc
def test_one_entry_per_device_and_numa_node_is_merged_by_resource(grpc_server):
    """The kubelet sends one ContainerDevices per device and NUMA node; a device on two NUMA nodes
    comes twice and is held once."""
    sent = [
        pod(
            "ml",
            "trainer-0",
            container(
                "main",
                [
                    ("nvidia.com/gpu", [GPU_A], [0]),
                    ("example.com/nic", ["eth1"], [1]),
                    ("nvidia.com/gpu", [GPU_B], [0]),
                    ("nvidia.com/gpu", [GPU_B], [1]),
                ],
            ),
        )
    ]
    got = pr.read_pod_resources(grpc_server(sent))
    assert got["pods"][0]["containers"][0]["devices"] == [
        {"resource_name": "nvidia.com/gpu", "device_ids": [GPU_A, GPU_B], "numa_nodes": [0, 1]},
        {"resource_name": "example.com/nic", "device_ids": ["eth1"], "numa_nodes": [1]},
    ]
    assert [h["device_id"] for h in got["holders"]] == [GPU_A, GPU_B]


@needs_grpc
def test_an_answer_above_one_megabyte_is_read_whole(grpc_server):
    """Larger than every default HTTP/2 window (64 KiB): only the client's WINDOW_UPDATE lets it through."""
    pods = [
        pod(
            "load",
            f"pod-{i:05d}",
            container("c", [("nvidia.com/gpu", [f"GPU-{i:08d}-{j:027d}" for j in range(8)], [])]),
        )
        for i in range(3000)
    ]
    assert len(standin().encode_list_response(pods)) > 1 << 20
    got = pr.read_pod_resources(grpc_server(pods), timeout=60)
    assert got["pods"] == pods
    assert len(got["holders"]) == 24000


@needs_grpc
def test_dynamic_resources(grpc_server):
    claim = {
        "claim_name": "trainer-0-gpu-x7k2p",
        "claim_namespace": "ml",
        "devices": [
            {
                "driver": "gpu.nvidia.com",
                "pool": "node-a",
                "device": "gpu-3",
                "cdi_devices": ["k8s.gpu.nvidia.com/device=gpu-3"],
            },
            {"driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-5", "cdi_devices": []},
        ],
    }
    pods = [pod("ml", "trainer-0", container("main", dynamic=[claim]))]
    got = pr.read_pod_resources(grpc_server(pods))
    assert got["pods"] == pods
    assert [(h["resource_name"], h["claim_name"], h["pool"], h["device"]) for h in got["holders"]] == [
        (None, "trainer-0-gpu-x7k2p", "node-a", "gpu-3"),
        (None, "trainer-0-gpu-x7k2p", "node-a", "gpu-5"),
    ]


@needs_grpc
def test_unknown_fields_are_skipped(grpc_server):
    lab = standin()
    cpu_ids = lab.field_bytes(3, lab.varint(4) + lab.varint(5))  # repeated int64 cpu_ids, packed
    memory = lab.field_bytes(4, lab.field_string(1, "memory") + lab.field_varint(2, 1 << 30))
    later = (
        lab.varint(99 << 3 | 5) + b"\0\0\0\0" + lab.varint(98 << 3 | 1) + b"\0" * 8 + lab.field_varint(97, 7)
    )
    inner = (
        lab.encode_container(container("main", [("nvidia.com/gpu", [GPU_A], [])])) + cpu_ids + memory + later
    )
    message = (
        lab.field_bytes(1, lab.field_string(1, "p") + lab.field_string(2, "ns") + lab.field_bytes(3, inner))
        + later
    )
    path = grpc_server(handler=list_handler(lambda request, context: message))
    got = pr.read_pod_resources(path)
    assert got["pods"] == [pod("ns", "p", container("main", [("nvidia.com/gpu", [GPU_A], [])]))]


@needs_grpc
def test_unimplemented_is_reported_with_its_grpc_status(grpc_server):
    other = grpc.method_handlers_generic_handler("v1.Other", {})
    path = grpc_server(handler=other)
    with pytest.raises(pr.PodResourcesError) as err:
        pr.read_pod_resources(path)
    text = str(err.value)
    assert path in text and "gRPC status 12 UNIMPLEMENTED" in text and "before 1.20" in text


@needs_grpc
def test_permission_denied_is_reported_with_the_servers_message(grpc_server):
    def deny(request, context):
        context.abort(grpc.StatusCode.PERMISSION_DENIED, "uid 1000 may not list pod resources: désolé 100%")

    path = grpc_server(handler=list_handler(deny))
    with pytest.raises(pr.PodResourcesError) as err:
        pr.read_pod_resources(path)
    text = str(err.value)
    assert "gRPC status 7 PERMISSION_DENIED: uid 1000 may not list pod resources: désolé 100%" in text
    assert "become: true" in text


@needs_grpc
def test_a_server_that_hangs_times_out(grpc_server):
    def hang(request, context):
        grpc_server.release.wait(30)
        return b""

    path = grpc_server(handler=list_handler(hang))
    with pytest.raises(pr.PodResourcesError) as err:
        pr.read_pod_resources(path, timeout=0.5)
    assert f"{path}: no complete answer within 0.5 s" in str(err.value)


@needs_grpc
def test_a_socket_path_longer_than_a_unix_address(grpc_server, tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = grpc_server([pod("ns", "p", container("c"))], path=deep / "kubelet.sock")
    assert len(path) > 108
    assert pr.read_pod_resources(path)["pods"] == [pod("ns", "p", container("c"))]


# ---- servers that are not (quite) gRPC, no grpcio needed ----------------------------------------


class UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@contextlib.contextmanager
def unix_server(path, handle):
    """A thread serving ``handle(connection)`` for each connection on the unix socket ``path``."""

    class Handler(socketserver.BaseRequestHandler):
        def handle(self):
            handle(self.request)

    server = UnixServer(str(path), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield str(path)
    finally:
        server.shutdown()
        server.server_close()


def read_request(conn):
    """Everything the client sends first (preface, SETTINGS, WINDOW_UPDATE, HEADERS, DATA)."""
    data = b""
    conn.settimeout(5)
    while not data.endswith(b"\0\0\0\0\0"):
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def test_a_socket_that_does_not_exist(tmp_path):
    path = str(tmp_path / "kubelet.sock")
    with pytest.raises(pr.PodResourcesError) as err:
        pr.read_pod_resources(path)
    assert f"{path} does not exist" in str(err.value) and "missing_ok" in str(err.value)
    assert pr.read_pod_resources(path, missing_ok=True) == {
        "available": False,
        "socket": path,
        "pods": [],
        "holders": [],
    }


def test_a_plain_http1_server(tmp_path):
    def http1(conn):
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    with unix_server(tmp_path / "http.sock", http1) as path:
        with pytest.raises(pr.PodResourcesError) as err:
            pr.read_pod_resources(path, timeout=5)
    text = str(err.value)
    assert (
        "answered in HTTP/1 ('HTTP/1.1 400 Bad Request')" in text
        and "not the kubelet's pod-resources socket" in text
    )


def test_a_server_that_accepts_and_never_answers(tmp_path):
    done = threading.Event()
    with unix_server(tmp_path / "mute.sock", lambda conn: done.wait(10)) as path:
        with pytest.raises(pr.PodResourcesError, match="no complete answer within 0.3 s"):
            pr.read_pod_resources(path, timeout=0.3)
        done.set()


def test_a_server_that_closes_at_once(tmp_path):
    with unix_server(tmp_path / "closer.sock", lambda conn: None) as path:
        with pytest.raises(pr.PodResourcesError, match="closed the connection without an HTTP/2 answer"):
            pr.read_pod_resources(path, timeout=5)


def test_a_stale_socket_and_things_that_are_not_sockets(tmp_path):
    stale = tmp_path / "stale.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(stale))
    sock.close()  # bound once, nobody listens: what a stopped kubelet leaves
    with pytest.raises(
        pr.PodResourcesError, match="connection refused: the socket file is there but nothing listens"
    ):
        pr.read_pod_resources(str(stale))
    regular = tmp_path / "file.sock"
    regular.write_text("")
    with pytest.raises(pr.PodResourcesError, match=r"is not a unix socket \(not a socket\)"):
        pr.read_pod_resources(str(regular))
    with pytest.raises(pr.PodResourcesError, match=r"is not a unix socket \(directory\)"):
        pr.read_pod_resources(str(tmp_path))


def test_permission_denied_says_to_become_root(tmp_path, monkeypatch):
    """Root (who runs the tests in CI) is never refused, so the refusal comes from a stand-in socket."""
    path = tmp_path / "kubelet.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    real = socket.socket

    class Refused(real):
        def connect(self, address):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(grpc_unix.socket, "socket", Refused)
    try:
        with pytest.raises(pr.PodResourcesError) as err:
            pr.read_pod_resources(str(path))
    finally:
        listener.close()
    assert f"{path}: permission denied (Permission denied)" in str(err.value)
    assert "become: true" in str(err.value)


def h2_frame(kind, flags, stream, payload=b""):
    return grpc_unix.frame(kind, flags, stream, payload)


def h2_server(*frames, linger=True):
    """A handler that reads the request and answers with the given HTTP/2 frames after its SETTINGS;
    it then reads until the client closes (``linger``) or closes at once."""

    def handle(conn):
        read_request(conn)
        conn.sendall(h2_frame(grpc_unix.SETTINGS, 0, 0) + b"".join(frames))
        with contextlib.suppress(OSError):
            while linger and conn.recv(4096):  # the client's ACKs, until it closes
                pass

    return handle


OK_HEADERS = hpack.encode_headers([(":status", "200"), ("content-type", "application/grpc")])


def test_a_stream_that_ends_without_a_message(tmp_path):
    handle = h2_server(
        h2_frame(grpc_unix.HEADERS, grpc_unix.END_HEADERS | grpc_unix.END_STREAM, 1, OK_HEADERS)
    )
    with unix_server(tmp_path / "empty.sock", handle) as path:
        with pytest.raises(pr.PodResourcesError) as err:
            pr.read_pod_resources(path, timeout=5)
    assert str(err.value) == (
        f"{path}: the call ended without a message; it said: :status: 200, content-type: application/grpc"
    )


@pytest.mark.parametrize("linger", [True, False], ids=["server-waits", "server-closes-at-once"])
def test_a_hand_made_answer_with_padding_continuation_and_ping(tmp_path, linger):
    """Frames a small server may send: PING (answered), padded DATA, trailers split by CONTINUATION;
    a server that closes right after its answer loses the client's ACKs, not its answer."""
    message = standin_free_message()
    trailers = hpack.encode_headers([("grpc-status", "0"), ("grpc-message", "")])
    padded = bytes([3]) + struct.pack(">BI", 0, len(message)) + message + b"\0\0\0"
    handle = h2_server(
        h2_frame(grpc_unix.PING, 0, 0, b"12345678"),
        h2_frame(grpc_unix.HEADERS, grpc_unix.END_HEADERS, 1, OK_HEADERS),
        h2_frame(grpc_unix.DATA, grpc_unix.PADDED, 1, padded),
        h2_frame(grpc_unix.HEADERS, grpc_unix.END_STREAM, 1, trailers[:4]),
        h2_frame(grpc_unix.CONTINUATION, grpc_unix.END_HEADERS, 1, trailers[4:]),
        linger=linger,
    )
    deep = tmp_path / ("x" * 70) / ("y" * 70)
    deep.mkdir(parents=True)
    path = deep / "kubelet.sock"
    # bind the long path as the kubelet would, through the directory
    with grpc_unix.connectable_path(str(path)) as short, unix_server(short, handle):
        got = pr.read_pod_resources(str(path), timeout=5)
    assert got["pods"] == [pod("ns", "p", container("c", [("nvidia.com/gpu", [GPU_A], [])]))]


def standin_free_message():
    """ListPodResourcesResponse{pod_resources: [{name: p, namespace: ns, containers: [{name: c, devices:
    [{resource_name: nvidia.com/gpu, device_ids: [GPU_A]}]}]}]}, written out by hand."""

    def ld(number, payload):
        assert len(payload) < 128
        return bytes([number << 3 | 2, len(payload)]) + payload

    devices = ld(1, b"nvidia.com/gpu") + ld(2, GPU_A.encode())
    return ld(1, ld(1, b"p") + ld(2, b"ns") + ld(3, ld(1, b"c") + ld(2, devices)))


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (b"\x0a\x04\x0a\x03ab", "cut off inside field 1 of PodResources"),
        (b"\x0a", "cut off inside a number of ListPodResourcesResponse"),
        (b"\x0b", "cut off inside group 1 of ListPodResourcesResponse"),
        (b"\x0b\x14", "group 1 of ListPodResourcesResponse ends as group 2"),
        (b"\x0c", "ends group 1 that never began"),
        (b"\x0e", "wire type 6"),
        (b"\x02\x00", "field number 0"),
        (b"\xf8\xff\xff\xff\x1f\x00", "a field tag beyond 32 bits"),
        (b"\x08" + b"\xff" * 10 + b"\x01", "longer than 10 octets"),
        # issue 43: invalid UTF-8 was replaced, so that two device ids could become one holder
        (b"\x0a\x05\x0a\x03\xff\xfe\xfd", "a pod name that is not UTF-8"),
    ],
)
def test_an_answer_that_does_not_decode(message, error):
    with pytest.raises(pr.PodResourcesError, match=error):
        pr.decode_list_response(message)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"timeout": 0}, "timeout: expected a number of seconds above 0 and at most 86400, got 0"),
        (
            {"timeout": float("nan")},
            "timeout: expected a number of seconds above 0 and at most 86400, got nan",
        ),
        (
            {"timeout": float("inf")},
            "timeout: expected a number of seconds above 0 and at most 86400, got inf",
        ),
        ({"timeout": 1e300}, r"timeout: expected a number of seconds above 0 and at most 86400, got 1e\+300"),
        ({"prefixes": "nvidia.com/"}, "resource_prefixes: expected a list of strings"),
        ({"prefixes": ["", 3]}, "resource_prefixes: every entry must be a non-empty string"),
    ],
)
def test_bad_arguments(kwargs, error, tmp_path):
    with pytest.raises(pr.PodResourcesError, match=error):
        pr.read_pod_resources(str(tmp_path / "kubelet.sock"), **kwargs)


def test_grpc_message_is_percent_decoded():
    assert grpc_unix.percent_decode("d%C3%A9sol%C3%A9 100%25 sure %zz") == "désolé 100% sure %zz"


def huffman(text):
    """``text`` Huffman-coded (RFC 7541 5.2) with the collection's code table: how grpc-go (the
    kubelet) writes most header strings."""
    codes = hpack.huffman_codes()
    bits = length = 0
    for octet in text.encode():
        code, size = codes[octet]
        bits, length = (bits << size) | code, length + size
    pad = -length % 8
    bits, length = (bits << pad) | ((1 << pad) - 1), length + pad
    return bits.to_bytes(length // 8, "big")


def incremental(name, value):
    """A literal with incremental indexing, new name, both strings Huffman-coded (what grpc-go sends)."""
    encode_integer = hpack.encode_integer
    name_h, value_h = huffman(name), huffman(value)
    return (
        bytes([0x40])
        + encode_integer(len(name_h), 7, 0x80)
        + name_h
        + encode_integer(len(value_h), 7, 0x80)
        + value_h
    )


def test_a_trailers_only_error_coded_as_grpc_go_codes_it(tmp_path):
    block = (
        bytes([0x88])  # :status 200, static table
        + incremental("content-type", "application/grpc")
        + incremental("grpc-status", "7")
        + incremental("grpc-message", "permission denied: uid 1000 %C3%BC 100%25")
    )
    handle = h2_server(h2_frame(grpc_unix.HEADERS, grpc_unix.END_HEADERS | grpc_unix.END_STREAM, 1, block))
    with unix_server(tmp_path / "go.sock", handle) as path:
        with pytest.raises(pr.PodResourcesError) as err:
            pr.read_pod_resources(path, timeout=5)
    assert "gRPC status 7 PERMISSION_DENIED: permission denied: uid 1000 ü 100%" in str(err.value)


@pytest.mark.parametrize("status", ["²", "٣", "７", "1e0", "-0", ""])
def test_a_grpc_status_in_other_digits_is_unreadable(tmp_path, status):
    """issue 43: grpc-status "²" passed str.isdigit() and int() then failed with Python's words; "٣" was read
    as 3 (and "７" as 7). Only ASCII digits are a status; anything else is reported as unreadable."""
    block = (
        bytes([0x88]) + incremental("content-type", "application/grpc") + incremental("grpc-status", status)
    )
    handle = h2_server(h2_frame(grpc_unix.HEADERS, grpc_unix.END_HEADERS | grpc_unix.END_STREAM, 1, block))
    with unix_server(tmp_path / "s.sock", handle) as path:
        with pytest.raises(pr.PodResourcesError) as err:
            pr.read_pod_resources(path, timeout=5)
    assert f"failed with gRPC status {status} unreadable" in str(err.value)


def test_a_varint_beyond_64_bits_is_cut_as_protobuf_cuts_it():
    """issue 43: a 10-octet varint kept its 70 bits (a NUMA node of 2**69 - 1); protobuf keeps the low 64."""
    numa = b"\x08" + b"\xff" * 9 + b"\x7f"  # NUMANode.ID: 64 bits of ones, then six more
    topology = b"\x0a" + bytes([len(numa)]) + numa
    devices = b"\x0a\x01r" + b"\x12\x01d" + b"\x1a" + bytes([len(topology)]) + topology
    container = b"\x0a\x01c" + b"\x12" + bytes([len(devices)]) + devices
    message = b"\x0a" + bytes([len(container) + 2]) + b"\x1a" + bytes([len(container)]) + container
    assert pr.decode_list_response(message)[0]["containers"][0]["devices"][0]["numa_nodes"] == [-1]


@pytest.mark.parametrize(
    ("message", "limits", "error"),
    [
        # issue 43: 24 MiB of empty pods ended in MemoryError after 49 s
        (b"\x0a\x00" * 11, {"pods": 10}, "more than 10 pods (the limit of this client: MAX_PODS)"),
        (b"\x0a\x0a\x1a\x08\x12\x06\x12\x01a\x12\x01b", {"devices": 1}, "more than 1 devices"),
        (b"\x10\x00" * 6, {"fields": 5}, "more than 5 fields"),
    ],
)
def test_what_an_answer_lists_is_bounded(message, limits, error):
    with pytest.raises(pr.PodResourcesError, match=re.escape(error)):
        pr.decode_list_response(message, pr.Budget(**limits))


def test_the_default_limits_stop_a_flood_of_empty_pods_quickly():
    started = time.monotonic()
    with pytest.raises(pr.PodResourcesError, match="more than 10000 pods"):
        pr.decode_list_response(b"\x0a\x00" * (1 << 20))
    assert time.monotonic() - started < 5
