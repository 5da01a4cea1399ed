# Copyright: gpusplit contributors
# Apache-2.0
"""One unary gRPC call over a unix socket: HTTP/2 cleartext with prior knowledge. Private to the collection.

A managed host has no gRPC library, and this is all the kubelet's pod-resources API needs: the
client connection preface, SETTINGS (push off, the largest stream window, and a WINDOW_UPDATE that
opens the connection window as far, so that a large answer is never held up by flow control), one
HEADERS frame (HPACK literals, hpack.py), one DATA frame with the gRPC length prefix and the request
message, then frames are read until the stream ends: the server's SETTINGS are acknowledged, its
PINGs answered, its header blocks decoded (the dynamic table included), so that ``grpc-status`` and
``grpc-message`` are known whichever way the server coded them. RFC 9113 (HTTP/2) and the gRPC
"PROTOCOL-HTTP2" description are the references. Standard library only, Python 3.8+.

Everything a server sends is bounded, each limit named in the refusal when it is passed: ``timeout``
bounds the whole call (connecting, every read and write, and the work between them: checked before
each frame), frames are at most MAX_FRAME octets (the SETTINGS_MAX_FRAME_SIZE this client keeps at its
default), a header block at most MAX_HEADER_BLOCK octets however many CONTINUATION frames carry it, its
decoded fields at most MAX_HEADER_LIST octets (advertised as SETTINGS_MAX_HEADER_LIST_SIZE), a call at
most two header blocks (headers and trailers), the answer at most ``max_answer`` octets (MAX_ANSWER).
What grpc-go refuses is refused too: more than one message in a unary answer, an answer without
trailers (no grpc-status), a header field that is not UTF-8.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
import struct
import time

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, ascii_int
from ansible_collections.gpusplit.k8s.plugins.module_utils._kubelet.hpack import (
    HpackDecoder,
    HpackError,
    encode_headers,
)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    range(10)
)
END_STREAM = ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20
SETTINGS_ENABLE_PUSH = 0x2
SETTINGS_INITIAL_WINDOW_SIZE = 0x4
SETTINGS_MAX_HEADER_LIST_SIZE = 0x6
MAX_FRAME = 16384  # SETTINGS_MAX_FRAME_SIZE: this client never raises it from its initial value
MAX_HEADER_BLOCK = 65536  # one header block as sent (HEADERS and its CONTINUATION frames)
MAX_HEADER_LIST = 65536  # one header block decoded: names, values and 32 octets per field (RFC 9113 6.5.2)
MAX_HEADER_BLOCKS = 2  # the headers and the trailers of the one stream
MAX_ANSWER = 16 << 20  # octets of the answer (grpc-go's default limit is 4 MiB)
MAX_WINDOW = (1 << 31) - 1
DEFAULT_WINDOW = 65535
WINDOW_REFILL = 1 << 20  # octets received before the windows are given back what was read
STREAM = 1  # the one stream this client opens
# socket.timeout is TimeoutError only from Python 3.10 on; managed hosts start at 3.8
SOCKET_TIMEOUT = socket.timeout
# the longest unix socket path connect() takes (sun_path is 108 octets with the final NUL)
SUN_PATH_MAX = 107

# RFC 9113 section 7
H2_ERRORS = {
    0: "NO_ERROR",
    1: "PROTOCOL_ERROR",
    2: "INTERNAL_ERROR",
    3: "FLOW_CONTROL_ERROR",
    4: "SETTINGS_TIMEOUT",
    5: "STREAM_CLOSED",
    6: "FRAME_SIZE_ERROR",
    7: "REFUSED_STREAM",
    8: "CANCEL",
    9: "COMPRESSION_ERROR",
    10: "CONNECT_ERROR",
    11: "ENHANCE_YOUR_CALM",
    12: "INADEQUATE_SECURITY",
    13: "HTTP_1_1_REQUIRED",
}
# grpc/grpc doc/statuscodes.md
GRPC_CODES = {
    0: "OK",
    1: "CANCELLED",
    2: "UNKNOWN",
    3: "INVALID_ARGUMENT",
    4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND",
    6: "ALREADY_EXISTS",
    7: "PERMISSION_DENIED",
    8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION",
    10: "ABORTED",
    11: "OUT_OF_RANGE",
    12: "UNIMPLEMENTED",
    13: "INTERNAL",
    14: "UNAVAILABLE",
    15: "DATA_LOSS",
    16: "UNAUTHENTICATED",
}


class GrpcCallError(GpusplitError):
    """The call did not return a message; the text names the socket and what to do."""


class SocketMissingError(GrpcCallError):
    """Nothing at the socket's path."""


class CallTimeoutError(GrpcCallError):
    """No complete answer within the time limit."""


class GrpcStatusError(GrpcCallError):
    """The server answered with a gRPC status other than OK; ``code`` and ``grpc_message`` hold it."""

    def __init__(self, errors="", code=None, grpc_message=""):
        super().__init__(errors)
        self.code = code
        self.grpc_message = grpc_message


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", kind, flags, stream) + payload


def grpc_message_frame(message):
    """A gRPC length-prefixed message: not compressed, 4-octet big-endian length, the message."""
    return struct.pack(">BI", 0, len(message)) + message


def percent_decode(text):
    """grpc-message is percent-encoded UTF-8 (PROTOCOL-HTTP2: Status-Message)."""
    raw = bytearray()
    i = 0
    data = text.encode("utf-8", "replace")
    while i < len(data):
        hexdigits = data[i + 1 : i + 3]
        if (
            data[i] == 0x25
            and len(hexdigits) == 2
            and all(chr(c) in "0123456789abcdefABCDEF" for c in hexdigits)
        ):
            raw.append(int(hexdigits, 16))
            i += 3
        else:
            raw.append(data[i])
            i += 1
    return raw.decode("utf-8", "replace")


def socket_kind(path):
    """What is at ``path``: None (nothing), 'socket', or a word for what else it is."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError:
        return "unreadable"  # connect() says why
    if stat.S_ISSOCK(mode):
        return "socket"
    return "directory" if stat.S_ISDIR(mode) else "not a socket"


@contextlib.contextmanager
def connectable_path(path):
    """``path``, or, when it is longer than a unix socket address may be, the same socket reached
    through /proc/self/fd/<fd of its directory>/<name> (the directory stays open meanwhile)."""
    if len(os.fsencode(path)) <= SUN_PATH_MAX:
        yield path
        return
    directory, name = os.path.split(os.path.abspath(path))
    fd = os.open(directory or "/", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        yield f"/proc/self/fd/{fd}/{name}"
    finally:
        os.close(fd)


def connect(path, timeout):
    """A connected unix stream socket, or a GrpcCallError that says what to fix."""
    kind = socket_kind(path)
    if kind is None:
        raise SocketMissingError(f"{path} does not exist: nothing serves it on this host")
    if kind in ("directory", "not a socket"):
        raise GrpcCallError(f"{path} is not a unix socket ({kind}): give the path of the socket itself")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        with connectable_path(path) as address:
            sock.connect(address)
    except SOCKET_TIMEOUT:
        sock.close()
        raise CallTimeoutError(f"{path}: connecting took longer than {timeout:g} s") from None
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise GrpcCallError(
                f"{path}: permission denied ({exc.strerror}): the socket belongs to root; "
                "run the task as root (become: true)"
            ) from None
        if exc.errno == errno.ECONNREFUSED:
            raise GrpcCallError(
                f"{path}: connection refused: the socket file is there but nothing listens on it "
                "(the process that served it has stopped)"
            ) from None
        if exc.errno == errno.ENOENT:
            raise SocketMissingError(f"{path} does not exist: nothing serves it on this host") from None
        raise GrpcCallError(f"{path}: cannot connect: {exc.strerror or exc}") from None
    return sock


class Connection:
    """The frames of one HTTP/2 connection over a connected socket, with a deadline."""

    def __init__(self, sock, name, deadline, timeout):
        self.sock = sock
        self.name = name
        self.deadline = deadline
        self.timeout = timeout
        self.buffer = bytearray()
        self.received = 0
        self.peer_closed = False

    def remaining(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise CallTimeoutError(self.timeout_refusal())
        return left

    def timeout_refusal(self):
        return (
            f"{self.name}: no complete answer within {self.timeout:g} s "
            f"({self.received} octets received): the server accepted the connection but did not answer "
            "in time; it may be hung, or the answer is large: raise the timeout"
        )

    def send(self, data):
        """Send ``data``. A server that already closed its side does not stop the call here: what
        it sent before (an answer, an HTTP/1 error) is still read, and judged by the reader."""
        if self.peer_closed:
            return
        self.sock.settimeout(self.remaining())
        try:
            self.sock.sendall(data)
        except SOCKET_TIMEOUT:
            raise CallTimeoutError(self.timeout_refusal()) from None
        except (BrokenPipeError, ConnectionResetError):
            self.peer_closed = True
        except OSError as exc:
            raise GrpcCallError(
                f"{self.name}: the connection broke while sending: {exc.strerror or exc}"
            ) from None

    def fill(self, wanted):
        """At least ``wanted`` octets in the buffer; False when the peer closed before."""
        while len(self.buffer) < wanted:
            self.sock.settimeout(self.remaining())
            try:
                chunk = self.sock.recv(max(65536, wanted - len(self.buffer)))
            except SOCKET_TIMEOUT:
                raise CallTimeoutError(self.timeout_refusal()) from None
            except ConnectionResetError:
                return False  # closed with our data unread: a close all the same
            except OSError as exc:
                raise GrpcCallError(
                    f"{self.name}: the connection broke while reading: {exc.strerror or exc}"
                ) from None
            if not chunk:
                return False
            self.buffer += chunk
            self.received += len(chunk)
        return True

    def take(self, count):
        out = bytes(self.buffer[:count])
        del self.buffer[:count]
        return out

    def read_frame(self):
        """(type, flags, stream, payload), or None when the peer closed the connection between frames."""
        if not self.fill(9):
            if self.buffer:
                raise GrpcCallError(f"{self.name}: the connection closed inside a frame header")
            return None
        length = int.from_bytes(self.buffer[:3], "big")
        kind, flags = self.buffer[3], self.buffer[4]
        stream = int.from_bytes(self.buffer[5:9], "big") & 0x7FFFFFFF
        if length > MAX_FRAME:
            raise GrpcCallError(
                f"{self.name}: the server sent a frame of {length} octets, above the {MAX_FRAME} this client "
                "allows (SETTINGS_MAX_FRAME_SIZE, MAX_FRAME); refusing to read it"
            )
        if not self.fill(9 + length):
            raise GrpcCallError(
                f"{self.name}: the connection closed inside a frame ({length} octets announced)"
            )
        self.take(9)
        return kind, flags, stream, self.take(length)


def unpad(flags, payload, name):
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise GrpcCallError(f"{name}: a padded frame whose padding is longer than the frame")
    return payload[1 : len(payload) - payload[0]]


def looks_like_http1(data):
    return data[:5] == b"HTTP/" or data[:1] == b"<"


def first_line(data):
    return data.split(b"\r\n", 1)[0].split(b"\n", 1)[0][:120].decode("latin-1")


def call(path, method, message=b"", timeout=10.0, max_answer=MAX_ANSWER):
    """The answer message (bytes) of the unary gRPC ``method`` (e.g. ``/v1.PodResourcesLister/List``)
    with the request ``message``, over the unix socket ``path``. Every failure is a GrpcCallError
    (``SocketMissingError``, ``CallTimeoutError``, ``GrpcStatusError``) whose text names ``path``."""
    deadline = time.monotonic() + timeout
    sock = connect(path, timeout)
    try:
        return Exchange(Connection(sock, path, deadline, timeout), method, message, max_answer).run()
    finally:
        with contextlib.suppress(OSError):
            sock.close()


class Exchange:
    """The client side of one call: send the request, read until the stream ends."""

    def __init__(self, conn, method, message, max_answer):
        self.conn = conn
        self.name = conn.name
        self.method = method
        self.message = message
        self.max_answer = max_answer
        self.decoder = HpackDecoder(max_list_size=MAX_HEADER_LIST)
        self.header_blocks = []  # decoded header blocks of our stream: [headers, trailers]
        self.pending = None  # (flags, fragment) of a header block awaiting CONTINUATION
        self.body = bytearray()
        self.unacknowledged = 0
        self.ended = False
        self.said = []  # what the server said besides headers (GOAWAY, RST_STREAM)

    def request(self):
        settings = (
            struct.pack(">HI", SETTINGS_ENABLE_PUSH, 0)
            + struct.pack(">HI", SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW)
            + struct.pack(">HI", SETTINGS_MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST)
        )
        headers = encode_headers(
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", self.method),
                (":authority", "localhost"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ]
        )
        return (
            PREFACE
            + frame(SETTINGS, 0, 0, settings)
            + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", MAX_WINDOW - DEFAULT_WINDOW))
            + frame(HEADERS, END_HEADERS, STREAM, headers)
            + frame(DATA, END_STREAM, STREAM, grpc_message_frame(self.message))
        )

    def run(self):
        self.conn.send(self.request())
        self.check_server_preface()
        while not self.ended:
            self.conn.remaining()  # the whole call's deadline, also where frames come faster than it is read
            got = self.conn.read_frame()
            if got is None:
                raise GrpcCallError(self.closed_refusal())
            self.handle(*got)
        return self.result()

    def check_server_preface(self):
        """The server's first frame must be SETTINGS; an HTTP/1 server answers with text instead."""
        if not self.conn.fill(9):
            said = bytes(self.conn.buffer)
            if looks_like_http1(said):
                raise GrpcCallError(self.http1_refusal(said))
            raise GrpcCallError(
                f"{self.name}: the server closed the connection without an HTTP/2 answer"
                + (f" (it sent {said[:40]!r})" if said else "")
                + ": it is not a gRPC server"
            )
        head = bytes(self.conn.buffer[:9])
        if looks_like_http1(head):
            self.conn.fill(256)  # the rest of the status line, when it comes
            raise GrpcCallError(self.http1_refusal(bytes(self.conn.buffer)))
        if head[3] != SETTINGS or head[5:9] != b"\0\0\0\0":
            raise GrpcCallError(
                f"{self.name}: the server's first octets {head!r} are not an HTTP/2 SETTINGS frame: "
                "it is not a gRPC server"
            )

    def http1_refusal(self, said):
        return (
            f"{self.name}: the server answered in HTTP/1 ({first_line(said)!r}), not gRPC over HTTP/2: "
            "this is not the kubelet's pod-resources socket"
        )

    def closed_refusal(self):
        return f"{self.name}: the server closed the connection before the call ended" + self.said_text()

    def said_text(self):
        parts = list(self.said)
        for block in self.header_blocks:
            parts.append(", ".join(f"{n}: {v}" for n, v in block))
        return f"; it said: {'; '.join(parts)}" if parts else ""

    def handle(self, kind, flags, stream, payload):
        if self.pending is not None and kind != CONTINUATION:
            raise GrpcCallError(f"{self.name}: a header block was interrupted by a frame of type {kind}")
        if kind == SETTINGS:
            if stream != 0 or (not flags & ACK and len(payload) % 6):
                raise GrpcCallError(f"{self.name}: a malformed SETTINGS frame")
            if not flags & ACK:
                self.conn.send(frame(SETTINGS, ACK, 0))
        elif kind == PING:
            if not flags & ACK:
                self.conn.send(frame(PING, ACK, 0, payload[:8]))
        elif kind == GOAWAY:
            last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF if len(payload) >= 8 else 0
            code = int.from_bytes(payload[4:8], "big") if len(payload) >= 8 else 0
            debug = payload[8:].decode("utf-8", "replace")
            self.said.append(f"GOAWAY {H2_ERRORS.get(code, code)}" + (f" ({debug})" if debug else ""))
            if last < STREAM:
                raise GrpcCallError(f"{self.name}: the server refused the call" + self.said_text())
        elif stream != STREAM:
            return  # WINDOW_UPDATE, PRIORITY and anything on stream 0 or another stream
        elif kind == RST_STREAM:
            code = int.from_bytes(payload[:4], "big") if len(payload) >= 4 else 0
            self.said.append(f"RST_STREAM {H2_ERRORS.get(code, code)}")
            raise GrpcCallError(f"{self.name}: the server reset the call" + self.said_text())
        elif kind in (HEADERS, CONTINUATION):
            self.header_fragment(kind, flags, payload)
        elif kind == DATA:
            self.data(flags, payload)
        elif kind == PUSH_PROMISE:
            raise GrpcCallError(f"{self.name}: the server pushed a stream although push was turned off")

    def header_fragment(self, kind, flags, payload):
        if kind == HEADERS:
            payload = unpad(flags, payload, self.name)
            if flags & PRIORITY_FLAG:
                payload = payload[5:]
            self.pending = (flags, bytearray(payload))
        elif self.pending is None:
            raise GrpcCallError(f"{self.name}: a CONTINUATION frame without a header block")
        else:
            self.pending[1].extend(payload)
        if len(self.pending[1]) > MAX_HEADER_BLOCK:
            raise GrpcCallError(
                f"{self.name}: the server's header block is larger than {MAX_HEADER_BLOCK} octets "
                "(MAX_HEADER_BLOCK, CONTINUATION frames included); refusing to read more"
            )
        if not flags & END_HEADERS:
            return
        first_flags, block = self.pending
        self.pending = None
        if len(self.header_blocks) >= MAX_HEADER_BLOCKS:
            raise GrpcCallError(
                f"{self.name}: the server sent more than {MAX_HEADER_BLOCKS} header blocks (headers and trailers) "
                "on the call"
            )
        try:
            self.header_blocks.append(self.decoder.decode(block))
        except HpackError as exc:
            raise GrpcCallError(
                exc.prefixed(f"{self.name}: the server's header block does not decode: ").errors
            ) from None
        if first_flags & END_STREAM:
            self.ended = True

    def data(self, flags, payload):
        if not self.header_blocks:
            raise GrpcCallError(f"{self.name}: the server sent data before its headers")
        self.unacknowledged += len(payload)
        self.body += unpad(flags, payload, self.name)
        if len(self.body) > self.max_answer:
            raise GrpcCallError(
                f"{self.name}: the answer is larger than {self.max_answer} octets; refusing to read more"
            )
        if self.unacknowledged >= WINDOW_REFILL and not flags & END_STREAM:  # keep both windows wide open
            update = struct.pack(">I", self.unacknowledged)
            self.conn.send(frame(WINDOW_UPDATE, 0, 0, update) + frame(WINDOW_UPDATE, 0, STREAM, update))
            self.unacknowledged = 0
        if flags & END_STREAM:
            self.ended = True

    def result(self):
        fields = {}
        for block in self.header_blocks:
            for name, value in block:
                fields[name] = value
        status = fields.get(":status")
        if status is not None and status != "200":
            raise GrpcCallError(f"{self.name}: the server answered HTTP status {status}" + self.said_text())
        content_type = fields.get("content-type", "")
        if "grpc-status" in fields:
            code_text = fields["grpc-status"]
            code = ascii_int(code_text)
            text = percent_decode(fields.get("grpc-message", ""))
            if code != 0:
                label = GRPC_CODES.get(code, "unknown code") if code is not None else "unreadable"
                raise GrpcStatusError(
                    f"{self.name}: {self.method} failed with gRPC status {code_text} {label}"
                    + (f": {text}" if text else ""),
                    code=code,
                    grpc_message=text,
                )
        if content_type and not content_type.startswith("application/grpc"):
            raise GrpcCallError(
                f"{self.name}: the answer is {content_type!r}, not application/grpc: not a gRPC server"
                + self.said_text()
            )
        messages = self.messages()
        if not messages:
            raise GrpcCallError(f"{self.name}: the call ended without a message" + self.said_text())
        if len(messages) > 1:
            raise GrpcCallError(
                f"{self.name}: the answer holds {len(messages)} messages; a unary call answers with one"
            )
        if "grpc-status" not in fields:
            raise GrpcCallError(
                f"{self.name}: the call ended without trailers (no grpc-status): the answer may be cut off"
                + self.said_text()
            )
        return messages[0]

    def messages(self):
        body, out, pos = bytes(self.body), [], 0
        while pos < len(body):
            if pos + 5 > len(body):
                raise GrpcCallError(f"{self.name}: the answer ends inside a gRPC message prefix")
            compressed, length = struct.unpack(">BI", body[pos : pos + 5])
            if compressed:
                raise GrpcCallError(
                    f"{self.name}: the server compressed its answer although no compression was offered"
                )
            if pos + 5 + length > len(body):
                raise GrpcCallError(
                    f"{self.name}: the answer ends inside a gRPC message ({length} octets announced, "
                    f"{len(body) - pos - 5} there)"
                )
            out.append(body[pos + 5 : pos + 5 + length])
            pos += 5 + length
        return out
