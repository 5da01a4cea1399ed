#!/usr/bin/env python3
# Copyright: gpusplit contributors
# Apache-2.0
"""Write docs/errors.md: every refusal message of the collection, by capability, from the code.

It reads (never imports) every Python file under plugins/ and collects the messages at the
places a refusal is made:

* ``raise SomeError(...)`` where ``SomeError`` is ``GpusplitError``, one of its subclasses (found
  in plugins/ by their bases) or ``AnsibleFilterError``;
* ``errors.append(...)``, ``problems.append(...)`` (any list called ``errors``, ``problems`` or
  ``refusals``: the messages a function collects before raising them at once);
* ``fail_json(msg=...)``;
* ``problems += [...]`` on such a list, and what a function whose name ends in ``_problem``,
  ``_problems`` or ``_refusal`` returns (the messages callers add to their lists).

It also reads the tasks of roles/ and playbooks/ (YAML, never run): the message of every
``ansible.builtin.fail`` task and the ``fail_msg`` of every ``ansible.builtin.assert``, and the
``msg`` of each ``{ok, msg}`` check in a task's ``vars`` (the refusals a role makes in YAML), with
each ``{{ expression }}`` shown as ``<expression>``.

A message is a string, an f-string, a concatenation or a list of them; the values it fills in
are shown as ``<expression>``. Messages built elsewhere (a variable) are left out. The order is
that of the code, so the output is the same for the same code.

    python tools/gen_errors_doc.py            # rewrite docs/errors.md
    python tools/gen_errors_doc.py --check    # exit 1 when docs/errors.md differs

tests/unit/test_errors_doc.py fails when docs/errors.md is not what this writes.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "plugins"
DOC = ROOT / "docs" / "errors.md"
ROOT_ERROR = "GpusplitError"
OTHER_REFUSALS = {"AnsibleFilterError"}
LISTS = {"errors", "problems", "refusals"}

# (title, what it covers, path prefixes under plugins/); the first match wins
CAPABILITIES = (
    (
        "GPU discovery",
        "The module `nvidia_gpu_facts` and the fleet GPU table (`playbooks/discover.yml`).",
        (
            "module_utils/_gpu/",
            "modules/nvidia_gpu_facts.py",
            "filter/gpu_table.py",
        ),
    ),
    (
        "Planning the split",
        "The planner (`gpu_plan` role, `playbooks/plan.yml`): the inventory's split variables, node "
        "names, the GPU facts it reads, the mode table, and the outputs in out/ (`out_files`).",
        (
            "module_utils/_split/inputs.py",
            "module_utils/_split/selectors.py",
            "module_utils/_split/planner.py",
            "module_utils/_split/fleet_identity.py",
            "module_utils/_split/sharing.py",
            "module_utils/_split/mig_geometry.py",
            "plugin_utils/mig_apply.py",
            "module_utils/_split/modes.py",
            "module_utils/_split/sharing.py",
            "plugin_utils/split_table.py",
            "plugin_utils/fleet_outputs.py",
            "module_utils/_out/",
            "modules/out_files.py",
            "filter/split.py",
            "filter/split_modes.py",
            "filter/fleet.py",
        ),
    ),
    (
        "Verifying the split",
        "`fleet_verify` and the `gpu_verify` role: the plan and the facts it compares with the cluster.",
        ("module_utils/_split/verify.py", "modules/fleet_verify.py"),
    ),
    (
        "Who holds each GPU",
        "The module `gpu_pod_resources`: the kubelet's pod-resources API over its unix socket (gRPC, "
        "HTTP/2, HPACK and the protobuf messages, standard library only).",
        (
            "module_utils/_kubelet/pod_resources.py",
            "module_utils/_kubelet/grpc_unix.py",
            "module_utils/_kubelet/hpack.py",
            "modules/gpu_pod_resources.py",
        ),
    ),
    (
        "Changing the split of a busy fleet",
        "The re-split (role `gpu_resplit`, `playbooks/resplit.yml`): the policy for pods that hold a GPU "
        "leaving the Kubernetes share, host processes on GPUs going to Kubernetes, the batch size.",
        (
            "plugin_utils/resplit.py",
            "plugin_utils/resplit_inventory.py",
            "plugin_utils/rollout.py",
            "filter/resplit.py",
        ),
    ),
    (
        "Taking a split back",
        "The unsplit (role `gpu_unsplit`, `playbooks/unsplit.yml`): its settings, the device plugin the "
        "nodes go back to, and `gpu_host_undo`, which takes gpusplit's host files back (docs/undo.md).",
        (
            "plugin_utils/unsplit.py",
            "plugin_utils/unsplit_cluster.py",
            "module_utils/_host/host_files_undo.py",
            "modules/gpu_host_undo.py",
        ),
    ),
    (
        "Evicting pods for a re-split",
        "`pod_eviction`: the pods that hold a GPU leaving the Kubernetes share, evicted through the "
        "Eviction API (PodDisruptionBudgets honoured).",
        ("module_utils/_k8s/eviction.py", "modules/pod_eviction.py"),
    ),
    (
        "Rendering and applying the split",
        "The split device plugin's objects, node labels and taints, the plugin settings, the output "
        "directory, the cluster connection, `cluster_apply` (server-side apply) and `node_taints`.",
        (
            "plugin_utils/split_render.py",
            "plugin_utils/settings.py",
            "plugin_utils/output_dir.py",
            "module_utils/_k8s/",
            "modules/cluster_apply.py",
            "modules/node_taints.py",
        ),
    ),
    (
        "Host share and container toolkit",
        "What the `gpu_host` role writes on a host: the host share, the toolkit's config.toml.",
        (
            "plugin_utils/host_files_render.py",
            "plugin_utils/host_play.py",
            "filter/host_files.py",
            "module_utils/_host/",
            "modules/nvidia_toolkit_config.py",
        ),
    ),
    (
        "GPU Operator mode",
        "The `gpu_operator` role's checks and settings.",
        ("plugin_utils/gpu_operator", "plugin_utils/operator_mig_layouts.py", "filter/gpu_operator.py"),
    ),
    (
        "DRA mode",
        "The DRA driver, its preflight, DeviceTaintRules and isolating a GPU.",
        ("module_utils/_dra/", "plugin_utils/_dra/", "filter/dra.py", "modules/device_taint_rule.py"),
    ),
    (
        "Feature gates on the control plane",
        "Static pod manifests, kubeadm-config, k3s/rke2 drop-ins, the gate catalog, the preflight "
        "and health checks.",
        (
            "module_utils/_control_plane/",
            "plugin_utils/control_plane_detect.py",
            "filter/control_plane_gates.py",
            "modules/static_pod_flags.py",
            "modules/kubeadm_config_flags.py",
            "modules/rancher_config_dropin.py",
            "modules/feature_gate_preflight.py",
            "modules/control_plane_health.py",
        ),
    ),
    (
        "Diagnosing Pending pods",
        "`gpu_pending_diagnose` (`playbooks/diagnose.yml`).",
        ("module_utils/_diagnose/", "modules/gpu_pending_diagnose.py"),
    ),
    (
        "Workloads: lint, admission guard, gang jobs",
        "`playbooks/guard.yml`'s lint (the manifest files and the manifests), the admission guard's "
        "settings and policies (DRA claims, privileged pods), the privileged-pod report, gang jobs.",
        (
            "plugin_utils/manifest_files.py",
            "plugin_utils/admission_guard.py",
            "plugin_utils/guard_report.py",
            "plugin_utils/workload_checks.py",
            "plugin_utils/gang_job_render.py",
            "filter/workload_lint.py",
            "filter/workload.py",
        ),
    ),
    (
        "The roles' steps on the controller",
        "What the roles work out on the controller, one step per task (`role_step`): the inventory's hosts and "
        "their node names, GPU facts and discovery reports, and a step's inputs of the wrong shape.",
        (
            "plugin_utils/role_steps.py",
            "plugin_utils/_steps/",
            "plugin_utils/inventory_vars.py",
            "modules/role_step.py",
        ),
    ),
    (
        "Every filter",
        "What any filter says when its arguments are not of the shape it reads.",
        ("plugin_utils/filter_errors.py", "filter/"),
    ),
)
YAML_TITLE = "The roles' and playbooks' own checks"
YAML_WHAT = (
    "Refusals written in the tasks of roles and playbooks (a failed `assert` or `fail`), by role or playbook and task: "
    "what a role checks before it changes anything, such as the DRA chart's name and version."
)
OTHER = ("Other", "Refusals of files no capability above lists.", ())


def capability(rel):
    for entry in CAPABILITIES:
        if rel.startswith(entry[2]):
            return entry
    return OTHER


def python_files():
    return sorted(p for p in PLUGINS.rglob("*.py") if p.name != "__init__.py")


def refusal_classes(trees):
    """GpusplitError and every class in plugins/ that derives from it (by name), transitively."""
    bases = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = {
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                }
    found = {ROOT_ERROR}
    while True:
        more = {name for name, parents in bases.items() if parents & found} - found
        if not more:
            return found | OTHER_REFUSALS
        found |= more


PASS_THROUGH = {"fmt_list", "str", "repr", "sorted", "list", "join"}  # show what they are given


def _inner(expr):
    """The expression a message means, without the formatting calls around it."""
    while isinstance(expr, ast.Call) and expr.args and _callee(expr) in PASS_THROUGH:
        expr = expr.args[0]
    if isinstance(expr, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):
        return f"{_inner(expr.elt)}, ..."
    return ast.unparse(expr)


def _value(expr):
    """``<expression>`` for a value a message fills in (calls of type_name read as <type>)."""
    if isinstance(expr, ast.Call) and getattr(expr.func, "id", "") in ("type_name", "_got"):
        return "got <type>" if expr.func.id == "_got" else "<type>"
    return f"<{_inner(expr)}>"


def texts(node):
    """The message(s) ``node`` spells out; [] when it is built elsewhere."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        out = ""
        for part in node.values:
            if isinstance(part, ast.Constant):
                out += str(part.value)
            elif isinstance(part, ast.FormattedValue):
                out += _value(part.value)
        return [out]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = texts(node.left), texts(node.right)
        if left or right:
            return [(left[0] if left else _value(node.left)) + (right[0] if right else _value(node.right))]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [t for item in node.elts for t in texts(item)]
    if isinstance(node, ast.ListComp):
        return texts(node.elt)
    if isinstance(node, ast.IfExp):
        return texts(node.body) + texts(node.orelse)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "prefixed":
        inner = texts(node.args[0]) if node.args else []
        return [f"{inner[0]}<message>" if inner else "<prefix><message>"]
    return []


def _callee(call):
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _list_name(func):
    """The name of the list a ``x.append``/``x.y.append`` call adds to."""
    target = func.value
    return target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")


class Collector(ast.NodeVisitor):
    """(function, message) at each refusal site of one file, in the order of the code."""

    def __init__(self, refusals):
        self.refusals = refusals
        self.scope = []
        self.found = []

    def _add(self, node):
        where = ".".join(self.scope) or "(module)"
        for text in texts(node):
            text = " ".join(text.split())
            if text:
                self.found.append((where, text))

    def visit_FunctionDef(self, node):
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_Raise(self, node):
        exc = node.exc
        if isinstance(exc, ast.Call) and _callee(exc) in self.refusals and exc.args:
            self._add(exc.args[0])
        elif isinstance(exc, ast.Call) and _callee(exc) == "prefixed":
            self._add(exc)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        if isinstance(node.op, ast.Add) and getattr(node.target, "id", "") in LISTS:
            self._add(node.value)
        self.generic_visit(node)

    def visit_Return(self, node):
        function = self.scope[-1] if self.scope else ""
        if node.value is not None and function.endswith(("_problem", "_problems", "_refusal")):
            self._add(node.value)
        self.generic_visit(node)

    def visit_Call(self, node):
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "append"
            and _list_name(func) in LISTS
            and node.args
        ):
            self._add(node.args[0])
        elif _callee(node) == "fail_json":
            for kw in node.keywords:
                if kw.arg == "msg":
                    self._add(kw.value)
        self.generic_visit(node)


def collect():
    """{capability entry: {relative path: [(function, message), ...]}}."""
    trees = {p: ast.parse(p.read_text(encoding="utf-8"), str(p)) for p in python_files()}
    refusals = refusal_classes(trees)
    out = {}
    for path, tree in trees.items():
        collector = Collector(refusals)
        collector.visit(tree)
        seen, messages = set(), []
        for where, text in collector.found:
            if (where, text) not in seen:
                seen.add((where, text))
                messages.append((where, text))
        if messages:
            rel = path.relative_to(PLUGINS).as_posix()
            out.setdefault(capability(rel), {})[rel] = messages
    return out


JINJA_VALUE = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}", re.S)
YAML_PLACES = ("roles", "playbooks")


def _yaml_text(value):
    if not isinstance(value, str):
        return None
    text = " ".join(value.split())
    text = JINJA_VALUE.sub(lambda m: "<" + " ".join(m.group(1).split()) + ">", text)
    return text or None


def _tasks(items):
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        yield item
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks"):
            yield from _tasks(item.get(key))


def _checks(value):
    """The ``msg`` of each ``{ok, msg}`` mapping anywhere in ``value`` (a task's vars)."""
    if isinstance(value, dict):
        if "ok" in value and "msg" in value:
            yield value["msg"]
        for item in value.values():
            yield from _checks(item)
    elif isinstance(value, list):
        for item in value:
            yield from _checks(item)


def yaml_refusals():
    """{relative path: [(task name, message), ...]} of the refusals written in roles/ and playbooks/."""
    out = {}
    for place in YAML_PLACES:
        for path in sorted((ROOT / place).rglob("*.yml")):
            if "meta" in path.parts or "defaults" in path.parts or "vars" in path.parts:
                continue
            try:
                doc = yaml.safe_load(path.read_text(encoding="utf-8"))
            except yaml.YAMLError:
                continue
            found = []
            for task in _tasks(doc):
                name = " ".join(str(task.get("name", "")).split()) or "a task"
                texts_ = []
                fail = task.get("ansible.builtin.fail")
                if isinstance(fail, dict):
                    texts_.append(fail.get("msg"))
                check = task.get("ansible.builtin.assert")
                if isinstance(check, dict):
                    texts_.append(check.get("fail_msg"))
                    texts_.extend(_checks(task.get("vars")))
                for text in map(_yaml_text, texts_):
                    if text and (name, text) not in found:
                        found.append((name, text))
            if found:
                out[path.relative_to(ROOT).as_posix()] = found
    return out


def _code(text):
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def render():
    found = collect()
    in_yaml = yaml_refusals()
    order = [*CAPABILITIES, OTHER]
    body, listed = [], 0
    for entry in order:
        files = found.get(entry)
        if not files:
            continue
        title, what, _ = entry
        # one entry per message, whichever files say it; the files are private to the collection
        texts = {text for messages in files.values() for _, text in messages if findable(text)}
        listed += len(texts)
        body += [f"## {title}", "", what, ""]
        body += [f"- {_code(text)}" for text in sorted(texts, key=_message_key)]
        body.append("")
    # one line per message, naming its role or playbook and task: no heading per object
    entries = {
        (_yaml_object(rel), text, where)
        for rel, messages in in_yaml.items()
        for where, text in messages
        if findable(text)
    }
    if entries:
        body += [f"## {YAML_TITLE}", "", YAML_WHAT, ""]
        for name, text, where in sorted(entries, key=lambda e: (e[0], _message_key(e[1]), e[2])):
            body.append(f"- {_code(text)} ({name}, task: {where})")
    lines = [
        "# Refusals",
        "",
        "<!-- Generated by tools/gen_errors_doc.py from the code; do not edit by hand.",
        "     Regenerate: python tools/gen_errors_doc.py (tests/unit/test_errors_doc.py checks it). -->",
        "",
        "Every message gpusplit refuses bad input with, as the code spells it, by capability and in",
        "alphabetical order: search the page for the words of your message. `<...>` is a value the message",
        "fills in (`<type>`: its JSON type). A module fails with `msg` and `errors` (every message), a",
        "filter with `<title> refused:` and one line each, a role's argument spec names the variable first;",
        "a run stops with every reason at once, before anything is changed. A number is refused the same",
        "way everywhere, naming the field, what it takes and what was given, for example",
        "`replicas: expected a whole number of at least 2, got 1.5`. A message that only passes on",
        "another's text (such as `<path>: <message>`) is not listed: search for the words of the inner one.",
        "",
        f"{listed} messages of the modules, filters and plugins, and {len(entries)} of the roles and playbooks.",
        "",
    ]
    # the index is one paragraph, so that the page's lines are its messages
    titles = [entry[0] for entry in order if entry in found] + ([YAML_TITLE] if entries else [])
    lines += ["## Capabilities", "", " · ".join(f"[{title}](#{_anchor(title)})" for title in titles), ""]
    return "\n".join(lines + body).rstrip("\n") + "\n"


PLACEHOLDER = re.compile(r"<[^<>]*>|\{%.*?%\}")


def findable(text):
    """Whether a message has words of its own to search for (not only values it passes on)."""
    rest = text
    while True:
        stripped = PLACEHOLDER.sub("", rest)
        if stripped == rest:
            return re.search(r"[A-Za-z]{3,}", rest) is not None
        rest = stripped


def _message_key(text):
    """Alphabetical by the message's words: case and the placeholders' brackets left aside."""
    return (text.lower().lstrip("<`'\"-* "), text)


def _yaml_object(rel):
    """`role gpusplit.k8s.<role>` or `playbook gpusplit.k8s.<playbook>` for a file of roles/ or playbooks/."""
    parts = rel.split("/")
    if parts[0] == "roles":
        return f"role `gpusplit.k8s.{parts[1]}`"
    if parts[0] == "playbooks" and len(parts) == 2:
        return f"playbook `gpusplit.k8s.{Path(parts[1]).stem}`"
    return "playbooks' shared tasks"


def _anchor(title):
    keep = "".join(c for c in title.lower() if c.isalnum() or c in " -")
    return keep.replace(" ", "-")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/errors.md differs")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = DOC.read_text(encoding="utf-8") if DOC.is_file() else ""
        if current != text:
            print("docs/errors.md is out of date: run python tools/gen_errors_doc.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
