"""The gRPC client (plugins/module_utils/_kubelet/grpc_unix.py): hostile servers on a unix socket, each cut off
within the call's timeout and under a memory cap, with a message naming the limit it passed (issue 43);
what grpc-go refuses, refused too; and a differential test against servers written with the PyPI package
``h2`` (the oracle, a test dependency only), which answer in every framing HTTP/2 allows."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import struct
import threading
import time
import tracemalloc

import h2.config
import h2.connection
import h2.events
import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._kubelet import grpc_unix, hpack
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._kubelet.test_pod_resources import (
    h2_frame,
    read_request,
    unix_server,
)

CASES = max(2000, int(os.environ.get("GPUSPLIT_DIFF_CASES", "2000")))
SEED = 43
METHOD = "/v1.PodResourcesLister/List"
OK_HEADERS = hpack.encode_headers([(":status", "200"), ("content-type", "application/grpc")])
TRAILERS = hpack.encode_headers([("grpc-status", "0")])
MEMORY_CAP = 48 << 20  # what one call may allocate at its peak, whatever the server sends


def hostile(*chunks, forever=None):
    """A server that reads the request, sends its SETTINGS and ``chunks``, then ``forever()``'s octets in a loop
    until the client goes away."""

    def handle(conn):
        read_request(conn)
        with contextlib.suppress(OSError):
            conn.sendall(h2_frame(grpc_unix.SETTINGS, 0, 0) + b"".join(chunks))
            while forever is not None:
                conn.sendall(forever())
            while conn.recv(65536):
                pass

    return handle


def refused_within(path, timeout, match):
    """The call fails with a GrpcCallError matching ``match``, within ``timeout`` (plus a scheduling margin),
    allocating at most MEMORY_CAP at its peak."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(grpc_unix.GrpcCallError, match=match) as caught:
            grpc_unix.call(path, METHOD, b"", timeout=timeout)
        elapsed = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < timeout + 1.5, f"ended after {elapsed:.1f} s, timeout {timeout} s"
    assert peak < MEMORY_CAP, f"{peak} octets at the peak"
    return str(caught.value)


def test_a_continuation_flood_stops_at_the_header_block_limit(tmp_path):
    """issue 43: HEADERS without END_HEADERS, then CONTINUATION without end: 688 MB read in a 4 s timeout."""
    piece = h2_frame(grpc_unix.CONTINUATION, 0, 1, b"\x00" * 16384)
    handle = hostile(h2_frame(grpc_unix.HEADERS, 0, 1, OK_HEADERS), forever=lambda: piece * 16)
    with unix_server(tmp_path / "s.sock", handle) as path:
        text = refused_within(path, 4, "MAX_HEADER_BLOCK")
    assert "header block is larger than 65536 octets" in text


def test_one_huge_huffman_headers_frame_is_refused_at_its_length(tmp_path):
    """issue 43: one 16 MiB Huffman HEADERS frame returned after 28.5 s with a 2 s timeout."""
    name = hpack.encode_integer(4, 7, 0x80) + b"\x00" * 4
    body = bytes([0x40]) + name + hpack.encode_integer((1 << 24) - 40, 7, 0x80)
    payload = body + b"\xff" * ((1 << 24) - 1 - len(body))
    handle = hostile(h2_frame(grpc_unix.HEADERS, grpc_unix.END_HEADERS, 1, payload))
    with unix_server(tmp_path / "s.sock", handle) as path:
        text = refused_within(path, 2, "MAX_FRAME")
    assert "a frame of 16777215 octets, above the 16384 this client allows" in text


def header_block_frames(block):
    frames = [block[i : i + 16000] for i in range(0, len(block), 16000)]
    if len(frames) == 1:
        return [h2_frame(grpc_unix.HEADERS, grpc_unix.END_HEADERS, 1, block)]
    chunks = [h2_frame(grpc_unix.HEADERS, 0, 1, frames[0])]
    chunks += [h2_frame(grpc_unix.CONTINUATION, 0, 1, f) for f in frames[1:-1]]
    return [*chunks, h2_frame(grpc_unix.CONTINUATION, grpc_unix.END_HEADERS, 1, frames[-1])]


def test_huffman_headers_that_decode_beyond_the_header_list_limit(tmp_path):
    """Within the frame and block limits, a block of Huffman strings that decodes to more than 64 KiB."""
    coded = int("00011" * 1000, 2).to_bytes(625, "big")
    field = (
        bytes([0x00])
        + hpack.encode_integer(3, 7)
        + b"x-a"
        + hpack.encode_integer(len(coded), 7, 0x80)
        + coded
    )
    block = OK_HEADERS + field * 64
    assert len(block) < grpc_unix.MAX_HEADER_BLOCK
    with unix_server(tmp_path / "s.sock", hostile(*header_block_frames(block))) as path:
        text = refused_within(path, 2, "SETTINGS_MAX_HEADER_LIST_SIZE")
    assert "more than 65536 octets of fields" in text


def test_indexed_fields_that_repeat_a_large_entry_beyond_the_header_list_limit(tmp_path):
    """One 4000-octet field put in the dynamic table, then one octet per copy of it."""
    block = (
        OK_HEADERS
        + bytes([0x40])
        + hpack.encode_integer(3, 7)
        + b"x-a"
        + hpack.encode_integer(3950, 7)
        + b"v" * 3950
    )
    block += bytes([0x80 | 62]) * 5000
    with unix_server(tmp_path / "s.sock", hostile(*header_block_frames(block))) as path:
        refused_within(path, 2, "more than 65536 octets of fields")


def test_a_huge_answer_stops_at_the_answer_limit(tmp_path):
    """issue 43: a 24 MiB answer of empty pods ended in MemoryError after 49 s."""
    data = h2_frame(grpc_unix.DATA, 0, 1, b"\x0a\x00" * 8192)
    handle = hostile(
        h2_frame(grpc_unix.HEADERS, grpc_unix.END_HEADERS, 1, OK_HEADERS),
        h2_frame(grpc_unix.DATA, 0, 1, struct.pack(">BI", 0, 24 << 20)),
        forever=lambda: data * 64,
    )
    with unix_server(tmp_path / "s.sock", handle) as path:
        text = refused_within(path, 10, "larger than 16777216 octets")
    assert "refusing to read more" in text


@pytest.mark.parametrize(
    "forever",
    [
        lambda: h2_frame(grpc_unix.PING, 0, 0, b"12345678"),  # answered, one by one, without end
        lambda: h2_frame(grpc_unix.WINDOW_UPDATE, 0, 3, b"\0\0\0\1") * 200,  # another stream's frames
        lambda: h2_frame(grpc_unix.SETTINGS, 0, 0),  # each acknowledged
    ],
    ids=["ping-drip", "other-stream-flood", "settings-flood"],
)
def test_frames_without_end_stop_at_the_whole_call_deadline(tmp_path, forever):
    handle = hostile(h2_frame(grpc_unix.HEADERS, grpc_unix.END_HEADERS, 1, OK_HEADERS), forever=forever)
    with unix_server(tmp_path / "s.sock", handle) as path:
        text = refused_within(path, 1, "no complete answer within 1 s")
    assert "raise the timeout" in text


def test_a_third_header_block_is_refused(tmp_path):
    headers = h2_frame(grpc_unix.HEADERS, grpc_unix.END_HEADERS, 1, OK_HEADERS)
    with unix_server(
        tmp_path / "s.sock", hostile(headers, headers, headers)
    ) as path:  # no data: not an answer
        refused_within(path, 2, "more than 2 header blocks")


def message(body):
    return h2_frame(grpc_unix.DATA, 0, 1, struct.pack(">BI", 0, len(body)) + body)


def test_two_messages_in_a_unary_answer_are_refused(tmp_path):
    """issue 43: the second message was dropped silently; grpc-go refuses such an answer."""
    handle = hostile(
        h2_frame(grpc_unix.HEADERS, grpc_unix.END_HEADERS, 1, OK_HEADERS),
        message(b"\x0a\x00"),
        message(b"\x0a\x00"),
        h2_frame(grpc_unix.HEADERS, grpc_unix.END_HEADERS | grpc_unix.END_STREAM, 1, TRAILERS),
    )
    with unix_server(tmp_path / "s.sock", handle) as path:
        refused_within(path, 2, "the answer holds 2 messages; a unary call answers with one")


@pytest.mark.parametrize("cut", [False, True], ids=["data-ends-the-stream", "empty-data-ends-it"])
def test_an_answer_without_trailers_is_refused(tmp_path, cut):
    """issue 43: an answer whose stream ended without trailers (no grpc-status) was taken as complete."""
    end = h2_frame(grpc_unix.DATA, grpc_unix.END_STREAM, 1, b"")
    body = message(b"\x0a\x00")
    if not cut:
        body = h2_frame(grpc_unix.DATA, grpc_unix.END_STREAM, 1, struct.pack(">BI", 0, 2) + b"\x0a\x00")
        end = b""
    handle = hostile(h2_frame(grpc_unix.HEADERS, grpc_unix.END_HEADERS, 1, OK_HEADERS), body, end)
    with unix_server(tmp_path / "s.sock", handle) as path:
        refused_within(path, 2, r"without trailers \(no grpc-status\)")


def test_a_header_value_that_is_not_utf8_is_refused(tmp_path):
    trailers = (
        hpack.encode_headers([("grpc-status", "0")])
        + hpack.encode_literal("grpc-message", "x")[:-1]
        + b"\xff"
    )
    handle = hostile(
        h2_frame(grpc_unix.HEADERS, grpc_unix.END_HEADERS, 1, OK_HEADERS),
        message(b""),
        h2_frame(grpc_unix.HEADERS, grpc_unix.END_HEADERS | grpc_unix.END_STREAM, 1, trailers),
    )
    with unix_server(tmp_path / "s.sock", handle) as path:
        refused_within(path, 2, "not UTF-8")


# ---- the differential test: servers written with h2 ---------------------------------------------


class H2Server:
    """One thread serving connections one after another with h2, each answered as ``plan`` (set per case)
    says: the message split into DATA frames of random sizes and padding, PINGs and SETTINGS between them,
    extra headers, and trailers with status OK or an error status and message."""

    def __init__(self, path):
        self.plan = None
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(4)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                self.answer(conn, self.plan)

    def answer(self, sock, plan):
        h2conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        h2conn.initiate_connection()
        sock.sendall(h2conn.data_to_send())
        ended = False
        while not ended:
            data = sock.recv(65536)
            if not data:
                return
            for event in h2conn.receive_data(data):
                ended = ended or isinstance(event, h2.events.StreamEnded)
            sock.sendall(h2conn.data_to_send())
        rnd = random.Random(plan["seed"])
        if plan["status"] == 0 or rnd.random() < 0.5:
            h2conn.send_headers(
                1, [(b":status", b"200"), (b"content-type", b"application/grpc")] + plan["extra"]
            )
            body = (
                struct.pack(">BI", 0, len(plan["message"])) + plan["message"] if plan["status"] == 0 else b""
            )
            while body:
                size = rnd.randint(1, min(len(body), 16000))
                pad = rnd.choice([None, None, 0, rnd.randint(1, 200)])
                h2conn.send_data(1, body[:size], pad_length=pad)
                body = body[size:]
                if rnd.random() < 0.2:
                    h2conn.ping(rnd.randbytes(8))
                if rnd.random() < 0.1:
                    h2conn.update_settings(
                        {h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: rnd.randint(1, 100)}
                    )
                if rnd.random() < 0.3:
                    sock.sendall(h2conn.data_to_send())
            trailers = [(b"grpc-status", str(plan["status"]).encode())]
        else:  # trailers-only
            trailers = [
                (b":status", b"200"),
                (b"content-type", b"application/grpc"),
                (b"grpc-status", str(plan["status"]).encode()),
            ]
        if plan["text"]:
            trailers.append((b"grpc-message", plan["text"].encode()))
        h2conn.send_headers(1, trailers, end_stream=True)
        sock.sendall(h2conn.data_to_send())
        sock.settimeout(5)
        while sock.recv(65536):
            pass

    def close(self):
        self.listener.close()


def test_answers_framed_by_h2_are_read_whole(tmp_path):
    rnd = random.Random(SEED)
    server = H2Server(tmp_path / "h2.sock")
    seen = {"messages": 0, "statuses": 0}
    try:
        for case in range(CASES):
            size = (
                rnd.choice([0, 1, 2, 100, 5000, 16384, 40000])
                if rnd.random() < 0.95
                else rnd.randint(0, 300000)
            )
            status = 0 if rnd.random() < 0.8 else rnd.choice([2, 5, 7, 12, 16])
            plan = {
                "seed": rnd.random(),
                "message": rnd.randbytes(size),
                "status": status,
                "text": rnd.choice(["", "permission denied", "caf%C3%A9 100%25"]) if status else "",
                "extra": [
                    (b"x-%d" % i, rnd.randbytes(rnd.randint(0, 20)).hex().encode())
                    for i in range(rnd.randint(0, 3))
                ],
            }
            server.plan = plan
            if status == 0:
                got = grpc_unix.call(str(tmp_path / "h2.sock"), METHOD, b"", timeout=5)
                assert got == plan["message"], f"case {case}"
                seen["messages"] += 1
            else:
                with pytest.raises(grpc_unix.GrpcStatusError) as caught:
                    grpc_unix.call(str(tmp_path / "h2.sock"), METHOD, b"", timeout=5)
                assert caught.value.code == status, f"case {case}"
                assert caught.value.grpc_message == grpc_unix.percent_decode(plan["text"])
                seen["statuses"] += 1
    finally:
        server.close()
    assert sum(seen.values()) >= CASES and seen["statuses"] >= CASES // 10, seen
