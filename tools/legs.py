"""The support matrix's legs (``[[tool.gpusplit.legs]]`` in pyproject.toml): their venvs and their tests.

The default leg is the project's own venv (.venv, `make venv`); every other leg has a cached venv
of its own, ``.venv-<leg>`` (e.g. .venv-core2.19), with the project's dependency list and the leg's
ansible and ansible-core pins in place of the default ones. It is built with the first of the leg's
``controller_python`` this machine has (tools/find_python.sh runs each candidate), and rebuilt only
when that Python or the requirements change (a stamp in the venv); pip's own cache serves the
downloads. Every leg gets the collections ``galaxy.yml`` depends on at their floor version or later:
where the leg's ``ansible`` package bundles an older one (ansible 12.3.0 bundles kubernetes.core
6.2.0, and ``dependencies`` asks for 6.4.0, the first that runs helm 4), the leg's copy is replaced
by the default leg's (ansible 14.5.0 bundles 6.6.0); :func:`ensure_collections`.

    python tools/legs.py venv [LEG...]            # build or reuse the other legs' venvs
    python tools/legs.py test [LEG...]            # each other leg's version-sensitive part (make test)
    python tools/legs.py matrix [LEG...]          # every leg in full, the default one too (make test-matrix)
    python tools/legs.py list                     # the legs, their venvs and Pythons
    python tools/legs.py test --parts lab core2.19   # one part of one leg (unit, pytest, sanity, lab)

``test`` runs, per non-default leg, its version-sensitive unit tests (the files that reach ansible-core:
:func:`version_sensitive_tests`) and
``ansible-test sanity`` (tools/sanity.py, ``--python`` the leg's own), and on a leg with ``lab =
true`` the lab tests of the split, verify and the SSH host on a lab of its own. ``matrix`` runs the
whole pytest suite and sanity on every leg. Each leg's lab has its own directory
(.lab/legs/<leg>), loopback address and output folder, so it never meets the default leg's labs.
Every part prints the leg, its ansible-core, the Python it ran on, its counts and its time; a leg
that cannot run (no Python for it, its venv missing or not buildable) is a named failure.
Exit status 0 only when every part of every leg passed.

The Kubernetes legs (:func:`kube_legs`): one per release of lab/versions.env ``KUBE_VERSIONS`` other than
the default ``KUBE_VERSION`` (``k8s1.36.3``, ``k8s1.35.4``), on the default leg's venv. Their parts are
``build`` (``K8S=<release> lab/build.sh kube`` with :data:`KUBE_LEG_COMPONENTS`: cached, or linked from
the Go build cache in seconds where that release was built before) and ``lab``: in ``test``, the tests
:func:`kube_tests` lists for the release on a lab of that release (``GPUSPLIT_KUBE_VERSION``, its
kubectl first on PATH, no real node); in ``matrix``, every lab test. Their labs follow the other legs'
addresses (:func:`lab_env`).

    python tools/legs.py test k8s1.36.3           # one release's build and lab parts
    python tools/legs.py build                    # the Kubernetes legs' binaries only (.ci/run)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIND_PYTHON = ROOT / "tools" / "find_python.sh"
# the lab leg: the split end to end (site.yml, re-run, change, prune, verify.yml) and the SSH host
# (a real sshd, become, the managed-host Pythons, verify.yml and diagnose.yml over SSH)
LAB_TESTS = ("tests/integration/test_split_lab.py", "tests/integration/test_ssh_host.py")
UNIT_ARGS = ("-m", "not integration")
# a unit test file is version-sensitive where it reaches ansible-core: it imports ansible, runs one of its
# commands, runs a module, a filter or an action plugin, or molecule; the others test the collection's own logic,
# which no ansible-core version changes (make test-matrix runs them on every leg too)
VERSION_SENSITIVE = re.compile(
    r"^\s*(?:from|import)\s+ansible(?:\.|\s|$)|ansible-(?:playbook|doc|galaxy|test|lint)\b|\bmolecule\b"
    r"|module_run|playbook_run|host_module|plugins\.(?:modules|filter|action)\b|ansible_test|ansible\.module_utils",
    re.M,
)


def version_sensitive_tests(root: Path = ROOT) -> list[str]:
    """The unit test files (relative to ``root``) that a non-default leg runs in make test."""
    files = sorted((root / "tests" / "unit").rglob("test_*.py"))
    return [
        str(f.relative_to(root)) for f in files if VERSION_SENSITIVE.search(f.read_text(encoding="utf-8"))
    ]


# the binaries a Kubernetes leg's lab runs: the control plane, and kubectl (one minor of skew, so the
# default release's does not reach 1.35); kubeadm is left out, the lab writes kubeadm's manifests itself
KUBE_LEG_COMPONENTS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl")
KUBE_SUPPORT = Path("tools") / "kubernetes_support.toml"
KUBE_LEG_FILES = ("tests/integration/test_k8s_versions.py",)


class LegError(RuntimeError):
    """A leg cannot run; the message names the leg and why."""


# ---- the data file ---------------------------------------------------------------------------


def load(root: Path = ROOT) -> dict:
    """``{"legs": [...], "matrix": {...}, "dependencies": [...]}`` from pyproject.toml."""
    data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    tool = data["tool"]["gpusplit"]
    legs = tool["legs"]
    if sum(1 for leg in legs if leg.get("default")) != 1:
        raise ValueError("pyproject.toml: exactly one [[tool.gpusplit.legs]] must have default = true")
    return {"legs": legs, "matrix": tool["matrix"], "dependencies": data["project"]["dependencies"]}


def lab_versions(root: Path = ROOT) -> dict[str, str]:
    """lab/versions.env's KEY=VALUE lines."""
    out = {}
    for line in (root / "lab" / "versions.env").read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#"):
            out[key.strip()] = value.strip()
    return out


def kube_legs(root: Path = ROOT) -> list[dict]:
    """A leg per Kubernetes release of KUBE_VERSIONS other than the default: ``{"name": "k8s1.36.3", "kube": "1.36.3"}``."""
    pins = lab_versions(root)
    default = pins.get("KUBE_VERSION", "")
    releases = [v.strip() for v in pins.get("KUBE_VERSIONS", "").split(",") if v.strip()]
    if default not in releases:
        raise ValueError(f"lab/versions.env: KUBE_VERSION {default!r} is not one of KUBE_VERSIONS {releases}")
    return [{"name": f"k8s{v}", "kube": v} for v in releases if v != default]


def kube_tests(release: str, root: Path = ROOT, files=KUBE_LEG_FILES) -> tuple[list[str], list[str]]:
    """What make test runs on a release's lab: (pytest arguments, node ids to deselect).

    ``files`` whole, and every test that a proven or refused cell of that release names in
    tools/kubernetes_support.toml, less the file's ``matrix_only`` tests (make test-matrix runs those).
    """
    data = tomllib.loads((root / KUBE_SUPPORT).read_text(encoding="utf-8"))
    if release not in data["releases"]:
        raise LegError(f"leg k8s{release}: {KUBE_SUPPORT} has no cells for Kubernetes {release}")
    slow = list(data.get("matrix_only", []))
    run = list(files)
    for feature in data["features"]:
        cell = feature["cells"].get(release, {})
        if cell.get("state") not in ("proven", "refused"):
            continue
        for test in cell.get("tests", []):
            whole = test.split("::", 1)[0] in run
            if test not in run and not whole and test not in slow:
                run.append(test)
    return in_file_order(run, root), [test for test in slow if test.split("::", 1)[0] in files]


def in_file_order(tests: list[str], root: Path = ROOT) -> list[str]:
    """The node ids of each file in the order the file defines them, the files in first-named order.

    pytest runs node ids in the order given, and a lab test file's tests build on each other's state
    in the order they are written (test_resplit_lab.py's PodDisruptionBudget test before its evict).
    """
    files: dict[str, list[str]] = {}
    for test in tests:
        files.setdefault(test.split("::", 1)[0], []).append(test)

    def place(test: str) -> int:
        path, _, name = test.partition("::")
        if not name:
            return -1
        text = (root / path).read_text(encoding="utf-8") if (root / path).is_file() else ""
        found = text.find(f"def {name.split('[', 1)[0]}(")
        return found if found >= 0 else len(text)

    return [test for group in files.values() for test in sorted(group, key=place)]


def pin(leg: dict, name: str) -> str:
    """The version a leg pins ``name`` (ansible or ansible-core) to."""
    for spec in leg["pins"]:
        got, _, version = spec.partition("==")
        if got.strip().lower() == name:
            return version.strip()
    raise KeyError(f"leg {leg['name']} pins no {name}")


def requirement_name(spec: str) -> str:
    return re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", spec).group(0).lower().replace("_", "-")


def requirements(leg: dict, dependencies: list[str]) -> list[str]:
    """The project's dependency list with the leg's pins in place of the same packages' pins."""
    pins = {requirement_name(spec): spec for spec in leg["pins"]}
    out = [pins.pop(requirement_name(spec), spec) for spec in dependencies]
    if pins:
        raise ValueError(f"leg {leg['name']} pins {sorted(pins)}, which the dependency list lacks")
    return out


def venv_dir(leg: dict, root: Path = ROOT) -> Path:
    return root / (".venv" if leg.get("default") else f".venv-{leg['name']}")


def lab_env(legs: list[dict], leg: dict, root: Path = ROOT) -> dict[str, str]:
    """The environment of a leg's own lab: {} for the default leg (.lab and 127.0.0.1 as usual).

    Leg i (its place in the data file, the Kubernetes legs after the others) binds its lab to
    127.<32*i>.0.1 with its state in .lab/legs/<leg> and its playbooks' output in out/legs/<leg>;
    the pytest-xdist workers of a whole-suite run add 65536 per worker to the address
    (lab/workers.py), which stays clear of the next leg's. A Kubernetes leg's lab runs its release
    (GPUSPLIT_KUBE_VERSION) with no real node (the real node's kubelet is the default release's).
    """
    if leg.get("default"):
        return {}
    index = next(i for i, other in enumerate(legs) if other["name"] == leg["name"])
    if 32 * index > 255:
        raise LegError(f"leg {leg['name']}: no loopback address 127.{32 * index}.0.1 for leg {index}")
    env = {
        "GPUSPLIT_LAB_HOST": f"127.{32 * index}.0.1",
        "GPUSPLIT_LAB_DIR": str(root / ".lab" / "legs" / leg["name"]),
        "GPUSPLIT_OUT_DIR": str(root / "out" / "legs" / leg["name"]),
    }
    if leg.get("kube"):
        env.update({"GPUSPLIT_KUBE_VERSION": leg["kube"], "GPUSPLIT_LAB_REAL_NODE": "0", "K8S": leg["kube"]})
    return env


def select(legs: list[dict], names: list[str]) -> list[dict]:
    known = {leg["name"]: leg for leg in legs}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"unknown leg(s) {', '.join(unknown)}; the legs are {', '.join(known)}")
    return [known[name] for name in names] if names else legs


# ---- venvs -----------------------------------------------------------------------------------


def find_python(leg: dict) -> str:
    """The Python the leg's venv is built with: the first of its controller_python that works here."""
    done = subprocess.run(
        [str(FIND_PYTHON), *leg["controller_python"]], capture_output=True, text=True, check=False
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise LegError(f"leg {leg['name']}: {done.stderr.strip() or 'tools/find_python.sh found nothing'}")
    return done.stdout.strip()


def python_version(python: Path | str) -> str:
    done = subprocess.run(
        [str(python), "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise LegError(f"{python} does not run: {done.stderr.strip()}")
    return done.stdout.strip()


def collection_floors(root: Path = ROOT) -> dict[str, str]:
    """The lowest version of each collection ``galaxy.yml`` depends on: ``{"kubernetes.core": "6.4.0"}``."""
    import yaml

    galaxy = root / "galaxy.yml"
    if not galaxy.is_file():
        return {}
    deps = (yaml.safe_load(galaxy.read_text(encoding="utf-8")) or {}).get("dependencies") or {}
    floors = {}
    for name, spec in deps.items():
        found = re.search(r">=\s*([0-9][0-9.]*)", str(spec))
        if found:
            floors[name] = found.group(1)
    return floors


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", str(version))[:3])


def collection_path(home: Path, name: str) -> Path | None:
    """Where a venv's ``ansible`` package keeps collection ``name`` (``namespace.name``); None without one."""
    namespace, _, short = name.partition(".")
    site = next(iter(sorted(home.glob("lib/python*/site-packages"))), None)
    return site / "ansible_collections" / namespace / short if site else None


def collection_version(path: Path | None) -> str | None:
    try:
        manifest = json.loads((path / "MANIFEST.json").read_text(encoding="utf-8"))
    except (OSError, TypeError, ValueError):
        return None
    return str(manifest.get("collection_info", {}).get("version") or "") or None


def ensure_collections(leg: dict, data: dict, root: Path = ROOT, log=print) -> dict[str, str]:
    """Give the leg's venv every collection of galaxy.yml at its floor or later; {name: version it has}.

    A collection older than its floor (or missing) is replaced by the default leg's copy, which
    must meet the floor itself. The default leg's venv is left as it is.
    """
    home = venv_dir(leg, root)
    have = {}
    for name, floor in collection_floors(root).items():
        target = collection_path(home, name)
        version = collection_version(target)
        if version and version_key(version) >= version_key(floor):
            have[name] = version
            continue
        if leg.get("default"):
            raise LegError(
                f"leg {leg['name']}: {name} {version or '(missing)'} is older than galaxy.yml's {floor}"
            )
        default = next(other for other in data["legs"] if other.get("default"))
        source = collection_path(venv_dir(default, root), name)
        offered = collection_version(source)
        if target is None or not offered or version_key(offered) < version_key(floor):
            raise LegError(
                f"leg {leg['name']}: {name} {version or '(missing)'} is older than galaxy.yml's {floor}, and the "
                f"default leg's venv has {offered or 'none'} to give it (make venv builds it)"
            )
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        log(
            f"[{leg['name']}] {name} {version or '(missing)'} replaced by the default leg's {offered} (galaxy.yml: >={floor})"
        )
        have[name] = offered
    return have


def ensure_venv(leg: dict, data: dict, root: Path = ROOT, log=print) -> Path:
    """The leg's venv python, built or reused (the stamp names its Python and requirements)."""
    home = venv_dir(leg, root)
    python = home / "bin" / "python"
    if leg.get("default"):
        if not python.exists():
            raise LegError(f"leg {leg['name']}: {home.name} is missing (make venv builds it)")
        ensure_collections(leg, data, root, log=log)
        return python
    base = find_python(leg)
    wanted = requirements(leg, data["dependencies"])
    stamp = {"python": base, "version": python_version(base), "requirements": wanted}
    stamp_file = home / ".gpusplit-leg.json"
    try:
        if json.loads(stamp_file.read_text()) == stamp and python.exists():
            ensure_collections(leg, data, root, log=log)
            return python
    except (OSError, ValueError):
        pass
    started = time.monotonic()
    log(f"[{leg['name']}] building {home.name} with Python {stamp['version']} ({base})")
    shutil.rmtree(home, ignore_errors=True)
    reqs = home / "requirements.txt"
    steps = (
        [base, "-m", "venv", str(home)],
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--upgrade", "pip"],
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", str(reqs)],
    )
    for argv in steps:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            raise LegError(
                f"leg {leg['name']}: {' '.join(argv[:5])} ... failed: {said[-1] if said else done.returncode}"
            )
        if argv[1:3] == ["-m", "venv"]:
            reqs.write_text("\n".join(wanted) + "\n")
    ensure_collections(leg, data, root, log=log)
    stamp_file.write_text(json.dumps(stamp, indent=1))
    log(f"[{leg['name']}] {home.name} built in {time.monotonic() - started:.0f} s")
    return python


# ---- running the parts -----------------------------------------------------------------------


def pytest_counts(output: str) -> str:
    """pytest's summary ("3170 passed, 2 skipped in 250.10s"), or its last line."""
    lines = [line.strip("= ").strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.search(r"\b(passed|failed|error|errors|no tests ran|skipped|deselected)\b", line):
            return line
    return lines[-1] if lines else "no output"


def sanity_counts(output: str) -> str:
    """How many sanity tests ran and how many of them failed (ansible-test's own summary)."""
    ran = len(re.findall(r"^Running sanity test [\"'][\w-]+[\"']", output, re.M))
    failed = re.search(r"The (\d+) sanity test\(s\) listed below \(out of (\d+)\) failed", output)
    if failed:
        return f"{failed.group(2)} sanity tests, {failed.group(1)} failed"
    return f"{ran} sanity tests ran"


def run_part(leg: dict, part: str, argv: list[str], env: dict, counts, logs: Path, log=print) -> str | None:
    """Run one part of a leg; print its line; return None when it passed, else the failure."""
    logs.mkdir(parents=True, exist_ok=True)
    log_file = logs / f"{leg['name']}-{part}.log"
    started = time.monotonic()
    with log_file.open("w") as out:
        rc = subprocess.call(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    took = time.monotonic() - started
    output = log_file.read_text(errors="replace")
    log(f"[{leg['name']}] {part}: {counts(output)}; {took:.0f} s; exit status {rc}; log {shown(log_file)}")
    if rc != 0:
        log(output[-6000:])
        return f"{leg['name']} {part} (exit status {rc})"
    return None


def shown(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


# what a leg's environment sets afresh: a lab of the caller's (or a make K8S=...) must not leak into it
LAB_VARIABLES = (
    "PYTEST_XDIST_WORKER",
    "GPUSPLIT_LAB_HOST",
    "GPUSPLIT_LAB_DIR",
    "GPUSPLIT_OUT_DIR",
    "GPUSPLIT_KUBE_VERSION",
    "GPUSPLIT_LAB_REAL_NODE",
    "K8S",
)


def leg_env(every: list[dict], leg: dict, python: Path, root: Path = ROOT, environ=None) -> dict[str, str]:
    """The environment of a leg's parts: its lab's, its venv first on PATH (a Kubernetes leg's kubectl before it)."""
    env = dict(os.environ if environ is None else environ)
    for name in LAB_VARIABLES:
        env.pop(name, None)
    env.update(lab_env(every, leg, root))
    first = [str(python.parent)]
    if leg.get("kube"):
        first.insert(0, str(root / ".lab" / "bin" / leg["kube"]))
    env["PATH"] = os.pathsep.join([*first, env.get("PATH", "")])
    env.pop("VIRTUAL_ENV", None)
    return env


PARTS = ("unit", "pytest", "sanity", "build", "lab")


def build_counts(output: str) -> str:
    """What lab/build.sh did: the binaries it linked or compiled, each with its time, or that all were cached."""
    built = re.findall(r"^\[lab-build\] ([\w.-]+): done in (\d+) s \((\d+) packages compiled", output, re.M)
    if built:
        total = sum(int(took) for _name, took, _pkgs in built)
        each = ", ".join(f"{name} {took} s ({pkgs} packages compiled)" for name, took, pkgs in built)
        return f"{len(built)} built in {total} s: {each}"
    cached = re.search(r"^\[lab-build\] (kubernetes v\S+ binaries cached)", output, re.M)
    if cached:
        return cached.group(1)
    failed = re.search(r"^\[lab-build\] error: (.*)$", output, re.M)
    return f"error: {failed.group(1)}" if failed else pytest_counts(output)


def kube_parts(leg: dict, python: Path, mode: str, root: Path = ROOT) -> list[tuple[str, list[str], object]]:
    """A Kubernetes leg's parts: its release's binaries (lab/build.sh), then its lab tests."""
    build = [
        "env",
        f"KUBE_COMPONENTS={' '.join(KUBE_LEG_COMPONENTS)}",
        str(root / "lab" / "build.sh"),
        "kube",
    ]
    pytest = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE"]
    if mode == "matrix":
        lab = [*pytest, "-m", "integration", "tests"]
    elif mode == "build":
        return [("build", build, build_counts)]
    else:
        run, deselect = kube_tests(leg["kube"], root)
        lab = [*pytest, *(arg for test in deselect for arg in ("--deselect", test)), *run]
    return [("build", build, build_counts), ("lab", lab, pytest_counts)]


def parts(leg: dict, python: Path, mode: str, workers: str) -> list[tuple[str, list[str], object]]:
    py = str(python)
    pytest = [py, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    if mode == "matrix":
        suite = [*pytest, "--numprocesses", "auto", "--maxprocesses", "4", "--dist", "loadgroup", "tests"]
        out = [("pytest", suite, pytest_counts)]
    else:
        unit = [
            *pytest,
            *(["--numprocesses", workers] if workers not in ("", "0") else []),
            *UNIT_ARGS,
            *version_sensitive_tests(),
        ]
        out = [("unit", unit, pytest_counts)]
    out.append(("sanity", [py, str(ROOT / "tools" / "sanity.py")], sanity_counts))
    if mode == "test" and leg.get("lab"):
        out.append(("lab", [*pytest, *LAB_TESTS], pytest_counts))
    return out


def build_kube_legs(every: list[dict], chosen: list[dict], run=subprocess.call, log=print) -> int:
    """Build (or find cached) each Kubernetes leg's binaries, lab/build.sh's output passed through."""
    failed = []
    for leg in chosen:
        argv = kube_parts(leg, Path(sys.executable), "build")[0][1]
        rc = run(argv, cwd=ROOT, env=leg_env(every, leg, Path(sys.executable)))
        if rc != 0:
            log(f"[{leg['name']}] FAILED: {shown(Path(argv[2]))} kube: exit status {rc}")
            failed.append(leg["name"])
    return 1 if failed else 0


def run_legs(data: dict, legs: list[dict], mode: str, workers: str, only=PARTS, log=print, every=None) -> int:
    """Run each leg's parts (``every``: all the legs, in the order that gives each its lab's address)."""
    every = every if every is not None else data["legs"]
    failures = []
    logs = ROOT / ".lab" / "legs" / "logs"
    started = time.monotonic()
    # a Kubernetes leg runs on the default leg's venv
    default = next((leg for leg in data["legs"] if leg.get("default")), None)
    for leg in legs:
        venv_leg = default if leg.get("kube") else leg
        core = pin(venv_leg, "ansible-core")
        try:
            python = ensure_venv(venv_leg, data, log=log)
            version = python_version(python)
            env = leg_env(every, leg, python)
            leg_parts = (
                kube_parts(leg, python, mode) if leg.get("kube") else parts(leg, python, mode, workers)
            )
        except LegError as exc:
            log(f"[{leg['name']}] FAILED: cannot run: {exc}")
            failures.append(f"{leg['name']} cannot run")
            continue
        kube = f"Kubernetes {leg['kube']} lab, " if leg.get("kube") else ""
        log(f"== leg {leg['name']}: {kube}ansible-core {core} on Python {version} ({shown(python)}) ==")
        leg_started = time.monotonic()
        built = True
        for part, argv, counts in leg_parts:
            if part not in only:
                continue
            if part == "lab" and not built:
                log(f"[{leg['name']}] lab: not run, the release's binaries were not built")
                failures.append(f"{leg['name']} lab (not run: no binaries of Kubernetes {leg['kube']})")
                continue
            failure = run_part(leg, part, argv, env, counts, logs, log=log)
            if failure:
                failures.append(failure)
                built = built and part != "build"
        log(f"[{leg['name']}] done in {time.monotonic() - leg_started:.0f} s")
    log(f"legs {', '.join(leg['name'] for leg in legs)}: {time.monotonic() - started:.0f} s")
    if failures:
        log("FAILED: " + "; ".join(failures))
        return 1
    log("every leg passed")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("venv", "build", "test", "matrix", "list"))
    parser.add_argument("legs", nargs="*", help="leg names (default: every leg the command covers)")
    parser.add_argument(
        "--workers",
        default=os.environ.get("GPUSPLIT_LEG_WORKERS", "2"),
        help="pytest-xdist workers for a leg's unit tests (0: none)",
    )
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"only these parts of each leg, e.g. unit,sanity (of {', '.join(PARTS)})",
    )
    args = parser.parse_intermixed_args(argv)
    only = tuple(part.strip() for part in args.parts.split(","))
    if set(only) - set(PARTS):
        parser.error(
            f"unknown part(s) {', '.join(sorted(set(only) - set(PARTS)))}; the parts are {', '.join(PARTS)}"
        )
    data = load()
    try:
        every = data["legs"] + kube_legs()
    except (OSError, ValueError) as exc:
        print(f"FAILED: the Kubernetes legs cannot run: {exc}", file=sys.stderr)
        return 1
    chosen = select(every, args.legs)
    others = [leg for leg in chosen if not leg.get("default")]
    if args.command == "list":
        for leg in chosen:
            if leg.get("kube"):
                env = lab_env(every, leg)
                print(
                    f"{leg['name']}: Kubernetes {leg['kube']} on the default leg's venv, lab "
                    f"{env['GPUSPLIT_LAB_HOST']} ({shown(Path(env['GPUSPLIT_LAB_DIR']))}), "
                    f"binaries {', '.join(KUBE_LEG_COMPONENTS)}"
                )
                continue
            print(
                f"{leg['name']}: ansible-core {pin(leg, 'ansible-core')}, venv {venv_dir(leg).name}, "
                f"controller Python {' or '.join(leg['controller_python'])}, "
                f"hosts {', '.join(leg['host_python'])}{', lab leg' if leg.get('lab') else ''}"
            )
        return 0
    if args.command == "build":
        return build_kube_legs(every, [leg for leg in chosen if leg.get("kube")])
    if args.command == "venv":
        failed = []
        for leg in (leg for leg in others if not leg.get("kube")):
            try:
                python = ensure_venv(leg, data)
                print(f"[{leg['name']}] {shown(python.parent.parent)}: Python {python_version(python)}")
            except LegError as exc:
                print(f"[{leg['name']}] FAILED: {exc}", file=sys.stderr)
                failed.append(leg["name"])
        return 1 if failed else 0
    return run_legs(
        data, others if args.command == "test" else chosen, args.command, args.workers, only, every=every
    )


if __name__ == "__main__":
    sys.exit(main())
