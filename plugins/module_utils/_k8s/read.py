# Copyright: gpusplit contributors
# Apache-2.0
"""Several kinds read from the cluster in one step (the module cluster_read). Private to the collection.

A role that needs DaemonSets, Pods and Nodes before it decides used to run one
``kubernetes.core.k8s_info`` task per kind: each a module execution that loads the kubernetes client
and reads the API's discovery again. :func:`check_queries` refuses bad queries, every problem at
once, before any request; :func:`read_queries` sends one LIST per query through one client.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import API_ERRORS, error_text

QUERY_KEYS = ("api_version", "kind", "label_selectors", "namespace")


def check_queries(queries):
    """``[(name, api_version, kind, label_selector or None, namespace or None)]`` in the given order."""
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
        unknown = sorted(set(map(str, query)) - set(QUERY_KEYS))
        if unknown:
            errors.append(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(QUERY_KEYS)})")
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
        checked.append(
            (name, query.get("api_version"), query.get("kind"), ",".join(selectors) or None, namespace)
        )
    if errors:
        raise GpusplitError(errors)
    return checked


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
    for name, api_version, kind, selector, namespace in checked:
        try:
            found[name] = cluster.list_items(api_version, kind, label_selector=selector, namespace=namespace)
        except API_ERRORS as exc:
            raise GpusplitError(
                f"{name}: reading {kind} ({api_version}) from the cluster failed: {error_text(exc)}"
            ) from exc
    return found
