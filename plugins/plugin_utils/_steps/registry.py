# Copyright: gpusplit contributors
# Apache-2.0
"""The roles' steps: how one is registered, run and refused (plugins/plugin_utils/role_steps.py).

Private to the collection.

A step is ``step(inputs, context)`` (``inputs``: the task's mapping; ``context``: :class:`StepContext`) returning a
mapping, the task's result. A refusal (:class:`GpusplitError`) becomes a failed result with every message
(``<title> refused:``), titled by the kind of refusal as the filters title theirs; a Python error inside a step
is named without Python's own text. Every step runs with the cyclic garbage collector paused
(module_utils/_split/gc_pause.py).
"""

from __future__ import annotations

import os
import time
import traceback

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import (
    GpusplitError,
    refusal_text,
    type_name,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.gc_pause import gc_paused
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.lazy import lazy

dra_names = lazy("module_utils._dra.names")
planner = lazy("module_utils._split.planner")
render = lazy("plugin_utils.split_render")

STEPS = {}

# keys of a task's result that Ansible reads itself, and the names of a mapping's own methods (Jinja's
# ``result.values`` is the method, not the key): no step returns them, its caller would not see them as given
RESERVED = frozenset(
    {
        "ansible_facts",
        "attempts",
        "changed",
        "deprecations",
        "diff",
        "exception",
        "failed",
        "invocation",
        "results",
        "retries",
        "skipped",
        "unreachable",
        "warnings",
    }
    | {
        "clear",
        "copy",
        "fromkeys",
        "get",
        "items",
        "keys",
        "pop",
        "popitem",
        "setdefault",
        "update",
        "values",
    }
)


class StepContext:
    """What a step reads besides its inputs.

    ``hostvars``/``groups``: the play's (a mapping of host to variables, of group to hosts); ``run_module``:
    ``(name, args) -> result``, a module run through ansible-core (the steps that wait on the cluster);
    ``sleep``: time.sleep (a test passes its own); ``clock``: seconds of wall clock (time.monotonic where
    ``sleep`` is given, else a clock that only ``sleep`` advances, so a test's wait ends at once); ``check_mode``:
    the task's.
    """

    def __init__(self, hostvars=None, groups=None, run_module=None, sleep=None, check_mode=False, clock=None):
        self.hostvars = hostvars if hostvars is not None else {}
        self.groups = groups if groups is not None else {}
        self.run_module = run_module
        if sleep is None and clock is None:
            slept = [0.0]

            def sleep(seconds):
                slept[0] += seconds

            def clock():
                return slept[0]

        self.sleep = sleep or (lambda seconds: None)
        self.clock = clock or time.monotonic
        self.check_mode = check_mode


def titles():
    """The refusal kinds and their titles, the first match wins (as the filters title theirs)."""
    return (
        (planner.PlanError, "gpusplit split plan"),
        (render.RenderError, "gpusplit render"),
        (dra_names.DraError, "gpusplit DRA"),
        (lazy("plugin_utils.gpu_operator").OperatorError, "gpusplit GPU Operator mode"),
        (lazy("plugin_utils.host_files_render").HostShareError, "gpusplit host share"),
        (lazy("plugin_utils.workload_checks").LintError, "gpusplit admission guard"),
        (lazy("plugin_utils.guard_report").GuardReportError, "gpusplit guard report"),
        (lazy("plugin_utils.resplit").ResplitError, "gpusplit re-split"),
        (lazy("plugin_utils.unsplit").UnsplitError, "gpusplit unsplit"),
    )


def step(func):
    """Registers ``func`` as the step of its name."""
    STEPS[func.__name__] = gc_paused(func)
    return func


def _where(exc):
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else "?"


def run_step(name, inputs, context):
    """The result of step ``name``: what it computed, or ``failed`` with every message of its refusal."""
    func = STEPS.get(name)
    if func is None:
        return {"failed": True, "msg": f"step: no step {name!r} (one of {', '.join(sorted(STEPS))})"}
    if not isinstance(inputs, dict):
        return {"failed": True, "msg": f"inputs: expected a mapping, got {type_name(inputs)}"}
    try:
        result = func(inputs, context)
        reserved = sorted(RESERVED.intersection(result))
        if reserved:  # Ansible would take these out of the task's result, or read them as its own
            raise GpusplitError(f"the step's result has keys a task result reserves: {', '.join(reserved)}")
        return result
    except GpusplitError as exc:
        title = next((t for kind, t in titles() if isinstance(exc, kind)), f"gpusplit {name}")
        return {"failed": True, "msg": refusal_text(title, exc), "errors": list(exc.errors)}
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as exc:
        # a bug, or an input of a shape the step did not check: named without Python's own text
        given = ", ".join(f"{key}: {type_name(value)}" for key, value in sorted(inputs.items()))
        return {
            "failed": True,
            "msg": f"gpusplit {name} refused:\n- cannot read its inputs as given ({given}) "
            f"(a bug in the step too: {type_name(exc)} at {_where(exc)})",
        }


def mapping_input(inputs, key, default=None):
    value = inputs.get(key)
    if value is None:
        return {} if default is None else default
    if not isinstance(value, dict):
        raise GpusplitError(f"{key}: expected a mapping, got {type_name(value)}")
    return value


def list_input(inputs, key):
    value = inputs.get(key)
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise GpusplitError(f"{key}: expected a list, got {type_name(value)}")
    return list(value)


def unique_in(first, second):
    """The items of ``first`` that are in ``second``, once each, in ``first``'s order (Jinja's intersect)."""
    wanted, out = set(second), []
    for item in first:
        if item in wanted and item not in out:
            out.append(item)
    return out


def wait_pods(context, queries, left_of, retries, delay):
    """Lists each query's pods (kubernetes.core.k8s_info) until ``left_of(pods)`` is empty, up to
    ``retries`` + 1 times ``delay`` seconds apart, one query after the other (as a looped task with
    ``until``); returns every query's last list."""
    lists = []
    for query in queries:
        for attempt in range(retries + 1):
            result = context.run_module("kubernetes.core.k8s_info", query) or {}
            pods = result.get("resources") or []
            if not left_of(pods) or attempt == retries:
                break
            context.sleep(delay)
        lists.append(pods)
    return lists


def connection_args(inputs):
    return {key: inputs[key] for key in ("kubeconfig", "context") if inputs.get(key)}
