# Copyright: gpusplit contributors
# Apache-2.0
"""Several kinds read from the cluster in one step (the module cluster_read). Private to the collection.

A role that needs DaemonSets, Pods and Nodes before it decides used to run one
``kubernetes.core.k8s_info`` task per kind: each a module execution that loads the kubernetes client
and reads the API's discovery again. :func:`check_queries` refuses bad queries, every problem at
once, before any request; :func:`read_queries` sends one LIST per query through one client.

What a read returns goes back to the controller as the module's result, and Ansible's handling of a
result (decoding, copying, the callbacks) costs in proportion to its size: at fleet size that was most
of a read (docs/dev/measurements.md). So every object comes back without
``metadata.managedFields`` (which ``kubectl get`` hides too, and which is half of a pod or a node), and
a query may keep only the ``fields`` its caller reads (:func:`project`).
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import (
    GpusplitError,
    type_name,
    unknown_keys,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import API_ERRORS, error_text

QUERY_KEYS = ("api_version", "kind", "fields", "label_selectors", "namespace", "field_manager")
MANAGED_FIELDS = ("metadata", "managedFields")


def _field_paths(fields, where, errors):
    """``fields`` as a tuple of paths (tuples of keys), or None when left out."""
    if fields is None:
        return None
    if not isinstance(fields, list) or not fields:
        errors.append(
            f"{where}.fields: expected a non-empty list of paths such as 'metadata.name', got {fields!r}"
        )
        return None
    paths = []
    for field in fields:
        parts = field.split(".") if isinstance(field, str) else None
        if not parts or not all(part.strip() for part in parts):
            errors.append(
                f"{where}.fields: {field!r} is not a path of keys separated by dots, such as 'status.phase'"
            )
            continue
        paths.append(tuple(parts))
    return tuple(paths)


def check_queries(queries):
    """``[(name, api_version, kind, label_selector or None, namespace or None, field_manager or None, fields or
    None)]`` in the given order; ``fields`` a tuple of paths, each a tuple of keys."""
    if not isinstance(queries, dict) or not queries:
        raise GpusplitError(
            f"queries: expected a mapping of name to query (at least one), got {type_name(queries)}"
        )
    checked, errors = [], []
    for name, query in queries.items():
        where = f"queries[{name!r}]"
        if not isinstance(query, dict):
            errors.append(f"{where}: expected a mapping with api_version and kind, got {type_name(query)}")
            continue
        errors.extend(unknown_keys(where, query, QUERY_KEYS))
        for key in ("api_version", "kind"):
            if not isinstance(query.get(key), str) or not query.get(key).strip():
                errors.append(f"{where}.{key}: expected a non-empty string, got {type_name(query.get(key))}")
        selectors = query.get("label_selectors") or []
        if not isinstance(selectors, list) or not all(isinstance(s, str) and s.strip() for s in selectors):
            errors.append(
                f"{where}.label_selectors: expected a list of selectors such as 'app=x', got {selectors!r}"
            )
            selectors = []
        namespace = query.get("namespace")
        if namespace is not None and (not isinstance(namespace, str) or not namespace.strip()):
            errors.append(f"{where}.namespace: expected a namespace name, got {type_name(namespace)}")
        fields = _field_paths(query.get("fields"), where, errors)
        manager = query.get("field_manager")
        if manager is not None and (not isinstance(manager, str) or not manager.strip()):
            errors.append(
                f"{where}.field_manager: expected the name of a field manager, got {type_name(manager)}"
            )
        elif manager is not None and MANAGED_FIELDS not in (fields or ()):
            errors.append(
                f"{where}.field_manager: keeps one manager's metadata.managedFields, which only a query whose "
                "fields name metadata.managedFields keeps; add it to fields or leave field_manager out"
            )
        checked.append(
            (
                name,
                query.get("api_version"),
                query.get("kind"),
                ",".join(selectors) or None,
                namespace,
                manager,
                fields,
            )
        )
    if errors:
        raise GpusplitError(errors)
    return checked


def _without_managed_fields(obj):
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or MANAGED_FIELDS[1] not in meta:
        return obj
    return {**obj, "metadata": {key: value for key, value in meta.items() if key != MANAGED_FIELDS[1]}}


def project(obj, paths=None, manager=None):
    """``obj`` without ``metadata.managedFields`` and, where ``paths`` are given, with only those paths
    (and its ``apiVersion`` and ``kind``).

    A path is a tuple of keys into nested mappings; what it reaches is kept whole (a list, a mapping).
    A path that an object does not have is left out of it, as the API leaves out an empty field. Only
    a path that names them, ``metadata.managedFields``, keeps the managedFields; with ``manager``, only
    that field manager's entries of them (what a caller needs to tell what its own applies own).
    """
    if paths is None:
        return _without_managed_fields(obj)
    if MANAGED_FIELDS not in paths:
        obj = _without_managed_fields(obj)
    out = {key: obj[key] for key in ("apiVersion", "kind") if key in obj}
    for path in paths:
        value = obj
        for key in path:
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            target = out
            for key in path[:-1]:
                # a copy, so that a shorter path kept before is not changed in the object read
                target[key] = dict(target[key]) if isinstance(target.get(key), dict) else {}
                target = target[key]
            if manager is not None and path == MANAGED_FIELDS and isinstance(value, list):
                value = [
                    entry for entry in value if isinstance(entry, dict) and entry.get("manager") == manager
                ]
            target[path[-1]] = value
    return out


def read_queries(connect, checked):
    """``{name: [objects]}``, one LIST per query through the cluster ``connect()`` returns (a
    module_utils._k8s.apply.Cluster).

    An unusable kubeconfig, a kind the cluster does not serve, the connection or a denial raise a
    :class:`GpusplitError` that says which (and names the query).
    """
    try:
        cluster = connect()
    except API_ERRORS as exc:
        raise GpusplitError(f"connecting to the cluster failed: {error_text(exc)}") from exc
    found = {}
    for name, api_version, kind, selector, namespace, manager, fields in checked:
        try:
            items = cluster.list_items(api_version, kind, label_selector=selector, namespace=namespace)
        except API_ERRORS as exc:
            raise GpusplitError(
                f"{name}: reading {kind} ({api_version}) from the cluster failed: {error_text(exc)}"
            ) from exc
        found[name] = [project(item, fields, manager) for item in items]
    return found
