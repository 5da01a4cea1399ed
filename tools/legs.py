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

    Leg i (its place in the data file) binds its lab to 127.<32*i>.0.1 with its state in
    .lab/legs/<leg> and its playbooks' output in out/legs/<leg>; the pytest-xdist workers of a
    whole-suite run add 65536 per worker to the address (lab/workers.py), which stays clear of the
    next leg's.
    """
    if leg.get("default"):
        return {}
    index = next(i for i, other in enumerate(legs) if other["name"] == leg["name"])
    return {
        "GPUSPLIT_LAB_HOST": f"127.{32 * index}.0.1",
        "GPUSPLIT_LAB_DIR": str(root / ".lab" / "legs" / leg["name"]),
        "GPUSPLIT_OUT_DIR": str(root / "out" / "legs" / leg["name"]),
    }


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


def leg_env(data: dict, leg: dict, python: Path) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("PYTEST_XDIST_WORKER", "GPUSPLIT_LAB_HOST", "GPUSPLIT_LAB_DIR", "GPUSPLIT_OUT_DIR"):
        env.pop(name, None)
    env.update(lab_env(data["legs"], leg))
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("VIRTUAL_ENV", None)
    return env


PARTS = ("unit", "pytest", "sanity", "lab")


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


def run_legs(data: dict, legs: list[dict], mode: str, workers: str, only=PARTS, log=print) -> int:
    failures = []
    logs = ROOT / ".lab" / "legs" / "logs"
    started = time.monotonic()
    for leg in legs:
        core = pin(leg, "ansible-core")
        try:
            python = ensure_venv(leg, data, log=log)
            version = python_version(python)
        except LegError as exc:
            log(f"[{leg['name']}] FAILED: cannot run: {exc}")
            failures.append(f"{leg['name']} cannot run")
            continue
        log(f"== leg {leg['name']}: ansible-core {core} on Python {version} ({shown(python)}) ==")
        leg_started = time.monotonic()
        env = leg_env(data, leg, python)
        for part, argv, counts in parts(leg, python, mode, workers):
            if part not in only:
                continue
            failure = run_part(leg, part, argv, env, counts, logs, log=log)
            if failure:
                failures.append(failure)
        log(f"[{leg['name']}] done in {time.monotonic() - leg_started:.0f} s")
    log(f"legs {', '.join(leg['name'] for leg in legs)}: {time.monotonic() - started:.0f} s")
    if failures:
        log("FAILED: " + "; ".join(failures))
        return 1
    log("every leg passed")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("venv", "test", "matrix", "list"))
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
    chosen = select(data["legs"], args.legs)
    others = [leg for leg in chosen if not leg.get("default")]
    if args.command == "list":
        for leg in chosen:
            print(
                f"{leg['name']}: ansible-core {pin(leg, 'ansible-core')}, venv {venv_dir(leg).name}, "
                f"controller Python {' or '.join(leg['controller_python'])}, "
                f"hosts {', '.join(leg['host_python'])}{', lab leg' if leg.get('lab') else ''}"
            )
        return 0
    if args.command == "venv":
        failed = []
        for leg in others:
            try:
                python = ensure_venv(leg, data)
                print(f"[{leg['name']}] {shown(python.parent.parent)}: Python {python_version(python)}")
            except LegError as exc:
                print(f"[{leg['name']}] FAILED: {exc}", file=sys.stderr)
                failed.append(leg["name"])
        return 1 if failed else 0
    return run_legs(data, others if args.command == "test" else chosen, args.command, args.workers, only)


if __name__ == "__main__":
    sys.exit(main())
