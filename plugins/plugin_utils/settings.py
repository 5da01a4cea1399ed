# Copyright: gpusplit contributors
# Apache-2.0
"""Settings given as a mapping over a table of defaults, unknown keys refused. Private to the collection."""

from __future__ import annotations

import copy

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name


def with_defaults(settings, defaults, title, error=GpusplitError):
    """A deep copy of ``defaults`` updated with ``settings``, where a None value means the default.

    Refuses with ``error`` (a :class:`GpusplitError` subclass), naming ``title``, ``settings`` that
    are no mapping and keys that ``defaults`` does not have. Checking the values is the caller's.
    """
    settings = {} if settings is None else settings
    if not isinstance(settings, dict):
        raise error(f"{title}: expected a mapping, got {type_name(settings)}")
    unknown = sorted(str(k) for k in settings if k not in defaults)
    if unknown:
        raise error(f"{title}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(defaults)})")
    out = copy.deepcopy(defaults)
    out.update({k: v for k, v in settings.items() if v is not None})
    return out
