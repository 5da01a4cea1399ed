# Copyright: gpusplit contributors
# Apache-2.0
"""Control-plane flag values: ``--feature-gates`` and ``--runtime-config``, parsed, merged and put into a command.

Private to the collection.

No Ansible imports and no I/O. Facts the behaviour rests on (Kubernetes v1.37.2):

* ``--feature-gates`` and ``--runtime-config`` may be repeated; every occurrence is merged into the
  same map, later values win (component-base featuregate/feature_gate.go:367-388 Set ->
  SetFromMap copies the existing state; cli/flag/configuration_map.go Set).  Keys and values are
  whitespace-trimmed, empty items skipped; a gate without ``=`` is "missing bool value".
* kubeadm writes its default flags sorted and appends ``extraArgs`` at the end, in their order
  (cmd/kubeadm/app/util/arguments.go ArgumentsToCommand); new flags are appended the same way, so a
  later ``kubeadm upgrade`` produces the same order.
"""

from __future__ import annotations

import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.gates import (
    CatalogError,
    parse_bool,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError

FEATURE_GATES = "feature-gates"
RUNTIME_CONFIG = "runtime-config"

# The argument spec of the gate options every flag-editing module takes (doc fragment gpusplit.k8s.gate_edits).
GATE_EDIT_ARGS = {
    "feature_gates": {"type": "dict", "default": {}},
    "runtime_config": {"type": "dict", "default": {}},
    "remove_feature_gates": {"type": "list", "elements": "str", "default": []},
    "remove_runtime_config": {"type": "list", "elements": "str", "default": []},
}


def gate_edits_given(params) -> list[str]:
    """The gate options of :data:`GATE_EDIT_ARGS` that a module call sets, in that order."""
    return [name for name in GATE_EDIT_ARGS if params.get(name)]


class FlagEditError(GpusplitError):
    """The text cannot be edited safely (unexpected shape, invalid value, failed self-check)."""


# --------------------------------------------------------------------------------------------
# flag values


def _parse_bool(value, what: str) -> bool:
    try:
        return parse_bool(value)
    except CatalogError:
        raise FlagEditError(f"invalid value of {what}={value}: not a boolean") from None


def _flag_items(value: str | None):
    """``(key, "=" or "", value)`` of each non-empty comma-separated item, key and value trimmed."""
    for item in (value or "").split(","):
        if item:
            key, sep, raw = item.partition("=")
            yield key.strip(), sep, raw.strip()


def parse_feature_gates(value: str | None) -> dict[str, bool]:
    """``"A=true, B=false"`` -> ``{"A": True, "B": False}`` with the component's own rules."""
    gates: dict[str, bool] = {}
    for name, sep, raw in _flag_items(value):
        if not sep:
            raise FlagEditError(f"missing bool value for {name}")
        gates[name] = _parse_bool(raw, name)
    return gates


def format_feature_gates(gates: dict) -> str:
    return ",".join(f"{name}={'true' if _parse_bool(v, name) else 'false'}" for name, v in gates.items())


def parse_runtime_config(value: str | None) -> dict[str, str]:
    """``"a/v1=true,api/beta"`` -> ``{"a/v1": "true", "api/beta": ""}`` (ConfigurationMap.Set)."""
    return {key: raw for key, _sep, raw in _flag_items(value)}


def _rc_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value).strip()


def format_runtime_config(config: dict) -> str:
    return ",".join(f"{k}={_rc_value(v)}" if _rc_value(v) != "" else k for k, v in config.items())


def flag_map(value, parse=parse_runtime_config) -> dict:
    """A flag's map given as a dict or as the flag's text (``"A=true,B"``, read with ``parse``).

    The default reads ``key=value`` items as given (ConfigurationMap.Set), without judging values.
    """
    if not value:
        return {}
    if isinstance(value, dict):
        return dict(value)
    return parse(str(value))


def merge_map(existing: dict, updates: dict | None, remove=()) -> dict:
    """Existing keys first (in place, new value when updated), then new keys sorted; ``remove`` dropped."""
    updates = dict(updates or {})
    merged = {}
    for key, value in existing.items():
        if key in remove:
            continue
        merged[key] = updates.pop(key, value)
    for key in sorted(updates):
        if key not in remove:
            merged[key] = updates[key]
    return merged


# Every gate name of every covered release is letters and digits (gate_data.py); --runtime-config keys
# are group/versions (``scheduling.k8s.io/v1beta1``, ``api/all``) and their values booleans.
_GATE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*\Z")
_RUNTIME_CONFIG_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9./_-]*\Z")
_RUNTIME_CONFIG_VALUE = re.compile(r"[A-Za-z0-9]*\Z")


def _meta_character(text: str) -> str | None:
    """Why a character of ``text`` would change what it means inside ``--flag=a=x,b=y``, or None."""
    for char in text:
        if char == "=":
            return "'=' separates a name from its value there, so the text after it would become the value"
        if char == ",":
            return "',' separates one entry from the next there, so it would write two entries"
        if char in "\r\n":
            return "a line break would end the command-line item (and the YAML line) in the middle"
        if char.isspace():
            return "the component trims whitespace around entries and a shell splits arguments at it"
        if char in "\"'`\\":
            return f"{char!r} is taken literally by the component (no shell or YAML parser removes it)"
        if not char.isprintable():
            return f"the control character {char!r} cannot be written into a flag"
    return None


def check_flag_text(kind: str, text: str, pattern, expected: str) -> None:
    """Refuse ``text`` (a gate name, a runtime-config key or value) that ``pattern`` does not match.

    The message names what it is, quotes it, says which character changes its meaning inside the
    flag and what a valid one looks like (``expected``).
    """
    if pattern.match(text):
        return
    if not text:
        raise FlagEditError(f"empty {kind}: {expected}")
    reason = _meta_character(text) or "it holds a character that a flag of this kind never carries"
    raise FlagEditError(f"{kind} {text!r} is refused: {reason}; {expected}")


def norm_gates(gates: dict | None) -> dict[str, bool]:
    """Gate names as strings, values as booleans (Go ParseBool).

    A non-boolean value, or a name with a character that would change the flag's meaning (``=``,
    ``,``, whitespace, quotes, line breaks; Kubernetes gate names are letters and digits), is a
    FlagEditError, before anything is written.
    """
    normed = {}
    for key, value in (gates or {}).items():
        name = str(key)
        check_flag_text(
            "feature gate name", name, _GATE_NAME, "gate names are letters and digits, e.g. GenericWorkload"
        )
        normed[name] = _parse_bool(value, name)
    return normed


def norm_runtime_config(config: dict | None) -> dict[str, str]:
    """Keys as strings, values as the flag's text (``True`` -> ``"true"``, None -> ``""``).

    Keys and values with a character that would change the flag's meaning are a FlagEditError.
    """
    normed = {}
    for key, value in (config or {}).items():
        name = str(key)
        check_flag_text(
            "runtime_config key",
            name,
            _RUNTIME_CONFIG_KEY,
            "keys are group/versions such as scheduling.k8s.io/v1beta1, or api/all, api/beta, api/alpha, api/ga",
        )
        text = _rc_value(value)
        check_flag_text(
            f"runtime_config value of {name}",
            text,
            _RUNTIME_CONFIG_VALUE,
            "values are true or false (or empty for on)",
        )
        normed[name] = text
    return normed


# --------------------------------------------------------------------------------------------
# command lists


def flag_occurrences(command: list[str], name: str) -> list[tuple[int, int, str]]:
    """[(index of flag token, index of value token, value)] for ``--name=value`` and ``--name value``."""
    found = []
    prefix = f"--{name}="
    i = 0
    while i < len(command):
        token = command[i]
        if token.startswith(prefix):
            found.append((i, i, token[len(prefix) :]))
        elif token == f"--{name}" and i + 1 < len(command):
            found.append((i, i + 1, command[i + 1]))
            i += 1
        i += 1
    return found


def command_flags(command: list[str]) -> dict:
    """``{"feature_gates": {...}, "runtime_config": {...}}`` as the component would see them."""
    gates: dict[str, bool] = {}
    config: dict[str, str] = {}
    for _i, _j, value in flag_occurrences(command, FEATURE_GATES):
        gates.update(parse_feature_gates(value))
    for _i, _j, value in flag_occurrences(command, RUNTIME_CONFIG):
        config.update(parse_runtime_config(value))
    return {"feature_gates": gates, "runtime_config": config}


def _merge_one(command: list[str], name: str, parse, fmt, updates: dict, remove) -> list[str]:
    occurrences = flag_occurrences(command, name)
    existing: dict = {}
    for _i, _j, value in occurrences:
        existing.update(parse(value))
    merged = merge_map(existing, updates, remove)
    if merged == existing and list(merged) == list(existing):
        return list(command)
    new = list(command)
    drop = set()
    if occurrences:
        first_flag, first_value, _v = occurrences[0]
        for flag_i, value_i, _v in occurrences[1:]:
            drop.update({flag_i, value_i})
        if merged:
            if first_flag == first_value:
                new[first_flag] = f"--{name}={fmt(merged)}"
            else:
                new[first_value] = fmt(merged)
        else:
            drop.update({first_flag, first_value})
    elif merged:
        new.append(f"--{name}={fmt(merged)}")
    return [token for i, token in enumerate(new) if i not in drop]


def merge_flags(
    command: list[str],
    feature_gates: dict | None = None,
    runtime_config: dict | None = None,
    remove_feature_gates=(),
    remove_runtime_config=(),
) -> list[str]:
    """Merge gates and runtime-config entries into a component's command list.

    Inside ``--feature-gates=A=true,B=false`` (and ``--runtime-config``) a gate of the same name is
    replaced in place, the others are kept, new names are appended sorted.  A flag that does not exist
    yet is appended at the end of the command (where kubeadm puts extraArgs).  Repeated flags are
    folded into the first one (the component merges them the same way).  A flag whose map ends up
    empty is removed.  Nothing changes - the very same list comes back - when the flag's meaning
    would not change, so a re-run is a no-op.
    """
    gates = norm_gates(feature_gates)
    config = norm_runtime_config(runtime_config)
    new = _merge_one(
        command, FEATURE_GATES, parse_feature_gates, format_feature_gates, gates, remove_feature_gates
    )
    return _merge_one(
        new, RUNTIME_CONFIG, parse_runtime_config, format_runtime_config, config, remove_runtime_config
    )
