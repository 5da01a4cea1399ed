"""Run the managed-host modules' unit tests under every Python 3.8 to 3.13 this machine has.

Managed hosts run the collection's modules with their own Python (RHEL 9: 3.9, Ubuntu 22.04: 3.10, ...)
and only what Ansible ships to them: the module, the collection's module_utils and ansible-core's own
``ansible.module_utils``. This runner proves those run there:

1. finds the Pythons: pyenv's (``~/.pyenv/versions/*/bin/python3.X``, or ``$PYENV_ROOT``) and
   ``python3.X`` on PATH, each asked for its version; prints which it uses and which it skips and why;
2. compiles every file under plugins/module_utils and plugins/modules with each of them (syntax that
   an older Python does not read fails here first);
3. for each, keeps a virtual environment under ``.lab/pyenvs/<X.Y>`` (``$GPUSPLIT_PYENVS_DIR`` to move
   it; rebuilt when its Python or its pins change) with only pytest, PyYAML and nvidia-ml-py at the
   project's pins, and on 3.11+ (where ansible-core 2.19 runs as a controller) ansible-core too;
4. runs the unit tests of the managed-host modules in it (TEST_PATHS). Below 3.11 ansible-core cannot
   be installed, so ``ansible.module_utils`` comes from the controller's ansible-core, exactly as
   AnsiballZ ships it to a host, and the test files that import controller-only code (``ansible.*``
   other than ``ansible.module_utils``, the collection's filters or plugin_utils, the lab) are left out
   there, each named with the reason.

Exit status 0 only when every Python found passed; a Python that is not on the machine is a skip,
one whose environment cannot be built (no package index) is a failure. Standard library only; runs
under the project's virtual environment (``make test`` calls it).

    python tools/multi_python_tests.py [--pythons 3.9,3.10] [--list] [-- <pytest args>]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MINORS = ((3, 8), (3, 9), (3, 10), (3, 11), (3, 12), (3, 13))
CONTROLLER_MIN = (3, 11)  # ansible-core 2.19 runs as a controller from here on

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
CONTROLLER_PINNED = ("ansible-core",)

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


def split_tests(minor, paths=TEST_PATHS, root=ROOT):
    """``(run, left_out)``: the test files to run under ``minor`` and {file: why not} for the others."""
    run, left_out = [], {}
    for path in test_files(paths, root):
        needs = controller_imports(path)
        if needs and minor < CONTROLLER_MIN:
            left_out[path] = f"imports controller-only {', '.join(needs)} (ansible-core 2.19 needs 3.11+)"
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


# ---- environments ----------------------------------------------------------------------------


def project_pins(root=ROOT):
    """{name: "name==version"} of the project's dependencies (pyproject.toml), read without a TOML library."""
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    return {
        m.group(1): m.group(0) for m in re.finditer(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\"'\s,\]]+)", text)
    }


def requirements(minor, pins):
    wanted = [PYTEST_BY_MINOR.get(minor) or pins["pytest"], pins["PyYAML"], pins["nvidia-ml-py"]]
    if minor >= CONTROLLER_MIN:
        wanted += [pins[name] for name in CONTROLLER_PINNED]
    return wanted


def envs_dir(root=ROOT):
    return Path(os.environ.get("GPUSPLIT_PYENVS_DIR") or root / ".lab" / "pyenvs")


def ensure_env(minor, executable, version, pins, root=ROOT, log=print):
    """The virtual environment's python for ``minor``, built or reused; RuntimeError with the reason."""
    wanted = requirements(minor, pins)
    home = envs_dir(root) / f"{minor[0]}.{minor[1]}"
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
    for argv in (
        [executable, "-m", "venv", str(home)],
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            *wanted,
        ],
    ):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            raise RuntimeError(f"{' '.join(argv[:4])} ... failed: {said[-1] if said else done.returncode}")
    stamp_file.write_text(json.dumps(stamp))
    return python


def host_module_utils(root=ROOT):
    """A folder holding ``ansible/module_utils`` of the controller's ansible-core (what AnsiballZ ships)."""
    import ansible.module_utils

    source = Path(ansible.module_utils.__file__).resolve().parent
    lib = envs_dir(root) / "host-module-utils"
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


def run_tests(minor, python, files, pytest_args=(), root=ROOT):
    paths = [str(collections_root(root))]
    if minor < CONTROLLER_MIN:
        paths.insert(0, str(host_module_utils(root)))
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pythons", help="only these versions, e.g. 3.9,3.10")
    parser.add_argument("--list", action="store_true", help="say what would run, build and run nothing")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    minors = MINORS
    if args.pythons:
        minors = tuple(_minor(part) for part in args.pythons.split(","))

    found, skipped = discover(minors)
    print("Pythons used:")
    for _minor_found, (executable, version) in sorted(found.items()):
        print(f"  {'.'.join(map(str, version))}  {executable}")
    print("Pythons skipped:" if skipped else "Pythons skipped: none")
    for minor, why in sorted(skipped.items()):
        print(f"  {minor[0]}.{minor[1]}  {why}")
    if not found:
        print("no Python 3.8-3.13 found: nothing ran")
        return 1

    pins = project_pins()
    failures = []
    for minor, (executable, version) in sorted(found.items()):
        label = f"{minor[0]}.{minor[1]}"
        files, left_out = split_tests(minor)
        print(f"\n== Python {'.'.join(map(str, version))} ==")
        for path, why in sorted(left_out.items()):
            print(f"  left out: {path.relative_to(ROOT)}: {why}")
        if args.list:
            print(f"  would compile {', '.join(COMPILE_PATHS)} and run {len(files)} test files")
            continue
        count, errors = compile_check(executable)
        print(f"  compile: {count} files, {len(errors)} errors")
        for error in errors:
            print(f"    {error}")
        if errors:
            failures.append(f"{label}: {len(errors)} file(s) do not compile")
        try:
            python = ensure_env(minor, executable, version, pins, log=print)
        except RuntimeError as exc:
            print(f"  environment: {exc}")
            failures.append(f"{label}: no test environment ({exc})")
            continue
        rc, summary, output = run_tests(minor, python, files, args.pytest_args)
        print(f"  pytest: {summary}")
        if rc != 0:
            print(output[-12000:])
            failures.append(f"{label}: {summary}")
    print()
    if args.list:
        return 0
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    print(
        f"passed on {', '.join('.'.join(map(str, v)) for _, v in sorted(found.values(), key=lambda x: x[1]))}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
