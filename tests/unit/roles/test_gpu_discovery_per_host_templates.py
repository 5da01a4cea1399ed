"""The discovery's one task per host templates its arguments in every host's worker. A filter or a test there
(ansible-core's own, even ``default`` or ``lower``) makes each worker load filter plugins for it, which cost
about 12 ms of the controller's CPU per host in the fleet bench; the task and the role's values it reads use
Jinja expressions only."""

import re
from pathlib import Path

import pytest
import yaml

ROLE = Path(__file__).resolve().parents[3] / "roles" / "gpu_discovery"
FILTER_OR_TEST = re.compile(r"\|(?!\|)|\bis\s+(?:not\s+)?[a-z_]")


def _templates(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _templates(item)
    elif isinstance(value, list):
        for item in value:
            yield from _templates(item)
    elif isinstance(value, str) and "{{" in value:
        yield value


def _facts_task():
    (task,) = yaml.safe_load((ROLE / "tasks" / "facts.yml").read_text())
    return task


def _role_values():
    values = {}
    for name in ("defaults", "vars"):
        path = ROLE / name / "main.yml"
        if path.exists():
            values.update(yaml.safe_load(path.read_text()) or {})
    return values


def test_the_check_finds_a_filter_and_a_test():
    assert FILTER_OR_TEST.search("{{ x | default(omit) }}")
    assert FILTER_OR_TEST.search("{{ x is defined }}")
    assert not FILTER_OR_TEST.search("{{ x or omit }}")
    assert not FILTER_OR_TEST.search("{{ 'a' if x else 'b' }}")


@pytest.mark.parametrize("part", ["gpusplit.k8s.nvidia_gpu_facts", "environment"])
def test_the_facts_task_templates_without_filters(part):
    task = _facts_task()
    for template in _templates(task[part]):
        assert not FILTER_OR_TEST.search(template), template


def test_the_role_values_the_facts_task_reads_template_without_filters():
    task_text = (ROLE / "tasks" / "facts.yml").read_text()
    values = _role_values()
    # the role's own values, and those they name in turn
    names = {name for name in values if re.search(rf"\b{name}\b", task_text)}
    names |= {other for name in names for other in values if re.search(rf"\b{other}\b", str(values[name]))}
    assert {
        "gpusplit_pod_resources_socket",
        "gpusplit_host_state_path",
        "gpu_discovery_install_asked",
    } <= names
    for name in sorted(names):
        for template in _templates(values[name]):
            assert not FILTER_OR_TEST.search(template), (name, template)
