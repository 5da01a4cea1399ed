# Copyright: gpusplit contributors
# Apache-2.0
"""Static-pod manifests (kubeadm's /etc/kubernetes/manifests): read and edit a component's flags.

Private to the collection.

No Ansible imports and no I/O: text in, text (or data) out.  Only the lines of the container's
``command`` list that have to change are touched (see yaml_text.py), and the edited manifest is
read back and compared with the intended one before it is returned.
"""

from __future__ import annotations

import difflib

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.flag_values import (
    FEATURE_GATES,
    RUNTIME_CONFIG,
    FlagEditError,
    command_flags,
    merge_flags,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.yaml_text import (
    Editor,
    compose_all,
    ensure_line_end,
    is_mapping,
    is_scalar,
    is_sequence,
    load,
    mapping_get,
    newline_of,
    render_scalar,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.versions import version_from_image


def _find_container(doc_node, container: str | None):
    """``(index, node)`` of the container whose command is edited: ``container``, else the one named
    like the pod, else the first."""
    _k, spec = mapping_get(doc_node, "spec")
    _k, containers = mapping_get(spec, "containers")
    if not is_sequence(containers) or not containers.value:
        raise FlagEditError("manifest has no spec.containers list")
    for index, c in enumerate(containers.value):
        if not is_mapping(c):
            raise FlagEditError(
                f"spec.containers[{index}] (line {c.start_mark.line + 1}) is not a mapping with name, "
                "image and command"
            )
    _k, meta = mapping_get(doc_node, "metadata")
    _k, pod_name = mapping_get(meta, "name")
    wanted = container or (pod_name.value if is_scalar(pod_name) else None)
    for index, c in enumerate(containers.value):
        _k, cname = mapping_get(c, "name")
        if wanted and is_scalar(cname) and cname.value == wanted:
            return index, c
    if container:
        raise FlagEditError(f"no container named {container!r} in the manifest")
    return 0, containers.value[0]


def _command_node(cnode, cname):
    """The block list of the container's ``command``; a refusal naming the container otherwise."""
    who = f"container {cname!r}" if cname else "the container"
    _k, seq = mapping_get(cnode, "command")
    if seq is None or (is_scalar(seq) and seq.tag.endswith(":null")):
        raise FlagEditError(
            f"{who} has no command list; gpusplit edits the flags in spec.containers[].command, where "
            "kubeadm writes them (the component's binary and its flags, one per item): add it, or put "
            "back the manifest kubeadm generated"
        )
    if not is_sequence(seq):
        raise FlagEditError(
            f"{who}: command (line {seq.start_mark.line + 1}) is a single value, not a list; write it "
            "as a YAML list, the binary and each flag one item"
        )
    for item in seq.value:
        if not is_scalar(item):
            raise FlagEditError(
                f"{who}: command holds a non-scalar item on line {item.start_mark.line + 1}; every item "
                "must be one word of the command line"
            )
    return seq


def parse_static_pod(text: str, container: str | None = None) -> dict:
    """``{component, container, image, version, command, feature_gates, runtime_config}``."""
    docs = compose_all(text, "manifest")
    if len(docs) != 1:
        raise FlagEditError(f"expected one YAML document in the manifest, found {len(docs)}")
    data = load(text, "manifest")
    if not isinstance(data, dict) or data.get("kind") != "Pod":
        raise FlagEditError("not a Pod manifest")
    index, node = _find_container(docs[0], container)
    name_node = mapping_get(node, "name")[1]
    cname = str(name_node.value) if is_scalar(name_node) else None
    _command_node(node, cname)
    cdata = data["spec"]["containers"][index]
    command = [str(t) for t in cdata["command"]]
    args = cdata.get("args") or []
    for token in args if isinstance(args, list) else [args]:
        if str(token).startswith((f"--{FEATURE_GATES}", f"--{RUNTIME_CONFIG}")):
            raise FlagEditError(
                f"container {cname!r} passes {str(token).split('=', 1)[0]} in args; only command is edited"
            )
    image = cdata.get("image")
    image = image if isinstance(image, str) else ""
    component = command[0].rsplit("/", 1)[-1] if command else (cname or "")
    flags = command_flags(command)
    return {
        "component": component,
        "container": cname,
        "index": index,
        "image": image,
        "version": version_from_image(image),
        "command": command,
        "feature_gates": flags["feature_gates"],
        "runtime_config": flags["runtime_config"],
    }


def _edit_sequence(editor: Editor, seq, old: list[str], new: list[str], nl: str, what: str):
    """Turn the block sequence ``seq`` (scalars ``old``) into ``new`` with line-level edits."""
    if seq.flow_style:
        raise FlagEditError(f"{what} is a flow-style list; only block lists are edited")
    items = seq.value
    if any(not is_scalar(i) for i in items):
        raise FlagEditError(f"{what} holds non-scalar items")
    if not items:
        raise FlagEditError(f"{what} is empty")
    first_line = items[0].start_mark.line
    prefix = editor.line_text(first_line)[: items[0].start_mark.column]
    if prefix.strip() != "-":
        raise FlagEditError(f"{what}: unexpected layout on line {first_line + 1} ({prefix!r})")

    def item_lines(i):
        return items[i].start_mark.line, items[i].end_mark.line

    for i in range(1, len(items)):
        if items[i].start_mark.line == items[i - 1].end_mark.line:
            raise FlagEditError(f"{what}: two items share line {items[i].start_mark.line + 1}")

    def new_lines(values):
        return "".join(prefix + render_scalar(v) + nl for v in values)

    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace" and a1 - a0 == b1 - b0:
            for k in range(a1 - a0):
                node = items[a0 + k]
                if node.start_mark.line != node.end_mark.line:
                    raise FlagEditError(f"{what}: item on line {node.start_mark.line + 1} spans lines")
                editor.replace(
                    node.start_mark.index, node.end_mark.index, render_scalar(new[b0 + k], node.style or None)
                )
            continue
        if tag in ("replace", "delete"):
            start = editor.line_start(item_lines(a0)[0])
            end = editor.line_end(item_lines(a1 - 1)[1])
            editor.replace(start, end, new_lines(new[b0:b1]))
            continue
        # insert
        if a0 == 0:
            at = editor.line_start(item_lines(0)[0])
            editor.replace(at, at, new_lines(new[b0:b1]))
        else:
            last = item_lines(a0 - 1)[1]
            at = editor.line_end(last)
            editor.replace(at, at, ensure_line_end(editor, last, nl) + new_lines(new[b0:b1]))


def edit_static_pod_manifest(
    text: str,
    feature_gates: dict | None = None,
    runtime_config: dict | None = None,
    remove_feature_gates=(),
    remove_runtime_config=(),
    container: str | None = None,
) -> dict:
    """Merge gates/runtime-config into a static-pod manifest's command, touching only those lines.

    Returns ``{text, changed, component, image, version, before: {feature_gates, runtime_config},
    after: {...}, command_before, command_after}``.
    """
    before = parse_static_pod(text, container)
    command = before["command"]
    new_command = merge_flags(
        command, feature_gates, runtime_config, remove_feature_gates, remove_runtime_config
    )
    result = {
        "component": before["component"],
        "image": before["image"],
        "version": before["version"],
        "before": {"feature_gates": before["feature_gates"], "runtime_config": before["runtime_config"]},
        "command_before": command,
        "command_after": new_command,
    }
    if new_command == command:
        result.update(text=text, changed=False, after=dict(result["before"]))
        return result

    doc = compose_all(text, "manifest")[0]
    _index, cnode = _find_container(doc, container)
    seq = _command_node(cnode, before["container"])
    editor = Editor(text)
    _edit_sequence(editor, seq, command, new_command, newline_of(text), "spec.containers[].command")
    new_text = editor.apply()

    expected = load(text, "manifest")
    expected["spec"]["containers"][before["index"]]["command"] = new_command
    if load(new_text, "the edited manifest") != expected:
        raise FlagEditError("self-check failed: the edited manifest does not read back as intended")
    after = parse_static_pod(new_text, container)
    result.update(
        text=new_text,
        changed=True,
        after={"feature_gates": after["feature_gates"], "runtime_config": after["runtime_config"]},
    )
    return result


def version_from_manifest(text: str) -> str | None:
    """The Kubernetes version of a static-pod manifest's image tag (None when the tag is no version)."""
    return parse_static_pod(text)["version"]
