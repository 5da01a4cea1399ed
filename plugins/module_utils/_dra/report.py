# Copyright: gpusplit contributors
# Apache-2.0
"""The controller's report on a DeviceTaintRule: its EvictionInProgress condition. Private to the collection.

kube-controller-manager writes, once per generation of a rule, how many published and allocated
devices it selects and how many pods it would evict (or is evicting). These parse that
condition (``parse_eviction_message``, ``rule_report``) and say when it is current
(``rule_settled``). Standard library only: the module device_taint_rule uses them.
"""

from __future__ import annotations

import re

CONDITION_TYPE = "EvictionInProgress"

_MESSAGE_PATTERNS = {
    "published_devices": re.compile(r"(\d+) published devices? selected"),
    "allocated_devices": re.compile(r"(\d+) allocated devices? selected"),
    "pods_would_be_evicted": re.compile(r"(\d+) pods? would be evicted in"),
    "pods_pending_eviction": re.compile(r"(\d+) pods? needs? to be evicted in"),
    "namespaces": re.compile(r"evicted in (\d+) (?:different )?namespaces?"),
    "pods_evicted": re.compile(r"(\d+) pods? evicted since starting the controller"),
}


def parse_eviction_message(message):
    """The numbers in an EvictionInProgress message; absent numbers are None.

    e.g. "3 published devices selected. 1 allocated device selected. 1 pod would be evicted in
    1 namespace if the effect was NoExecute. ..." -> published_devices 3, allocated_devices 1,
    pods_would_be_evicted 1, namespaces 1.
    """
    out = {k: None for k in _MESSAGE_PATTERNS}
    text = message or ""
    for key, pattern in _MESSAGE_PATTERNS.items():
        match = pattern.search(text)
        if match:
            out[key] = int(match.group(1))
    out["final"] = "will not be updated again" in text
    return out


_IMPACT_KEYS = (
    "published_devices",
    "allocated_devices",
    "pods_would_be_evicted",
    "pods_pending_eviction",
    "namespaces",
    "pods_evicted",
)


def impact_summary(impact):
    """``published_devices=1 allocated_devices=1 ...``: the numbers the message gave, one line."""
    parts = [f"{key}={impact[key]}" for key in _IMPACT_KEYS if (impact or {}).get(key) is not None]
    return " ".join(parts) or "no numbers in the message"


def eviction_condition(rule):
    """The rule's EvictionInProgress condition, or None."""
    for cond in ((rule or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == CONDITION_TYPE:
            return cond
    return None


def rule_report(rule):
    """{name, effect, current, status, reason, message, since, impact} of a live rule.

    ``current``: the condition was written for the rule's present generation (the controller
    computes it once per generation; an older one describes an earlier effect).
    """
    rule = rule or {}
    meta = rule.get("metadata") or {}
    cond = eviction_condition(rule) or {}
    impact = parse_eviction_message(cond.get("message"))
    return {
        "name": meta.get("name"),
        "effect": ((rule.get("spec") or {}).get("taint") or {}).get("effect"),
        "device": (rule.get("spec") or {}).get("deviceSelector"),
        "current": bool(cond) and cond.get("observedGeneration") == meta.get("generation"),
        "status": cond.get("status"),
        "reason": cond.get("reason"),
        "message": cond.get("message"),
        "since": cond.get("lastTransitionTime"),
        "impact": impact,
        "summary": impact_summary(impact),
    }


def rule_settled(rule, wait_eviction=False):
    """True when the controller has reported on this generation (and, if asked, evicted)."""
    report = rule_report(rule)
    if not report["current"]:
        return False
    if wait_eviction and report["effect"] == "NoExecute":
        return report["status"] == "False"
    return True
