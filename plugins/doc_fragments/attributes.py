# Copyright: gpusplit contributors
# Apache-2.0
"""The attributes blocks gpusplit's modules share (use gpusplit.k8s.attributes.<name>)."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options: {}
"""

    # reads, or changes the cluster through its API: check mode, no diff
    CHECK_MODE_NO_DIFF = r"""
attributes:
  check_mode:
    description: In check mode the module changes nothing and reports what it would change.
    support: full
  diff_mode:
    description: The module returns no before/after diff.
    support: none
"""

    # edits a file or a stored document: check mode and diff
    CHECK_MODE_AND_DIFF = r"""
attributes:
  check_mode:
    description: In check mode the module changes nothing and reports what it would change.
    support: full
  diff_mode:
    description: In diff mode the module returns what it changes (or would change) as a before/after diff.
    support: full
"""

    # returns facts (ansible_facts)
    FACTS = r"""
attributes:
  facts:
    description: The module returns its results as facts of the host (C(ansible_facts)).
    support: full
"""
