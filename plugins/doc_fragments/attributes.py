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
    support: full
  diff_mode:
    support: none
"""

    # edits a file or a stored document: check mode and diff
    CHECK_MODE_AND_DIFF = r"""
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""
