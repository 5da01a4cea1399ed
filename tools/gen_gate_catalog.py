#!/usr/bin/env python3
# Copyright: gpusplit contributors
# Apache License 2.0 (see galaxy.yml)
"""Generate plugins/module_utils/_control_plane/gate_data.py: every Kubernetes feature gate, per release.

Reads the released Go modules from the Go module cache (``go env GOMODCACHE``), downloading the
ones that are missing with ``go mod download`` (through the Go module proxy), and writes a plain
Python dict literal.  Nothing is compiled or run from those modules; the Go text is only read.

What a control-plane component registers on its ``--feature-gates`` flag (read from the same
releases):

* ``k8s.io/kubernetes pkg/features/kube_features.go``: ``defaultVersionedKubernetesFeatureGates``
  (kube's own gates plus copies of the apiserver, apiextensions-apiserver, controller-manager and
  zpages gates) and ``defaultKubernetesFeatureGateDependencies``; its ``init`` also registers the
  client-go gates (``k8s.io/client-go features/known_features.go``) and the zpages gates.
* ``k8s.io/apiserver pkg/features/kube_features.go`` and ``k8s.io/apiextensions-apiserver
  pkg/features/kube_features.go`` (``init`` of those packages), ``k8s.io/controller-manager
  pkg/features/kube_features.go`` (``register`` package).
* ``k8s.io/component-base logs/api/v1/kube_features.go``: ``logsapi.AddFeatureGates`` in
  ``cmd/kube-apiserver``, ``cmd/kube-scheduler``, ``cmd/kube-controller-manager``, ``cmd/kubelet``.
* ``k8s.io/component-base metrics/features/kube_features.go``: ``init`` of
  ``k8s.io/apiserver pkg/server/config.go`` and explicitly in the scheduler, controller-manager and
  kubelet.

Usage::

    python tools/gen_gate_catalog.py            # write the data module
    python tools/gen_gate_catalog.py --check    # exit 1 when the data module is out of date
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA_MODULE = ROOT / "plugins" / "module_utils" / "_control_plane" / "gate_data.py"

#: Kubernetes minor -> the k8s.io/kubernetes release read for it.
RELEASES = {"1.35": "1.35.4", "1.36": "1.36.3", "1.37": "1.37.2"}

KUBERNETES = "k8s.io/kubernetes"
#: Staging modules whose gates the components register (released as v0.<minor>.<patch>).
STAGING = (
    "k8s.io/apiserver",
    "k8s.io/apiextensions-apiserver",
    "k8s.io/client-go",
    "k8s.io/component-base",
    "k8s.io/controller-manager",
)

#: (module, file): every versioned gate map in these files is read.
GATE_FILES = (
    (KUBERNETES, "pkg/features/kube_features.go"),
    ("k8s.io/client-go", "features/known_features.go"),
    ("k8s.io/apiserver", "pkg/features/kube_features.go"),
    ("k8s.io/apiextensions-apiserver", "pkg/features/kube_features.go"),
    ("k8s.io/controller-manager", "pkg/features/kube_features.go"),
    ("k8s.io/component-base", "logs/api/v1/kube_features.go"),
    ("k8s.io/component-base", "metrics/features/kube_features.go"),
    ("k8s.io/component-base", "zpages/features/kube_features.go"),
)
#: (module, file): the dependency map is read from these.
DEPENDENCY_FILES = ((KUBERNETES, "pkg/features/kube_features.go"),)

_STAGES = {"Alpha": "alpha", "Beta": "beta", "GA": "ga", "Deprecated": "deprecated", "PreAlpha": "prealpha"}
_TOKENS = re.compile(r'"(?:\\.|[^"\\\n])*"|`[^`]*`|//[^\n]*|/\*.*?\*/', re.S)
_CONST = re.compile(
    r"^\s*(\w+)\s*(?:\s(?:featuregate\.)?Feature\s*)?=\s*(?:(?:featuregate\.)?Feature\(\s*)?\"([^\"]+)\"",
    re.M,
)
_IMPORT_BLOCK = re.compile(r"^import \((.*?)^\)", re.M | re.S)
_IMPORT_LINE = re.compile(r'^\s*(?:(\w+)\s+)?"([^"]+)"', re.M)
_SPEC_MAP = re.compile(r"map\[(?:featuregate\.)?Feature\](?:featuregate\.)?VersionedSpecs\{")
_DEP_MAP = re.compile(r"map\[(?:featuregate\.)?Feature\]\[\](?:featuregate\.)?Feature\{")
_KEY = re.compile(r"\s*([A-Za-z_][\w.]*)\s*:\s*\{")
_VERSION = re.compile(
    r'^version\.MustParse\("v?(\d+)\.(\d+)(?:\.\d+)?"\)$|^version\.MajorMinor\((\d+),\s*(\d+)\)$'
)


class SourceError(RuntimeError):
    """The Go source does not have the shape this generator understands."""


# ---------------------------------------------------------------------------------------------
# finding the modules


def staging_version(release: str) -> str:
    """'1.37.2' -> 'v0.37.2' (the staging modules' tag of the same release)."""
    _major, minor, patch = release.split(".")
    return f"v0.{minor}.{patch}"


def module_versions(release: str) -> dict[str, str]:
    versions = {KUBERNETES: f"v{release}"}
    versions.update(dict.fromkeys(STAGING, staging_version(release)))
    return versions


def gomodcache() -> Path:
    env = os.environ.get("GOMODCACHE")
    if env:
        return Path(env)
    try:
        out = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True)
        if out.stdout.strip():
            return Path(out.stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        pass
    return Path(os.environ.get("GOPATH") or Path.home() / "go") / "pkg" / "mod"


def _escape(path: str) -> str:
    # Go module cache case-encoding: an upper-case letter becomes '!' + lower-case
    return re.sub(r"[A-Z]", lambda m: "!" + m.group(0).lower(), path)


def module_dir(module: str, version: str, cache: Path | None = None) -> Path:
    return (cache or gomodcache()) / f"{_escape(module)}@{version}"


def missing_modules(releases=RELEASES, cache: Path | None = None) -> list[str]:
    """``module@version`` of every module the generator needs that the cache lacks."""
    missing = []
    for release in releases.values():
        for module, version in module_versions(release).items():
            if not module_dir(module, version, cache).is_dir():
                missing.append(f"{module}@{version}")
    return missing


def download(releases=RELEASES) -> list[str]:
    """``go mod download`` every module that is missing from the cache; returns what it fetched.

    Runs in an empty temporary directory (outside any Go module), so only the module cache changes.
    Raises :class:`SourceError` naming the module when go cannot fetch it.
    """
    wanted = missing_modules(releases)
    if not wanted:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        for ref in wanted:
            try:
                proc = subprocess.run(
                    ["go", "mod", "download", "-json", ref], cwd=tmp, capture_output=True, text=True
                )
            except OSError as exc:
                raise SourceError(f"cannot run 'go mod download {ref}': {exc} (is Go installed?)") from exc
            detail = ""
            try:
                detail = json.loads(proc.stdout or "{}").get("Error", "")
            except json.JSONDecodeError:
                detail = proc.stdout.strip()
            if proc.returncode != 0 or detail:
                raise SourceError(f"'go mod download {ref}' failed: {detail or proc.stderr.strip()}")
    return wanted


# ---------------------------------------------------------------------------------------------
# reading Go text


def strip_comments(text: str) -> str:
    """Comments blanked out (newlines kept, so offsets and line numbers stay valid)."""

    def repl(m):
        token = m.group(0)
        if token.startswith("//") or token.startswith("/*"):
            return re.sub(r"[^\n]", " ", token)
        return token

    return _TOKENS.sub(repl, text)


def _closing(text: str, open_at: int) -> int:
    """Index of the brace that closes the one at ``open_at`` (comments already stripped)."""
    depth = 0
    i = open_at
    while i < len(text):
        ch = text[i]
        if ch == '"':
            i = _string_end(text, i)
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise SourceError("unbalanced braces")


def _string_end(text: str, start: int) -> int:
    i = start + 1
    while text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return i


def _split_top(body: str) -> list[str]:
    """Split on commas that are not inside (), {} or a string."""
    parts, depth, current, i = [], 0, [], 0
    while i < len(body):
        ch = body[i]
        if ch == '"':
            end = _string_end(body, i)
            current.append(body[i : end + 1])
            i = end + 1
            continue
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
        i += 1
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return [p for p in parts if p]


def package_consts(directory: Path) -> dict[str, str]:
    """Feature constants (Go identifier -> gate name) of the Go package in ``directory``."""
    consts: dict[str, str] = {}
    for path in sorted(directory.glob("*.go")):
        if path.name.endswith("_test.go"):
            continue
        for ident, value in _CONST.findall(strip_comments(path.read_text(encoding="utf-8"))):
            consts[ident] = value
    return consts


def file_imports(text: str) -> dict[str, str]:
    """Import alias -> import path of one Go file."""
    imports = {}
    for block in _IMPORT_BLOCK.findall(text):
        for alias, path in _IMPORT_LINE.findall(block):
            imports[alias or path.rsplit("/", 1)[-1]] = path
    for alias, path in re.findall(r'^import\s+(?:(\w+)\s+)?"([^"]+)"', text, re.M):
        imports[alias or path.rsplit("/", 1)[-1]] = path
    return imports


class Resolver:
    """Turns the Go expression of a map key (``GenericWorkload``, ``genericfeatures.APIServerIdentity``)
    into the gate's name, reading the constants of the packages involved."""

    def __init__(self, modules: dict[str, Path], own_dir: Path, text: str, where: str):
        self.modules = modules
        self.own = package_consts(own_dir)
        self.imports = file_imports(text)
        self.where = where
        self._cache: dict[str, dict[str, str]] = {}

    def _package(self, import_path: str) -> dict[str, str]:
        if import_path not in self._cache:
            for module in sorted(self.modules, key=len, reverse=True):
                if import_path == module or import_path.startswith(module + "/"):
                    sub = import_path[len(module) :].lstrip("/")
                    self._cache[import_path] = package_consts(self.modules[module] / sub)
                    break
            else:
                raise SourceError(f"{self.where}: gate key from package {import_path}, which is not read")
        return self._cache[import_path]

    def name(self, expr: str) -> str:
        expr = expr.strip()
        m = re.fullmatch(r"(?:featuregate\.)?Feature\((.+)\)", expr)
        if m:
            expr = m.group(1).strip()
        if re.fullmatch(r'"[^"]+"', expr):
            return expr[1:-1]
        qualifier, _, ident = expr.rpartition(".")
        if not qualifier:
            if ident not in self.own:
                raise SourceError(f"{self.where}: no Feature constant {ident} in its package")
            return self.own[ident]
        if qualifier not in self.imports:
            raise SourceError(f"{self.where}: {expr}: package {qualifier} is not imported")
        consts = self._package(self.imports[qualifier])
        if ident not in consts:
            raise SourceError(f"{self.where}: no Feature constant {ident} in {self.imports[qualifier]}")
        return consts[ident]


def _minor(expr: str, where: str) -> str:
    m = _VERSION.match(expr.strip())
    if not m:
        raise SourceError(f"{where}: cannot read the version {expr!r}")
    major, minor = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    return f"{int(major)}.{int(minor)}"


def parse_spec(body: str, where: str) -> tuple:
    """``{Version: ..., Default: ..., PreRelease: ..., LockToDefault: ..., MinCompatibilityVersion: ...}``
    -> ``(version, default, stage, locked[, min_compat])``."""
    fields = {}
    for part in _split_top(body):
        key, sep, value = part.partition(":")
        if not sep:
            raise SourceError(f"{where}: unnamed spec field {part!r}")
        fields[key.strip()] = value.strip()
    unknown = set(fields) - {"Version", "Default", "PreRelease", "LockToDefault", "MinCompatibilityVersion"}
    if unknown or "Version" not in fields or "PreRelease" not in fields:
        raise SourceError(f"{where}: unexpected spec fields {sorted(fields)}")
    stage = fields["PreRelease"].rpartition(".")[2]
    if stage not in _STAGES:
        raise SourceError(f"{where}: unknown PreRelease {fields['PreRelease']!r}")
    for flag in ("Default", "LockToDefault"):
        if fields.get(flag, "false") not in ("true", "false"):
            raise SourceError(f"{where}: {flag} is {fields[flag]!r}, not a literal")
    spec = (
        _minor(fields["Version"], where),
        fields.get("Default", "false") == "true",
        _STAGES[stage],
        fields.get("LockToDefault", "false") == "true",
    )
    if "MinCompatibilityVersion" in fields:
        spec += (_minor(fields["MinCompatibilityVersion"], where),)
    return spec


def _map_entries(text: str, pattern: re.Pattern, where: str):
    """Yield ``(key_expr, value_body, line)`` of every top-level entry of every map literal matching
    ``pattern`` in ``text`` (comments stripped)."""
    for m in pattern.finditer(text):
        open_at = m.end() - 1
        close_at = _closing(text, open_at)
        i = open_at + 1
        while i < close_at:
            if text[i] in " \t\n,":
                i += 1
                continue
            km = _KEY.match(text, i)
            if not km:
                snippet = text[i : i + 60].split("\n")[0]
                raise SourceError(f"{where}: cannot read the map entry at {snippet!r}")
            value_open = km.end() - 1
            value_close = _closing(text, value_open)
            yield km.group(1), text[value_open + 1 : value_close], text.count("\n", 0, km.start(1)) + 1
            i = value_close + 1


def read_gate_file(path: Path, package_dir: Path, modules: dict[str, Path], label: str):
    """``{gate: (specs, line)}`` from every versioned gate map literal in one file."""
    text = strip_comments(path.read_text(encoding="utf-8"))
    resolver = Resolver(modules, package_dir, text, label)
    gates = {}
    for key, body, line in _map_entries(text, _SPEC_MAP, label):
        where = f"{label}:{line}"
        name = resolver.name(key)
        specs = []
        for sm in re.finditer(r"\{([^{}]*)\}", body):
            specs.append(parse_spec(sm.group(1), where))
        if not specs:
            raise SourceError(f"{where}: {name} has no versioned spec")
        if name in gates:
            raise SourceError(f"{where}: {name} appears twice")
        gates[name] = (tuple(specs), line)
    return gates


def read_dependency_file(path: Path, package_dir: Path, modules: dict[str, Path], label: str):
    """``{gate: (dependencies, line)}`` from the dependency map literal of one file."""
    text = strip_comments(path.read_text(encoding="utf-8"))
    resolver = Resolver(modules, package_dir, text, label)
    deps = {}
    for key, body, line in _map_entries(text, _DEP_MAP, label):
        deps[resolver.name(key)] = (tuple(resolver.name(part) for part in _split_top(body)), line)
    return deps


# ---------------------------------------------------------------------------------------------
# extraction


def extract_release(release: str, cache: Path | None = None) -> dict:
    """Every gate of one release: ``{name: {"specs", "depends_on", "src"}}``.

    Raises :class:`SourceError` when a module is not in the cache or the source has an unexpected
    shape, and when two files define the same gate differently (the components would not start).
    """
    versions = module_versions(release)
    modules = {m: module_dir(m, v, cache) for m, v in versions.items()}
    for module, directory in modules.items():
        if not directory.is_dir():
            raise SourceError(f"{module}@{versions[module]} is not in the Go module cache ({directory})")
    gates: dict[str, dict] = {}
    for module, rel in GATE_FILES:
        path = modules[module] / rel
        label = f"{module}@{versions[module]} {rel}"
        if not path.is_file():
            raise SourceError(f"{label} does not exist")
        for name, (specs, line) in read_gate_file(path, path.parent, modules, label).items():
            if name in gates:
                if gates[name]["specs"] != specs:
                    raise SourceError(f"{name}: {label}:{line} differs from {gates[name]['src']}")
                continue
            gates[name] = {"specs": specs, "depends_on": (), "src": f"{label}:{line}"}
    for module, rel in DEPENDENCY_FILES:
        path = modules[module] / rel
        label = f"{module}@{versions[module]} {rel}"
        for name, (deps, _line) in read_dependency_file(path, path.parent, modules, label).items():
            if name not in gates:
                raise SourceError(f"{label}: dependencies of {name}, which no file defines")
            for dep in deps:
                if dep not in gates:
                    raise SourceError(f"{label}: {name} depends on {dep}, which no file defines")
            gates[name]["depends_on"] = deps
    return dict(sorted(gates.items()))


def extract(releases=RELEASES, cache: Path | None = None) -> dict[str, dict]:
    return {minor: extract_release(release, cache) for minor, release in releases.items()}


def source_list(releases=RELEASES) -> list[str]:
    lines = []
    for minor, release in releases.items():
        versions = module_versions(release)
        files = sorted({f"{m}@{versions[m]} {rel}" for m, rel in GATE_FILES + DEPENDENCY_FILES})
        lines.append(f"{minor}: " + ", ".join(files))
    return lines


# ---------------------------------------------------------------------------------------------
# writing


def _lit(value) -> str:
    """A Python literal; strings double-quoted, as ruff format writes them."""
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _spec(spec: tuple) -> str:
    return "(" + ", ".join(_lit(v) for v in spec) + ")"


def render(data: dict[str, dict], releases=RELEASES) -> str:
    out = [
        "# Copyright: gpusplit contributors",
        "# Apache License 2.0 (see galaxy.yml)",
        "# fmt: off",
        '"""Every Kubernetes feature gate per release: GENERATED by tools/gen_gate_catalog.py, do not edit.',
        "",
        "Private to the collection. Read by gates.py, the catalog.",
        "",
        "Read from the released Go modules in the Go module cache (facts only, no Go code):",
        "",
    ]
    for line in source_list(releases):
        release, files = line.split(": ", 1)
        out.append(f"* {release}:")
        out += [f"  {f}" for f in files.split(", ")]
    out += [
        "",
        "Regenerate (needs Go; fetches missing modules with ``go mod download``)::",
        "",
        "    python tools/gen_gate_catalog.py",
        "",
        "``GATES[minor][name]``: ``specs`` is the versioned spec list as written in Go, each",
        "``(version, default, stage, locked)`` plus ``min_compatibility_version`` where the source sets",
        "one; ``depends_on`` the gate's entry in ``defaultKubernetesFeatureGateDependencies``; ``src``",
        "the file and line of the spec list.  A name missing from a release is unknown to it.",
        '"""',
        "",
        "RELEASES = {" + ", ".join(f"{_lit(k)}: {_lit(v)}" for k, v in releases.items()) + "}",
        "",
        "GATES = {",
    ]
    for minor, gates in data.items():
        out.append(f"    {_lit(minor)}: {{")
        for name, gate in gates.items():
            deps = "".join(f"{_lit(d)}, " for d in gate["depends_on"]).rstrip(" ")
            out.append(f"        {_lit(name)}: {{")
            out.append('            "specs": (')
            out += [f"                {_spec(s)}," for s in gate["specs"]]
            out.append("            ),")
            out.append(f'            "depends_on": ({deps}),')
            out.append(f'            "src": {_lit(gate["src"])},')
            out.append("        },")
        out.append("    },")
    out.append("}")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the data module is out of date")
    parser.add_argument("--no-download", action="store_true", help="never run go mod download")
    parser.add_argument("--output", type=Path, default=DATA_MODULE)
    args = parser.parse_args(argv)
    try:
        if not args.no_download:
            for ref in download():
                print(f"downloaded {ref}", file=sys.stderr)
        data = extract()
        text = render(data)
    except SourceError as exc:
        print(f"gen_gate_catalog: {exc}", file=sys.stderr)
        return 2
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.is_file() else ""
        if current != text:
            print(f"{args.output} is out of date; run tools/gen_gate_catalog.py", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text, encoding="utf-8")
    counts = ", ".join(f"{minor}: {len(gates)}" for minor, gates in data.items())
    print(f"wrote {args.output} ({counts})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
