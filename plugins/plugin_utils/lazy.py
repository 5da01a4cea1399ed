# Copyright: gpusplit contributors
# Apache-2.0
"""Modules imported at their first use, for the filter files.

Ansible looks a collection filter up by importing every file of ``plugins/filter/`` in turn, and it
compiles collection code from source in each process (no ``.pyc``): a playbook task that names any
gpusplit filter made its worker process import the libraries of every filter file, about 0.2 s of
CPU per host and task (docs/performance.md). A filter file therefore names the libraries it uses
with :func:`lazy`; a library is imported the first time one of its names is used, that is, only by
the filter that needs it.
"""

from __future__ import annotations

import importlib


class LazyModule:
    """Stands for the module ``name`` and imports it at the first attribute looked up."""

    __slots__ = ("_lazy_name", "_lazy_module")

    def __init__(self, name):
        self._lazy_name = name
        self._lazy_module = None

    def __getattr__(self, attr):
        module = self._lazy_module
        if module is None:
            module = importlib.import_module(self._lazy_name)
            self._lazy_module = module
        return getattr(module, attr)

    def __repr__(self):
        return f"<lazy module {self._lazy_name}>"


def lazy(name):
    """A stand-in for the module ``name`` (``ansible_collections.gpusplit.k8s.plugins.…`` or a
    short ``plugin_utils.x`` / ``module_utils._x.y``) that imports it at its first use."""
    if not name.startswith("ansible_collections."):
        name = f"ansible_collections.gpusplit.k8s.plugins.{name}"
    return LazyModule(name)
