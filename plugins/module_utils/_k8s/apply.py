# Copyright: gpusplit contributors
# Apache-2.0
"""Batched server-side apply that writes nothing when nothing changed. Private to the collection.

Pure part (no I/O): validate the desired objects, decide per object whether the live object
already carries every desired field (then it is left alone: no PATCH at all, so a re-run makes
zero API writes), and which owned objects to prune. I/O part: `Cluster`, a thin wrapper over the
kubernetes dynamic client that lists each kind once, applies with a field manager (dryRun=All
in check mode) and deletes. Namespaces (and other cluster-scoped objects) are applied before the
objects that live in them (apply_phases).

Why not one kubernetes.core.k8s task per object: a fleet has hundreds of nodes, and
kubernetes.core's apply always sends the PATCH, so a re-run still writes. This module batches
one LIST per kind and sends a PATCH only for objects that differ.
"""

from __future__ import annotations

import difflib
import json
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import api_client
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.compare import decide, key_text, object_key
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import LABEL_MANAGED_BY

try:
    import yaml
except ImportError:  # pragma: no cover - PyYAML ships with ansible-core
    yaml = None

# fields the server owns: never compared, never shown in a diff
_VOLATILE_METADATA = (
    "managedFields",
    "resourceVersion",
    "uid",
    "generation",
    "creationTimestamp",
    "selfLink",
)


class ApplyError(GpusplitError):
    """Bad desired objects or prune specs; raised before any request is sent."""


def object_problems(objects):
    """What is wrong with the desired objects, one message each ([] when nothing is).

    Every object needs apiVersion, kind and metadata.name (strings; metadata a mapping, its
    namespace a string when given), and no object may appear twice.
    """
    errors = []
    seen = set()
    for pos, obj in enumerate(objects):
        if not isinstance(obj, dict):
            errors.append(f"objects[{pos}] is a {type_name(obj)}, not a mapping")
            continue
        meta = obj.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            errors.append(f"objects[{pos}] metadata is a {type_name(meta)}, not a mapping")
            continue
        meta = meta or {}
        fields = (
            ("apiVersion", obj.get("apiVersion")),
            ("kind", obj.get("kind")),
            ("metadata.name", meta.get("name")),
        )
        missing = [f for f, v in fields if not v]
        if missing:
            errors.append(f"objects[{pos}] lacks {', '.join(missing)}")
            continue
        fields += (("metadata.namespace", meta.get("namespace") or ""),)
        not_text = [f"{f} ({type_name(v)})" for f, v in fields if not isinstance(v, str)]
        if not_text:
            errors.append(f"objects[{pos}] has {', '.join(not_text)} where a string belongs")
            continue
        key = object_key(obj)
        if key in seen:
            errors.append(f"objects[{pos}] {key_text(key)} appears more than once")
        seen.add(key)
    return errors


def prune_problems(prune):
    """What is wrong with the prune specs ({api_version, kind, label_selector, namespace?}), one message each.

    The selector must include the ownership label, so that only owned objects are deleted.
    """
    errors = []
    for pos, spec in enumerate(prune or []):
        if not isinstance(spec, dict):
            errors.append(f"prune[{pos}] is a {type_name(spec)}, not a mapping")
            continue
        bad = [
            f
            for f in ("api_version", "kind", "label_selector")
            if not spec.get(f) or not isinstance(spec[f], str)
        ]
        if spec.get("namespace") is not None and not isinstance(spec["namespace"], str):
            bad.append("namespace")
        if bad:
            errors.append(f"prune[{pos}] needs {', '.join(bad)} as non-empty string(s)")
        elif LABEL_MANAGED_BY not in spec["label_selector"]:
            errors.append(
                f"prune selector for {spec['kind']} must include {LABEL_MANAGED_BY} so that only owned objects are deleted"
            )
    return errors


def to_prune(live_owned, desired_keys):
    """Live objects carrying the ownership selector that the desired set no longer has."""
    return sorted(
        (o for o in live_owned if object_key(o) not in desired_keys),
        key=object_key,
    )


# kinds that other objects of a batch may need to exist first; applied before everything else
_FOUNDATION_KINDS = (("v1", "Namespace"), ("apiextensions.k8s.io/v1", "CustomResourceDefinition"))


def apply_phases(objects):
    """Positions of ``objects`` in the order they may be applied, as a list of phases.

    Phase 1: Namespaces (and CRDs), which other objects live in or are made of; phase 2: every
    other cluster-scoped object (no metadata.namespace); phase 3: namespaced objects. Empty phases
    are left out. A phase must be answered before the next one is sent: the apiserver refuses a
    namespaced object whose namespace does not exist yet.
    """
    phases = ([], [], [])
    for pos, obj in enumerate(objects):
        if (obj.get("apiVersion"), obj.get("kind")) in _FOUNDATION_KINDS:
            phases[0].append(pos)
        elif not (obj.get("metadata") or {}).get("namespace"):
            phases[1].append(pos)
        else:
            phases[2].append(pos)
    return [p for p in phases if p]


def namespaces_created(plan):
    """Names of the Namespaces that ``plan`` (from decide) creates."""
    return {
        o["metadata"]["name"]
        for o in plan["create"]
        if (o.get("apiVersion"), o.get("kind")) == ("v1", "Namespace")
    }


def not_dry_runnable(objects, new_namespaces):
    """Split ``objects`` into (sendable as a server dry-run, living in a namespace the batch creates).

    A dry-run creates nothing, so the apiserver would refuse every object of a namespace that only
    this batch creates ("namespaces ... not found"). Such objects are reported as would-be-created
    without a request; they are validated on the real run, after their Namespace exists.
    """
    send, skip = [], []
    for obj in objects:
        ns = (obj.get("metadata") or {}).get("namespace")
        (skip if ns and ns in new_namespaces else send).append(obj)
    return send, skip


def strip_server_fields(obj):
    """A copy without status and server-owned metadata, for diffs."""
    clean = json.loads(json.dumps(obj))
    clean.pop("status", None)
    meta = clean.get("metadata") or {}
    for field in _VOLATILE_METADATA:
        meta.pop(field, None)
    annotations = meta.get("annotations") or {}
    if isinstance(annotations, dict):  # a desired object may carry anything; the apiserver judges it
        annotations.pop("deprecated.daemonset.template.generation", None)
        if not annotations:
            meta.pop("annotations", None)
    return clean


def project(desired, live):
    """The part of `live` that `desired` speaks about (same shape), for a focused diff."""
    if isinstance(desired, dict) and isinstance(live, dict):
        return {k: project(v, live[k]) for k, v in desired.items() if k in live}
    if isinstance(desired, list) and isinstance(live, list):
        common = min(len(desired), len(live))
        return [project(desired[i], live[i]) for i in range(common)] + live[len(desired) :]
    return live


def _dump(obj):
    if obj is None:
        return ""
    if yaml is not None:
        return yaml.safe_dump(obj, sort_keys=True, default_flow_style=False)
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def diff_entry(key, before, after):
    """One entry for Ansible's diff output (before/after text with headers)."""
    return {
        "before_header": key_text(key) if before is not None else "(absent)",
        "after_header": key_text(key) if after is not None else "(absent)",
        "before": _dump(before),
        "after": _dump(after),
    }


def unified(key, before, after):
    return "".join(
        difflib.unified_diff(
            _dump(before).splitlines(True),
            _dump(after).splitlines(True),
            fromfile=f"live {key_text(key)}",
            tofile=f"desired {key_text(key)}",
        )
    )


class Cluster:
    """The I/O side: one LIST per kind, server-side apply per changed object, delete."""

    def __init__(self, kubeconfig=None, context=None):
        from kubernetes.dynamic import DynamicClient  # guarded: only the module's run reaches here

        self.client = DynamicClient(api_client({"kubeconfig": kubeconfig, "context": context}))
        self.writes = 0
        self._resources = {}

    def resource(self, api_version, kind):
        key = (api_version, kind)
        if key not in self._resources:
            self._resources[key] = self.client.resources.get(api_version=api_version, kind=kind)
        return self._resources[key]

    def list_items(self, api_version, kind, label_selector=None, namespace=None):
        """Every object of a kind (in ``namespace`` where the kind is namespaced), one LIST request."""
        res = self.resource(api_version, kind)
        kwargs = {"label_selector": label_selector} if label_selector else {}
        if namespace and res.namespaced:
            kwargs["namespace"] = namespace
        # the answer's JSON as it is: the dynamic client's ResourceInstance wrapping and to_dict()
        # back would cost most of the read at fleet size (docs/dev/measurements.md)
        answer = self.client.get(res, serialize=False, **kwargs)
        items = json.loads(answer.data).get("items") or []
        for item in items:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    def list_index(self, api_version, kind, label_selector=None, namespace=None):
        return {object_key(i): i for i in self.list_items(api_version, kind, label_selector, namespace)}

    def live_for(self, desired_objects):
        """Index of the live objects for every (apiVersion, kind) in the desired set."""
        index = {}
        for api_version, kind in sorted({(o["apiVersion"], o["kind"]) for o in desired_objects}):
            index.update(self.list_index(api_version, kind))
        return index

    def apply(self, obj, field_manager, force=True, dry_run=False):
        res = self.resource(obj["apiVersion"], obj["kind"])
        kwargs = {"field_manager": field_manager, "force_conflicts": force}
        if dry_run:
            kwargs["dry_run"] = "All"
        else:
            self.writes += 1
        meta = obj["metadata"]
        return self.client.server_side_apply(
            res, body=obj, name=meta["name"], namespace=meta.get("namespace"), **kwargs
        ).to_dict()

    def apply_many(self, objects, field_manager, force=True, dry_run=False, parallel=8):
        """Apply ``objects`` phase by phase (see apply_phases); results in the order given.

        Inside a phase the requests run in parallel; a phase starts only when the one before it
        has been answered, so a Namespace exists before the first object that lives in it.
        """
        results = [None] * len(objects)
        if not objects:
            return results
        with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            for phase in apply_phases(objects):
                answers = pool.map(lambda i: self.apply(objects[i], field_manager, force, dry_run), phase)
                for pos, answer in enumerate(answers):
                    results[phase[pos]] = answer
        return results

    def delete(self, obj, dry_run=False):
        res = self.resource(obj["apiVersion"], obj["kind"])
        meta = obj["metadata"]
        kwargs = {"dry_run": "All"} if dry_run else {}
        if not dry_run:
            self.writes += 1
        self.client.delete(res, name=meta["name"], namespace=meta.get("namespace") or None, **kwargs)


def run(cluster, objects, field_manager="gpusplit", prune=None, check_mode=False, force=True, parallel=8):
    """Apply `objects` and prune owned leftovers. Returns the module's result fields.

    prune: list of {api_version, kind, label_selector, namespace?}; only objects matching the
    selector (which must include the ownership label) are candidates. Bad objects or prune specs
    are refused (ApplyError, every reason at once) before any request is sent.
    """
    problems = object_problems(objects) + prune_problems(prune)
    if problems:
        raise ApplyError("nothing was applied: " + "; ".join(problems))
    live = cluster.live_for(objects)
    plan = decide(objects, live, field_manager)
    changed_objs = plan["create"] + plan["update"]
    skipped = []
    if check_mode:
        changed_objs, skipped = not_dry_runnable(changed_objs, namespaces_created(plan))
    results = cluster.apply_many(
        changed_objs, field_manager, force=force, dry_run=check_mode, parallel=parallel
    )
    diffs = []
    for pos, obj in enumerate(changed_objs):
        after = results[pos]
        key = object_key(obj)
        before = live.get(key)
        diffs.append(
            diff_entry(
                key,
                project(obj, strip_server_fields(before)) if before else None,
                project(obj, strip_server_fields(after)),
            )
        )
    for obj in skipped:  # nothing live can exist in a namespace that does not exist
        diffs.append(diff_entry(object_key(obj), None, strip_server_fields(obj)))
    desired_keys = {object_key(o) for o in objects}
    pruned = []
    for spec in prune or []:
        owned = cluster.list_index(
            spec["api_version"], spec["kind"], spec["label_selector"], spec.get("namespace")
        ).values()
        for obj in to_prune(owned, desired_keys):
            cluster.delete(obj, dry_run=check_mode)
            pruned.append(key_text(object_key(obj)))
            diffs.append(diff_entry(object_key(obj), strip_server_fields(obj), None))
    result = {
        "changed": bool(changed_objs or skipped or pruned),
        "created": [key_text(object_key(o)) for o in plan["create"]],
        "updated": [key_text(object_key(o)) for o in plan["update"]],
        "unchanged": len(plan["unchanged"]),
        "pruned": pruned,
        "api_writes": cluster.writes,
        "not_dry_run": [key_text(object_key(o)) for o in skipped],
        "diff": diffs,
    }
    if skipped:
        namespaces = sorted({o["metadata"]["namespace"] for o in skipped})
        result["warnings"] = [
            f"check mode: {len(skipped)} object(s) in namespace(s) {', '.join(namespaces)} that this run "
            "would create are reported as would-be-created without a server dry-run (a dry-run creates "
            "no namespace, so the apiserver would refuse them); the real run validates them"
        ]
    return result
