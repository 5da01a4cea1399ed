"""Which fields of a Kubernetes object a filter reads, for the tests of cluster_read's ``fields``.

A role that reads the cluster with ``gpusplit.k8s.cluster_read`` may keep only the fields its filters read
(the query's ``fields``). If a filter later reads one more field, the projected objects would silently lack
it. :func:`recorded` wraps an object so that every key a filter reads is noted with its path;
:func:`uncovered` names the reads that the query's fields do not keep; :func:`query_fields` takes the
fields from the role's own task file, so the test checks what the role really sends.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.read import check_queries

ROOT = Path(__file__).resolve().parents[2]


class _Reads:
    def __init__(self):
        self.keys = set()  # paths read by key: each may lead further down
        self.whole = set()  # paths read whole: iterated, counted, compared, copied


class _Dict(dict):
    """A dict that notes, in ``reads``, the path of each key read and each mapping read whole."""

    def __init__(self, data, path, reads):
        super().__init__(data)
        self._path, self._reads = path, reads

    def _child(self, key, value):
        return _wrap(value, (*self._path, key), self._reads)

    def __getitem__(self, key):
        self._reads.keys.add((*self._path, key))
        return self._child(key, super().__getitem__(key))

    def get(self, key, default=None):
        self._reads.keys.add((*self._path, key))
        return self._child(key, dict.__getitem__(self, key)) if dict.__contains__(self, key) else default

    def __bool__(self):  # ``meta or {}``: whether there is a mapping, not what is in it
        return dict.__len__(self) > 0

    def __contains__(self, key):
        self._reads.keys.add((*self._path, key))
        return dict.__contains__(self, key)

    def _whole(self):
        self._reads.whole.add(self._path)

    def __iter__(self):
        self._whole()
        return dict.__iter__(self)

    def keys(self):
        self._whole()
        return dict.keys(self)

    def items(self):
        self._whole()
        return [(k, self._child(k, v)) for k, v in dict.items(self)]

    def values(self):
        self._whole()
        return [self._child(k, v) for k, v in dict.items(self)]

    def __len__(self):
        self._whole()
        return dict.__len__(self)

    def __eq__(self, other):
        self._whole()
        return dict.__eq__(self, other)

    __hash__ = None

    def copy(self):
        self._whole()
        return dict(self)


def _wrap(value, path, reads):
    if isinstance(value, dict) and not isinstance(value, _Dict):
        return _Dict(value, path, reads)
    if isinstance(value, list):
        return [_wrap(item, path, reads) for item in value]  # an item of a list: the list's path
    return value


def recorded(objects):
    """``(wrapped objects, reads)``: the objects as a filter sees them, and what it read of them."""
    reads = _Reads()
    return [_wrap(obj, (), reads) for obj in objects], reads


def field_paths(fields):
    """``fields`` as cluster_read checks them: a tuple of paths, each a tuple of keys."""
    [(*_, paths)] = check_queries({"query": {"api_version": "v1", "kind": "Object", "fields": fields}})
    return paths


def uncovered(reads, fields):
    """The paths read that the fields do not keep, sorted (empty when every read is covered).

    A path read by key is covered by a field that is its prefix or equal to it, or is on the way to a
    field (its own prefix). A path read whole needs a field that is its prefix or equal to it.
    ``apiVersion`` and ``kind`` are always kept.
    """
    paths = [*field_paths(fields), ("apiVersion",), ("kind",)]

    def kept(path):
        return any(path[: len(p)] == p for p in paths)

    out = {".".join(p) for p in reads.keys if not kept(p) and not any(p == f[: len(p)] for f in paths)}
    out |= {".".join(p) or "(the object)" for p in reads.whole if not kept(p)}
    return sorted(out)


def query(task_file, name):
    """The cluster_read query ``name`` (a mapping with ``kind``) in a role's task file (relative to the
    checkout); exactly one such query must be there."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get(name), dict) and "kind" in node[name]:
                found.append(node[name])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(yaml.safe_load((ROOT / task_file).read_text()))
    assert len(found) == 1, f"{task_file}: expected one cluster_read query {name!r}, found {len(found)}"
    return found[0]


def query_fields(task_file, name):
    """The ``fields`` of the cluster_read query ``name`` in a role's task file."""
    fields = query(task_file, name).get("fields")
    assert fields, f"{task_file}: the cluster_read query {name!r} has no fields"
    return fields
