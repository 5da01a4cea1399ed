# Copyright: gpusplit contributors
# Apache-2.0
"""HPACK (RFC 7541), as much as a small HTTP/2 client needs. Private to the collection.

Encoding: literal header fields without indexing, names and values as plain octets (no Huffman),
so the peer's dynamic table is never touched. Decoding: everything a server may send, i.e. the
static table (Appendix A), the dynamic table with its size updates (section 4), literals with and
without indexing, never-indexed literals, and Huffman-coded strings (section 5.2, the code of
Appendix B). Standard library only, Python 3.8+.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError


class HpackError(GpusplitError):
    """A header block that does not decode."""


# RFC 7541 Appendix A: the static table, index 1 to 61 (an empty value where the RFC has none).
STATIC_TABLE = (
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
)

# RFC 7541 Appendix B: the length in bits of the Huffman code of each octet 0..255, sixteen a row.
# The code is canonical (codes of one length are consecutive, in octet order, and each length's
# first code follows the last code of the shorter lengths), so the lengths alone define it; the
# end-of-string symbol (256) is 30 bits long.
HUFFMAN_CODE_LENGTHS = (
    (13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28)
    + (28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28)
    + (6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6)
    + (5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10)
    + (13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7)
    + (7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6)
    + (15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5)
    + (6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28)
    + (20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23)
    + (24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24)
    + (22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23)
    + (21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23)
    + (26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25)
    + (19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27)
    + (20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23)
    + (26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26)
    + (30,)
)
EOS = 256
DEFAULT_TABLE_SIZE = 4096  # SETTINGS_HEADER_TABLE_SIZE's initial value (RFC 9113 section 6.5.2)


def huffman_codes():
    """{symbol: (code, length)} of the canonical code that HUFFMAN_CODE_LENGTHS defines."""
    order = sorted(range(len(HUFFMAN_CODE_LENGTHS)), key=lambda sym: (HUFFMAN_CODE_LENGTHS[sym], sym))
    codes = {}
    code, previous = -1, HUFFMAN_CODE_LENGTHS[order[0]]
    for sym in order:
        length = HUFFMAN_CODE_LENGTHS[sym]
        code = (code + 1) << (length - previous)
        previous = length
        codes[sym] = (code, length)
    return codes


HUFFMAN_DECODE = {(length, code): sym for sym, (code, length) in huffman_codes().items()}
SHORTEST_CODE = min(HUFFMAN_CODE_LENGTHS)


def huffman_decode(data):
    """The octets of a Huffman-coded string (RFC 7541 section 5.2); HpackError when it is malformed."""
    out = bytearray()
    code = length = 0
    for octet in bytearray(data):
        for shift in range(7, -1, -1):
            code = (code << 1) | ((octet >> shift) & 1)
            length += 1
            if length < SHORTEST_CODE:
                continue
            sym = HUFFMAN_DECODE.get((length, code))
            if sym is None:
                if length > 30:
                    raise HpackError("a Huffman-coded header string holds a code longer than 30 bits")
                continue
            if sym == EOS:
                raise HpackError("a Huffman-coded header string holds the end-of-string symbol")
            out.append(sym)
            code = length = 0
    # the padding: fewer than 8 bits, all ones (the most significant bits of the EOS code)
    if length > 7 or code != (1 << length) - 1:
        raise HpackError("a Huffman-coded header string does not end in the EOS padding")
    return bytes(out)


def encode_integer(value, prefix_bits, first=0):
    """An HPACK integer (section 5.1) with ``prefix_bits`` bits in the first octet, whose other bits are ``first``."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_literal(name, value):
    """One header field as a literal without indexing, new name, no Huffman (section 6.2.2)."""
    name_b, value_b = name.encode("ascii"), value.encode("utf-8")
    return (
        encode_integer(0, 4)
        + encode_integer(len(name_b), 7)
        + name_b
        + encode_integer(len(value_b), 7)
        + value_b
    )


def encode_headers(fields):
    """A header block of (name, value) pairs, each a literal without indexing."""
    return b"".join(encode_literal(name, value) for name, value in fields)


class HpackDecoder:
    """The decoding side of one HTTP/2 connection: its dynamic table lives across header blocks."""

    def __init__(self, max_table_size=DEFAULT_TABLE_SIZE, max_list_size=65536):
        self.limit = max_table_size  # what we allow (our SETTINGS_HEADER_TABLE_SIZE)
        self.max_list_size = max_list_size  # one decoded block: names, values and 32 octets per field
        self.max_size = max_table_size  # what the encoder chose (dynamic table size update)
        self.table = []  # newest first: (name bytes, value bytes)
        self.size = 0

    def entry(self, index):
        if index <= 0:
            raise HpackError("a header field refers to table index 0")
        if index <= len(STATIC_TABLE):
            name, value = STATIC_TABLE[index - 1]
            return name.encode(), value.encode()
        position = index - len(STATIC_TABLE) - 1
        if position >= len(self.table):
            raise HpackError(
                f"a header field refers to table index {index}, beyond the "
                f"{len(STATIC_TABLE) + len(self.table)} entries there are"
            )
        return self.table[position]

    def evict(self):
        while self.size > self.max_size and self.table:
            name, value = self.table.pop()
            self.size -= len(name) + len(value) + 32

    def add(self, name, value):
        self.table.insert(0, (name, value))
        self.size += len(name) + len(value) + 32
        self.evict()

    @staticmethod
    def integer(block, pos, prefix_bits):
        if pos >= len(block):
            raise HpackError("a header block ends inside an integer")
        limit = (1 << prefix_bits) - 1
        value = block[pos] & limit
        pos += 1
        if value < limit:
            return value, pos
        shift = 0
        while True:
            if pos >= len(block):
                raise HpackError("a header block ends inside an integer")
            octet = block[pos]
            pos += 1
            value += (octet & 0x7F) << shift
            shift += 7
            if not octet & 0x80:
                return value, pos
            if shift > 28:
                raise HpackError("a header block holds an integer too large for it")

    def string(self, block, pos):
        if pos >= len(block):
            raise HpackError("a header block ends before a string")
        huffman = block[pos] & 0x80
        length, pos = self.integer(block, pos, 7)
        if pos + length > len(block):
            raise HpackError("a header block ends inside a string")
        raw = bytes(block[pos : pos + length])
        return (huffman_decode(raw) if huffman else raw), pos + length

    def decode(self, block):
        """[(name, value), ...] of one complete header block, as text; HpackError where a field is not UTF-8."""
        out = []
        for name, value in self.decode_raw(block):
            try:
                out.append((name.decode("utf-8"), value.decode("utf-8")))
            except UnicodeDecodeError:
                raise HpackError(f"a header field is not UTF-8: {name[:40]!r}: {value[:40]!r}") from None
        return out

    def decode_raw(self, block):
        """[(name, value), ...] of one complete header block, as octets. Refused (HpackError): anything
        RFC 7541 calls a decoding error, a dynamic table size update after the block's first field
        (section 4.2), and a block whose fields take more than ``max_list_size`` octets (names, values and
        32 octets per field, as SETTINGS_MAX_HEADER_LIST_SIZE counts them)."""
        block = bytearray(block)
        fields = []
        pos = 0
        size_of_list = 0

        def keep(field):
            nonlocal size_of_list
            size_of_list += len(field[0]) + len(field[1]) + 32
            if size_of_list > self.max_list_size:
                raise HpackError(
                    f"a header block decodes to more than {self.max_list_size} octets of fields "
                    "(SETTINGS_MAX_HEADER_LIST_SIZE); refusing to read more"
                )
            fields.append(field)

        while pos < len(block):
            octet = block[pos]
            if octet & 0x80:  # indexed header field
                index, pos = self.integer(block, pos, 7)
                keep(self.entry(index))
                continue
            if octet & 0xE0 == 0x20:  # dynamic table size update
                if fields:
                    raise HpackError(
                        "a dynamic table size update comes after a header field; it must open the block"
                    )
                size, pos = self.integer(block, pos, 5)
                if size > self.limit:
                    raise HpackError(
                        f"the peer sets its header table to {size} octets, above the {self.limit} allowed"
                    )
                self.max_size = size
                self.evict()
                continue
            indexing = octet & 0xC0 == 0x40
            index, pos = self.integer(block, pos, 6 if indexing else 4)
            if index:
                name = self.entry(index)[0]
            else:
                name, pos = self.string(block, pos)
            value, pos = self.string(block, pos)
            if indexing:
                self.add(name, value)
            keep((name, value))
        return fields
