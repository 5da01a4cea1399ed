"""HPACK (plugins/module_utils/_kubelet/hpack.py) against the examples of RFC 7541 Appendix C."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._kubelet import hpack


def test_the_huffman_code_is_complete_and_ends_in_the_30_bit_eos():
    # a complete prefix code: the Kraft sum of its lengths is exactly one
    assert len(hpack.HUFFMAN_CODE_LENGTHS) == 257
    assert sum(1 << (30 - n) for n in hpack.HUFFMAN_CODE_LENGTHS) == 1 << 30
    codes = hpack.huffman_codes()
    assert codes[hpack.EOS] == ((1 << 30) - 1, 30)
    # a few codes as RFC 7541 Appendix B prints them
    assert codes[ord("0")] == (0x0, 5)
    assert codes[ord("a")] == (0x3, 5)
    assert codes[ord(" ")] == (0x14, 6)
    assert codes[ord("X")] == (0xFC, 8)
    assert codes[0] == (0x1FF8, 13)
    assert codes[255] == (0x3FFFFEE, 26)


@pytest.mark.parametrize(
    ("coded", "plain"),
    [
        # RFC 7541 C.4.1 to C.4.3 and C.6.1
        ("f1e3c2e5f23a6ba0ab90f4ff", b"www.example.com"),
        ("a8eb10649cbf", b"no-cache"),
        ("25a849e95ba97d7f", b"custom-key"),
        ("25a849e95bb8e8b4bf", b"custom-value"),
        ("6402", b"302"),
        ("aec3771a4b", b"private"),
        ("d07abe941054d444a8200595040b8166e082a62d1bff", b"Mon, 21 Oct 2013 20:13:21 GMT"),
        ("9d29ad171863c78f0b97c8e9ae82ae43d3", b"https://www.example.com"),
    ],
)
def test_huffman_decodes_the_rfc_examples(coded, plain):
    assert hpack.huffman_decode(bytes.fromhex(coded)) == plain


@pytest.mark.parametrize(
    ("coded", "why"),
    [
        ("f1e3c2e5f23a6ba0ab90f400", "EOS padding"),  # padding of zeros
        ("ffffffff", "end-of-string symbol"),  # the EOS code itself (30 ones) and more ones
        ("f1e3c2e5f23a6ba0ab90f4ffff", "EOS padding"),  # more than 7 bits of padding
    ],
)
def test_huffman_refuses_malformed_strings(coded, why):
    with pytest.raises(hpack.HpackError, match=why):
        hpack.huffman_decode(bytes.fromhex(coded))


def test_the_dynamic_table_across_requests_rfc_c3():
    """RFC 7541 C.3: three requests without Huffman coding, one decoder."""
    decoder = hpack.HpackDecoder()
    first = decoder.decode(bytes.fromhex("828684410f7777772e6578616d706c652e636f6d"))
    assert first == [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
    ]
    assert decoder.size == 57
    second = decoder.decode(bytes.fromhex("828684be58086e6f2d6361636865"))
    assert second[-1] == ("cache-control", "no-cache") and second[-2] == (":authority", "www.example.com")
    assert decoder.size == 110
    third = decoder.decode(bytes.fromhex("828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565"))
    assert third == [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ]
    assert decoder.size == 164


def test_responses_with_huffman_and_eviction_rfc_c6():
    """RFC 7541 C.6: responses with Huffman coding, a 256-octet table, so entries are evicted."""
    decoder = hpack.HpackDecoder(max_table_size=256)
    first = decoder.decode(
        bytes.fromhex(
            "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff"
            "6e919d29ad171863c78f0b97c8e9ae82ae43d3"
        )
    )
    assert first == [
        (":status", "302"),
        ("cache-control", "private"),
        ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
        ("location", "https://www.example.com"),
    ]
    assert decoder.size == 222
    second = decoder.decode(bytes.fromhex("4883640effc1c0bf"))
    assert second[0] == (":status", "307") and second[3] == ("location", "https://www.example.com")
    assert decoder.size == 222


def test_literals_round_trip_and_never_indexed_fields_are_read():
    block = hpack.encode_headers([(":path", "/v1.PodResourcesLister/List"), ("te", "trailers")])
    assert block[0] == 0x00  # literal without indexing, new name
    decoder = hpack.HpackDecoder()
    assert decoder.decode(block) == [(":path", "/v1.PodResourcesLister/List"), ("te", "trailers")]
    assert decoder.table == []
    never = bytes([0x10]) + hpack.encode_integer(8, 7) + b"password" + hpack.encode_integer(6, 7) + b"secret"
    assert decoder.decode(never) == [("password", "secret")]


def test_long_integers_and_bad_blocks():
    value = "x" * 300
    block = hpack.encode_headers([("grpc-message", value)])
    assert hpack.HpackDecoder().decode(block) == [("grpc-message", value)]
    with pytest.raises(hpack.HpackError, match="table index 70"):
        hpack.HpackDecoder().decode(hpack.encode_integer(70, 7, 0x80))
    with pytest.raises(hpack.HpackError, match="above the 4096 allowed"):
        hpack.HpackDecoder().decode(hpack.encode_integer(5000, 5, 0x20))
    with pytest.raises(hpack.HpackError, match="ends inside a string"):
        hpack.HpackDecoder().decode(block[:-3])
