# Copyright: gpusplit contributors
# Apache-2.0
"""Version strings: read as numbers, the minor of a Kubernetes version, the version in an image tag or ``--version`` output.

Private to the collection.
"""

from __future__ import annotations

import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError

_VERSION = r"v?(\d+)\.(\d+)(?:\.(\d+))?"
_VERSION_RE = re.compile(rf"^{_VERSION}(?:[-+].*)?$")
_VERSION_INSIDE_RE = re.compile(_VERSION)
_IMAGE_TAG_RE = re.compile(r":v?(\d+\.\d+\.\d+)(?:[-+][0-9A-Za-z.+_-]*)?(?:@sha256:[0-9a-f]+)?$")
_VERSION_OUTPUT_RE = re.compile(r"\bv(\d+\.\d+\.\d+)(?:[-+][0-9A-Za-z.+_-]*)?")


class VersionError(GpusplitError):
    """A text that holds no Kubernetes version."""


def parse_version(text, inside=False):
    """``v1.34.2-eks-1`` / ``1.35.0+k3s1`` / ``1.37`` -> (major, minor, patch), patch 0 when absent.

    None when ``text`` is no string or holds no version. The whole text must be the version (a
    ``-``/``+`` suffix allowed), unless ``inside``: then the first ``<major>.<minor>[.<patch>]`` in it
    counts (``containerd github.com/containerd/containerd v1.7.20 ...``, ``570.172.08``).
    """
    if not isinstance(text, str):
        return None
    m = _VERSION_INSIDE_RE.search(text) if inside else _VERSION_RE.match(text.strip())
    if m is None:
        return None
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


def format_version(version) -> str:
    """(1, 34, 2) -> ``1.34.2``."""
    return ".".join(str(x) for x in version)


def minor_of(version, error=VersionError) -> str:
    """'v1.37.2', '1.37', '1.37.2+k3s1', 'v1.37.2-eks-1a2b' -> '1.37' (no range check).

    An unreadable version raises ``error`` (a :class:`GpusplitError` subclass), so that each caller
    refuses it as its own kind of error.
    """
    text = str(version).strip()
    parsed = parse_version(text)
    if parsed is None:
        raise error(f"cannot read a Kubernetes version from {text!r} (expected e.g. v1.37.2)")
    return f"{parsed[0]}.{parsed[1]}"


def version_from_image(image: str | None) -> str | None:
    """``registry.k8s.io/kube-apiserver:v1.37.2`` -> ``1.37.2``; None when the tag is no version."""
    if not image:
        return None
    name = str(image).strip()
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    m = _IMAGE_TAG_RE.search(last)
    return m.group(1) if m else None


def version_from_version_output(text: str | None) -> str | None:
    """``Kubernetes v1.37.2`` (``kube-apiserver --version``), ``k3s version v1.37.2+k3s1 (..)`` ->
    ``1.37.2``."""
    if not text:
        return None
    m = _VERSION_OUTPUT_RE.search(str(text))
    return m.group(1) if m else None
