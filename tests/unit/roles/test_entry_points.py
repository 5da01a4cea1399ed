"""Every ``tasks_from`` names an entry point of the role's meta/argument_specs.yml (or the role has none).

ansible-core picks the entry point's spec by the literal ``tasks_from`` value: ``tasks_from: preflight.yml``
loads tasks/preflight.yml but checks no spec at all, since the spec is ``preflight``. The real thing is
checked too: ansible-playbook inserts the entry point's validation task, and a bad value stops the role.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
ROLES = ROOT / "roles"
ROLE_KEYS = {
    f"{prefix}{kind}_role"
    for prefix in ("", "ansible.builtin.", "ansible.legacy.")
    for kind in ("include", "import")
}


def role_calls(node):
    """(role, tasks_from) of every include_role/import_role with tasks_from in a parsed YAML file."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ROLE_KEYS and isinstance(value, dict) and "tasks_from" in value:
                yield value["name"], value["tasks_from"]
            else:
                yield from role_calls(value)
    elif isinstance(node, list):
        for item in node:
            yield from role_calls(item)


def every_tasks_from():
    files = sorted((ROOT / "playbooks").glob("*.yml")) + sorted(ROLES.glob("*/tasks/*.yml"))
    for path in files:
        for role, tasks_from in role_calls(yaml.safe_load(path.read_text())):
            yield pytest.param(
                path.relative_to(ROOT).as_posix(), role, tasks_from, id=f"{path.name}:{tasks_from}"
            )


def entry_points(role):
    path = ROLES / role.rpartition(".")[2] / "meta" / "argument_specs.yml"
    if not path.is_file():
        return None
    return yaml.safe_load(path.read_text())["argument_specs"]


# entry points left out of their role's argument specs on purpose: any entry, even one with no options, makes
# ansible-core insert a validation task on every host of the play (and antsibull-docs wants a description)
UNCHECKED_ON_PURPOSE = {
    ("gpu_discovery", "fleet"): "its first task checks main's options once for the play",
    ("gpu_host", "apply"): "its input is the result of fleet, whose entry point checks it once",
}


def test_entry_points_left_out_on_purpose_stay_out_and_fleet_checks_itself():
    for role, entry in UNCHECKED_ON_PURPOSE:
        assert entry not in entry_points(role), (role, entry)
        assert (ROLES / role / "tasks" / f"{entry}.yml").is_file(), (role, entry)
    first = yaml.safe_load((ROLES / "gpu_discovery" / "tasks" / "fleet.yml").read_text())[0]
    assert first["run_once"] is True
    assert "argument_specs.main.options" in first["ansible.builtin.validate_argument_spec"]["argument_spec"]


def test_the_playbooks_have_tasks_from():
    assert len(list(every_tasks_from())) >= 9


@pytest.mark.parametrize(("where", "role", "tasks_from"), list(every_tasks_from()))
def test_tasks_from_names_an_entry_point(where, role, tasks_from):
    specs = entry_points(role)
    if specs is None or (role.rpartition(".")[2], tasks_from) in UNCHECKED_ON_PURPOSE:
        return  # a role without argument specs, or an entry point left out on purpose: nothing to select
    assert tasks_from in specs, (
        f"{where}: tasks_from {tasks_from!r} of {role} is no entry point of its meta/argument_specs.yml "
        f"({', '.join(specs)}): Ansible would check no argument spec there"
    )
    tasks = ROLES / role.rpartition(".")[2] / "tasks"
    assert (tasks / f"{tasks_from}.yml").is_file() or (tasks / tasks_from).is_file(), (where, tasks_from)


def test_every_entry_point_has_its_tasks():
    for spec in sorted(ROLES.glob("*/meta/argument_specs.yml")):
        for entry in yaml.safe_load(spec.read_text())["argument_specs"]:
            assert (spec.parents[1] / "tasks" / f"{entry}.yml").is_file(), (spec, entry)


@pytest.mark.parametrize(
    "role", sorted(p.name for p in ROLES.iterdir() if (p / "meta" / "argument_specs.yml").is_file())
)
def test_empty_entry_points_say_who_checks_them(role):
    """An entry point left empty (no validation task per host) is checked once for the play elsewhere:
    another entry point's description names it."""
    specs = entry_points(role)
    for entry, body in specs.items():
        if body:
            continue
        others = " ".join(
            " ".join(b.get("description") or [])
            if isinstance(b.get("description"), list)
            else str(b.get("description"))
            for name, b in specs.items()
            if b and name != entry
        )
        assert f"entry point {entry}" in others, (role, entry)


def test_preflight_checks_its_spec_when_a_playbook_includes_it(tmp_path):
    """feature_gates.yml's way of including control_plane_gates' preflight: a bad value is refused by the
    entry point's spec before any task of it runs."""
    plays = yaml.safe_load((ROOT / "playbooks" / "feature_gates.yml").read_text())
    calls = [c for c in role_calls(plays) if c[0].endswith("control_plane_gates")]
    assert calls, "feature_gates.yml includes control_plane_gates"
    _, tasks_from = calls[0]
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {"gpusplit_feature_gates": "not a mapping"},
            "tasks": [
                {
                    "ansible.builtin.include_role": {
                        "name": "gpusplit.k8s.control_plane_gates",
                        "tasks_from": tasks_from,
                    }
                }
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "play.yml",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert f"Validating arguments against arg spec '{tasks_from}'" in out, out[-3000:]
    assert "gpusplit_feature_gates" in out
