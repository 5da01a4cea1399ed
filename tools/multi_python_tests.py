"""Run the managed-host modules' unit tests per ansible-core leg, under each managed-host Python it supports.

Managed hosts run the collection's modules with their own Python (RHEL 9: 3.9, Ubuntu 22.04: 3.10, ...)
and only what Ansible ships to them: the module, the collection's module_utils and ansible-core's own
``ansible.module_utils``. Which Pythons an ansible-core release accepts on a host differs (2.19 runs
modules under 3.8, 2.20 and later refuse anything below 3.9), so this runner reads the support matrix
(``[[tool.gpusplit.legs]]`` in pyproject.toml) and, for each leg, proves its ``host_python`` list:

1. finds the Pythons: pyenv's (``~/.pyenv/versions/*/bin/python3.X``, or ``$PYENV_ROOT``) and
   ``python3.X`` on PATH, each run and asked for its version; prints which it uses and which are
   missing and why. A missing one fails the run in CI (``CI=true``); elsewhere it is skipped with a
   loud line;
2. compiles every file under plugins/module_utils and plugins/modules with each of them (syntax that
   an older Python does not read fails here first);
3. for each leg and Python, keeps a virtual environment under ``.lab/pyenvs/<leg>/<X.Y>``
   (``$GPUSPLIT_PYENVS_DIR`` to move it; rebuilt when its Python or its pins change) with only
   pytest, PyYAML and nvidia-ml-py at the project's pins, and, on the Pythons the leg runs a
   controller on (its ``controller_python``), the leg's ansible-core too;
4. runs the unit tests of the managed-host modules in it (TEST_PATHS), except under the Python the
   leg's own test run uses (the default leg's pytest in .venv, another leg's unit tests in
   .venv-<leg>, tools/legs.py), which runs those files already (``--all`` runs them here too).
   Below the leg's controller Pythons, ``ansible.module_utils`` comes from the leg's ansible-core
   (unpacked once per leg, its ``module_utils`` only), exactly as AnsiballZ ships it to a host, and
   the test files that import controller-only code (``ansible.*`` other than
   ``ansible.module_utils``, the collection's filters or plugin_utils, the lab) are left out there,
   each named with the reason.

Exit status 0 only when every leg passed under every Python it names (in CI, a missing Python is a
failure); one whose environment cannot be built (no package index) is a failure. Standard library
only (Python 3.11+: tomllib); runs under the project's virtual environment (``make test`` calls it).

    python tools/multi_python_tests.py [--legs core2.19] [--pythons 3.9,3.10] [--all] [--list] [-- <pytest args>]
"""

from __future__ import annotations

import argparse
import glob
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
MINORS = ((3, 8), (3, 9), (3, 10), (3, 11), (3, 12), (3, 13))

# The unit tests of the modules that run on managed hosts, and of their module_utils.
TEST_PATHS = (
    "tests/unit/plugins/module_utils/_gpu",
    "tests/unit/plugins/module_utils/_host",
    "tests/unit/plugins/module_utils/_control_plane",
    "tests/unit/plugins/module_utils/_out",
    "tests/unit/plugins/module_utils/test_errors.py",
    "tests/unit/plugins/modules/test_control_plane_health.py",
    "tests/unit/plugins/modules/test_feature_gate_preflight.py",
    "tests/unit/plugins/modules/test_gpu_pod_resources.py",
)
COMPILE_PATHS = ("plugins/module_utils", "plugins/modules")

# pytest 8.4 needs 3.9; 8.3.5 is the last release for 3.8.
PYTEST_BY_MINOR = {(3, 8): "pytest==8.3.5"}
PINNED = ("pytest", "PyYAML", "nvidia-ml-py")

_CONTROLLER_IMPORT = re.compile(
    r"^\s*(?:from|import)\s+("
    r"ansible\.(?!module_utils\b)[\w.]+"
    r"|ansible_collections\.gpusplit\.k8s\.plugins\.(?:plugin_utils|filter|action|lookup|callback|inventory)\b[\w.]*"
    r"|lab\b[\w.]*"
    r")",
    re.MULTILINE,
)


# ---- finding the Pythons ---------------------------------------------------------------------


def candidates(minor, pyenv_root=None, path=None):
    """Executables that may be Python ``minor`` (a (3, X) tuple): pyenv's first, then PATH's."""
    name = f"python{minor[0]}.{minor[1]}"
    root = pyenv_root or os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = sorted(glob.glob(os.path.join(root, "versions", f"{minor[0]}.{minor[1]}*", "bin", name)))
    on_path = shutil.which(name, path=path if path is not None else os.environ.get("PATH"))
    if on_path:
        found.append(on_path)
    unique = []
    for candidate in found:
        if candidate not in unique:
            unique.append(candidate)
    return unique


def version_of(executable):
    """``(major, minor, micro)`` that ``executable`` reports, or the reason it could not say."""
    try:
        done = subprocess.run(
            [executable, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{executable} does not run: {exc}"
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", done.stdout.strip())
    if done.returncode != 0 or not match:
        said = (done.stderr or done.stdout).strip().splitlines()
        return None, f"{executable} does not run: {said[-1] if said else f'exit code {done.returncode}'}"
    return tuple(int(part) for part in match.groups()), None


def discover(minors=MINORS, pyenv_root=None, path=None):
    """``(found, skipped)``: {(3, X): (executable, version)} and {(3, X): reason}."""
    found, skipped = {}, {}
    for minor in minors:
        reasons = []
        for executable in candidates(minor, pyenv_root, path):
            version, why = version_of(executable)
            if version is None:
                reasons.append(why)
                continue
            if version[:2] != minor:
                reasons.append(f"{executable} is Python {'.'.join(map(str, version))}")
                continue
            found[minor] = (executable, version)
            break
        else:
            where = "pyenv versions or PATH"
            skipped[minor] = "; ".join(reasons) if reasons else f"no python{minor[0]}.{minor[1]} in {where}"
    return found, skipped


# ---- what runs where -------------------------------------------------------------------------


def controller_imports(path):
    """The controller-only modules a test file imports (empty: it runs with module_utils alone)."""
    return sorted(set(_CONTROLLER_IMPORT.findall(Path(path).read_text(encoding="utf-8"))))


def test_files(paths=TEST_PATHS, root=ROOT):
    files = []
    for rel in paths:
        target = root / rel
        files.extend(sorted(target.rglob("test_*.py")) if target.is_dir() else [target])
    return files


def split_tests(minor, controller_min, paths=TEST_PATHS, root=ROOT):
    """``(run, left_out)``: the test files to run under ``minor`` and {file: why not} for the others.

    ``controller_min`` is the lowest Python the leg's ansible-core runs a controller on: below it only
    ``ansible.module_utils`` is there, as on a managed host.
    """
    run, left_out = [], {}
    for path in test_files(paths, root):
        needs = controller_imports(path)
        if needs and minor < controller_min:
            left_out[path] = (
                f"imports controller-only {', '.join(needs)} "
                f"(this leg's controller needs {controller_min[0]}.{controller_min[1]}+)"
            )
        else:
            run.append(path)
    return run, left_out


def compile_check(executable, paths=COMPILE_PATHS, root=ROOT):
    """Compile every .py under ``paths`` with ``executable``; returns the errors (empty: all compile)."""
    files = sorted(str(p) for rel in paths for p in (root / rel).rglob("*.py"))
    code = (
        "import sys\n"
        "bad = 0\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        with open(name, 'rb') as handle:\n"
        "            compile(handle.read(), name, 'exec', dont_inherit=True)\n"
        "    except SyntaxError as exc:\n"
        "        bad += 1\n"
        "        print('%s:%s: %s' % (name, exc.lineno, exc.msg))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    done = subprocess.run([executable, "-c", code, *files], capture_output=True, text=True, check=False)
    errors = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 and not errors:
        errors = [done.stderr.strip() or f"exit code {done.returncode}"]
    return len(files), errors


# ---- the legs --------------------------------------------------------------------------------


def _minor_of(text):
    major, minor = str(text).split(".")[:2]
    return (int(major), int(minor))


def load(root=ROOT):
    """``(legs, pins)``: the support matrix's legs and {name: "name==version"} of the dependency list."""
    data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    pins = {}
    for spec in data["project"]["dependencies"]:
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", spec.strip())
        if match:
            pins[match.group(1)] = spec.strip()
    legs = []
    for leg in data["tool"]["gpusplit"]["legs"]:
        leg_pins = dict(pins)
        for spec in leg["pins"]:
            leg_pins[spec.split("==")[0].strip()] = spec.strip()
        legs.append(
            {
                "name": leg["name"],
                "core": leg_pins["ansible-core"],
                "hosts": tuple(sorted(_minor_of(v) for v in leg["host_python"])),
                "controller_min": min(_minor_of(v) for v in leg["controller_python"]),
                "controller_python": tuple(_minor_of(v) for v in leg["controller_python"]),
                "pins": leg_pins,
                "default": bool(leg.get("default")),
            }
        )
    return legs, pins


def project_pins(root=ROOT):
    """{name: "name==version"} of the project's dependencies (pyproject.toml)."""
    return load(root)[1]


def host_minors(core_version=None, root=ROOT):
    """The managed-host Pythons the leg of ``core_version`` (default: the running ansible-core) names."""
    if core_version is None:
        from ansible.release import __version__ as core_version
    for leg in load(root)[0]:
        if leg["core"] == f"ansible-core=={core_version}":
            return leg["hosts"]
    raise LookupError(f"ansible-core {core_version} is no leg of pyproject.toml's support matrix")


def leg_controller(leg, root=ROOT):
    """The Python the leg's own test run uses (its venv's), as (3, X); None where that is unknown.

    `make test` runs every test file of TEST_PATHS there already: the default leg's pytest under
    the project's venv (the Python this runs under, when it runs from .venv), each other leg's unit
    tests under .venv-<leg> (tools/legs.py: its stamp names the Python it was built with).
    """
    if leg["default"]:
        if Path(sys.prefix).resolve() == (root / ".venv").resolve():
            return tuple(sys.version_info[:2])
        return None
    try:
        stamp = json.loads((root / f".venv-{leg['name']}" / ".gpusplit-leg.json").read_text())
        return _minor_of(stamp["version"])
    except (OSError, ValueError, KeyError):
        return None


# ---- environments ----------------------------------------------------------------------------


def requirements(minor, leg):
    pins = leg["pins"]
    wanted = [PYTEST_BY_MINOR.get(minor) or pins["pytest"], pins["PyYAML"], pins["nvidia-ml-py"]]
    if minor >= leg["controller_min"]:
        wanted.append(leg["core"])
    return wanted


def envs_dir(root=ROOT):
    return Path(os.environ.get("GPUSPLIT_PYENVS_DIR") or root / ".lab" / "pyenvs")


def _pip(argv):
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise RuntimeError(f"{' '.join(argv[:4])} ... failed: {said[-1] if said else done.returncode}")


def ensure_env(minor, executable, version, leg, root=ROOT, log=print):
    """The virtual environment's python for ``minor`` on ``leg``, built or reused; RuntimeError with the reason."""
    wanted = requirements(minor, leg)
    home = envs_dir(root) / leg["name"] / f"{minor[0]}.{minor[1]}"
    stamp_file = home / ".gpusplit-env.json"
    stamp = {"python": executable, "version": list(version), "requirements": wanted}
    python = home / "bin" / "python"
    try:
        if json.loads(stamp_file.read_text()) == stamp and python.exists():
            return python
    except (OSError, ValueError):
        pass
    log(f"  building {home} ({', '.join(wanted)})")
    shutil.rmtree(home, ignore_errors=True)
    _pip([executable, "-m", "venv", str(home)])
    _pip(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input", *wanted]
    )
    stamp_file.write_text(json.dumps(stamp))
    return python


def host_module_utils(leg, root=ROOT):
    """A folder holding ``ansible/module_utils`` of the leg's ansible-core (what AnsiballZ ships).

    The leg's ansible-core is unpacked once (no dependencies, whatever Python it asks for: only its
    module_utils are used) under the leg's environments; ``ansible/__init__.py`` there is empty.
    """
    base = envs_dir(root) / leg["name"]
    core = base / "ansible-core"
    stamp = core / ".gpusplit-core"
    if not stamp.is_file() or stamp.read_text() != leg["core"]:
        shutil.rmtree(core, ignore_errors=True)
        _pip(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-input",
                "--no-deps",
                "--ignore-requires-python",
                "--target",
                str(core),
                leg["core"],
            ]
        )
        stamp.write_text(leg["core"])
    source = (core / "ansible" / "module_utils").resolve()
    lib = base / "host-module-utils"
    package = lib / "ansible"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    link = package / "module_utils"
    if not link.is_symlink() or Path(os.readlink(link)) != source:
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(source, target_is_directory=True)
    return lib


def collections_root(root=ROOT):
    """Where ansible_collections/ is for this checkout (the same rule as tests/conftest.py)."""
    if root.parent.parent.name == "ansible_collections" and root.parent.name == "gpusplit":
        return root.parents[2]
    return root / ".collections"


def run_tests(minor, python, files, leg, pytest_args=(), root=ROOT):
    paths = [str(collections_root(root))]
    if minor < leg["controller_min"]:
        paths.insert(0, str(host_module_utils(leg, root)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), PYTHONDONTWRITEBYTECODE="1")
    argv = [
        str(python),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        f"--rootdir={root}",
        f"--confcutdir={root / 'tests' / 'unit'}",
        *pytest_args,
        *(str(f) for f in files),
    ]
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return done.returncode, (lines[-1] if lines else done.stderr.strip()), done.stdout + done.stderr


# ---- main ------------------------------------------------------------------------------------


def _minor(text):
    match = re.fullmatch(r"3\.(\d+)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a Python version such as 3.9")
    return (3, int(match.group(1)))


def edges(leg):
    """``leg`` with only the bounds of its managed-host Pythons (its oldest and newest): where a core's own
    module_utils meets the Pythons it supports; every Python between them is compiled with each, and
    make multi-python and make test-matrix run the tests under all of them."""
    if len(leg["hosts"]) <= 2:
        return leg
    hosts = sorted(leg["hosts"])
    return dict(leg, hosts=(hosts[0], hosts[-1]))


def in_ci(environ=None):
    return (environ if environ is not None else os.environ).get("CI", "").lower() in ("1", "true", "yes")


def missing_lines(legs, skipped, ci):
    """``(lines, failures)`` for the Pythons a leg names that this machine lacks."""
    lines, failures = [], []
    for leg in legs:
        for minor in leg["hosts"]:
            if minor not in skipped:
                continue
            label = f"{leg['name']} on Python {minor[0]}.{minor[1]}"
            if ci:
                lines.append(f"  FAILED (CI=true): {label}: {skipped[minor]}")
                failures.append(f"{label}: no such Python here")
            else:
                lines.append(f"  SKIPPED, NOT PROVEN HERE: {label}: {skipped[minor]} (in CI this fails)")
    return lines, failures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--legs", help="only these legs, e.g. core2.19,core2.21")
    parser.add_argument("--pythons", help="only these versions, e.g. 3.9,3.10")
    parser.add_argument("--list", action="store_true", help="say what would run, build and run nothing")
    parser.add_argument(
        "--all",
        action="store_true",
        help="also under the Python each leg's own test run uses (make test runs those files there already)",
    )
    parser.add_argument(
        "--edges",
        action="store_true",
        help="each leg under its oldest and newest managed-host Python only "
        "(the version-sensitive part that make test runs; make multi-python and make test-matrix run all)",
    )
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    legs, _pins = load()
    if args.legs:
        names = [part.strip() for part in args.legs.split(",")]
        unknown = sorted(set(names) - {leg["name"] for leg in legs})
        if unknown:
            parser.error(f"unknown leg(s) {', '.join(unknown)}")
        legs = [leg for leg in legs if leg["name"] in names]
    if args.pythons:
        only = {_minor(part) for part in args.pythons.split(",")}
        legs = [dict(leg, hosts=tuple(m for m in leg["hosts"] if m in only)) for leg in legs]
    if args.edges:
        legs = [edges(leg) for leg in legs]
    minors = tuple(sorted({m for leg in legs for m in leg["hosts"]}))

    found, skipped = discover(minors)
    print("Pythons used:")
    for _minor_found, (executable, version) in sorted(found.items()):
        print(f"  {'.'.join(map(str, version))}  {executable}")
    print("Pythons missing:" if skipped else "Pythons missing: none")
    for minor, why in sorted(skipped.items()):
        print(f"  {minor[0]}.{minor[1]}  {why}")
    lines, failures = missing_lines(legs, skipped, in_ci())
    for line in lines:
        print(line)
    if not found:
        print("no managed-host Python found: nothing ran")
        return 1

    started = time.monotonic()
    for minor, (executable, _version) in sorted(found.items()):
        if args.list:
            break
        count, errors = compile_check(executable)
        print(f"compile with {minor[0]}.{minor[1]}: {count} files, {len(errors)} errors")
        for error in errors:
            print(f"    {error}")
        if errors:
            failures.append(f"{minor[0]}.{minor[1]}: {len(errors)} file(s) do not compile")
    for leg in legs:
        print(
            f"\n== leg {leg['name']} ({leg['core']}): managed-host Pythons "
            f"{', '.join(f'{m[0]}.{m[1]}' for m in leg['hosts'])} =="
        )
        own = None if args.all else leg_controller(leg)
        for minor in leg["hosts"]:
            if minor not in found:
                continue
            executable, version = found[minor]
            label = f"{leg['name']} on Python {'.'.join(map(str, version))}"
            if minor == own:
                where = ".venv" if leg["default"] else f".venv-{leg['name']}"
                print(
                    f"-- {label}: run by the leg's own tests in {where} (make test), not again here (--all)"
                )
                continue
            files, left_out = split_tests(minor, leg["controller_min"])
            print(f"-- {label}")
            for path, why in sorted(left_out.items()):
                print(f"  left out: {path.relative_to(ROOT)}: {why}")
            if args.list:
                print(f"  would run {len(files)} test files")
                continue
            part_started = time.monotonic()
            try:
                python = ensure_env(minor, executable, version, leg, log=print)
                rc, summary, output = run_tests(minor, python, files, leg, args.pytest_args)
            except RuntimeError as exc:
                print(f"  environment: {exc}")
                failures.append(f"{label}: no test environment ({exc})")
                continue
            print(f"  pytest: {summary} ({time.monotonic() - part_started:.0f} s)")
            if rc != 0:
                print(output[-12000:])
                failures.append(f"{label}: {summary}")
    print()
    if args.list:
        return 1 if failures else 0
    print(f"took {time.monotonic() - started:.0f} s")
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    print(f"passed: {', '.join(leg['name'] for leg in legs)} on every managed-host Python they name")
    return 0


if __name__ == "__main__":
    sys.exit(main())
