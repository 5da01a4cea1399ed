# Copyright: gpusplit contributors
# Apache-2.0
"""A digest of JSON data by its content, so that files written by different runs are tied by what they hold.

The verify step puts the digest of the plan it verified into out/fleet-report.json; diagnose.yml computes
the digest of out/fleet-plan.json and draws the fleet only when both are the same plan. Files that did not
change are not rewritten, so their modification times say nothing about which run's data they hold.
"""

from __future__ import annotations

import hashlib
import json


def _plain(value):
    """``value`` as plain dicts, lists, str, int, float, bool and None, read through each container's own
    ``items()`` and iteration (a templating engine's lazy containers render their values there)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def json_digest(value):
    """``sha256:<hex>`` of ``value`` as canonical JSON (keys sorted, no blanks): the same for the data in
    memory and for its JSON file read back, whatever the file's indentation or key order."""
    text = json.dumps(_plain(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
