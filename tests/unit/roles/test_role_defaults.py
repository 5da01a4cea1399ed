"""Every role's defaults/main.yml passes its own argument spec: a role run with no variables of the user's
must not be refused by its own check (ansible-core's ArgumentSpecValidator, as the role's validation task
runs it, on each entry point with the defaults of the options it has)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

ROOT = Path(__file__).resolve().parents[3]
ROLES = ROOT / "roles"


def optional(options):
    """The options with ``required`` dropped (at every depth): what the caller must give is not a default."""
    out = copy.deepcopy(options)
    for option in out.values():
        option.pop("required", None)
        if isinstance(option.get("options"), dict):
            option["options"] = optional(option["options"])
    return out


def entry_points():
    for spec in sorted(ROLES.glob("*/meta/argument_specs.yml")):
        role = spec.parents[1]
        for entry, body in yaml.safe_load(spec.read_text())["argument_specs"].items():
            if (body or {}).get("options"):
                yield pytest.param(role.name, entry, id=f"{role.name}/{entry}")


@pytest.mark.parametrize(("role", "entry"), list(entry_points()))
def test_the_defaults_pass_the_roles_own_spec(role, entry):
    spec = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())
    options = spec["argument_specs"][entry]["options"]
    path = ROLES / role / "defaults" / "main.yml"
    defaults = (yaml.safe_load(path.read_text()) if path.is_file() else None) or {}
    values = {name: value for name, value in defaults.items() if name in options}
    result = ArgumentSpecValidator(optional(options)).validate(values)
    assert not result.error_messages, (
        f"roles/{role}/defaults/main.yml, entry point {entry}: {result.error_messages}"
    )


def test_every_default_is_an_option_of_some_entry_point():
    """A default no entry point declares is checked by nothing (and documented nowhere)."""
    for path in sorted(ROLES.glob("*/defaults/main.yml")):
        spec = path.parents[1] / "meta" / "argument_specs.yml"
        if not spec.is_file():
            continue
        declared = set()
        for body in yaml.safe_load(spec.read_text())["argument_specs"].values():
            declared |= set((body or {}).get("options") or {})
        undeclared = sorted(set(yaml.safe_load(path.read_text()) or {}) - declared)
        assert not undeclared, f"{path.relative_to(ROOT)}: {undeclared} in no entry point's options"
