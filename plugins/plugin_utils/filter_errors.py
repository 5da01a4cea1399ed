# Copyright: gpusplit contributors
# Apache-2.0
"""One way for every gpusplit filter to turn a refusal into an AnsibleFilterError.

A refusal from module_utils is an exception with ``errors`` (a list of messages: the planner,
DRA, GPU Operator mode, host share, gang jobs) or a plain message. It becomes

    <title> refused:
    - <message 1>
    - <message 2>

so that a play stops with every reason at once. Every GpusplitError is caught (one the filter
file does not title is titled by the filter's name); nothing else is.
"""

from __future__ import annotations

import functools

from ansible.errors import AnsibleFilterError

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, refusal_text


def wrap(func, refusals=None):
    """``func`` raising AnsibleFilterError for the exception types in ``refusals`` ({type: title}).

    The first matching type (in the order given) names the refusal; a title of None uses the
    filter's own name as a playbook spells it (``gpusplit.k8s.<name>``). Any other
    :class:`GpusplitError` is caught last, under the filter's own name, so that no refusal
    reaches a play unformatted.
    """
    refusals = {**(refusals or {})}
    refusals.setdefault(GpusplitError, None)
    kinds = tuple(refusals)

    @functools.wraps(func)
    def run(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except kinds as exc:
            title = next(t for k, t in refusals.items() if isinstance(exc, k))
            raise AnsibleFilterError(refusal_text(title or f"gpusplit.k8s.{func.__name__}", exc)) from None

    return run


def filters(funcs, refusals=None):
    """{name: wrapped filter} for a FilterModule: each function's name is its filter's name."""
    return {f.__name__: wrap(f, refusals) for f in funcs}
