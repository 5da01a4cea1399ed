# Copyright: gpusplit contributors
# Apache-2.0
"""Taints set on and taken off many nodes in one step (the module node_taints). Private to the collection.

``kubernetes.core.k8s_taint`` changes one node per module execution, so tainting every node with a
Kubernetes share that way costs one execution per node on every run, changed or not (1.3 to 1.7 s of the
controller's CPU each, docs/performance.md). Here :func:`check_requests` refuses bad requests,
every problem at once, before any request; :func:`node_changes` works out from one LIST of the nodes
which of them change; :func:`apply_changes` patches only those.

A taint is known by its key and effect, as the API server and ``kubectl taint`` know it: setting one
whose key and effect a node already has replaces its value in place; taking one off removes the node's
taint of that key and effect whatever its value. Other taints of the node are kept as they are, in
their order. Each patch is a JSON patch that first tests the node's ``resourceVersion``: a node
changed by someone else between the read and the patch is read again and worked out again, so no one
else's taint is lost.
"""

from __future__ import annotations

import json

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import (
    GpusplitError,
    type_name,
    unknown_keys,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import list_json
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import taint_text

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
REQUEST_KEYS = ("name", "present", "absent")
TAINT_KEYS = ("key", "value", "effect")
ATTEMPTS = 3  # reads and patches of one node whose resourceVersion moved in between


def taint_id(taint):
    return (taint["key"], taint["effect"])


def _taint_problems(where, taint):
    if not isinstance(taint, dict):
        return [f"{where}: expected a taint (key, value, effect), got {type_name(taint)}"]
    problems = unknown_keys(where, taint, TAINT_KEYS)
    key = taint.get("key")
    if not isinstance(key, str) or not key:
        problems.append(f"{where}.key: expected the taint's key, a non-empty string, got {key!r}")
    if taint.get("effect") not in EFFECTS:
        problems.append(f"{where}.effect: expected one of {', '.join(EFFECTS)}, got {taint.get('effect')!r}")
    value = taint.get("value")
    if value is not None and not isinstance(value, str):
        problems.append(f"{where}.value: expected a string (or none), got {type_name(value)}")
    return problems


def check_requests(requests):
    """``[(name, present taints, absent taints)]`` from the module's ``nodes``; every problem refused at once
    (GpusplitError) before the cluster is read. A node named twice, or one taint both set and taken off,
    is refused: which one wins would be a guess."""
    if not isinstance(requests, list):
        raise GpusplitError(
            f"nodes: expected a list of nodes (name, present, absent), got {type_name(requests)}"
        )
    errors, checked, seen = [], [], set()
    for i, request in enumerate(requests):
        where = f"nodes[{i}]"
        if not isinstance(request, dict):
            errors.append(
                f"{where}: expected a mapping with name, present and absent, got {type_name(request)}"
            )
            continue
        errors.extend(unknown_keys(where, request, REQUEST_KEYS))
        name = request.get("name")
        if not isinstance(name, str) or not name:
            errors.append(f"{where}.name: expected the node's name, a non-empty string, got {name!r}")
        elif name in seen:
            errors.append(
                f"{where}.name: node {name} is named twice; give each node once with all its taints"
            )
        else:
            where = f"nodes[{i}] ({name})"
            seen.add(name)
        lists, taints_ok = {}, True
        for part in ("present", "absent"):
            taints = request.get(part) or []
            if not isinstance(taints, list):
                errors.append(f"{where}.{part}: expected a list of taints, got {type_name(taints)}")
                taints = []
            for j, taint in enumerate(taints):
                problems = _taint_problems(f"{where}.{part}[{j}]", taint)
                errors.extend(problems)
                taints_ok = taints_ok and not problems
            lists[part] = taints
        if taints_ok:
            both = {taint_id(t) for t in lists["present"]} & {taint_id(t) for t in lists["absent"]}
            errors.extend(
                f"{where}: taint {key}:{effect} is both in present and in absent"
                for key, effect in sorted(both)
            )
        checked.append((name, lists["present"], lists["absent"]))
    if errors:
        raise GpusplitError(errors)
    return checked


def _value(taint):
    return taint.get("value") or ""


def merged(existing, present, absent):
    """The node's taints after setting ``present`` and taking off ``absent`` (see the module's doc).

    A taint already there with the value asked for stays as it is (its ``timeAdded`` too); one of the
    same key and effect with another value is replaced in its place."""
    gone = {taint_id(t) for t in absent}
    wanted = {taint_id(t): {k: t[k] for k in TAINT_KEYS if t.get(k)} for t in present}
    out = []
    for taint in existing or []:
        tid = taint_id(taint)
        if tid in gone:
            continue
        want = wanted.pop(tid, None)
        out.append(taint if want is None or _value(want) == _value(taint) else want)
    out.extend(wanted.values())
    return out


def node_changes(nodes_by_name, checked):
    """``[{name, before, after, resource_version}]`` for each requested node whose taints change, in the
    order asked. A requested node that the cluster does not have is refused, all of them at once, before
    anything is patched."""
    missing = [request[0] for request in checked if request[0] not in nodes_by_name]
    if missing:
        raise GpusplitError(
            f"node(s) not in the cluster: {', '.join(missing)}; no node's taints were changed "
            "(is the node registered under another name? check gpusplit_node_name)"
        )
    out = []
    for name, present, absent in checked:
        node = nodes_by_name[name]
        before = (node.get("spec") or {}).get("taints") or []
        after = merged(before, present, absent)
        if after != before:
            meta = node.get("metadata") or {}
            out.append(
                {
                    "name": name,
                    "before": before,
                    "after": after,
                    "resource_version": meta.get("resourceVersion"),
                }
            )
    return out


def patch_ops(change):
    """The JSON patch of one change: test the node's resourceVersion read, then set (or remove) its taints."""
    ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": change["resource_version"]}]
    if change["after"]:
        ops.append({"op": "add", "path": "/spec/taints", "value": change["after"]})
    else:
        ops.append({"op": "remove", "path": "/spec/taints"})
    return ops


def diff_entry(change):
    """One entry of Ansible's diff output: the node's taints before and after, one per line."""

    def text(taints):
        return "".join(f"{taint_text(t)}\n" for t in taints)

    return {
        "before_header": f"node {change['name']} taints",
        "after_header": f"node {change['name']} taints",
        "before": text(change["before"]),
        "after": text(change["after"]),
    }


class NodeTaintsApi:
    """The I/O side through the typed client: one LIST of the nodes, a GET of one node, a JSON patch."""

    def __init__(self, core, api_exception):
        self.core = core
        self.api_exception = api_exception
        self.writes = 0

    def nodes(self):
        return {(n.get("metadata") or {}).get("name"): n for n in list_json(self.core.list_node)}

    def node(self, name):
        answer = self.core.read_node(name, _preload_content=False)
        return json.loads(answer.data)

    def patch(self, name, ops):
        """None when patched; the API server's answer when it refused the patch (409 or 422: a failed
        resourceVersion test is a 422 "Invalid" that does not say which operation failed, as is a taint
        the API server finds invalid; apply_changes tells them apart by reading the node again)."""
        try:
            self.core.patch_node(name, ops, _content_type="application/json-patch+json")
        except self.api_exception as exc:
            if exc.status in (409, 422):
                return str(getattr(exc, "body", None) or exc)
            raise
        self.writes += 1
        return None


def apply_changes(api, checked, check_mode=False, attempts=ATTEMPTS):
    """Read the nodes once, work out the changes and, unless ``check_mode``, patch each changed node.

    Where the API server refuses a patch, the node is read again: if its resourceVersion moved since it
    was read, someone else changed it in between, and it is worked out again (up to ``attempts`` times);
    if not, the patch itself was refused and that is raised with the API server's answer. Returns the
    changes made (or, in check mode, that would be made)."""
    requests = {name: (present, absent) for name, present, absent in checked}
    changes = node_changes(api.nodes(), checked)
    if check_mode:
        return changes
    done = []

    def refused(why):
        already = f"; already changed: {', '.join(c['name'] for c in done)}" if done else ""
        return GpusplitError(f"node {change['name']}: {why}{already}")

    for change in changes:
        for _attempt in range(attempts):
            answer = api.patch(change["name"], patch_ops(change))
            if answer is None:
                done.append(change)
                break
            name = change["name"]
            live = api.node(name)
            if (live.get("metadata") or {}).get("resourceVersion") == change["resource_version"]:
                raise refused(f"the API server refused the patch of its taints: {answer}")
            again = node_changes({name: live}, [(name, *requests[name])])
            if not again:  # someone else made the change meanwhile
                break
            change = again[0]
        else:
            raise refused(
                f"its taints kept changing under this patch ({attempts} attempts); run again when whatever "
                "else edits the node has settled"
            )
    return done
