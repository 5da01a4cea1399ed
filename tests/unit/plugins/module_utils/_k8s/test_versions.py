"""Kubernetes version strings (plugins/module_utils/_k8s/versions.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.versions import (
    VersionError,
    format_version,
    minor_of,
    parse_version,
    version_from_image,
    version_from_version_output,
)


class CallersError(GpusplitError):
    """A caller's own kind of refusal."""


@pytest.mark.parametrize(
    ("text", "minor"),
    [
        ("v1.37.2", "1.37"),
        ("1.36", "1.36"),
        ("1.35.4", "1.35"),
        ("v1.37.2+k3s1", "1.37"),
        ("v1.37.2-eks-1a2b", "1.37"),
    ],
)
def test_minor_of(text, minor):
    assert minor_of(text) == minor


@pytest.mark.parametrize("bad", ["", "latest", "stable-1", "1"])
def test_minor_of_refuses_garbage(bad):
    with pytest.raises(VersionError, match="cannot read a Kubernetes version"):
        minor_of(bad)
    with pytest.raises(CallersError, match="cannot read a Kubernetes version"):
        minor_of(bad, CallersError)


@pytest.mark.parametrize(
    ("text", "whole", "inside"),
    [
        ("v1.37.2", (1, 37, 2), (1, 37, 2)),
        (" 1.36 ", (1, 36, 0), (1, 36, 0)),
        ("v1.34.2-eks-1", (1, 34, 2), (1, 34, 2)),
        ("1.35.0+k3s1", (1, 35, 0), (1, 35, 0)),
        ("570.172.08", (570, 172, 8), (570, 172, 8)),
        ("containerd github.com/containerd/containerd v1.7.20 8fc6bcff", None, (1, 7, 20)),
        ("latest", None, None),
        (None, None, None),
        (1.37, None, None),
    ],
)
def test_parse_version(text, whole, inside):
    """One parser: the whole text is the version, or (``inside``) the first version found in it."""
    assert parse_version(text) == whole
    assert parse_version(text, inside=True) == inside


def test_format_version():
    assert format_version((1, 34, 2)) == "1.34.2"
    assert format_version(parse_version("570.172.08")) == "570.172.8"


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("registry.k8s.io/kube-apiserver:v1.37.2", "1.37.2"),
        ("my-registry:5000/k8s/kube-scheduler:v1.36.3", "1.36.3"),
        ("registry.k8s.io/kube-apiserver:v1.37.2@sha256:" + "a" * 64, "1.37.2"),
        ("registry.k8s.io/kube-apiserver@sha256:" + "a" * 64, None),
        ("my-registry:5000/kube-apiserver", None),
        ("registry.k8s.io/kube-apiserver:latest", None),
        ("", None),
    ],
)
def test_version_from_image(image, version):
    assert version_from_image(image) == version


@pytest.mark.parametrize(
    ("output", "version"),
    [
        ("Kubernetes v1.37.2\n", "1.37.2"),
        ("k3s version v1.37.2+k3s1 (0123abcd)\ngo version go1.26.8\n", "1.37.2"),
        ("rke2 version v1.36.3+rke2r1 (deadbeef)\n", "1.36.3"),
        ("no version here", None),
    ],
)
def test_version_from_version_output(output, version):
    assert version_from_version_output(output) == version
