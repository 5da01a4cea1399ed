"""Every name the user docs (README.md, docs/*.md) give exists in the repository.

Checked in inline code and links:
- a path of the repository (`plugins/...`, `roles/...`, `docs/...`, ...), also one relative to
  plugins/ (`module_utils/...`, `plugin_utils/...`, `_split/...`), and `meta/...` of a role;
- a relative Markdown link, and its `#anchor`: a heading of the page it points to;
- `gpusplit.k8s.<name>`: a module, role, playbook, filter, action or action group of the collection;
- a `gpusplit_*` variable: a role's option (meta/argument_specs.yml) or default, or a variable that
  the playbooks, roles, plugins, templates or inventories read or set;
- `make <target>` in a command: a target of the Makefile;
- `<module>.<name>` where <module> is a Python module of plugins/: <name> is defined in plugins/.

Not checked: file names of other projects (a Helm chart's `templates/*.yaml`, without `.j2`) and
names with a placeholder (`<node>`, `*`, `...`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
FQCN = re.compile(r"\bgpusplit\.k8s\.([a-z_][a-z0-9_]*)(\*?)")
VAR = re.compile(r"\bgpusplit_[a-z0-9_]+\b")
MAKE = re.compile(r"\bmake\s+(?:[A-Z_]+=\S+\s+)*([a-z][a-z0-9-]*)")
TOP = ("plugins/", "roles/", "playbooks/", "docs/", "tests/", "tools/", "templates/", "lab/", "inventory/")
TOP += ("changelogs/", "meta/", "molecule/", ".ci/")
PLUGIN_RELATIVE = ("module_utils/", "plugin_utils/", "filter/", "modules/", "action/")
PLACEHOLDER = re.compile(r"[<>*{}$\[\]]|\.\.\.")
# `<word>.<word>` that is data, an API group or a file, not a Python module's attribute
DATA_WORDS = {"split", "settings", "sharing", "health", "cel", "fleet", "scheduling", "registry"}
EXTENSIONS = {
    "py",
    "yml",
    "yaml",
    "svg",
    "json",
    "j2",
    "md",
    "toml",
    "txt",
    "env",
    "conf",
    "log",
    "tmpl",
    "sh",
}


def inline_code(text):
    return [m.group(1) for m in CODE.finditer(text)]


def collection_names():
    names = {p.stem for p in (ROOT / "plugins" / "modules").glob("*.py")}
    names |= {p.stem for p in (ROOT / "plugins" / "action").glob("*.py")}
    names |= {p.stem for p in (ROOT / "plugins" / "filter").glob("*.yml")}
    names |= {p.stem for p in (ROOT / "playbooks").glob("*.yml")}
    names |= {p.name for p in (ROOT / "roles").iterdir() if p.is_dir()}
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    names |= set(runtime.get("action_groups") or {})
    return names - {"__init__"}


def known_variables():
    known = set()
    for spec in (ROOT / "roles").glob("*/meta/argument_specs.yml"):
        for entry in (yaml.safe_load(spec.read_text())["argument_specs"] or {}).values():
            known |= set((entry or {}).get("options") or {})
    for defaults in (ROOT / "roles").glob("*/defaults/main.yml"):
        known |= set(yaml.safe_load(defaults.read_text()) or {})
    for folder in ("roles", "playbooks", "plugins", "templates", "inventory"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in {".yml", ".yaml", ".py", ".j2"}:
                known |= set(VAR.findall(path.read_text()))
    return known


def python_names():
    stems, defined = set(), set()
    for path in (ROOT / "plugins").rglob("*.py"):
        stems.add(path.stem)
        for a, b in re.findall(
            r"^\s*(?:def|class)\s+([A-Za-z_]\w*)|^([A-Za-z_]\w*)\s*[:=]", path.read_text(), re.M
        ):
            defined.add(a or b)
    return stems, defined


def missing_names(doc: Path, text: str, names, variables, targets, stems, defined):
    """What ``text`` (the page ``doc``) names that does not exist, one line each."""
    found = []
    for code in inline_code(text):
        for part in re.split(r"[\s,()=]+", code):
            part = part.rstrip(".:;'\"")
            if not part or PLACEHOLDER.search(part):
                continue
            path, _, test = part.split("#")[0].partition("::")
            path = path.split(":")[0]  # a line number
            if path.startswith(TOP):
                if path.startswith("templates/") and not path.endswith(".j2"):
                    continue  # a Helm chart's template, not one of ours (templates/*.j2)
                exists = (ROOT / path).exists() or (
                    path.startswith("meta/") and any((ROOT / "roles").glob(f"*/{path}"))
                )
                if not exists:
                    found.append(f"path {part}")
                elif test and not re.search(
                    rf"def {re.escape(test.split('[')[0])}\(", (ROOT / path).read_text()
                ):
                    found.append(f"test {part}")
            elif path.startswith(PLUGIN_RELATIVE) or re.match(r"_[a-z0-9_]+/", path):
                bases = (
                    ROOT / "plugins",
                    ROOT / "plugins" / "module_utils",
                    ROOT / "plugins" / "plugin_utils",
                )
                if not any((base / path).exists() for base in bases):
                    found.append(f"path {part}")
        for m in re.finditer(r"(?<![\w./-])([a-z_][a-z0-9_]*)\.([A-Za-z_]\w*)(?![\w./-])", code):
            module, attr = m.groups()
            if (
                module in stems
                and module not in DATA_WORDS
                and attr not in EXTENSIONS
                and attr not in defined
            ):
                found.append(f"name {m.group(0)}")
        for m in MAKE.finditer(code):
            if m.group(1) not in targets:
                found.append(f"make target {m.group(1)}")
    for m in FQCN.finditer(text):
        name, wildcard = m.groups()
        if wildcard or name.endswith("_"):
            if not any(n.startswith(name) for n in names):
                found.append(f"name gpusplit.k8s.{name}*")
        elif name not in names:
            found.append(f"name gpusplit.k8s.{name}")
    for var in sorted(set(VAR.findall(text)) - variables):
        found.append(f"variable {var}")
    for m in LINK.finditer(text):
        target, _, anchor = m.group(1).partition("#")
        if "://" in target or target.startswith("mailto:"):
            continue
        page = doc.parent / target if target else doc
        if not page.exists():
            found.append(f"link {m.group(1)}")
        elif anchor and page.suffix == ".md" and anchor not in heading_anchors(page):
            found.append(f"anchor {m.group(1)}")
    return found


def heading_anchors(page: Path):
    """The anchors GitHub gives the page's headings (outside code blocks)."""
    anchors, in_code = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"#+\s+(.*)", line)):
            anchors.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return anchors


@pytest.fixture(scope="module")
def context():
    targets = set(re.findall(r"^([a-z][a-z0-9-]*)\s*:", (ROOT / "Makefile").read_text(), re.M))
    return (collection_names(), known_variables(), targets, *python_names())


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_name_in_the_docs_exists(doc, context):
    assert missing_names(doc, doc.read_text(), *context) == []


def test_the_check_finds_names_that_do_not_exist(context):
    text = "\n".join(
        [
            "`plugins/module_utils/_k8s/k8s_apply.py` and `_split/nothing.py`",
            "`gpusplit.k8s.no_such_module`, `gpusplit.k8s.site`, `gpusplit.k8s.zz_*`",
            "`gpusplit_no_such_variable: 1` and `gpusplit_mode`",
            "`make no-such-target`, `make dist`, `make K8S=1.36.3 lab-up`",
            "`planner.no_such_function` and `planner.plan_fleet`",
            "[gone](gone.md), [split](split.md), [matrix](../README.md#support-matrix), [x](split.md#no-such-part)",
            "`templates/validation.yaml` (a chart's), `roles/gpu_plan/<x>`, `meta/argument_specs.yml`",
            "`tests/unit/test_docs_names.py::test_no_such_test`, `tests/unit/test_docs_names.py::test_every_name_in_the_docs_exists`",
        ]
    )
    assert sorted(missing_names(ROOT / "docs" / "page.md", text, *context)) == sorted(
        [
            "path plugins/module_utils/_k8s/k8s_apply.py",
            "path _split/nothing.py",
            "test tests/unit/test_docs_names.py::test_no_such_test",
            "name planner.no_such_function",
            "make target no-such-target",
            "name gpusplit.k8s.no_such_module",
            "name gpusplit.k8s.zz_*",
            "variable gpusplit_no_such_variable",
            "link gone.md",
            "anchor split.md#no-such-part",
        ]
    )
