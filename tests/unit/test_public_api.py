"""plugins/ uses what ansible-core documents for plugin authors, nothing of its internals: no import from
``ansible._internal`` (or any module of ansible-core whose dotted name has a part starting with ``_``), no
name starting with ``_`` imported from an ansible-core module, and action plugins call no underscored method
of ActionBase except ``_execute_module`` (and ``super().run``). Every ansible-core release may change what
is private; this is what keeps the collection working from one release to the next."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from ansible.plugins.action import ActionBase

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "plugins"
FILES = sorted(PLUGINS.rglob("*.py"))
# the one underscored ActionBase method an action plugin may call: ansible-core's way to run a module
ACTION_ALLOWED = {"_execute_module"}


def private_uses(source, name="<source>"):
    """``file:line: what`` for every private use of ansible-core in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            modules = [(node.module or "", alias.name) for alias in node.names]
        else:
            continue
        for module, imported in modules:
            if module != "ansible" and not module.startswith("ansible."):
                continue
            if any(part.startswith("_") for part in module.split(".")):
                found.append(f"{name}:{node.lineno}: imports the private module {module}")
            elif imported is not None and imported.startswith("_"):
                found.append(f"{name}:{node.lineno}: imports the private name {imported} from {module}")
    return found


def private_action_calls(source, name="<source>"):
    """``file:line: what`` for every call of an underscored ActionBase method (``self._x(...)`` or
    ``super()._x(...)``) other than ACTION_ALLOWED."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner, method = node.func.value, node.func.attr
        on_self = isinstance(owner, ast.Name) and owner.id == "self"
        on_super = isinstance(owner, ast.Call) and getattr(owner.func, "id", None) == "super"
        if not (on_self or on_super) or not method.startswith("_") or method in ACTION_ALLOWED:
            continue
        if callable(getattr(ActionBase, method, None)):
            found.append(f"{name}:{node.lineno}: calls ActionBase.{method}")
    return found


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PLUGINS)))
def test_no_private_ansible_core_import(path):
    assert private_uses(path.read_text(encoding="utf-8"), path.relative_to(ROOT)) == []


@pytest.mark.parametrize(
    "path", sorted((PLUGINS / "action").glob("*.py")), ids=lambda p: str(p.relative_to(PLUGINS))
)
def test_action_plugins_call_no_private_actionbase_method_but_execute_module(path):
    assert private_action_calls(path.read_text(encoding="utf-8"), path.relative_to(ROOT)) == []


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("from ansible._internal._templating import _engine", "private module ansible._internal._templating"),
        ("import ansible._internal", "private module ansible._internal"),
        ("from ansible.executor.module_common import _get_shebang", "private name _get_shebang"),
        ("from ansible.module_utils._text import to_text", "private module ansible.module_utils._text"),
        ("def f():\n    from ansible.vars.clean import _x\n", "private name _x"),
    ],
)
def test_the_import_check_finds_each_kind_of_private_use(source, what):
    (found,) = private_uses(source)
    assert what in found


def test_the_import_check_leaves_public_and_collection_imports_alone():
    source = (
        "from __future__ import annotations\n"
        "from ansible.module_utils.basic import AnsibleModule\n"
        "from ansible.plugins.action import ActionBase\n"
        "from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError\n"
        "from . import _sibling\n"
    )
    assert private_uses(source) == []


def test_the_action_check_finds_underscored_actionbase_calls_only():
    source = (
        "class ActionModule(ActionBase):\n"
        "    def run(self, tmp=None, task_vars=None):\n"
        "        result = super().run(tmp, task_vars)\n"
        "        self._execute_module(task_vars=task_vars)\n"
        "        self._templar.template('x')\n"  # an attribute's method, not ActionBase's
        "        self._task.args.get('a')\n"
        "        self._helper()\n"  # not an ActionBase method: the plugin's own
        "        self._low_level_execute_command('true')\n"
        "        super()._remove_tmp_path('/tmp/x')\n"
    )
    found = private_action_calls(source)
    assert [line.split(": ", 1)[1] for line in found] == [
        "calls ActionBase._low_level_execute_command",
        "calls ActionBase._remove_tmp_path",
    ]
