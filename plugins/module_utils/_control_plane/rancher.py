# Copyright: gpusplit contributors
# Apache-2.0
"""k3s / rke2 control-plane flags: gpusplit's ``config.yaml.d`` drop-in and what the other config files do to it.

Private to the collection.

No Ansible imports and no I/O: text in, text (or data) out.  k3s/rke2 read ``config.yaml`` then
``config.yaml.d/*.yaml`` in name order; a later key replaces an earlier one, a key ending in ``+``
appends to it (k3s-io/k3s pkg/configfilearg/parser.go readConfigFile).  ``<component>-arg`` entries
become ``--<flag>=<value>``; repeated names are all passed (k3s pkg/util/args.go GetArgs), which the
components merge as flag_values.py describes.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.components import (
    APISERVER,
    CONTROL_PLANE,
    CONTROLLER_MANAGER,
    KUBELET,
    SCHEDULER,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.flag_values import (
    FEATURE_GATES,
    RUNTIME_CONFIG,
    FlagEditError,
    command_flags,
    format_feature_gates,
    format_runtime_config,
    merge_map,
    norm_gates,
    norm_runtime_config,
    parse_feature_gates,
    parse_runtime_config,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.yaml_text import (
    load_map,
    render_scalar,
)

#: k3s/rke2 config key per component
RANCHER_ARG_KEYS = {
    APISERVER: "kube-apiserver-arg",
    SCHEDULER: "kube-scheduler-arg",
    CONTROLLER_MANAGER: "kube-controller-manager-arg",
    KUBELET: "kubelet-arg",
}


def _rancher_arg_key(component: str, append: bool) -> str:
    try:
        key = RANCHER_ARG_KEYS[component]
    except KeyError:
        raise FlagEditError(f"no k3s/rke2 arg key for component {component!r}") from None
    return key + ("+" if append else "")


def _render_rancher_entries(entries: list[tuple[str, list[str]]], header: str | None) -> str:
    lines = []
    if header:
        lines.extend(f"# {line}".rstrip() for line in header.splitlines())
    for key, items in entries:
        if not items:
            continue
        lines.append(f"{key}:")
        lines.extend(f"  - {render_scalar(item)}" for item in items)
    return "\n".join(lines) + "\n" if lines else ""


def _component_order(components) -> tuple[str, ...]:
    return CONTROL_PLANE + tuple(c for c in components if c not in CONTROL_PLANE)


def render_rancher_dropin(
    feature_gates: dict | None,
    runtime_config: dict | None = None,
    *,
    components=CONTROL_PLANE,
    append: bool = True,
    header: str | None = None,
) -> str:
    """A ``/etc/rancher/{k3s,rke2}/config.yaml.d/*.yaml`` drop-in with the control-plane args.

    ``feature-gates=...`` goes to every component in ``components`` (kube-apiserver,
    kube-scheduler, kube-controller-manager by default), ``runtime-config=...`` to kube-apiserver
    only.  With ``append`` (default) the keys end in ``+`` so that they add to the args set in
    ``config.yaml`` instead of replacing that whole list (k3s configfilearg: a later file's plain
    key replaces the earlier value).  The rendered text is deterministic (idempotent writes).
    A drop-in that already exists is merged with :func:`merge_rancher_dropin` instead.
    """
    gates = norm_gates(feature_gates)
    config = norm_runtime_config(runtime_config)
    entries = []
    for component in _component_order(components):
        if component not in components:
            continue
        args = []
        if gates:
            args.append(f"{FEATURE_GATES}={format_feature_gates(dict(sorted(gates.items())))}")
        if config and component == APISERVER:
            args.append(f"{RUNTIME_CONFIG}={format_runtime_config(dict(sorted(config.items())))}")
        if args:
            entries.append((_rancher_arg_key(component, append), args))
    return _render_rancher_entries(entries, header)


def load_rancher_config(text: str | None, what: str = "k3s/rke2 config file") -> dict:
    """A k3s/rke2 config file as a dict (empty file: ``{}``); anything but a YAML map is an error."""
    return load_map(text, what, of="k3s/rke2 options")


def _arg_items(value, what: str) -> list[str]:
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if isinstance(item, (dict, list)) or item is None:
            raise FlagEditError(f"{what}: every item must be a 'flag=value' string, found {item!r}")
        out.append(str(item))
    return out


def _arg_name(item: str) -> tuple[str, str]:
    """``--feature-gates+=A=true`` -> (``feature-gates``, ``A=true``), as k3s GetArgs splits it."""
    item = item.strip()
    name, _sep, value = (item[2:] if item.startswith("--") else item).partition("=")
    return name.rstrip("+-"), value


def parse_rancher_dropin(text: str | None, what: str = "drop-in") -> dict:
    """A gpusplit drop-in: ``{component: {"key": key as written, "other": [args], "feature_gates":
    {...}, "runtime_config": {...}}}``.

    Only the control-plane ``<component>-arg`` / ``<component>-arg+`` keys belong in it; any other
    key, or a component named twice (with and without ``+``), is an error naming it, because
    gpusplit rewrites this file and must not drop what someone else put there.
    """
    data = load_rancher_config(text, what)
    by_key = {}
    for component in CONTROL_PLANE:
        for append in (False, True):
            by_key[_rancher_arg_key(component, append)] = component
    parsed: dict[str, dict] = {}
    for raw_key, value in data.items():
        key = str(raw_key)
        component = by_key.get(key)
        if component is None:
            raise FlagEditError(
                f"{what} holds {key!r}, which gpusplit does not write there; move it to a config.yaml.d "
                "file of its own (gpusplit rewrites this one)"
            )
        if component in parsed:
            raise FlagEditError(
                f"{what} sets both {parsed[component]['key']!r} and {key!r}; keep one of them"
            )
        other, gates, config = [], {}, {}
        for item in _arg_items(value, f"{what} {key}"):
            name, flag_value = _arg_name(item)
            try:
                if name == FEATURE_GATES:
                    gates.update(parse_feature_gates(flag_value))
                elif name == RUNTIME_CONFIG:
                    config.update(parse_runtime_config(flag_value))
                else:
                    other.append(item)
            except FlagEditError as exc:
                raise FlagEditError(f"{what} {key}: {exc}") from None
        parsed[component] = {"key": key, "other": other, "feature_gates": gates, "runtime_config": config}
    return parsed


def merge_rancher_dropin(
    existing: str | None,
    feature_gates: dict | None,
    runtime_config: dict | None = None,
    *,
    remove_feature_gates=(),
    remove_runtime_config=(),
    components=CONTROL_PLANE,
    header: str | None = None,
    what: str = "drop-in",
) -> dict:
    """Merge gates (and kube-apiserver's runtime-config) into the gpusplit drop-in ``existing``.

    Per component, a gate of the same name is replaced, the gates already in the drop-in are kept
    (in their order), new names are appended sorted; ``runtime-config`` likewise, on kube-apiserver.
    Other args of a component's list are kept in front, and so is the form of its key (a key the
    drop-in already has without ``+`` stays so; a new one gets ``+``).  ``existing`` None or empty:
    a new drop-in, the same text :func:`render_rancher_dropin` gives.

    Returns ``{text, changed, before, after}``; ``before``/``after`` map each component to its
    ``feature_gates``/``runtime_config`` in this file alone.
    """
    unknown = [c for c in components if c not in CONTROL_PLANE]
    if unknown:
        raise FlagEditError(
            f"{what}: unknown control-plane component(s) {', '.join(map(str, unknown))}; "
            f"use {', '.join(CONTROL_PLANE)}"
        )
    current = parse_rancher_dropin(existing, what)
    gates = norm_gates(feature_gates)
    config = norm_runtime_config(runtime_config)
    entries = []
    before, after = {}, {}
    for component in _component_order(components):
        old = current.get(component, {"key": None, "other": [], "feature_gates": {}, "runtime_config": {}})
        wanted = component in components
        new_gates = merge_map(old["feature_gates"], gates if wanted else {}, remove_feature_gates)
        new_config = merge_map(
            old["runtime_config"],
            config if wanted and component == APISERVER else {},
            remove_runtime_config,
        )
        items = list(old["other"])
        if new_gates:
            items.append(f"{FEATURE_GATES}={format_feature_gates(new_gates)}")
        if new_config:
            items.append(f"{RUNTIME_CONFIG}={format_runtime_config(new_config)}")
        if component in current:
            before[component] = {
                "feature_gates": old["feature_gates"],
                "runtime_config": old["runtime_config"],
            }
        if items:
            entries.append((old["key"] or _rancher_arg_key(component, True), items))
            after[component] = {"feature_gates": new_gates, "runtime_config": new_config}
    text = _render_rancher_entries(entries, header)
    if rancher_component_flags([text]) != {
        c: v for c, v in after.items() if v["feature_gates"] or v["runtime_config"]
    }:
        raise FlagEditError(f"{what}: the merged drop-in does not read back as intended; nothing was written")
    return {"text": text, "changed": text != (existing or ""), "before": before, "after": after}


def _effective(files: list[tuple[str, str]]) -> dict:
    return rancher_component_flags([text for _name, text in files], [name for name, _text in files])


def rancher_dropin_problems(
    files: list[tuple[str, str]],
    dropin: str,
    dropin_text: str,
    feature_gates: dict | None,
    runtime_config: dict | None = None,
    components=CONTROL_PLANE,
) -> list[str]:
    """Why the components would not run with the requested flags once ``dropin`` holds ``dropin_text``.

    ``files``: ``(name, text)`` of ``config.yaml`` and of every ``config.yaml.d`` file as they are
    now (any order: ``config.yaml`` is read first, the drop-ins in name order, as k3s does; the
    drop-in's own entry, if any, is replaced).  A file read after the drop-in that sets a
    component's arg key without ``+`` (which replaces the earlier args) or sets one of the
    requested gates / runtime-config keys to another value (the later value wins) is named.
    Returns one message per component and flag; empty when the drop-in takes effect.
    """
    ordered = rancher_read_order([(n, t) for n, t in files if n != dropin] + [(dropin, dropin_text)])
    gates = norm_gates(feature_gates)
    config = norm_runtime_config(runtime_config)
    effective = _effective(ordered)
    position = [n for n, _t in ordered].index(dropin)
    problems = []
    for component in _component_order(components):
        if component not in components:
            continue
        wanted = [("feature_gates", k, v) for k, v in gates.items()]
        if component == APISERVER:
            wanted += [("runtime_config", k, v) for k, v in config.items()]
        for kind, name, value in wanted:
            now = effective.get(component, {}).get(kind, {}).get(name)
            if now == value:
                continue
            culprit, reason = None, ""
            for i in range(position + 1, len(ordered)):
                seen = _effective(ordered[: i + 1]).get(component, {}).get(kind, {}).get(name)
                if seen != value:
                    culprit = ordered[i][0]
                    data = load_rancher_config(ordered[i][1], culprit)
                    plain = RANCHER_ARG_KEYS[component]
                    reason = (
                        f"sets {plain!r} without '+', which replaces the args of the files before it"
                        if plain in {str(k) for k in data}
                        else f"sets {name}={_shown(seen)} for {component}, and the later value wins"
                    )
                    break
            flag = FEATURE_GATES if kind == "feature_gates" else RUNTIME_CONFIG
            where = f"{culprit} (read after {dropin}) {reason}" if culprit else "the drop-in is not read"
            problems.append(
                f"{component} would run with {flag} {name}={_shown(now)} instead of {_shown(value)}: {where}"
            )
    return problems


def _shown(value) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def rancher_read_order(files: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``config.yaml`` first, then the other files by name (k3s reads config.yaml.d with os.ReadDir,
    which sorts by file name)."""
    main = [f for f in files if f[0].rsplit("/", 1)[-1] == "config.yaml"]
    rest = sorted((f for f in files if f not in main), key=lambda f: f[0].rsplit("/", 1)[-1])
    return main + rest


def rancher_component_flags(config_texts: list[str], names: list[str] | None = None) -> dict:
    """What feature gates / runtime-config each component gets from k3s/rke2 config files.

    ``config_texts``: ``config.yaml`` then the ``config.yaml.d`` files, in the order k3s reads them
    (file name order); ``names`` (same order) name them in errors.  Returns ``{component:
    {"feature_gates": {...}, "runtime_config": {...}}}``.
    """
    values: dict[str, list] = {}
    for index, text in enumerate(config_texts):
        what = names[index] if names else "a k3s/rke2 config file"
        data = load_rancher_config(text, what)
        for raw_key, value in data.items():
            key = str(raw_key)
            is_append = key.endswith("+")
            key = key.rstrip("+")
            items = value if isinstance(value, list) else [value]
            if is_append and key in values:
                values[key] = values[key] + items
            else:
                values[key] = list(items)
    result = {}
    for component, key in RANCHER_ARG_KEYS.items():
        command = []
        for item in values.get(key, []):
            name, sep, val = str(item).lstrip("-").partition("=")
            command.append(f"--{name.rstrip('+-')}{sep}{val}")
        flags = command_flags(command)
        if flags["feature_gates"] or flags["runtime_config"]:
            result[component] = flags
    return result
