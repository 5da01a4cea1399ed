# Copyright: gpusplit contributors
# Apache-2.0
"""The scheduler's own words taken apart: "0/N nodes are available: ..." and the gang messages.

Private to the collection.

Which class a message points at is the rule table's business (``classify.classify_message``);
here the text is only taken apart.
"""

from __future__ import annotations

import re

# the reasons end at the first full stop; PostFilter plugins' words follow it, joined by ", "
# ("no new claims to deallocate, preemption: ..." on 1.35 and 1.36, "preemption: ..." alone on 1.37)
_NODES_MSG = re.compile(r"^0/(\d+) nodes are available:\s*(.*?)(?:\.(?:\s+(.*))?)?\s*$", re.S)
_PREEMPTION = "preemption:"
_REASON_ITEM = re.compile(r"^(\d+) (.+)$")
_GANG_MSG = re.compile(
    r"minCount \((\d+)\) (cannot be|is not yet) satisfied: (\d+) scheduled, (\d+) remaining"
)
_GANG_WAIT = re.compile(r"waiting for (?:minCount pods from a gang|pods's pod group \"([^\"]*)\")")


def parse_message(message):
    """{total, reasons: {text: count}, preemption, post_filter} of "0/N nodes are available: ..."; None if not that shape.

    ``preemption`` is the preemption plugin's words (None where it said nothing), ``post_filter`` the other
    PostFilter plugins' messages in order.
    """
    if not message:
        return None
    m = _NODES_MSG.match(message.strip())
    if not m:
        return None
    reasons = {}
    for item in re.split(r", (?=\d+ )", m.group(2)):
        im = _REASON_ITEM.match(item.strip())
        if im:
            reasons[im.group(2).strip()] = reasons.get(im.group(2).strip(), 0) + int(im.group(1))
    post = (m.group(3) or "").strip()
    at = post.find(_PREEMPTION)
    preemption = post[at + len(_PREEMPTION) :].strip() if at >= 0 else None
    others = post[:at] if at >= 0 else post
    post_filter = [part.strip() for part in others.split(", ") if part.strip()]
    return {
        "total": int(m.group(1)),
        "reasons": reasons,
        "preemption": preemption,
        "post_filter": post_filter,
    }


def parse_gang_message(message):
    """The gang plugin's own wording, as a dict; None for other messages."""
    if not message:
        return None
    m = _GANG_MSG.search(message)
    if m:
        return {
            "min_count": int(m.group(1)),
            "final": m.group(2) == "cannot be",
            "scheduled": int(m.group(3)),
            "remaining": int(m.group(4)),
        }
    m = _GANG_WAIT.search(message)
    if m:
        return {"waiting_for": "group" if m.group(1) is not None else "quorum", "group": m.group(1)}
    return None
