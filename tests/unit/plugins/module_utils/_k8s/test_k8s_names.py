"""gpusplit's names in Kubernetes (plugins/module_utils/_k8s/names.py): DNS labels, label values, and the
shared labels that the renderers and the DRA code both use."""

from __future__ import annotations

import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s import names
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def test_render_uses_the_shared_names():
    for name in (
        "MANAGED_BY",
        "APP_NAME",
        "LABEL_NODE",
        "LABEL_MODE",
        "ANNOTATION_HOST",
        "dns_label_name",
        "label_value",
    ):
        assert getattr(render, name) is getattr(names, name), name
    # and no copy of its own of any other shared name
    for name in vars(names):
        if not name.startswith("_") and hasattr(render, name):
            assert getattr(render, name) is getattr(names, name), name


def test_dns_label_name_keeps_a_fitting_name_and_hashes_the_others():
    assert names.dns_label_name("gpusplit-dp-", "gpu-a") == "gpusplit-dp-gpu-a"
    odd = ["Gpu-A", "gpu-a.example.com", "n" * 80, "n" * 80 + "x"]
    made = [names.dns_label_name("gpusplit-dp-", n) for n in odd]
    assert len(set(made)) == len(odd)
    for name in made:
        assert len(name) <= 63 and DNS_LABEL.match(name) and name.startswith("gpusplit-dp-")
    assert made == [names.dns_label_name("gpusplit-dp-", n) for n in odd]  # stable
    assert len(names.dns_label_name("p-", "x" * 40, max_len=20)) <= 20


def test_label_value_keeps_a_valid_value_and_hashes_the_others():
    assert names.label_value("gpu-a.example") == "gpu-a.example"
    assert names.label_value(7) == "7"
    for odd in ('we"ird: name', "-dash-", "v" * 64, "!!!"):
        value = names.label_value(odd)
        assert len(value) <= 63 and names.LABEL_VALUE_RE.match(value), odd
    assert names.label_value("v" * 64) != names.label_value("v" * 65)
