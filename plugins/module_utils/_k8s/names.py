# Copyright: gpusplit contributors
# Apache-2.0
"""gpusplit's names in Kubernetes: shared labels and annotations, DNS labels, label values. Private to the collection.

Pure, standard library only. The renderers (``plugin_utils/split_render.py``) and the DRA code
(``module_utils/_dra/``, ``plugin_utils/_dra/``) label and name their objects with these, so that a selector written by
one finds the objects of the other.
"""

from __future__ import annotations

import hashlib
import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import type_name

MANAGED_BY = "gpusplit"
APP_NAME = "gpusplit-device-plugin"  # app.kubernetes.io/name of the split device plugin
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_NODE = "gpusplit.io/node"
LABEL_MODE = "gpusplit.io/mode"
ANNOTATION_HOST = "gpusplit.io/host"

DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def short_hash(text, length=8):
    """The first ``length`` hex digits of the sha256 of ``text``."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def dns_label_name(prefix, name, max_len=63):
    """``prefix + name`` as a DNS-1123 label (<= max_len), stable and unique per name.

    The name is used as it is when it already fits; otherwise (upper case, dots, other
    characters, or too long) it is lower-cased, cleaned, truncated and suffixed with the
    first 8 hex digits of its sha256, so that two different names never meet.
    """
    name = str(name)
    clean = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]+", "-", name.lower())).strip("-")
    candidate = prefix + clean
    if clean == name and len(candidate) <= max_len and DNS_LABEL_RE.match(candidate):
        return candidate
    digest = short_hash(name)
    room = max_len - len(prefix) - len(digest) - 1
    clean = clean[:room].rstrip("-")
    return f"{prefix}{clean}-{digest}" if clean else f"{prefix}{digest}"


def label_value(value):
    """``value`` as a valid label value (<= 63), stable; hashed when it does not fit."""
    value = str(value)
    if len(value) <= 63 and LABEL_VALUE_RE.match(value):
        return value
    digest = short_hash(value)
    clean = re.sub(r"[^A-Za-z0-9._-]+", "-", value)[: 63 - len(digest) - 1]
    clean = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", clean)
    return f"{clean}-{digest}" if clean else digest


DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_SUBDOMAIN_MAX = 253


def dns_subdomain_problem(name):
    """What keeps ``name`` from being an RFC 1123 subdomain (a Node's, a namespace's, most objects'
    name), or None when it is one: at most 253 characters, lower-case letters, digits, ``-`` and
    ``.``, each dot-separated part starting and ending with a letter or digit."""
    if not isinstance(name, str):
        return f"expected a string, got {type_name(name)}"
    if not name:
        return "it is empty"
    if len(name) > DNS_SUBDOMAIN_MAX:
        return f"it has {len(name)} characters, more than {DNS_SUBDOMAIN_MAX}"
    if not DNS_SUBDOMAIN_RE.match(name):
        bad = sorted({c for c in name if not (c.islower() or c.isdigit() or c in "-.") or not c.isascii()})
        if bad:
            return f"it contains {' '.join(repr(c) for c in bad)}; only lower-case letters, digits, '-' and '.' are allowed"
        return "each part between dots must start and end with a letter or digit"
    return None
