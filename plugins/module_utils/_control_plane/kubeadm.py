# Copyright: gpusplit contributors
# Apache-2.0
"""kubeadm ClusterConfiguration: read and edit the control-plane components' ``extraArgs``.

Private to the collection.

No Ansible imports and no I/O: text in, text (or data) out; only the affected lines change (see
yaml_text.py).  The text is a kubeadm config file (several YAML documents) or the
``ClusterConfiguration`` string of the ``kubeadm-config`` ConfigMap.

kubeadm v1beta4 ``extraArgs`` is a list of ``{name, value}`` (duplicates allowed), v1beta3 a map
(cmd/kubeadm/app/apis/kubeadm/v1beta4/types.go:171-177); kubeadm v1.37 refuses v1beta3 config files
("v1.37: only v1beta4 config", util/config/common.go:77), but an older cluster's ConfigMap may still
hold it, so both are edited.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.components import (
    APISERVER,
    CONTROLLER_MANAGER,
    SCHEDULER,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.flag_values import (
    FEATURE_GATES,
    RUNTIME_CONFIG,
    FlagEditError,
    command_flags,
    flag_occurrences,
    merge_flags,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.yaml_text import (
    Editor,
    compose_and_load,
    ensure_line_end,
    is_mapping,
    is_scalar,
    is_sequence,
    last_line,
    load_all,
    mapping_get,
    newline_of,
    render_scalar,
)

#: kubeadm ClusterConfiguration key -> component
KUBEADM_COMPONENTS = {"apiServer": APISERVER, "scheduler": SCHEDULER, "controllerManager": CONTROLLER_MANAGER}
_KUBEADM_KEY = {v: k for k, v in KUBEADM_COMPONENTS.items()}


def _kubeadm_key(component: str) -> str:
    if component in KUBEADM_COMPONENTS:
        return component
    if component in _KUBEADM_KEY:
        return _KUBEADM_KEY[component]
    raise FlagEditError(
        f"unknown control-plane component {component!r} (apiServer, scheduler, controllerManager)"
    )


def _find_cluster_config(pairs):
    """``(node, data)`` of the first ClusterConfiguration among composed documents; ``(None, None)``."""
    for node, data in pairs:
        if isinstance(data, dict) and data.get("kind") == "ClusterConfiguration":
            return node, data
    return None, None


def _cluster_config_doc(text: str):
    pairs = compose_and_load(text, "kubeadm configuration")
    node, data = _find_cluster_config(pairs)
    if node is None:
        raise FlagEditError("no ClusterConfiguration document found")
    api = str(data.get("apiVersion", ""))
    if api not in ("kubeadm.k8s.io/v1beta3", "kubeadm.k8s.io/v1beta4"):
        raise FlagEditError(f"unsupported kubeadm API version {api!r} (v1beta3 and v1beta4 are edited)")
    return node, data, api.rsplit("/", 1)[1], [d for _n, d in pairs]


def cluster_config_extra_args(text: str, component: str) -> list[tuple[str, str]]:
    """The component's extraArgs as an ordered ``[(name, value)]`` (v1beta3 maps in file order)."""
    key = _kubeadm_key(component)
    _node, data, api, _docs = _cluster_config_doc(text)
    section = data.get(key) or {}
    extra = section.get("extraArgs") or ([] if api == "v1beta4" else {})
    if api == "v1beta4":
        if not isinstance(extra, list):
            raise FlagEditError(f"{key}.extraArgs must be a list of {{name, value}} in v1beta4")
        return [(str(a.get("name")), "" if a.get("value") is None else str(a.get("value"))) for a in extra]
    if not isinstance(extra, dict):
        raise FlagEditError(f"{key}.extraArgs must be a map in v1beta3")
    return [(str(k), "" if v is None else str(v)) for k, v in extra.items()]


def load_cluster_config(text: str, what: str = "kubeadm configuration") -> dict:
    """The ClusterConfiguration document of ``text`` as data (``{}`` when there is none).

    Invalid YAML is a :class:`FlagEditError` naming ``what``."""
    return _find_cluster_config(compose_and_load(text, what))[1] or {}


def set_cluster_config_extra_args(text: str, component: str, args: dict, remove=()) -> str:
    """Set ``args`` (name -> value) in ``<component>.extraArgs`` of the ClusterConfiguration in ``text``.

    ``component`` is ``apiServer``, ``scheduler`` or ``controllerManager`` (or the component's
    binary name).  v1beta4 (list of ``{name, value}``): the first entry of a name gets the value,
    later entries of that name are removed, new names are appended.  v1beta3 (map): the key is set
    in place or appended.  ``remove`` names are dropped.  Only the affected lines change; the text
    may hold several YAML documents (a kubeadm config file) or just the ConfigMap's
    ``ClusterConfiguration`` string.
    """
    key = _kubeadm_key(component)
    args = {str(k): str(v) for k, v in (args or {}).items()}
    remove = set(remove or ())
    doc, data, api, loaded = _cluster_config_doc(text)
    current = cluster_config_extra_args(text, key)
    want = _target_extra_args(current, args, remove, api)
    if want == current:
        return text

    nl = newline_of(text)
    editor = Editor(text)
    knode, section = mapping_get(doc, key)
    if knode is None:
        _insert_component(editor, doc, key, want, api, nl)
    elif is_mapping(section) and section.flow_style:
        if section.value:
            raise FlagEditError(f"{key} is a non-empty flow mapping; only block mappings are edited")
        block = _render_extra_args(want, api, " " * (knode.start_mark.column + 2), nl, with_key=True)
        editor.replace(knode.end_mark.index, section.end_mark.index, ":" + nl + block.rstrip("\r\n"))
    elif is_scalar(section) and section.value in ("", "~", "null"):
        block = _render_extra_args(want, api, " " * (knode.start_mark.column + 2), nl, with_key=True)
        editor.replace(knode.end_mark.index, section.end_mark.index, ":" + nl + block.rstrip("\r\n"))
    elif is_mapping(section):
        _edit_section(editor, knode, section, key, current, want, api, nl)
    else:
        raise FlagEditError(f"{key} is not a mapping")
    new_text = editor.apply()

    # self-check: only <key>.extraArgs changed, and to exactly what was asked for
    expected = [dict(d) if isinstance(d, dict) else d for d in loaded]
    for d in expected:
        if isinstance(d, dict) and d.get("kind") == "ClusterConfiguration":
            d[key] = dict(d.get(key) or {})
            if api == "v1beta4":
                d[key]["extraArgs"] = [{"name": n, "value": v} for n, v in want]
            else:
                d[key]["extraArgs"] = dict(want)
            if not want:
                d[key].pop("extraArgs")
    got = load_all(new_text)
    if _stringify_extra_args(got) != _stringify_extra_args(expected):
        raise FlagEditError(
            "self-check failed: the edited ClusterConfiguration does not read back as intended"
        )
    return new_text


def _stringify_extra_args(docs):
    out = []
    for d in docs:
        if isinstance(d, dict) and d.get("kind") == "ClusterConfiguration":
            d = dict(d)
            for key in KUBEADM_COMPONENTS:
                section = d.get(key)
                if isinstance(section, dict) and "extraArgs" in section:
                    section = dict(section)
                    extra = section["extraArgs"]
                    if isinstance(extra, list):
                        section["extraArgs"] = [
                            {"name": str(a.get("name")), "value": str(a.get("value"))} for a in extra
                        ]
                    elif isinstance(extra, dict):
                        section["extraArgs"] = {str(k): str(v) for k, v in extra.items()}
                    d[key] = section
                if section is None and key in d:
                    d[key] = {}
        out.append(d)
    return out


def _target_extra_args(current, args, remove, api):
    want = []
    seen = set()
    for name, value in current:
        if name in remove:
            continue
        if name in args:
            if name in seen:
                continue
            seen.add(name)
            want.append((name, args[name]))
        else:
            want.append((name, value))
    for name in args:
        if name not in seen and name not in remove and name not in dict(current):
            want.append((name, args[name]))
    if api == "v1beta3":
        # a map: one value per name, file order kept
        deduped = {}
        for name, value in want:
            deduped[name] = value
        want = list(deduped.items())
    return want


def _render_extra_args(args, api, indent, nl, with_key):
    lines = []
    inner = indent
    if with_key:
        lines.append(f"{indent}extraArgs:{nl}")
        inner = indent if api == "v1beta4" else indent + "  "
    for name, value in args:
        if api == "v1beta4":
            lines.append(f"{inner}- name: {render_scalar(name)}{nl}")
            lines.append(f"{inner}  value: {render_scalar(value)}{nl}")
        else:
            lines.append(f"{inner}{render_scalar(name)}: {render_scalar(value)}{nl}")
    return "".join(lines)


def _insert_component(editor, doc, key, want, api, nl):
    if not want:
        return
    indent = " " * doc.value[0][0].start_mark.column if doc.value else ""
    # after the document's last line that belongs to the mapping
    last = last_line(doc.value[-1][1])
    at = editor.line_end(last)
    block = f"{indent}{key}:{nl}" + _render_extra_args(want, api, indent + "  ", nl, with_key=True)
    editor.replace(at, at, ensure_line_end(editor, last, nl) + block)


def _edit_section(editor, knode, section, key, current, want, api, nl):
    ek, extra = mapping_get(section, "extraArgs")
    child_indent = " " * section.value[0][0].start_mark.column if section.value else None
    if ek is None:
        if not want:
            return
        first_line = section.value[0][0].start_mark.line
        at = editor.line_start(first_line)
        editor.replace(at, at, _render_extra_args(want, api, child_indent, nl, with_key=True))
        return
    empty_flow = ((is_sequence(extra) or is_mapping(extra)) and extra.flow_style) or (
        is_scalar(extra) and extra.value in ("", "~", "null")
    )
    if empty_flow:
        if (is_sequence(extra) or is_mapping(extra)) and extra.value:
            raise FlagEditError(f"{key}.extraArgs is a non-empty flow collection; only block style is edited")
        inner = " " * ek.start_mark.column + ("" if api == "v1beta4" else "  ")
        block = _render_extra_args(want, api, inner, nl, with_key=False)
        if not want:
            return
        editor.replace(ek.end_mark.index, extra.end_mark.index, ":" + nl + block.rstrip("\r\n"))
        return
    if not want:
        last = last_line(extra)
        if len(section.value) == 1:
            # extraArgs was the only key: leave "<component>: {}" as kubeadm writes an empty one
            end = editor.line_end(last)
            tail = editor.text[editor.line_start(last) : end]
            newline = tail[len(tail.rstrip("\r\n")) :]
            editor.replace(knode.end_mark.index, end, ": {}" + newline)
        else:
            editor.replace(editor.line_start(ek.start_mark.line), editor.line_end(last), "")
        return
    if api == "v1beta4":
        _edit_v1beta4_list(editor, extra, key, current, want, nl)
    else:
        _edit_v1beta3_map(editor, extra, key, current, want, nl)


def _edit_v1beta4_list(editor, seq, key, current, want, nl):
    if not is_sequence(seq):
        raise FlagEditError(f"{key}.extraArgs must be a list of {{name, value}} in v1beta4")
    items = seq.value
    first = items[0]
    prefix = editor.line_text(first.start_mark.line)[: first.start_mark.column]
    if prefix.strip() != "-":
        raise FlagEditError(f"{key}.extraArgs: unexpected layout on line {first.start_mark.line + 1}")
    cont = " " * len(prefix)

    def render_item(name, value):
        return f"{prefix}name: {render_scalar(name)}{nl}{cont}value: {render_scalar(value)}{nl}"

    want_map = dict(want)
    kept = set()
    for idx, item in enumerate(items):
        name = current[idx][0]
        start = editor.line_start(item.start_mark.line)
        end = editor.line_end(last_line(item))
        if name not in want_map or name in kept:
            editor.replace(start, end, "")
            continue
        kept.add(name)
        if current[idx][1] == want_map[name]:
            continue
        _vk, vnode = mapping_get(item, "value")
        if vnode is None:
            _nk, nnode = mapping_get(item, "name")
            at = editor.line_end(nnode.end_mark.line)
            editor.replace(at, at, f"{cont}value: {render_scalar(want_map[name])}{nl}")
        elif vnode.start_mark.line != vnode.end_mark.line:
            raise FlagEditError(f"{key}.extraArgs: value of {name} spans lines")
        else:
            editor.replace(
                vnode.start_mark.index, vnode.end_mark.index, render_scalar(want_map[name], vnode.style)
            )
    added = [(n, v) for n, v in want if n not in kept]
    if added:
        last = last_line(items[-1])
        at = editor.line_end(last)
        editor.replace(
            at, at, ensure_line_end(editor, last, nl) + "".join(render_item(n, v) for n, v in added)
        )


def _edit_v1beta3_map(editor, mapping, key, current, want, nl):
    if not is_mapping(mapping):
        raise FlagEditError(f"{key}.extraArgs must be a map in v1beta3")
    want_map = dict(want)
    indent = " " * mapping.value[0][0].start_mark.column
    for index, (knode, vnode) in enumerate(mapping.value):
        name, value = current[index]
        if name not in want_map:
            editor.replace(editor.line_start(knode.start_mark.line), editor.line_end(last_line(vnode)), "")
            continue
        if value == want_map[name]:
            continue
        if vnode.start_mark.line != vnode.end_mark.line:
            raise FlagEditError(f"{key}.extraArgs: value of {name} spans lines")
        editor.replace(
            vnode.start_mark.index, vnode.end_mark.index, render_scalar(want_map[name], vnode.style)
        )
    present = {n for n, _v in current}
    added = [(n, v) for n, v in want if n not in present]
    if added:
        last = last_line(mapping.value[-1][1])
        at = editor.line_end(last)
        lines = "".join(f"{indent}{render_scalar(n)}: {render_scalar(v)}{nl}" for n, v in added)
        editor.replace(at, at, ensure_line_end(editor, last, nl) + lines)


def merge_cluster_config_flags(
    text: str,
    component: str,
    feature_gates: dict | None = None,
    runtime_config: dict | None = None,
    remove_feature_gates=(),
    remove_runtime_config=(),
) -> dict:
    """:func:`merge_flags` semantics for a ClusterConfiguration's ``<component>.extraArgs``.

    Returns ``{text, changed, before: {feature_gates, runtime_config}, after: {...}}``.
    """
    key = _kubeadm_key(component)
    current = cluster_config_extra_args(text, key)
    as_command = [f"--{name}={value}" for name, value in current]
    before = command_flags(as_command)
    merged = merge_flags(
        as_command, feature_gates, runtime_config, remove_feature_gates, remove_runtime_config
    )
    if merged == as_command:
        return {"text": text, "changed": False, "before": before, "after": before}
    args = {}
    remove = []
    for flag in (FEATURE_GATES, RUNTIME_CONFIG):
        values = [value for _i, _j, value in flag_occurrences(merged, flag)]
        if values:
            args[flag] = values[0]
        elif any(name == flag for name, _v in current):
            remove.append(flag)
    new_text = set_cluster_config_extra_args(text, key, args, remove)
    return {"text": new_text, "changed": new_text != text, "before": before, "after": command_flags(merged)}
