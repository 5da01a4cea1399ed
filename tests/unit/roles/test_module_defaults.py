"""A role's module_defaults name only modules the role runs.

The roles set the cluster connection once in ``module_defaults`` (docs/dev/architecture.md): for the action group
``gpusplit.k8s.cluster``, the ``kubernetes.core`` group, and single modules outside a group. A single module that
no task of the role runs any more (``kubernetes.core.k8s_taint`` after node_taints replaced it, ninth round) is a
default that nobody reads and a hint at a module the role does not use; this test names it.
"""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
KEYWORDS = {"module_defaults", "loop_control", "delegate_to"}


def walk(tasks, found_actions, found_defaults):
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        for key in ("block", "rescue", "always"):
            walk(task.get(key), found_actions, found_defaults)
        found_defaults.extend(
            name for name in (task.get("module_defaults") or {}) if not str(name).startswith("group/")
        )
        found_actions.update(key for key in task if "." in key and key not in KEYWORDS)


def role_modules(role: Path):
    """(modules the role's tasks run, modules its module_defaults name) over every task file of the role,
    and of the roles it includes or imports (their tasks run under the including task's defaults)."""
    actions, defaults, seen, todo = set(), [], set(), [role]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for path in sorted((current / "tasks").glob("*.yml")):
            tasks = yaml.safe_load(path.read_text())
            walk(tasks, actions, defaults if current == role else [])
            for task in _all_tasks(tasks):
                for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
                    name = ((task.get(key) or {}).get("name") or "").rsplit(".", 1)[-1]
                    if name and (ROOT / "roles" / name).is_dir():
                        todo.append(ROOT / "roles" / name)
    return actions, defaults


def _all_tasks(tasks):
    for task in tasks or []:
        if isinstance(task, dict):
            yield task
            for key in ("block", "rescue", "always"):
                yield from _all_tasks(task.get(key))


def test_module_defaults_name_only_modules_the_role_runs():
    unused = []
    for role in sorted(p for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir()):
        actions, defaults = role_modules(role)
        unused += [f"{role.name}: {name}" for name in sorted(set(defaults)) if name not in actions]
    assert unused == [], f"module_defaults for modules no task of the role runs: {unused}"


def test_the_check_finds_an_unused_default(tmp_path):
    role = tmp_path / "roles" / "r"
    (role / "tasks").mkdir(parents=True)
    (role / "tasks" / "main.yml").write_text(
        yaml.safe_dump(
            [
                {
                    "name": "b",
                    "module_defaults": {"kubernetes.core.k8s_taint": {"kubeconfig": "k"}},
                    "block": [{"name": "t", "kubernetes.core.k8s_info": {"kind": "Node"}}],
                }
            ]
        )
    )
    actions, defaults = role_modules(role)
    assert defaults == ["kubernetes.core.k8s_taint"] and "kubernetes.core.k8s_info" in actions
