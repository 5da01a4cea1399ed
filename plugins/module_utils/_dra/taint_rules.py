# Copyright: gpusplit contributors
# Apache-2.0
"""DeviceTaintRules created, changed or removed, many in one step, with the controller's report on each.
Private to the collection.

The module ``device_taint_rule`` is thin over this file. It takes one rule (``definition`` or ``name``) or
many (``definitions``). Every rule is checked before the first request. The rules are then worked on
together, phase by phase, so that the waits for kube-controller-manager overlap:

1. ``report_first``: each missing rule whose effect is not ``None`` is created with effect ``None``,
   then the controller's report is awaited for all of them at once;
2. each rule is applied as asked (or recreated with ``refresh``, or deleted with ``state=absent``);
3. the reports on the rules' present generations (and, with ``wait_eviction``, the end of the
   eviction) are awaited for all of them at once.

The I/O goes through ``api`` (``get(name)``, ``apply(definition, field_manager, dry_run)``,
``delete(rule, dry_run)``); the clock through ``clock`` (``now()``, ``sleep(seconds)``), so that the
unit tests drive both. A rule the controller does not report on in time fails the step with
:class:`RuleWaitError`, which names every such rule and carries what was changed already.
"""

from __future__ import annotations

import copy
import time

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import (
    API_GROUP_VERSION,
    EFFECTS,
    DraError,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.report import rule_report, rule_settled
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import (
    MAX_SECONDS,
    GpusplitError,
    check_number,
    type_name,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.compare import is_subset

KIND = "DeviceTaintRule"
# the group/versions of one DeviceTaintRule shape that a rule may be given in (k8s.io/api resource/v1 and
# v1beta2 types.go: the same DeviceTaintRuleSpec); the module writes it in the one the cluster serves
# (module_utils/_control_plane/api_versions.py APIS["device_taint_rule"] lists the same)
WRITTEN_VERSIONS = (API_GROUP_VERSION, "resource.k8s.io/v1beta2")
POLL_SECONDS = 1.0
GONE_POLL_SECONDS = 0.5


class RuleWaitError(GpusplitError):
    """The controller did not report (or a deleted rule did not go) in time, after a change; ``result`` is
    what the module fails with (``msg``, ``changed``, ``rules``: what was changed already)."""

    def __init__(self, msg, **result):
        super().__init__(msg)
        self.result = {"msg": msg, **result}


class Clock:
    now = staticmethod(time.time)
    sleep = staticmethod(time.sleep)


def _not_a(field, value, what="a mapping"):
    return f"{field}: expected {what}, got {type_name(value)}"


def _metadata_name(definition, where):
    metadata = definition.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise DraError(_not_a(f"{where}.metadata", metadata))
    name = metadata.get("name")
    if name is not None and not isinstance(name, str):
        raise DraError(_not_a(f"{where}.metadata.name", name, "a string"))
    return name


def _definition_problems(definition, where):
    problems = []
    if definition.get("apiVersion") not in WRITTEN_VERSIONS or definition.get("kind") != KIND:
        problems.append(f"{where} must be a {' or '.join(WRITTEN_VERSIONS)} {KIND}")
    spec = definition.get("spec") or {}
    taint = (spec.get("taint") or {}) if isinstance(spec, dict) else {}
    if not isinstance(spec, dict):
        problems.append(_not_a(f"{where}.spec", spec))
    elif not isinstance(taint, dict):
        problems.append(_not_a(f"{where}.spec.taint", taint))
    elif taint.get("effect") not in EFFECTS:
        problems.append(f"spec.taint.effect {taint.get('effect')!r} is not one of {', '.join(EFFECTS)}")
    return problems


def _checked_one(definition, name, state, where):
    if definition is not None and not isinstance(definition, dict):
        raise DraError(_not_a(where, definition))
    name = name or _metadata_name(definition or {}, where)
    if not name:
        raise DraError("give name, or a definition with metadata.name")
    if state == "absent":
        return name, None
    if not definition:
        raise DraError("state=present needs a definition")
    definition = dict(definition)
    definition["metadata"] = dict(definition.get("metadata") or {}, name=name)
    problems = _definition_problems(definition, where)
    if problems:
        raise DraError("nothing was applied: " + "; ".join(problems))
    return name, definition


def checked(params):
    """``[(name, definition)]`` from the module's parameters, one per rule (``definition`` None for
    state=absent, else carrying ``metadata.name``). Every refusal (DraError) is raised here, before any
    request; with ``definitions``, every rule's refusal at once, each naming its place in the list."""
    check_number(
        params.get("wait_timeout", 90),
        "wait_timeout",
        0,
        MAX_SECONDS,
        integer=True,
        unit="seconds",
        error=DraError,
    )
    many = params.get("definitions")
    if many is None:
        return [_checked_one(params["definition"], params["name"], params["state"], "definition")]
    if params.get("definition") is not None or params.get("name"):
        raise DraError("give definitions, or definition/name, not both")
    if not isinstance(many, list):
        raise DraError(_not_a("definitions", many, "a list"))
    requests, errors, seen = [], [], {}
    for pos, definition in enumerate(many):
        where = f"definitions[{pos}]"
        try:
            name, checked_definition = _checked_one(definition, None, params["state"], where)
        except DraError as exc:
            errors.extend(f"{where}: {e}" if not e.startswith(where) else e for e in exc.errors)
            continue
        if name in seen:
            errors.append(f"{where}: rule {name} is also definitions[{seen[name]}]")
            continue
        seen[name] = pos
        requests.append((name, checked_definition))
    if errors:
        raise DraError(errors)
    return requests


def _rules_were(names):
    """``DeviceTaintRule a was`` or ``DeviceTaintRules a, b were``: the start of a message on rules."""
    return (
        f"DeviceTaintRule {names[0]} was" if len(names) == 1 else f"DeviceTaintRules {', '.join(names)} were"
    )


def wait_settled(api, rules, wait_eviction, deadline, clock=Clock):
    """``(latest, late)``: each rule of ``rules`` ({name: rule}) as last read, and the names of those the
    controller has not reported on (see rule_settled) by ``deadline``, in order. The unsettled rules are
    read again together, once per poll."""
    latest = dict(rules)
    pending = [name for name, rule in rules.items() if not rule_settled(rule, wait_eviction)]
    while pending and clock.now() <= deadline:
        clock.sleep(POLL_SECONDS)
        for name in pending:
            latest[name] = api.get(name) or latest[name]
        pending = [name for name in pending if not rule_settled(latest[name], wait_eviction)]
    return latest, pending


def wait_gone(api, names, deadline, clock=Clock):
    """The names of ``names`` still there at ``deadline`` (empty when every one is gone)."""
    left = list(names)
    while left:
        left = [name for name in left if api.get(name) is not None]
        if not left or clock.now() > deadline:
            break
        clock.sleep(GONE_POLL_SECONDS)
    return left


def _names(requests):
    return [request[0] for request in requests]


def _result(name, action, rule, first_report=None):
    return {
        "changed": action not in ("unchanged", "absent"),
        "name": name,
        "action": action,
        "rule": rule,
        "report": rule_report(rule),
        "first_report": first_report,
    }


def _remove(api, requests, opts, check_mode, deadline, clock):
    results = []
    for name in _names(requests):
        live = api.get(name)
        if live is None:
            results.append(_result(name, "absent", None))
            continue
        api.delete(live, dry_run=check_mode)
        results.append(_result(name, "deleted", None))
    deleted = [r["name"] for r in results if r["action"] == "deleted"]
    if deleted and not check_mode and opts["wait"]:
        left = wait_gone(api, deleted, deadline, clock)
        if left:
            raise RuleWaitError(
                f"{_rules_were(left)} deleted but still there after {opts['wait_timeout']}s",
                changed=True,
                rules=results,
            )
    return results


def _report_first(api, requests, live, opts, deadline, clock):
    """Create every missing rule whose effect is not None with effect None and wait for the controller's
    reports on all of them; returns {name: first report}."""
    probes = {}
    for name, definition in requests:
        if live[name] is None and definition["spec"]["taint"]["effect"] != "None":
            probe = copy.deepcopy(definition)
            probe["spec"]["taint"]["effect"] = "None"
            probes[name] = api.apply(probe, opts["field_manager"], dry_run=False)
    if not probes:
        return {}
    settled, late = wait_settled(api, probes, False, deadline, clock)
    if late:
        effects = sorted({d["spec"]["taint"]["effect"] for n, d in requests if n in late})
        raise RuleWaitError(
            f"{_rules_were(late)} created with effect None to report first, but kube-controller-manager has not "
            f"reported within {opts['wait_timeout']}s; effect {', '.join(effects)} was not applied (does it run "
            "the device-taint-eviction controller?)",
            changed=True,
            rules=[_result(name, "created", settled[name]) for name in probes],
        )
    live.update(settled)
    return {name: rule_report(rule) for name, rule in settled.items()}


def _apply(api, name, definition, live, opts, check_mode, deadline, clock):
    if live is not None and is_subset(definition, live) and not opts["refresh"]:
        return "unchanged", live
    if live is not None and is_subset(definition, live):
        if check_mode:
            return "recreated", live
        api.delete(live)
        if wait_gone(api, [name], deadline, clock):
            raise RuleWaitError(f"DeviceTaintRule {name} did not go away for its re-creation", changed=True)
        return "recreated", api.apply(definition, opts["field_manager"], dry_run=False)
    return (
        "created" if live is None else "updated",
        api.apply(definition, opts["field_manager"], dry_run=check_mode),
    )


def run_rules(api, requests, opts, check_mode=False, clock=Clock):
    """Every rule of ``requests`` (from :func:`checked`) made as asked; a result per rule, in order.

    ``opts``: state, wait, wait_eviction, wait_timeout, refresh, report_first, field_manager (the module's
    options of those names). Raises RuleWaitError when the controller does not report in time."""
    deadline = clock.now() + opts["wait_timeout"]
    if opts["state"] == "absent":
        return _remove(api, requests, opts, check_mode, deadline, clock)
    live = {name: api.get(name) for name in _names(requests)}
    first = {}
    if opts["report_first"] and not check_mode:
        first = _report_first(api, requests, live, opts, deadline, clock)
    applied = {}
    for name, definition in requests:
        action, rule = _apply(api, name, definition, live[name], opts, check_mode, deadline, clock)
        applied[name] = ("created" if name in first else action, rule)
    results = {name: _result(name, action, rule, first.get(name)) for name, (action, rule) in applied.items()}
    if opts["wait"] and not check_mode:
        settled, late = wait_settled(
            api, {n: r["rule"] for n, r in results.items()}, opts["wait_eviction"], deadline, clock
        )
        for name, rule in settled.items():
            results[name].update(rule=rule, report=rule_report(rule))
        if late:
            what = (
                "finished evicting"
                if all(results[name]["report"]["current"] for name in late)
                else "reported"
            )
            actions = "/".join(sorted({results[name]["action"] for name in late}))
            raise RuleWaitError(
                f"{_rules_were(late)} {actions}, but kube-controller-manager has not {what} within "
                f"{opts['wait_timeout']}s (does it run the device-taint-eviction controller?)",
                changed=any(r["changed"] for r in results.values()),
                rules=[results[name] for name in _names(requests)],
            )
    return [results[name] for name in _names(requests)]


class ClusterRules:
    """``api`` for :func:`run_rules` over ``_k8s/apply.Cluster``: the rules by name, server-side apply, delete."""

    def __init__(self, cluster, group_version=API_GROUP_VERSION):
        self.cluster = cluster
        self.res = cluster.resource(group_version, KIND)

    def get(self, name):
        from kubernetes.dynamic.exceptions import NotFoundError  # guarded: only a module's run reaches here

        try:
            return self.cluster.client.get(self.res, name=name).to_dict()
        except NotFoundError:
            return None

    def apply(self, definition, field_manager, dry_run=False):
        return self.cluster.apply(definition, field_manager, dry_run=dry_run)

    def delete(self, rule, dry_run=False):
        self.cluster.delete(rule, dry_run=dry_run)
