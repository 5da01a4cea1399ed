"""Every entry point given malformed input of each JSON type in each argument (issue 18).

Every filter of plugins/filter/*.py (through its FilterModule, as a play calls it, with the values
tagged the way Ansible tags them) and every module of plugins/modules/ (its ``main``, with the
arguments Ansible would pass, in check mode, against no cluster) gets null, a boolean, an integer,
a number, a string, a list and a mapping in each argument in turn. Each must either work or be
refused (AnsibleFilterError, fail_json) with a message that shows no Python exception text.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import json
import pkgutil

import pytest
from ansible._internal._datatag._tags import Origin
from ansible.errors import AnsibleFilterError
from ansible.module_utils.testing import patch_module_args

import ansible_collections.gpusplit.k8s.plugins.filter as filter_package
import ansible_collections.gpusplit.k8s.plugins.modules as module_package

JSON_VALUES = [None, True, 3, 2.5, "x", ["x", 2], {"x": [1]}]
PYTHON_TEXT = (
    "object has no attribute",
    "not iterable",
    "unhashable",
    "codec can't decode",
    "Traceback",
    "NoneType",
    "_AnsibleTagged",
    "_AnsibleLazy",
    "is not subscriptable",
    "index out of range",
    "must be str, not",
    "not supported between",
    "CapturedExceptionMarker",
)
# a filter's last resort for a Python error inside it (plugin_utils/filter_errors.py): not text
# from Python, but still a bug to fix where it shows
BUG_FALLBACK = "(a bug in the filter too:"
ORIGIN = Origin(path="/inventory/hosts.yml", line_num=1)


def tagged(value):
    """``value`` as a play hands it to a filter: tagged with where it came from (bool and None stay)."""
    try:
        return ORIGIN.tag(value)
    except (TypeError, NotImplementedError):
        return value


def python_text(text):
    return [t for t in PYTHON_TEXT if t in text]


# --------------------------------------------------------------------------------------------
# filters


def every_filter():
    for info in sorted(pkgutil.iter_modules(filter_package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{filter_package.__name__}.{info.name}")
        for name, func in sorted(module.FilterModule().filters().items()):
            yield pytest.param(name, func, id=name)


FILTERS = list(every_filter())


def test_every_filter_is_driven():
    assert len(FILTERS) >= 15


@pytest.mark.parametrize(("name", "func"), FILTERS)
def test_every_filter_refuses_malformed_input_by_name(name, func):
    """Each argument in turn gets each JSON type (the other required arguments get the same)."""
    params = [
        p
        for p in inspect.signature(func).parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    required = [p.name for p in params if p.default is p.empty]
    for param in params:
        for value in JSON_VALUES:
            kwargs = {q: tagged(value) for q in required}
            kwargs[param.name] = tagged(value)
            try:
                func(**kwargs)
            except AnsibleFilterError as exc:
                text = str(exc)
                assert not python_text(text), (param.name, value, text)
                assert BUG_FALLBACK not in text, (param.name, value, text)
                assert text.strip(), (param.name, value)


# --------------------------------------------------------------------------------------------
# modules


class _Spec(Exception):
    pass


def argument_spec(module):
    """The module's full argument spec (doc fragments included), as its main() builds it."""
    real = module.AnsibleModule

    def capture(*args, **kwargs):
        raise _Spec(kwargs.get("argument_spec") or args[0])

    module.AnsibleModule = capture
    try:
        with patch_module_args({}):
            module.main()
    except _Spec as spec:
        return spec.args[0]
    finally:
        module.AnsibleModule = real
    raise AssertionError(f"{module.__name__}.main() built no AnsibleModule")


def base_args(name, tmp_path):
    """The required arguments of each module, pointing at nothing real (no cluster, no files)."""
    return {
        "cluster_apply": {"objects": []},
        "cluster_read": {"queries": {"pods": {"api_version": "v1", "kind": "Pod"}}},
        "control_plane_health": {"timeout": 1, "components": [], "apiserver_url": "https://127.0.0.1:9"},
        "feature_gate_preflight": {"version": "1.35.0"},
        "fleet_verify": {"plan": {"nodes": {}}},
        "kubeadm_config_flags": {"path": str(tmp_path / "kubeadm-config.yaml")},
        "nvidia_gpu_facts": {
            "nvidia_smi_path": str(tmp_path / "no-nvidia-smi"),
            "proc_root": str(tmp_path),
            "sysfs_root": str(tmp_path),
        },
        "nvidia_toolkit_config": {"path": str(tmp_path / "config.toml")},
        "out_files": {"dir": str(tmp_path / "out"), "files": {"a.json": "{}"}},
        "pod_eviction": {"pods": []},
        "rancher_config_dropin": {"config_dir": str(tmp_path / "rancher")},
        "static_pod_flags": {"path": str(tmp_path / "kube-apiserver.yaml")},
    }.get(name, {})


def ansible_spec_message(option, msg):
    """Ansible's own argument-spec check: it names the argument (and speaks of NoneType itself)."""
    return msg.startswith(f"argument '{option}' is of type")


MODULES = sorted(m.name for m in pkgutil.iter_modules(module_package.__path__))
# bad input known to still escape a module, each with its reason: strict, so that a fix removes it
KNOWN: dict = {}


def every_module_option():
    for name in MODULES:
        module = importlib.import_module(f"{module_package.__name__}.{name}")
        for option in sorted(argument_spec(module)):
            marks = (
                [pytest.mark.xfail(strict=True, reason=KNOWN[name, option])]
                if (name, option) in KNOWN
                else []
            )
            yield pytest.param(name, option, marks=marks, id=f"{name}.{option}")


def test_every_module_is_driven():
    assert len(MODULES) >= 12


def _run(module, args):
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        module.main()
    return json.loads(out.getvalue())


@pytest.mark.parametrize(("name", "option"), list(every_module_option()))
def test_every_module_refuses_malformed_arguments_by_name(name, option, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(f"{module_package.__name__}.{name}")
    for value in JSON_VALUES:
        args = {**base_args(name, tmp_path), option: value, "_ansible_check_mode": True}
        try:
            result = _run(module, args)
        except Exception as exc:  # a crash: Python's text would reach the user
            raise AssertionError(f"{name} {option}={value!r}: {type(exc).__name__}: {exc}") from exc
        msg = str(result.get("msg", ""))
        if result.get("failed") and not ansible_spec_message(option, msg):
            assert not python_text(msg), (name, option, value, msg)
            assert msg.strip(), (name, option, value)


def test_no_message_spells_a_python_class_name():
    """A value's type reaches a message as type_name(value) (_errors.py), never as
    ``type(value).__name__``: a value from a play is an _AnsibleTagged* class."""
    import ast
    from pathlib import Path

    plugins = Path(__file__).resolve().parents[2] / "plugins"
    found = []
    for path in sorted(plugins.rglob("*.py")):
        if path.name == "_errors.py":  # where type_name itself reads the class
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "__name__"
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id == "type"
            ):
                found.append(f"{path.relative_to(plugins)}:{node.lineno}")
    assert not found, f"use type_name (or a_type_name) from plugins/module_utils/_errors.py: {found}"
