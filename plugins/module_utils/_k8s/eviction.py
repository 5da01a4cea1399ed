# Copyright: gpusplit contributors
# Apache-2.0
"""Evicting pods through the Eviction API, PodDisruptionBudgets honoured. Private to the collection.

What the module pod_eviction does, in order (issue 17, policy ``evict``):

1. read every pod; one that is not there, or whose name now belongs to another uid, is already gone;
2. a server-side dry run (``dryRun=All``) of the policy/v1 Eviction of every other pod. The
   apiserver's eviction handler checks the pod's PodDisruptionBudget in a dry run as in a real
   eviction (kube-apiserver ``pkg/registry/core/pod/storage/eviction.go``: ``checkAndDecrement``
   returns 429 TooManyRequests before it looks at ``dryRun``; checked in the lab,
   tests/integration/test_pod_eviction_lab.py). When one is refused nothing is evicted: the
   refusal names each blocked pod, the PodDisruptionBudgets that select it and the apiserver's words;
3. the evictions, each with the pod's uid as a precondition (a pod replaced in between is not
   touched). Each dry run was alone: two pods under one budget that allows one disruption both pass
   it, and the second real eviction gets 429 until the first pod is gone and its replacement is
   ready. A 429 is retried every ``delay`` seconds until ``wait_timeout`` (as ``kubectl drain`` does);
4. waiting until every evicted pod is gone: deleted, or replaced by a pod of the same name and
   another uid.

Pure part (no I/O): the module's input (:func:`checked_request`), label selectors and the budgets
that select a pod (:func:`label_selector_matches`, :func:`budgets_selecting`), what the apiserver
answered (:func:`answer_from_error`), whether a pod is gone (:func:`gone_reason`) and the messages.
I/O part: :class:`PodApi` (three kinds of request: read a pod, create an Eviction, list the
PodDisruptionBudgets of a namespace) and :func:`run`, which takes the API, the clock and ``sleep``
as arguments so that unit tests drive it with fakes.
"""

from __future__ import annotations

import json
import time

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import (
    MAX_SECONDS,
    GpusplitError,
    check_number,
    type_name,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import api_client, list_json
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import requirement_matches

DEFAULT_WAIT_TIMEOUT = 300
DEFAULT_DELAY = 2.0
# metav1.LabelSelector's operators (Gt and Lt belong to node selectors only)
LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
# keys of an entry of ``pods`` that this module reads; others (owner, node, gpus of a plan) are ignored
POD_KEYS = ("namespace", "name", "uid")


class EvictionError(GpusplitError):
    """Bad input (before any request), a blocked eviction, or pods that did not go in time."""


# --------------------------------------------------------------------------------------------
# input


def _got(value):
    """``got <type>``, or ``got an empty string``."""
    if isinstance(value, str) and not value.strip():
        return "got an empty string"
    return f"got {type_name(value)}"


def _seconds_problem(field, value, allow_zero):
    """What is wrong with a number of seconds (None when nothing is): a finite number up to a day, >= 0
    (a whole number: wait_timeout) or above 0 (delay) unless ``allow_zero``."""
    try:
        check_number(value, field, 0, MAX_SECONDS, integer=allow_zero, above=not allow_zero, unit="seconds")
    except GpusplitError as exc:
        return str(exc)
    return None


def pod_entry_problems(pos, entry):
    """What is wrong with ``pods[pos]`` ([] when nothing is): a mapping with non-empty string
    ``namespace`` and ``name``, and ``uid`` a non-empty string when given."""
    if not isinstance(entry, dict):
        return [f"pods[{pos}]: expected a mapping with namespace, name and optionally uid, {_got(entry)}"]
    problems = []
    for key in ("namespace", "name"):
        value = entry.get(key)
        if value is None:
            problems.append(f"pods[{pos}].{key} is missing")
        elif not isinstance(value, str) or not value.strip():
            problems.append(f"pods[{pos}].{key}: expected a non-empty string, {_got(value)}")
    uid = entry.get("uid")
    if uid is not None and (not isinstance(uid, str) or not uid.strip()):
        problems.append(f"pods[{pos}].uid: expected a non-empty string (or no uid), {_got(uid)}")
    return problems


def checked_request(pods, wait_timeout=DEFAULT_WAIT_TIMEOUT, delay=DEFAULT_DELAY):
    """``{"pods": [{namespace, name, uid}], "wait_timeout", "delay"}`` from the module's options.

    Refused (EvictionError, every reason at once) before any request: ``pods`` not a list, an
    entry not a mapping or without a namespace or name, a uid that is not a string, a pod named
    twice with two different uids, a negative ``wait_timeout``, a ``delay`` that is not above 0.
    The same pod twice (the same uid, or no uid) is kept once; keys other than namespace, name and
    uid are ignored, so that the pod entries of a plan can be passed as they are.
    """
    problems = []
    if not isinstance(pods, (list, tuple)):
        problems.append(f"pods: expected a list of pods ({{namespace, name, uid}}), {_got(pods)}")
        pods = []
    refs, seen = [], {}
    for pos, entry in enumerate(pods):
        found = pod_entry_problems(pos, entry)
        if found:
            problems.extend(found)
            continue
        ref = {
            "namespace": entry["namespace"].strip(),
            "name": entry["name"].strip(),
            "uid": entry.get("uid"),
        }
        key = (ref["namespace"], ref["name"])
        if key in seen:
            first_pos, first = seen[key]
            if first["uid"] and ref["uid"] and first["uid"] != ref["uid"]:
                problems.append(
                    f"pods[{pos}] {pod_text(ref)} has uid {ref['uid']}, pods[{first_pos}] names the same pod with uid {first['uid']}"
                )
            elif ref["uid"] and not first["uid"]:
                first["uid"] = ref["uid"]
            continue
        seen[key] = (pos, ref)
        refs.append(ref)
    for field, value, allow_zero in (("wait_timeout", wait_timeout, True), ("delay", delay, False)):
        problem = _seconds_problem(field, value, allow_zero)
        if problem:
            problems.append(problem)
    if problems:
        raise EvictionError(problems)
    return {"pods": refs, "wait_timeout": wait_timeout, "delay": delay}


# --------------------------------------------------------------------------------------------
# PodDisruptionBudgets


def label_selector_matches(selector, labels):
    """A metav1.LabelSelector against a label map, as ``LabelSelectorAsSelector`` reads it.

    None (no selector) matches nothing, an empty selector ``{}`` matches everything; matchLabels and
    matchExpressions are ANDed. A selector the apiserver could not turn into one (an unknown
    operator, In/NotIn without values, Exists/DoesNotExist with values) matches nothing, as in
    the eviction handler, which skips such a budget.
    """
    if not isinstance(selector, dict):
        return False
    labels = labels if isinstance(labels, dict) else {}
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not isinstance(match_labels, dict) or not isinstance(expressions, list):
        return False
    for key, value in match_labels.items():
        if key not in labels or labels[key] != value:
            return False
    for expr in expressions:
        if not isinstance(expr, dict) or expr.get("operator") not in LABEL_SELECTOR_OPERATORS:
            return False
        values = expr.get("values") or []
        if (expr["operator"] in ("In", "NotIn")) != bool(values):
            return False
        if not requirement_matches(expr, labels):
            return False
    return True


def budget_summary(pdb):
    """What a PodDisruptionBudget allows: name, maxUnavailable, minAvailable and its status numbers."""
    meta, spec, status = (pdb.get(k) or {} for k in ("metadata", "spec", "status"))
    return {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "max_unavailable": spec.get("maxUnavailable"),
        "min_available": spec.get("minAvailable"),
        "disruptions_allowed": status.get("disruptionsAllowed"),
        "current_healthy": status.get("currentHealthy"),
        "desired_healthy": status.get("desiredHealthy"),
        "expected_pods": status.get("expectedPods"),
        "processed": status.get("observedGeneration", 0) >= meta.get("generation", 0),
    }


def budgets_selecting(pod, pdbs):
    """The summaries (:func:`budget_summary`) of the budgets in ``pdbs`` that select ``pod``: same
    namespace, selector matching the pod's labels. Sorted by name."""
    meta = pod.get("metadata") or {}
    found = []
    for pdb in pdbs:
        pdb_meta = pdb.get("metadata") or {}
        if pdb_meta.get("namespace") not in (None, meta.get("namespace")):
            continue
        if label_selector_matches((pdb.get("spec") or {}).get("selector"), meta.get("labels") or {}):
            found.append(budget_summary(pdb))
    return sorted(found, key=lambda b: str(b["name"]))


def budget_text(summary):
    """``PodDisruptionBudget ns/name (maxUnavailable 0, disruptionsAllowed 0, currentHealthy 1, desiredHealthy 0)``."""
    parts = []
    for key, label in (("max_unavailable", "maxUnavailable"), ("min_available", "minAvailable")):
        if summary.get(key) is not None:
            parts.append(f"{label} {summary[key]}")
    parts.append(f"disruptionsAllowed {summary.get('disruptions_allowed', 0) or 0}")
    for key, label in (("current_healthy", "currentHealthy"), ("desired_healthy", "desiredHealthy")):
        if summary.get(key) is not None:
            parts.append(f"{label} {summary[key]}")
    if not summary.get("processed", True):
        parts.append("not yet processed by the disruption controller")
    return f"PodDisruptionBudget {summary.get('namespace')}/{summary.get('name')} ({', '.join(parts)})"


def shared_budget_warnings(pods, pdbs_by_namespace):
    """Budgets that select more of ``pods`` than they allow disruptions now, one warning each.

    Each dry run checks one pod alone; such a budget makes the later real evictions wait for it.
    ``pods`` are live pod objects (with labels).
    """
    counts = {}
    for pod in pods:
        ns = (pod.get("metadata") or {}).get("namespace")
        for summary in budgets_selecting(pod, pdbs_by_namespace.get(ns) or []):
            key = (summary["namespace"], summary["name"])
            counts.setdefault(key, [summary, []])[1].append(pod_text(pod_ref(pod)))
    warnings = []
    for (_ns, _name), (summary, names) in sorted(counts.items()):
        allowed = summary.get("disruptions_allowed") or 0
        if len(names) > allowed:
            warnings.append(
                f"{budget_text(summary)} selects {len(names)} of the pods to evict ({', '.join(names)}) and allows "
                f"{allowed} disruption(s) now: each dry run passed alone, the later evictions wait until the "
                "budget allows them (retried every delay seconds, up to wait_timeout)"
            )
    return warnings


# --------------------------------------------------------------------------------------------
# pods and answers


def pod_ref(pod):
    """``{namespace, name, uid, node}`` of a live pod."""
    meta = pod.get("metadata") or {}
    return {
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "node": (pod.get("spec") or {}).get("nodeName"),
    }


def pod_text(ref):
    """``namespace/name``."""
    return f"{ref.get('namespace')}/{ref.get('name')}"


def gone_reason(ref, pod):
    """Why the pod ``ref`` names counts as gone, given what a read of its name returned (None when
    not found); None while it is still there. A pod of the same name and another uid is a
    replacement: the pod asked for is gone."""
    if pod is None:
        return "not found"
    uid = (pod.get("metadata") or {}).get("uid")
    if ref.get("uid") and uid and uid != ref["uid"]:
        return f"replaced: the pod of that name now has uid {uid}"
    return None


def still_there_text(ref, pod, waited):
    """Why a pod that should be gone is not, for the timeout's message."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    deleting = meta.get("deletionTimestamp")
    grace = meta.get("deletionGracePeriodSeconds")
    how = f"being deleted since {deleting}" if deleting else "not being deleted"
    if deleting and grace is not None:
        how += f" (grace period {grace} s)"
    node = (pod.get("spec") or {}).get("nodeName")
    where = f" on node {node}" if node else ""
    return (
        f"pod {pod_text(ref)} (uid {meta.get('uid')}){where} is still there after {waited} s: "
        f"phase {status.get('phase') or 'unknown'}, {how}"
    )


# the cause the apiserver gives when it refuses new content in a namespace being deleted
# (k8s.io/api core/v1 NamespaceTerminatingCause)
NAMESPACE_TERMINATING = "NamespaceTerminating"


def answer_from_error(status, reason, body):
    """What an error answer to an Eviction means: ``{"outcome", "status", "reason", "message"}``.

    ``outcome`` is ``gone`` for 404 (the pod is not there) and for 409 of the uid precondition (the
    name belongs to another pod now), ``terminating`` for 403 because the pod's namespace is being
    deleted (the apiserver's NamespaceLifecycle admission refuses any new object there, an Eviction
    too, and the namespace's deletion removes the pod anyway), else ``refused``; ``message`` is the
    apiserver's message followed by the causes it gives (for a budget: which one, and why).
    """
    parsed = {}
    if isinstance(body, (bytes, bytearray)):
        body = body.decode("utf-8", errors="replace")
    if isinstance(body, str) and body.strip():
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = {"message": body.strip()}
    if not isinstance(parsed, dict):
        parsed = {}
    message = str(parsed.get("message") or reason or "").strip()
    given = [c for c in ((parsed.get("details") or {}).get("causes") or []) if isinstance(c, dict)]
    causes = [str(c.get("message")).strip() for c in given if c.get("message")]
    if causes:
        message = f"{message} ({'; '.join(causes)})" if message else "; ".join(causes)
    answer = {"status": status, "reason": str(parsed.get("reason") or reason or ""), "message": message}
    if status == 404:
        return dict(answer, outcome="gone", why="not found")
    if status == 409 and "precondition" in message.lower():
        return dict(answer, outcome="gone", why=f"replaced: {message}")
    if status == 403 and (
        any(c.get("reason") == NAMESPACE_TERMINATING for c in given)
        or "because it is being terminated" in message
    ):
        return dict(answer, outcome="terminating")
    return dict(answer, outcome="refused")


def refused_text(entry):
    """One blocked pod: what the apiserver said and which budgets select it."""
    node = f" on node {entry['node']}" if entry.get("node") else ""
    text = (
        f"pod {pod_text(entry)}{node}: the eviction is refused (HTTP {entry.get('status')} "
        f"{entry.get('reason') or ''}".rstrip()
        + f"): {entry.get('message') or '(no message)'}"
    )
    pdbs = entry.get("pdbs")
    if pdbs:
        text += "; selected by " + ", ".join(budget_text(b) for b in pdbs)
    elif pdbs is not None:
        text += f"; no PodDisruptionBudget in namespace {entry.get('namespace')} selects it"
    return text


def new_result():
    """The module's result before anything happened; :func:`run` fills it in as it goes."""
    return {
        "changed": False,
        "evicted": [],
        "would_evict": [],
        "already_gone": [],
        "terminating": [],
        "blocked": [],
        "waited_seconds": 0,
        "warnings": [],
    }


# --------------------------------------------------------------------------------------------
# I/O


class PodApi:
    """The requests: read a pod, create an Eviction (policy/v1), list PodDisruptionBudgets.

    Answers are plain dicts (the API's JSON). An Eviction's error answer comes back as
    :func:`answer_from_error` says; other errors (connection, TLS, a kubeconfig) propagate.
    """

    def __init__(self, kubeconfig=None, context=None):
        from kubernetes import client  # guarded: only the module's run reaches here

        api = api_client({"kubeconfig": kubeconfig, "context": context})
        self.core = client.CoreV1Api(api)
        self.policy = client.PolicyV1Api(api)
        self.api_exception = client.exceptions.ApiException

    def read_pod(self, namespace, name):
        """The pod as a dict, None when it is not there."""
        try:
            answer = self.core.read_namespaced_pod(name, namespace, _preload_content=False)
        except self.api_exception as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(answer.data)

    def evict(self, ref, dry_run):
        """Create the Eviction of the pod ``ref`` (its uid a precondition); an answer dict."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": ref["name"], "namespace": ref["namespace"]},
            "deleteOptions": {"preconditions": {"uid": ref["uid"]}} if ref.get("uid") else {},
        }
        kwargs = {"dry_run": "All"} if dry_run else {}
        try:
            answer = self.core.create_namespaced_pod_eviction(
                ref["name"], ref["namespace"], body, _preload_content=False, **kwargs
            )
        except self.api_exception as exc:
            return answer_from_error(exc.status, exc.reason, exc.body)
        return {"outcome": "ok", "status": answer.status, "reason": "", "message": ""}

    def list_pdbs(self, namespace):
        """The PodDisruptionBudgets of a namespace, as dicts."""
        return list_json(self.policy.list_namespaced_pod_disruption_budget, namespace)


def _pdbs_by_namespace(api, namespaces):
    return {ns: api.list_pdbs(ns) for ns in sorted(set(namespaces))}


def _with_budgets(api, entries, live):
    """``entries`` (blocked pods) with ``pdbs``: the budgets that select each."""
    pdbs = _pdbs_by_namespace(api, [e["namespace"] for e in entries])
    for entry in entries:
        key = (entry["namespace"], entry["name"])
        entry["pdbs"] = budgets_selecting(live[key], pdbs[entry["namespace"]])
    return entries


def _public(entry):
    return {k: entry[k] for k in ("namespace", "name", "uid", "node") if k in entry}


def run(api, request, check_mode, result, clock=time.monotonic, sleep=time.sleep):
    """Evict ``request["pods"]`` (from :func:`checked_request`), filling in ``result`` (:func:`new_result`)
    as it goes, so that a caller that gets an exception still has what happened so far.

    Raises EvictionError when a dry run is refused (nothing evicted), when a real eviction is still
    refused at the deadline, or when evicted pods are still there at the deadline. Errors of the
    requests themselves (connection, an unexpected answer to a read) propagate.
    """
    live, candidates = {}, []
    for ref in request["pods"]:
        pod = api.read_pod(ref["namespace"], ref["name"])
        why = gone_reason(ref, pod)
        if why:
            result["already_gone"].append(dict(ref, why=why))
            continue
        entry = pod_ref(pod)
        live[(entry["namespace"], entry["name"])] = pod
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            result["terminating"].append(entry)
        else:
            candidates.append(entry)

    blocked = []
    for entry in candidates:
        answer = api.evict(entry, dry_run=True)
        if answer["outcome"] == "ok":
            result["would_evict"].append(entry)
        elif answer["outcome"] == "gone":
            result["already_gone"].append(dict(entry, why=answer["why"]))
        elif answer["outcome"] == "terminating":
            result["terminating"].append(entry)
        else:
            blocked.append(
                dict(entry, status=answer["status"], reason=answer["reason"], message=answer["message"])
            )
    if blocked:
        result["blocked"] = _with_budgets(api, blocked, live)
        total = len(candidates)
        raise EvictionError(
            [
                f"nothing was evicted: the apiserver refuses the eviction of {len(blocked)} of the {total} "
                "pod(s) still there (server-side dry run of each eviction)"
            ]
            + [refused_text(e) for e in result["blocked"]]
        )
    if result["would_evict"]:
        pods = [live[(e["namespace"], e["name"])] for e in result["would_evict"]]
        budgets = _pdbs_by_namespace(api, [e["namespace"] for e in result["would_evict"]])
        result["warnings"].extend(shared_budget_warnings(pods, budgets))
    if check_mode:
        return result

    start = clock()
    deadline = start + request["wait_timeout"]
    pending = list(result["would_evict"])
    while pending:
        waiting = []
        for entry in pending:
            answer = api.evict(entry, dry_run=False)
            if answer["outcome"] == "ok":
                result["evicted"].append(entry)
                result["changed"] = True
            elif answer["outcome"] == "gone":
                result["already_gone"].append(dict(entry, why=answer["why"]))
            elif answer["outcome"] == "terminating":
                result["terminating"].append(entry)
            elif answer["status"] == 429:
                waiting.append(
                    dict(entry, status=answer["status"], reason=answer["reason"], message=answer["message"])
                )
            else:
                refused = dict(
                    entry, status=answer["status"], reason=answer["reason"], message=answer["message"]
                )
                result["blocked"] = _with_budgets(api, [refused], live)
                raise EvictionError(_stopped_refusal(result, refused_text(result["blocked"][0])))
        pending = waiting
        result["waited_seconds"] = int(round(clock() - start))
        if pending and clock() >= deadline:
            result["blocked"] = _with_budgets(api, pending, live)
            raise EvictionError(
                _stopped_refusal(
                    result,
                    f"{len(pending)} eviction(s) still refused after {result['waited_seconds']} s (wait_timeout)",
                )
                + [refused_text(e) for e in result["blocked"]]
            )
        if pending:
            sleep(request["delay"])

    waiting = [_public(e) for e in result["evicted"] + result["terminating"]]
    total = len(waiting)
    while True:
        still = []
        for ref in waiting:
            pod = api.read_pod(ref["namespace"], ref["name"])
            if gone_reason(ref, pod) is None:
                still.append((ref, pod))
        result["waited_seconds"] = int(round(clock() - start))
        if not still:
            return result
        if clock() >= deadline:
            raise EvictionError(
                [
                    f"{len(still)} of the {total} evicted or terminating pod(s) are still there after "
                    f"{result['waited_seconds']} s (wait_timeout {request['wait_timeout']} s)"
                ]
                + [still_there_text(ref, pod, result["waited_seconds"]) for ref, pod in still]
            )
        waiting = [ref for ref, _pod in still]
        sleep(request["delay"])


def _stopped_refusal(result, why):
    done = ", ".join(pod_text(e) for e in result["evicted"]) or "none"
    return [f"the evictions stopped: {why}; evicted before that: {done}"]
