"""The roles' argument specs refuse bad values before any task runs, and match what the code accepts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.modes import MODE_NAMES
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render

ROOT = Path(__file__).resolve().parents[3]
ROLES = ROOT / "roles"
SETTINGS_ROLES = ("gpu_split_cluster", "gpu_host", "gpu_operator")


def spec(role: str, entry: str = "main") -> dict:
    doc = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())
    return doc["argument_specs"][entry]["options"]


def errors(role: str, values: dict, entry: str = "main") -> str:
    """The validation errors the role's entry point reports for ``values`` ("" when valid)."""
    result = ArgumentSpecValidator(spec(role, entry)).validate(values)
    return "; ".join(result.error_messages)


@pytest.mark.parametrize(
    "role", sorted(p.name for p in ROLES.iterdir() if (p / "meta" / "argument_specs.yml").is_file())
)
def test_every_spec_loads_into_the_validator(role):
    doc = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())
    for entry, body in doc["argument_specs"].items():
        if not body:
            continue  # an empty entry point: checked once for the play by another one (test_entry_points.py)
        ArgumentSpecValidator(body.get("options") or {})  # raises on a malformed spec
        assert body.get("short_description"), (role, entry)


@pytest.mark.parametrize(
    ("values", "text"),
    [
        (
            {"gpusplit_mode": "bogus"},
            "value of gpusplit_mode must be one of: device_plugin, gpu_operator, dra, none",
        ),
        (
            {"gpusplit_mig_strategy": "all"},
            "value of gpusplit_mig_strategy must be one of: none, single, mixed",
        ),
        ({"gpusplit_exclude_unhealthy": "sometimes"}, "gpusplit_exclude_unhealthy"),
    ],
)
def test_gpu_plan_refuses_bad_values(values, text):
    assert text in errors("gpu_plan", values)


def test_gpu_plan_mode_choices_are_the_mode_table():
    """A mode added to _split/modes.py is added to the role's choices too (and nothing else is)."""
    mode = spec("gpu_plan")["gpusplit_mode"]
    assert mode["choices"] == list(MODE_NAMES), (
        "roles/gpu_plan/meta/argument_specs.yml: gpusplit_mode choices must be the mode table's names "
        f"{list(MODE_NAMES)}"
    )
    assert mode["default"] in MODE_NAMES


def test_node_plan_filter_mode_choices_are_the_mode_table():
    """The node_plan filter documents its modes by hand: they are the mode table's names too."""
    doc = yaml.safe_load((ROOT / "plugins" / "filter" / "node_plan.yml").read_text())
    mode = doc["DOCUMENTATION"]["options"]["mode"]
    assert mode["choices"] == list(MODE_NAMES), (
        f"plugins/filter/node_plan.yml: the mode choices must be the mode table's names {list(MODE_NAMES)}"
    )


def test_gpu_plan_accepts_the_documented_forms():
    good = {
        "gpusplit_mode": "device_plugin",
        "gpusplit_split": {"host_uuids": ["GPU-1"], "product": ["NVIDIA H100*"]},
        "gpusplit_mig_strategy": "mixed",
        "gpusplit_node_name": "gpu-a.example.com",
        "gpusplit_exclude_unhealthy": False,
    }
    assert errors("gpu_plan", good) == ""
    assert errors("gpu_plan", {"gpusplit_split": {"count": "2"}}) == ""  # a numeric string converts


@pytest.mark.parametrize("role", SETTINGS_ROLES)
def test_plugin_settings_are_typed_like_render_accepts_them(role):
    options = spec(role)["gpusplit_plugin_settings"]["options"]
    assert set(options) == set(render.DEFAULT_SETTINGS)
    assert options["hardening"]["choices"] == list(render.HARDENING)
    assert options["node_pinning"]["choices"] == list(render.NODE_PINNING)
    assert set(options["image_pull_policy"]["choices"]) == {"Always", "IfNotPresent", "Never"}
    for key, default in render.DEFAULT_SETTINGS.items():
        if isinstance(default, bool):
            assert options[key]["type"] == "bool", key


@pytest.mark.parametrize("role", SETTINGS_ROLES)
@pytest.mark.parametrize(
    ("settings", "text"),
    [
        ({"hardening": "privileged"}, "hardening must be one of: envvar, volume-mounts, cdi, cdi-cri"),
        ({"namespaces": "x"}, "namespaces"),
        ({"pass_device_specs": "maybe"}, "pass_device_specs"),
        ({"node_pinning": "label"}, "node_pinning"),
        ({"extra_tolerations": ["dedicated"]}, "extra_tolerations"),
    ],
)
def test_plugin_settings_refuse_bad_values(role, settings, text):
    values = {"gpusplit_plugin_settings": settings}
    if role == "gpu_host":
        values["gpusplit_node_plan"] = {}
    if role in ("gpu_split_cluster", "gpu_operator"):
        values["gpusplit_fleet_plan"] = {"nodes": {}}
    assert text in errors(role, values)


def test_every_value_render_accepts_passes_the_spec():
    settings = {
        "namespace": "gpusplit-system",
        "hardening": "cdi",
        "runtime_class_name": "",
        "image_pull_secrets": ["regcred", {"name": "other"}],
        "extra_tolerations": [{"key": "k", "operator": "Exists"}],
        "resources": {"limits": {"memory": "128Mi"}},
        "nvidia_cdi_hook_path": "/usr/bin/nvidia-cdi-hook",
    }
    render.resolve_settings(settings)
    values = {"gpusplit_fleet_plan": {"nodes": {}}, "gpusplit_plugin_settings": settings}
    assert errors("gpu_split_cluster", values) == ""


@pytest.mark.parametrize("role", ["gpu_split_cluster", "gpu_verify"])
def test_the_fleet_plan_is_declared_and_required(role):
    assert spec(role)["gpusplit_fleet_plan"]["type"] == "dict"
    assert "gpusplit_fleet_plan" in errors(role, {})
    assert "gpusplit_fleet_plan" in errors(role, {"gpusplit_fleet_plan": "plan"})


JSON_VALUES = [None, True, 3, 2.5, "x", ["count", 2], {"x": [1]}]
# dict options with sub-options: Ansible's validator itself fails with a Python TypeError on a
# bool, int, float or a list holding one (ansible-core 2.19: _validate_sub_spec calls set_fallbacks
# before it checks that the value is a mapping; ansible/ansible#81631). No argument_specs.yml can
# avoid it and keep the sub-options: type raw (gpusplit_split's way) or a dict without options
# would leave the keys to the code, and gpu_split_cluster labels nodes before it renders (reads)
# the settings. What fixes it: a check that the value is a mapping that runs before the role's own
# validation (a role dependency in meta/main.yml does), or an ansible-core with that fix.
KNOWN_VALIDATOR_CRASHES = {
    ("gpu_host", "main", "gpusplit_plugin_settings"),
    ("gpu_operator", "main", "gpusplit_plugin_settings"),
    ("gpu_split_cluster", "main", "gpusplit_plugin_settings"),
}


def every_option():
    for path in sorted(ROLES.glob("*/meta/argument_specs.yml")):
        for entry, body in yaml.safe_load(path.read_text())["argument_specs"].items():
            for option in body.get("options") or {}:
                key = (path.parents[1].name, entry, option)
                marks = (
                    [
                        pytest.mark.xfail(
                            strict=True,
                            reason="ansible-core 2.19 validator bug (set_fallbacks before the mapping check)",
                        )
                    ]
                    if key in KNOWN_VALIDATOR_CRASHES
                    else []
                )
                yield pytest.param(*key, marks=marks, id="/".join(key))


@pytest.mark.parametrize(("role", "entry", "option"), list(every_option()))
def test_no_option_of_any_json_type_crashes_the_validator(role, entry, option):
    """Issue 18 case 12's class: a value of the wrong JSON type is named by the spec (or left to
    the code, which names it), never a Python error out of the validator."""
    for value in JSON_VALUES:
        text = errors(role, {option: value}, entry)
        assert "not iterable" not in text, (option, value, text)  # errors() raises on a crash


def test_gpusplit_split_of_any_json_type_reaches_the_planner():
    """gpusplit_split is raw in the spec: the planner names host, field and shape (test_planner.py)."""
    for value in JSON_VALUES:
        assert errors("gpu_plan", {"gpusplit_split": value}) == ""


def test_a_play_with_bad_values_stops_before_any_task(tmp_path):
    """The real thing: ansible-playbook validates the role's spec and names every bad value."""
    play = tmp_path / "play.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "bad split variables",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": {
                        "gpusplit_mode": "bogus",
                        "gpusplit_split": {"count": "two", "hosts_count": 1},
                        "gpusplit_out_dir": str(tmp_path / "out"),
                    },
                    "roles": [{"role": "gpusplit.k8s.gpu_plan"}],
                }
            ]
        )
    )
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_COLLECTIONS_PATH": os.environ["ANSIBLE_COLLECTIONS_PATH"],
    }
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(play)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Validating arguments against arg spec" in out
    assert "gpusplit_mode must be one of" in out and "bogus" in out
    assert "Plan the fleet" not in out  # no task of the role ran
    assert not (tmp_path / "out").exists()
