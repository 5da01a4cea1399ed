"""The HPACK decoder (plugins/module_utils/_kubelet/hpack.py) against the PyPI package ``hpack`` (the oracle,
a test dependency only): sequences of header blocks on one connection (the dynamic table carried from block
to block), written by ``hpack``'s own encoder (Huffman or not, indexed, never indexed, table size updates,
values that are not UTF-8), by hand from random representations, or spoiled by one octet. Either both
decoders refuse a block, or both read the same fields from it. A fixed seed and at least CASES sequences per
run (GPUSPLIT_DIFF_CASES raises it)."""

from __future__ import annotations

import os
import random

import hpack as oracle

from ansible_collections.gpusplit.k8s.plugins.module_utils._kubelet import hpack as ours

CASES = max(2000, int(os.environ.get("GPUSPLIT_DIFF_CASES", "2000")))
SEED = 43

NAMES = [
    b":status",
    b"content-type",
    b"grpc-status",
    b"grpc-message",
    b"x-a",
    b"date",
    b"",
    b"X-Upper",
    b"a" * 40,
]
VALUES = [
    b"200",
    b"application/grpc",
    b"0",
    b"7",
    b"",
    b"caf\xc3\xa9",
    b"\xff\xfe",
    b"%C3%BC 100%25",
    b"v" * 300,
]


def value(rnd):
    if rnd.random() < 0.6:
        return rnd.choice(VALUES)
    return bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 12)))


def encoded_block(rnd, encoder):
    if rnd.random() < 0.15:
        encoder.header_table_size = rnd.choice([0, 64, 256, 4096, 4097, 8192])
    fields = []
    for _ in range(rnd.randint(0, 6)):
        name, val = rnd.choice(NAMES), value(rnd)
        fields.append(oracle.NeverIndexedHeaderTuple(name, val) if rnd.random() < 0.2 else (name, val))
    return encoder.encode(fields, huffman=rnd.random() < 0.5)


def integer(rnd, prefix_bits, first):
    big = rnd.random() < 0.1
    n = rnd.randint(0, 1 << 30) if big else rnd.randint(0, 80)
    raw = ours.encode_integer(n, prefix_bits, first)
    if rnd.random() < 0.05:  # a continuation that never ends, or leading zero continuations
        raw = raw[:1] + b"\x80" * rnd.randint(1, 8) + raw[1:]
    return raw


def string(rnd):
    data = value(rnd)
    if rnd.random() < 0.4:
        coded = (
            huffman(data)
            if rnd.random() < 0.8
            else bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 6)))
        )
        return ours.encode_integer(len(coded), 7, 0x80) + coded
    return ours.encode_integer(len(data), 7) + data


CODES = ours.huffman_codes()


def huffman(data, rnd=None):
    bits = length = 0
    for octet in data:
        code, n = CODES[octet]
        bits, length = (bits << n) | code, length + n
    pad = -length % 8
    bits, length = (bits << pad) | ((1 << pad) - 1), length + pad
    return bits.to_bytes(length // 8, "big") if length else b""


def hand_block(rnd):
    """Random representations in random order: indexed fields (static, dynamic, beyond both), literals of each
    kind with indexed or new names, table size updates anywhere in the block, strings Huffman-coded or not."""
    out = b""
    for _ in range(rnd.randint(0, 6)):
        kind = rnd.randrange(6)
        if kind == 0:
            out += integer(rnd, 7, 0x80)
        elif kind == 1:
            out += integer(rnd, 5, 0x20)
        else:
            prefix, first = ((6, 0x40), (4, 0x00), (4, 0x10), (6, 0x40))[kind - 2]
            if rnd.random() < 0.5:
                out += ours.encode_integer(rnd.randint(1, 70), prefix, first)
            else:
                out += bytes([first]) + string(rnd)
            out += string(rnd)
    return out


def spoiled(rnd, block):
    if not block:
        return bytes([rnd.randrange(256)])
    pos = rnd.randrange(len(block))
    how = rnd.randrange(3)
    if how == 0:
        return block[:pos] + bytes([block[pos] ^ (1 << rnd.randrange(8))]) + block[pos + 1 :]
    if how == 1:
        return block[:pos] + block[pos + 1 :]
    return block[:pos] + bytes([rnd.randrange(256)]) + block[pos:]


def decode_both(theirs, mine, block):
    try:
        expected = [(bytes(n), bytes(v)) for n, v in theirs.decode(block, raw=True)]
    except (oracle.HPACKError, oracle.InvalidTableIndex, IndexError, ValueError):
        expected = "refused"
    try:
        got = mine.decode_raw(block)
    except ours.HpackError:
        got = "refused"
    return expected, got


def test_header_blocks_decode_like_the_hpack_package():
    rnd = random.Random(SEED)
    seen = {"blocks": 0, "refused": 0}
    for case in range(CASES):
        encoder, theirs, mine = oracle.Encoder(), oracle.Decoder(), ours.HpackDecoder()
        history = []
        for _ in range(rnd.randint(1, 4)):
            style = rnd.randrange(4)
            block = encoded_block(rnd, encoder) if style < 2 else hand_block(rnd)
            if style == 3:
                block = spoiled(rnd, block)
            history.append(block)
            expected, got = decode_both(theirs, mine, block)
            assert got == expected, (
                f"case {case}: blocks {[b.hex() for b in history]}: hpack {expected!r}, ours {got!r}"
            )
            seen["blocks"] += 1
            if expected == "refused":
                seen["refused"] += 1
                break
    assert seen["blocks"] >= CASES and seen["refused"] >= CASES // 20, seen


def test_a_table_size_update_after_a_field_is_refused():
    """issue 43: an update in mid-block was accepted (RFC 7541 4.2: it must open the block); hpack refuses it."""
    block = bytes([0x88, 0x3F, 0xE1, 0x1F])  # :status 200, then a size update to 4096
    with __import__("pytest").raises(ours.HpackError, match="must open the block"):
        ours.HpackDecoder().decode_raw(block)
    assert decode_both(oracle.Decoder(), ours.HpackDecoder(), block) == ("refused", "refused")


def test_a_decoded_header_list_is_bounded():
    big = ours.encode_literal("x-a", "v" * 40000)
    with __import__("pytest").raises(ours.HpackError, match="more than 65536 octets of fields"):
        ours.HpackDecoder().decode_raw(big + big)
    assert decode_both(oracle.Decoder(), ours.HpackDecoder(), big + big) == ("refused", "refused")


def test_a_field_that_is_not_utf8_is_refused_as_text():
    """issue 43: invalid UTF-8 was replaced by U+FFFD in the text of a header field."""
    block = ours.encode_literal("grpc-message", "x")[:-1] + b"\xff"
    with __import__("pytest").raises(ours.HpackError, match="not UTF-8"):
        ours.HpackDecoder().decode(block)


def test_the_differential_tests_oracles_are_installed():
    """The TOML differential tests (tests/unit/plugins/module_utils/_host) are left out where Hypothesis or tomllib
    is missing (a managed-host Python); in the project's venv they must run."""
    import importlib.util

    assert importlib.util.find_spec("hypothesis") is not None, "pyproject.toml pins hypothesis: run make venv"
    assert importlib.util.find_spec("tomllib") is not None
