"""Generated TOML documents for the differential tests of toml_read.py and toolkit_config.py.

Hypothesis draws a ``random.Random`` per case (``st.randoms``: a fixed seed, at least CASES cases per target
and run; GPUSPLIT_DIFF_CASES raises it, as make test-matrix does) and the functions here write a document
from it, in every spelling TOML 1.0 allows for the same data: the four string kinds, integers in four
bases with underscores, special floats, date-times, arrays and inline tables over several lines with
comments, dotted keys, [tables] and [[arrays of tables]], LF or CRLF, and comments and strings full of the
characters other line splitters break at (U+0085, U+2028, U+2029, VT, FF). ``spoil`` changes one
character, so that refusals are compared too. The oracle is the standard library's ``tomllib``; this
module only writes text. Plain ``random`` calls rather than one Hypothesis strategy per element: the same
documents at a tenth of the cost.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

CASES = max(2000, int(os.environ.get("GPUSPLIT_DIFF_CASES", "2000")))
SEED = 43


def each_case(function):
    """Run ``function(rnd)`` for CASES Hypothesis-drawn ``random.Random``s, with the fixed seed and no example
    database; returns how many cases ran."""
    ran = [0]

    @seed(SEED)
    @settings(max_examples=CASES, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.randoms(use_true_random=True))
    def check(rnd):
        ran[0] += 1
        function(rnd)

    check()
    return ran[0]


LINE_LIKE = "\x85\u2028\u2029\x0b\x0c\x1c\x1d\x1e"
TEXT_CHARS = list("ab z_-.=#[]{}'\"\\,\t") + list("\x85\u2028\u2029é€😀\u00a0\ufeff")
HOSTILE = list("\n\r\t '\"\\#=[]{}.,") + list(LINE_LIKE) + ["\x00", "\x7f", "\u2028"]
KEY_CHARS = "abcxyz019_-"


def text(rnd, alphabet, low, high):
    return "".join(rnd.choice(alphabet) for _ in range(rnd.randint(low, high)))


def key(rnd):
    """(name, spelling) of a key: bare, basic-quoted or literal-quoted."""
    name = text(rnd, KEY_CHARS, 1, 4)
    kind = rnd.randrange(6)
    if kind == 4:
        return name, '"' + name + rnd.choice(["", " ", "\\u2028", "\u2028", "\x85", "é", "\\t"]) + '"'
    if kind == 5:
        return name, "'" + name + rnd.choice(["", " ", "\u2029", "\\"]) + "'"
    return name, name


def keys(rnd, most):
    out, seen = [], set()
    for _ in range(rnd.randint(0, most)):
        name, spelled = key(rnd)
        if name not in seen:
            seen.add(name)
            out.append((name, spelled))
    return out


def basic_escape(ch):
    return {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(ch) or (
        f"\\u{ord(ch):04X}" if ord(ch) < 0x20 or ord(ch) == 0x7F else ch
    )


def string(rnd):
    body = text(rnd, TEXT_CHARS, 0, 8)
    kind = rnd.randrange(5)
    if kind == 1 and "'" not in body:
        return "'" + body + "'"
    if kind == 2:
        inner = "".join(basic_escape(c) if c in '"\\' else c for c in body)
        return '"""' + rnd.choice(["", "\n", "\r\n"]) + inner + rnd.choice(["", "\\\n   x", "\n"]) + '"""'
    if kind == 3 and "'''" not in body:
        return "'''" + rnd.choice(["", "\n"]) + body + "'''"
    return '"' + "".join(basic_escape(c) for c in body) + rnd.choice(["", "\\U0001F600", "\\b", ""]) + '"'


INTEGER_WORDS = [
    "0",
    "+0",
    "-0",
    "1_000",
    "0xDEAD_beef",
    "0o755",
    "0b1101",
    "9223372036854775807",
    "-9223372036854775808",
    "123456789012345678901234567890",
]
FLOAT_WORDS = [
    "nan",
    "+nan",
    "-nan",
    "inf",
    "+inf",
    "-inf",
    "-0.0",
    "0.0",
    "1e1_0",
    "6.626e-34",
    "3.14_15",
    "1E+2",
]
DATES = [
    "1979-05-27T07:32:00Z",
    "1979-05-27 00:32:00.999999-07:00",
    "1979-05-27T07:32:00",
    "1979-05-27",
    "07:32:00",
    "00:32:00.5",
    "2000-02-29T23:59:59+23:59",
    "1979-05-27t07:32:00z",
]


def scalar(rnd):
    kind = rnd.randrange(8)
    if kind == 0:
        return str(rnd.randint(-(10**20), 10**20))
    if kind == 1:
        return rnd.choice(INTEGER_WORDS)
    if kind == 2:
        return repr(rnd.uniform(-1e6, 1e6)) if rnd.random() < 0.7 else rnd.choice(FLOAT_WORDS)
    if kind == 3:
        return rnd.choice(["true", "false"])
    if kind == 4:
        return rnd.choice(DATES)
    return string(rnd)


def value(rnd, depth=0):
    if depth >= 2 or rnd.randrange(4):
        return scalar(rnd)
    if rnd.random() < 0.5:
        items = [value(rnd, depth + 1) for _ in range(rnd.randint(0, 3))]
        sep = rnd.choice([", ", ",", ",\n  ", " , # x\u2028\n"])
        return "[" + sep.join(items) + rnd.choice(["", ",", "\n"]) + "]"
    return "{" + ", ".join(f"{k[1]} = {value(rnd, depth + 1)}" for k in keys(rnd, 3)) + "}"


def blank(rnd):
    return rnd.choice(["", " ", "\t", "  "])


def comment(rnd):
    """Nothing, or a comment (to the end of the line) holding any character TOML allows there."""
    if rnd.randrange(3):
        return ""
    return rnd.choice([" #", "#", "  # "]) + text(rnd, TEXT_CHARS, 0, 6)


def pairs(rnd, prefix="d"):
    """``key = value`` lines of one table (unique keys, some dotted)."""
    out = []
    for n, (_name, spelled) in enumerate(keys(rnd, 4)):
        if rnd.randrange(5) == 0:
            spelled = f"{prefix}{n}.{spelled}"
        out.append(f"{blank(rnd)}{spelled}{blank(rnd)}={blank(rnd)}{value(rnd)}{blank(rnd)}{comment(rnd)}")
    return out


def document(rnd, tables=("t", "t.u", "u", '"t".v', "t . w"), extra=()):
    """A TOML document as text, usually valid. ``extra``: lines that may stand in any table (commented-out
    assignments, as the toolkit writes them)."""
    nl = rnd.choice(["\n", "\n", "\r\n"])
    lines = []
    if rnd.random() < 0.5:
        lines.append(comment(rnd) or "#")
    lines.extend(pairs(rnd))
    headers = rnd.sample(list(tables), rnd.randint(0, min(4, len(tables))))
    for n, header in enumerate(headers):
        if rnd.randrange(6) == 0:
            lines.append(f"[[{header}]]")
        else:
            lines.append(f"{blank(rnd)}[{header}]{blank(rnd)}{comment(rnd)}")
        body = pairs(rnd, f"h{n}d")
        for line in extra:
            if rnd.random() < 0.3:
                body.insert(rnd.randint(0, len(body)), line)
        lines.extend(body)
        if rnd.random() < 0.5:
            lines.append("")
    return nl.join(lines) + rnd.choice([nl, "", nl + nl])


def spoil(rnd, doc):
    """``doc`` with one character inserted, removed or replaced."""
    if not doc:
        return rnd.choice(HOSTILE)
    pos = rnd.randint(0, len(doc))
    how = rnd.randrange(3)
    ch = rnd.choice(HOSTILE)
    if how == 0:
        return doc[:pos] + ch + doc[pos:]
    if how == 1:
        return doc[:pos] + doc[pos + 1 :]
    return doc[:pos] + ch + doc[pos + 1 :]


# ---- toolkit-like files and the settings an edit is given

TOOLKIT_TABLES = (
    "nvidia-container-cli",
    "nvidia-container-runtime",
    "nvidia-container-runtime.modes.cdi",
    "features",
    "t",
)
COMMENTED = (
    '#root = "/run/nvidia/driver"',
    '# debug = "/var/log/nvidia-container-toolkit.log"',
    '#runtimes = ["docker-runc", "runc", "crun"]',
    "#accept-nvidia-visible-devices-envvar-when-unprivileged = true",
    "  # spec-dirs = [] # \u2028 x",
    "#k = 1 # c\u2028d",
    "# allow-ldconfig = false",
)
TOP_EXTRA = (
    "accept-nvidia-visible-devices-as-volume-mounts = false # \x85",
    'nvidia-container-cli.debug = "/x\u2028"',
    "features.x = true",
    "t.k = nan",
)


def toolkit_document(rnd):
    """A config.toml as an operator might have edited it: the toolkit's tables, its commented-out
    defaults, unrelated keys, and the hostile characters of :func:`document`."""
    doc = document(rnd, tables=TOOLKIT_TABLES, extra=COMMENTED)
    if rnd.random() < 0.3:
        doc = rnd.choice(TOP_EXTRA) + "\n" + doc
    return doc


def setting_value(rnd, kind):
    if kind == "boolean":
        return rnd.random() < 0.5
    if kind == "string":
        return text(rnd, TEXT_CHARS + ["\n", "\r", "\x00", "\x7f"], 0, 6)
    if kind == "list of strings":
        return [text(rnd, TEXT_CHARS, 0, 4) for _ in range(rnd.randint(0, 3))]
    choice = rnd.randrange(5)
    if choice == 0:
        return rnd.randint(-(1 << 63), (1 << 63) - 1)
    if choice == 1:
        return rnd.uniform(-1e9, 1e9)
    return setting_value(rnd, ("boolean", "string", "list of strings")[choice - 2])


SETTING_KEYS = (
    ("accept-nvidia-visible-devices-envvar-when-unprivileged", "boolean"),
    ("accept-nvidia-visible-devices-as-volume-mounts", "boolean"),
    ("nvidia-container-cli.root", "string"),
    ("nvidia-container-cli.debug", "string"),
    ("nvidia-container-runtime.runtimes", "list of strings"),
    ("nvidia-container-runtime.modes.cdi.spec-dirs", "list of strings"),
    ("features.allow-ldconfig", "boolean"),
    ("features.x", "boolean"),
    ("t.k", None),
    ("t.u.k", None),
    ("k", None),
)


def settings_for(rnd):
    chosen = rnd.sample(SETTING_KEYS, rnd.randint(1, 3))
    return {name: setting_value(rnd, kind) for name, kind in chosen}
