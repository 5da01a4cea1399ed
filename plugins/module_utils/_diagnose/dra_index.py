# Copyright: gpusplit contributors
# Apache-2.0
"""DRA for the diagnosis: published devices, their taints, whether a claim fits a node.

Private to the collection.

Built from ResourceSlices, DeviceTaintRules, DeviceClasses, ResourceClaims and their templates
(resource.k8s.io/v1). Knows nothing of Pending classes: :func:`claim_on_node` says whether a
claim is blocked on a node by device taints (``TAINTED``) or by the lack of a free matching
device (``UNAVAILABLE``); the rule table turns that into a class.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.cel import (
    CelUnsupported,
    cel_matches,
    device_view,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import (
    BLOCKING_EFFECTS,
    key_and_effect_match,
    meta_of,
    node_selector_matches,
    pod_key,
    spec_of,
    status_of,
    taint_text,
    toleration_for,
)

# why a claim cannot be allocated on a node
TAINTED = "tainted"  # enough matching devices, but too few of them untainted for the request
UNAVAILABLE = "unavailable"  # no (free, reachable, matching) device, or no claim at all


def _device_taint_rule_matches(rule, driver, pool, device_name):
    selector = spec_of(rule).get("deviceSelector")
    if selector is None:
        return False  # without a selector a rule selects nothing
    return (
        (not selector.get("driver") or selector["driver"] == driver)
        and (not selector.get("pool") or selector["pool"] == pool)
        and (not selector.get("device") or selector["device"] == device_name)
    )


def device_tolerates(toleration, taint):
    """Whether one DeviceToleration (Equal or Exists) matches one device taint."""
    if not key_and_effect_match(toleration, taint):
        return False
    if (toleration.get("operator") or "Equal") == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


class DraIndex:
    """Every published device with its node access and taints, and what is already allocated."""

    def __init__(self, resource):
        resource = resource or {}
        self.classes = {meta_of(c).get("name"): c for c in resource.get("classes") or []}
        self.claims = {
            (meta_of(c).get("namespace"), meta_of(c).get("name")): c for c in resource.get("claims") or []
        }
        self.templates = {
            (meta_of(t).get("namespace"), meta_of(t).get("name")): t for t in resource.get("templates") or []
        }
        self.rules = list(resource.get("rules") or [])
        self.devices = []
        for s in resource.get("slices") or []:
            spec = spec_of(s)
            driver = spec.get("driver")
            pool = (spec.get("pool") or {}).get("name")
            for d in spec.get("devices") or []:
                taints = [
                    dict(t, source=f"ResourceSlice {meta_of(s).get('name')}") for t in d.get("taints") or []
                ]
                for r in self.rules:
                    if _device_taint_rule_matches(r, driver, pool, d.get("name")):
                        taint = dict(spec_of(r).get("taint") or {})
                        taints.append(dict(taint, source=f"DeviceTaintRule {meta_of(r).get('name')}"))
                self.devices.append(
                    {
                        "driver": driver,
                        "pool": pool,
                        "name": d.get("name"),
                        "slice": meta_of(s).get("name"),
                        "access": self._access(spec, d),
                        "taints": taints,
                        "view": device_view(driver, d),
                    }
                )
        self.allocated = {}
        for c in resource.get("claims") or []:
            alloc = (status_of(c).get("allocation") or {}).get("devices") or {}
            for r in alloc.get("results") or []:
                self.allocated[(r.get("driver"), r.get("pool"), r.get("device"))] = pod_key(c)

    @staticmethod
    def _access(slice_spec, device):
        if slice_spec.get("perDeviceNodeSelection"):
            src = device
        else:
            src = slice_spec
        if src.get("nodeName"):
            return ("name", src["nodeName"])
        if src.get("allNodes"):
            return ("all", None)
        if src.get("nodeSelector"):
            return ("selector", src["nodeSelector"])
        return ("none", None)

    @staticmethod
    def reachable(device, node):
        kind, value = device["access"]
        if kind == "name":
            return value == meta_of(node).get("name")
        if kind == "all":
            return True
        if kind == "selector":
            return node_selector_matches(value, node)
        return False

    def pod_claims(self, pod):
        """[(pod claim name, claim spec or None, claim object or None, where)] for the pod."""
        ns = meta_of(pod).get("namespace") or "default"
        generated = {
            s.get("name"): s.get("resourceClaimName")
            for s in status_of(pod).get("resourceClaimStatuses") or []
        }
        out = []
        for ref in spec_of(pod).get("resourceClaims") or []:
            name = ref.get("name")
            claim_name = ref.get("resourceClaimName") or generated.get(name)
            if claim_name:
                claim = self.claims.get((ns, claim_name))
                out.append(
                    (name, spec_of(claim) if claim else None, claim, f"ResourceClaim {ns}/{claim_name}")
                )
            elif ref.get("resourceClaimTemplateName"):
                tmpl = self.templates.get((ns, ref["resourceClaimTemplateName"]))
                spec = spec_of(spec_of(tmpl)) if tmpl else None
                out.append(
                    (name, spec, None, f"ResourceClaimTemplate {ns}/{ref['resourceClaimTemplateName']}")
                )
            else:
                out.append((name, None, None, "(no claim named)"))
        return out

    def request_variants(self, request):
        """The alternatives of one claim request: [exactly] or its firstAvailable subrequests."""
        if request.get("exactly"):
            return [dict(request["exactly"], name=request.get("name"))]
        return [
            dict(s, name=f"{request.get('name')}/{s.get('name')}")
            for s in request.get("firstAvailable") or []
        ]

    def selected(self, variant):
        """(devices matching class + request selectors, [unevaluated selector texts])."""
        cls = self.classes.get(variant.get("deviceClassName"))
        exprs = [
            (sel.get("cel") or {}).get("expression")
            for sel in ((spec_of(cls).get("selectors") or []) if cls else [])
            + (variant.get("selectors") or [])
        ]
        exprs = [e for e in exprs if e]
        unevaluated = []
        out = []
        for dev in self.devices:
            ok = True
            for expr in exprs:
                try:
                    if not cel_matches(expr, dev["view"]):
                        ok = False
                        break
                except CelUnsupported:
                    if expr not in unevaluated:
                        unevaluated.append(expr)
            if ok:
                out.append(dev)
        return out, unevaluated

    def evaluate_variant(self, variant, node, own_claim_key):
        """{matching, untainted, free, needed, taints, unevaluated} of one request variant on one node."""
        devices, unevaluated = self.selected(variant)
        devices = [d for d in devices if self.reachable(d, node)]
        tolerations = variant.get("tolerations") or []
        untainted, taint_hits = [], []
        for d in devices:
            blocking = [
                t
                for t in d["taints"]
                if t.get("effect") in BLOCKING_EFFECTS
                and not any(device_tolerates(x, t) for x in tolerations)
            ]
            if blocking:
                taint_hits.append((d, blocking))
            else:
                untainted.append(d)
        free = [
            d
            for d in untainted
            if self.allocated.get((d["driver"], d["pool"], d["name"])) in (None, own_claim_key)
        ]
        if variant.get("allocationMode") == "All":
            needed = max(1, len(devices))
            ok = bool(devices) and len(free) == len(devices)
        else:
            needed = int(variant.get("count") or 1)
            ok = len(free) >= needed
        return {
            "ok": ok,
            "needed": needed,
            "matching": len(devices),
            "untainted": len(untainted),
            "free": len(free),
            "taints": taint_hits,
            "unevaluated": unevaluated,
        }


def claim_on_node(dra, claim_name, claim_spec, claim_obj, node):
    """(TAINTED, UNAVAILABLE or None, details) for one claim of the pod on one node."""
    if claim_obj is not None and (status_of(claim_obj).get("allocation")):
        alloc_nodes = (status_of(claim_obj)["allocation"]).get("nodeSelector")
        if alloc_nodes and not node_selector_matches(alloc_nodes, node):
            return UNAVAILABLE, {"claim": claim_name, "why": "the claim is allocated on another node"}
        return None, {"claim": claim_name, "why": "already allocated"}
    if claim_spec is None:
        return UNAVAILABLE, {"claim": claim_name, "why": "the claim does not exist (yet)"}
    own = pod_key(claim_obj) if claim_obj else None
    worst = None
    for request in (claim_spec.get("devices") or {}).get("requests") or []:
        results = [(v, dra.evaluate_variant(v, node, own)) for v in dra.request_variants(request)]
        if any(r["ok"] for _unused, r in results):
            continue
        variant, res = results[0] if results else ({"name": request.get("name")}, None)
        if res is None:
            return UNAVAILABLE, {
                "claim": claim_name,
                "request": request.get("name"),
                "why": "empty request",
            }
        detail = {
            "claim": claim_name,
            "request": variant.get("name"),
            "device_class": variant.get("deviceClassName"),
            "needed": res["needed"],
            "matching": res["matching"],
            "untainted": res["untainted"],
            "free": res["free"],
            "unevaluated_selectors": res["unevaluated"],
        }
        if res["matching"] >= res["needed"] and res["untainted"] < res["needed"]:
            taints = []
            for dev, blocking in res["taints"]:
                for t in blocking:
                    taints.append(
                        {
                            "device": f"{dev['driver']}/{dev['pool']}/{dev['name']}",
                            "taint": taint_text(t),
                            "source": t.get("source"),
                            "toleration": toleration_for(t),
                        }
                    )
            detail["device_taints"] = taints
            return TAINTED, detail
        if res["matching"] == 0:
            detail["why"] = "no published device matches the class and selectors on this node"
        elif res["untainted"] >= res["needed"]:
            detail["why"] = f"{res['untainted'] - res['free']} matching device(s) already allocated"
        else:
            detail["why"] = f"{res['matching']} matching device(s), {res['needed']} needed"
        worst = worst or (UNAVAILABLE, detail)
    return worst or (None, {"claim": claim_name})
