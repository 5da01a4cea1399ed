"""The standard-library TOML reader managed hosts use (plugins/module_utils/_host/toml_read.py).

Runs on Python 3.8+ (tools/multi_python_tests.py runs it under each Python found). Every case is
checked against the expected Python value; where the standard library has tomllib (3.11+), every
valid and invalid document is also checked to be read the same way by tomllib.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._host import toml_read

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

ROOT = Path(__file__).resolve().parents[5]
FIXTURE = ROOT / "tests" / "fixtures" / "nvidia-container-toolkit" / "config.toml"
needs_tomllib = pytest.mark.skipif(tomllib is None, reason="tomllib is in the standard library from 3.11")

UTC = dt.timezone.utc  # noqa: UP017 - runs on 3.8+

VALID = {
    "empty": ("", {}),
    "comments and blanks": ("# a\n\n  # b\n\t\n", {}),
    "bare, quoted, literal keys": (
        'a-b_c = 1\n"x y" = 2\n\'l\\k\' = 3\n"" = 4\n1234 = 5\n',
        {"a-b_c": 1, "x y": 2, "l\\k": 3, "": 4, "1234": 5},
    ),
    "dotted keys with blanks": (
        'a . b."c.d" = true\na.e = false\n',
        {"a": {"b": {"c.d": True}, "e": False}},
    ),
    "basic string escapes": (
        r'a = "q\" b\\ t\t n\n r\r f\f bs\b u\u00e9 U\U0001F600"' + "\n",
        {"a": 'q" b\\ t\t n\n r\r f\f bs\b u\u00e9 U\U0001f600'},
    ),
    "literal string": ("a = 'C:\\path\\\"x'\n", {"a": 'C:\\path\\"x'}),
    "multi-line basic": (
        'a = """\nline1\n  line2 \\\n     joined\\\n\n  after"""\n',
        {"a": "line1\n  line2 joined" + "after"},
    ),
    "multi-line basic, quotes at the end": ('a = """x""""\nb = """y"""""\n', {"a": 'x"', "b": 'y""'}),
    "multi-line literal": (
        "a = '''\nfirst\n\\n raw'''\nb = '''z'''''\n",
        {"a": "first\n\\n raw", "b": "z''"},
    ),
    "integers": (
        "a = +99\nb = -17\nc = 0\nd = 1_000\ne = 0xDEAD_beef\nf = 0o755\ng = 0b1101\nh = -0\n",
        {"a": 99, "b": -17, "c": 0, "d": 1000, "e": 0xDEADBEEF, "f": 0o755, "g": 13, "h": 0},
    ),
    "floats": (
        "a = 1.5\nb = -3.14e-2\nc = 5e+22\nd = 1e06\ne = 6.626e-34\nf = 9_224_617.445_991\ng = inf\nh = -inf\n",
        {
            "a": 1.5,
            "b": -0.0314,
            "c": 5e22,
            "d": 1e6,
            "e": 6.626e-34,
            "f": 9224617.445991,
            "g": float("inf"),
            "h": float("-inf"),
        },
    ),
    "booleans": ("t = true\nf = false\n", {"t": True, "f": False}),
    "date-times": (
        "odt1 = 1979-05-27T07:32:00Z\nodt2 = 1979-05-27T00:32:00.999999-07:00\n"
        "odt3 = 1979-05-27 07:32:00+05:30\nldt = 1979-05-27T07:32:00.5\nld = 1979-05-27\nlt = 00:32:00.1234567\n",
        {
            "odt1": dt.datetime(1979, 5, 27, 7, 32, tzinfo=UTC),
            "odt2": dt.datetime(1979, 5, 27, 0, 32, 0, 999999, tzinfo=dt.timezone(-dt.timedelta(hours=7))),
            "odt3": dt.datetime(1979, 5, 27, 7, 32, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
            "ldt": dt.datetime(1979, 5, 27, 7, 32, 0, 500000),
            "ld": dt.date(1979, 5, 27),
            "lt": dt.time(0, 32, 0, 123456),
        },
    ),
    "arrays over lines with comments": (
        'a = [\n  1, # one\n  2,\n  # nothing\n]\nb = [ "x", [1, 2], {c = 1} ]\nc = []\n',
        {"a": [1, 2], "b": ["x", [1, 2], {"c": 1}], "c": []},
    ),
    "inline tables": (
        'p = { x = 1, y.z = "w" }\ne = {}\n',
        {"p": {"x": 1, "y": {"z": "w"}}, "e": {}},
    ),
    "tables and sub-tables in any order": (
        '[a.b.c]\nx = 1\n[a]\ny = 2\n[a.d]\n[ q . "r" ]\n',
        {"a": {"b": {"c": {"x": 1}}, "y": 2, "d": {}}, "q": {"r": {}}},
    ),
    "dotted keys define sub-tables of the header": (
        "[t]\na.b = 1\na.c = 2\n[t.a.d]\ne = 3\n",
        {"t": {"a": {"b": 1, "c": 2, "d": {"e": 3}}}},
    ),
    "arrays of tables": (
        '[[f]]\nn = "a"\n[f.p]\nc = 1\n[[f.v]]\nn = 1\n[[f]]\nn = "b"\n[f.p]\nc = 2\n',
        {"f": [{"n": "a", "p": {"c": 1}, "v": [{"n": 1}]}, {"n": "b", "p": {"c": 2}}]},
    ),
    "crlf line endings": (
        'a = 1\r\n# c\r\n[t]\r\nb = """x\r\ny"""\r\nc = [\r\n 1,\r\n]\r\n',
        {"a": 1, "t": {"b": "x\ny", "c": [1]}},
    ),
    "no final newline": ("a = 1", {"a": 1}),
    "tab and unicode in comments and strings": ('a = "\tx\u00e9" # caf\u00e9\t\n', {"a": "\tx\u00e9"}),
    "hash in strings": ("a = \"#x\" # y\nb = '#'\n", {"a": "#x", "b": "#"}),
}

INVALID = {
    "key without value": "a =\n",
    "value without key": "= 1\n",
    "two statements on a line": "a = 1 b = 2\n",
    "key defined twice": "a = 1\na = 2\n",
    "table defined twice": "[a]\n[a]\n",
    "table then dotted key into it": "[a.b]\n[a]\nb.c = 1\n",
    "dotted key then table header": "a.b = 1\n[a]\n",
    "dotted key table then its header": "[t]\na.b = 1\n[t.a]\n",
    "value used as table": "a = 1\n[a]\n",
    "value extended by dotted key": "a = 1\na.b = 2\n",
    "inline table extended later": "a = {b = 1}\na.c = 2\n",
    "inline table extended by header": "a = {b = 1}\n[a.c]\n",
    "static array appended": "a = []\n[[a]]\n",
    "table then array of tables": "[a]\n[[a]]\n",
    "array of tables then table": "[[a]]\n[a]\n",
    "inline table over lines": "a = {b = 1,\nc = 2}\n",
    "inline table trailing comma": "a = {b = 1,}\n",
    "inline table duplicate": "a = {b = 1, b = 2}\n",
    "array without comma": "a = [1 2]\n",
    "unterminated array": "a = [1, 2\n",
    "unterminated string": 'a = "x\n',
    "unterminated multi-line": 'a = """x\n',
    "bad escape": 'a = "\\x41"\n',
    "surrogate escape": 'a = "\\uD800"\n',
    "short unicode escape": 'a = "\\u12"\n',
    "control character in string": 'a = "\x01"\n',
    "control character in comment": "# \x7f\n",
    "lone carriage return": "a = 1\rb = 2\n",
    "leading zero": "a = 012\n",
    "double underscore": "a = 1__0\n",
    "trailing underscore": "a = 1_\n",
    "signed hex": "a = +0x1\n",
    "upper-case hex prefix": "a = 0X1\n",
    "float without digits after point": "a = 1.\n",
    "float without digits before point": "a = .5\n",
    "exponent without digits": "a = 1e\n",
    "bare word": "a = yes\n",
    "capitalised bool": "a = True\n",
    "invalid date": "a = 2023-02-30\n",
    "time without seconds": "a = 07:32\n",
    "hour 24": "a = 24:00:00\n",
    "bare key with dot at end": "a. = 1\n",
    "header not closed": "[a\n",
    "array header not closed": "[[a]\n",
    "multi-line string as key": '"""a""" = 1\n',
    "non-ascii bare key": "caf\u00e9 = 1\n",
    "byte order mark": "\ufeffa = 1\n",
    "six closing quotes": 'a = """x""""""\n',
    "literal string with newline": "a = 'x\ny'\n",
    "line-ending backslash in a basic string": 'a = "x\\\ny"\n',
    "empty bare key": "[]\n",
}


def _equal(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))  # noqa: B905 - 3.8+
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_documents_read_as_expected(name):
    text, expected = VALID[name]
    assert _equal(toml_read.loads(text), expected)


def test_special_floats():
    data = toml_read.loads("a = nan\nb = +nan\nc = -inf\nd = +inf\n")
    assert math.isnan(data["a"]) and math.isnan(data["b"])
    assert data["c"] == float("-inf") and data["d"] == float("inf")


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_documents_are_refused_with_the_place(name):
    with pytest.raises(toml_read.TomlReadError, match=r"\(at line \d+, column \d+\)$"):
        toml_read.loads(INVALID[name])


def test_error_names_line_and_column():
    with pytest.raises(toml_read.TomlReadError) as exc:
        toml_read.loads('a = 1\n[t]\nb = "x\\q"\n')
    assert str(exc.value) == "invalid escape '\\\\q' (at line 3, column 7)"
    with pytest.raises(toml_read.TomlReadError, match=r"key t\.b is defined twice \(at line 4, column 5\)"):
        toml_read.loads("[t]\nb = 1\n\nb = 2\n")


def test_not_text_is_refused():
    with pytest.raises(toml_read.TomlReadError, match="TOML text must be a string, got bytes"):
        toml_read.loads(b"a = 1")


def test_decode_basic_string():
    assert toml_read.decode_basic_string("a\\u0041\\t") == "aA\t"
    with pytest.raises(toml_read.TomlReadError):
        toml_read.decode_basic_string('a" "b')


def test_the_toolkits_generated_config():
    data = toml_read.loads(FIXTURE.read_text(encoding="utf-8"))
    assert data["disable-require"] is False
    assert data["nvidia-container-cli"]["environment"] == []
    assert data["nvidia-container-runtime"]["modes"]["cdi"]["spec-dirs"] == ["/etc/cdi", "/var/run/cdi"]
    assert data["nvidia-container-runtime"]["modes"]["csv"] == {
        "mount-spec-path": "/etc/nvidia-container-runtime/host-files-for-container.d"
    }
    assert data["nvidia-ctk"] == {"path": "nvidia-ctk"}


# --------------------------------------------------------------------------------------------
# the same answers as the standard library


@needs_tomllib
@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_documents_read_like_tomllib(name):
    text = VALID[name][0]
    assert _equal(toml_read.loads(text), tomllib.loads(text))


@needs_tomllib
@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_documents_are_invalid_for_tomllib_too(name):
    with pytest.raises(tomllib.TOMLDecodeError):
        tomllib.loads(INVALID[name])


@needs_tomllib
def test_every_toml_file_of_the_project_reads_like_tomllib():
    paths = [FIXTURE, ROOT / "pyproject.toml", *sorted((ROOT / "tests" / "fixtures").rglob("*.toml"))]
    for path in paths:
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            assert _equal(toml_read.loads(text), tomllib.loads(text)), path
