# Copyright: gpusplit contributors
# Apache-2.0
"""What a server-side apply would change, decided from the live objects alone. Private to the collection.

No I/O and no kubernetes client: the module cluster_apply (module_utils/_k8s/apply.py) decides with it which
objects to send, and a filter on the controller (``apply_needed``) decides with it, from a read the run made
anyway, whether an apply task needs to run at all; importing the kubernetes client costs a process about half a
second of CPU (docs/performance.md).
"""

from __future__ import annotations


def object_key(obj):
    meta = obj.get("metadata") or {}
    return (obj.get("apiVersion"), obj.get("kind"), meta.get("namespace") or "", meta.get("name"))


def key_text(key):
    api_version, kind, namespace, name = key
    return f"{kind}/{namespace + '/' if namespace else ''}{name} ({api_version})"


def is_subset(desired, live):
    """True when every field of `desired` is present in `live` with the same value.

    Lists must have the same length and match element by element (the server keeps the order
    of lists it was given); fields the server adds (defaults, status) are ignored.
    """
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return False
        return all(k in live and is_subset(v, live[k]) for k, v in desired.items())
    if isinstance(desired, list):
        if not isinstance(live, list) or len(desired) != len(live):
            return False
        return all(is_subset(desired[i], live[i]) for i in range(len(desired)))
    if isinstance(desired, bool) or isinstance(live, bool):
        return desired is live
    if isinstance(desired, (int, float)) and isinstance(live, (int, float)):
        return desired == live
    return desired == live


def owned_fields(live, field_manager):
    """The fieldsV1 that ``field_manager`` owns on ``live`` through server-side apply ({} if none)."""
    for entry in (live.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") == field_manager and entry.get("operation") == "Apply":
            return entry.get("fieldsV1") or {}
    return {}


def stopped_sending(desired, fields, path=""):
    """Paths of map fields the manager owns (``fields``, fieldsV1) that ``desired`` no longer has.

    Applying ``desired`` removes such a field (a label gpusplit stopped setting, say), so an
    object whose live state merely contains ``desired`` still needs the apply. Items of lists
    (``k:``/``v:`` entries) are left to the list comparison of is_subset.
    """
    out = []
    if not isinstance(fields, dict) or not isinstance(desired, dict):
        return out
    for key, sub in fields.items():
        if not key.startswith("f:"):
            continue
        name = key[2:]
        where = f"{path}.{name}" if path else name
        if name not in desired:
            out.append(where)
        else:
            out.extend(stopped_sending(desired[name], sub, where))
    return out


def decide(desired_objects, live_index, field_manager=None):
    """Split desired objects into create / update / unchanged against the live index.

    With ``field_manager``, a live object that contains every desired field but still carries a
    field this manager applied earlier and no longer sends is an update (the apply removes it).
    """
    create, update, unchanged = [], [], []
    for obj in desired_objects:
        key = object_key(obj)
        live = live_index.get(key)
        if live is None:
            create.append(obj)
        elif is_subset(obj, live) and not (
            field_manager and stopped_sending(obj, owned_fields(live, field_manager))
        ):
            unchanged.append(obj)
        else:
            update.append(obj)
    return {"create": create, "update": update, "unchanged": unchanged}


def needing_apply(desired_objects, live_objects, field_manager):
    """The objects of ``desired_objects`` that an apply by ``field_manager`` would create or change, judged as
    :func:`decide` judges them against ``live_objects`` (a read of the same kind that kept what the desired objects
    set and the manager's own ``metadata.managedFields``, see cluster_read's ``field_manager``); ``[]`` where the
    apply would change nothing. A live object read without its managedFields cannot show a field the manager stopped
    sending, so it counts as needing the apply."""
    live = {}
    for obj in live_objects or []:
        if "managedFields" in ((obj or {}).get("metadata") or {}):
            live[object_key(obj)] = obj
    plan = decide(desired_objects, live, field_manager)
    return plan["create"] + plan["update"]
