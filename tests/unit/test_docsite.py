"""docs/docsite: what antsibull-docs shows beside the plugin and role docs.

Every page extra-docs.yml names is an RST file of docs/docsite/rst with the label antsibull-docs
wants, and every user page the guides name exists (antsibull-docs lint-collection-docs checks the
rest).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCSITE = ROOT / "docs" / "docsite"


def test_extra_docs_name_rst_pages_with_their_labels():
    sections = yaml.safe_load((DOCSITE / "extra-docs.yml").read_text())["sections"]
    assert sections
    for section in sections:
        for page in section["toctree"]:
            rst = DOCSITE / "rst" / f"{page}.rst"
            assert rst.is_file(), page
            assert rst.read_text().startswith(f".. _ansible_collections.gpusplit.k8s.docsite.{page}:\n"), page


def test_the_guides_name_pages_that_exist():
    text = (DOCSITE / "rst" / "guides.rst").read_text()
    named = re.findall(r"``(docs/[\w.-]+\.md)``", text)
    assert "docs/quickstart.md" in named
    for page in named:
        assert (ROOT / page).is_file(), page


def test_links_is_a_mapping():
    assert isinstance(yaml.safe_load((DOCSITE / "links.yml").read_text()), dict)
