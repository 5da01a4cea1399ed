#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache-2.0
DOCUMENTATION = r"""
module: helm_release
short_description: Install or upgrade one Helm release at a pinned chart version (helm 3 and helm 4)
version_added: "0.1.0"
description:
  - Runs C(helm upgrade --install) for one release when it is not installed, not C(deployed), from
    another chart version, or given other values; otherwise changes nothing and runs no upgrade.
  - Works with helm 3 and helm 4. C(kubernetes.core.helm) 6.x lists releases with C(helm list --all),
    which helm 4 removed, so with helm 4 it fails after installing; this module uses only
    C(helm list --filter -o json), C(helm get values -o json) and C(helm upgrade --install).
  - The values given are the release's whole user-supplied values (C(--reset-values)); the chart's
    own defaults fill in the rest.
  - Check mode reads the release and says what would be done, with the values as diff; helm is not
    asked to change anything.
options:
  name:
    description: The release name (a DNS label of at most 53 characters).
    type: str
    required: true
  namespace:
    description: The release namespace.
    type: str
    required: true
  chart_ref:
    description:
      - The chart. An C(oci://) reference (registry path and chart name), or the chart's name in
        I(repo_url).
      - Exactly one of I(chart_ref) and I(chart_path) is given.
    type: str
  chart_path:
    description:
      - A local chart on the controller instead of a registry or repository (air-gapped sites), either
        a chart folder or a packaged chart (C(.tgz), as C(helm package) writes it).
      - Its C(Chart.yaml) must have the name I(chart_name) and the version I(chart_version) (a
        leading C(v) aside); otherwise the module refuses, naming both, before helm runs. A
        development version (C(...-devel)) is refused with the C(helm package --version
        --app-version) command that stamps it as a release.
    type: path
  chart_name:
    description: The name the chart in I(chart_path) must have (its C(Chart.yaml) C(name)).
    type: str
  repo_url:
    description: A classic chart repository URL (not used with an C(oci://) I(chart_ref) or I(chart_path)).
    type: str
  chart_version:
    description: The pinned chart version.
    type: str
    required: true
  values:
    description: The values given to the chart.
    type: dict
    default: {}
  create_namespace:
    description: Create the namespace when it is missing.
    type: bool
    default: true
  wait:
    description: Wait until the release's resources are ready (C(helm --wait)).
    type: bool
    default: false
  wait_timeout:
    description: How long to wait with I(wait), a duration as helm takes it (C(10m0s), C(600s)) or seconds.
    type: str
    default: 5m0s
  binary_path:
    description: The helm binary.
    type: path
    default: helm
extends_documentation_fragment:
  - gpusplit.k8s.cluster_auth
  - gpusplit.k8s.attributes.check_mode_and_diff
author:
  - gpusplit team (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Install the NVIDIA DRA driver chart
  gpusplit.k8s.helm_release:
    name: nvidia-dra-driver-gpu
    namespace: nvidia-dra-driver-gpu
    chart_ref: oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu
    chart_version: "0.4.1"
    values:
      gpuResourcesEnabledOverride: true
    kubeconfig: "{{ gpusplit_kubeconfig }}"

- name: From a packaged chart on the controller (air-gapped)
  gpusplit.k8s.helm_release:
    name: dra-driver-nvidia-gpu
    namespace: dra-driver-nvidia-gpu
    chart_path: /srv/charts/dra-driver-nvidia-gpu-0.4.1.tgz
    chart_name: dra-driver-nvidia-gpu
    chart_version: "0.4.1"
    values:
      gpuResourcesEnabledOverride: true

- name: From a classic repository
  gpusplit.k8s.helm_release:
    name: gpu-operator
    namespace: gpu-operator
    chart_ref: gpu-operator
    repo_url: https://helm.ngc.nvidia.com/nvidia
    chart_version: v25.10.0
    values: {}
"""

RETURN = r"""
action:
  description: install, upgrade or none.
  returned: always
  type: str
reasons:
  description: Why the release is installed or upgraded.
  returned: always
  type: list
  elements: str
command:
  description: The helm command run (or that would run, in check mode); empty when nothing is done.
  returned: always
  type: list
  elements: str
release:
  description: The release's row from C(helm list) after the run (before it, in check mode); null when absent.
  returned: always
  type: dict
chart:
  description: The local chart's C(Chart.yaml) name, version and app_version (with I(chart_path) only).
  returned: when I(chart_path) is given
  type: dict
"""

import json
import os
import tempfile
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    import yaml

    YAML_IMPORT_ERROR = None
except ImportError:  # ansible-core brings PyYAML; reported by main() all the same
    yaml = None
    YAML_IMPORT_ERROR = traceback.format_exc()

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s import helm as H
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import CLUSTER_ARGS


def _run(module, cmd, what):
    rc, out, err = module.run_command(cmd)
    if rc != 0:
        raise H.HelmError(f"{what} failed (exit {rc}): {(err or out).strip()[-2000:]}")
    return out


def release(module, helm):
    """Read the release, decide, and install or upgrade it; the module's result.

    Every refusal is a HelmError that names the release.
    """
    p = module.params
    try:
        return _release(module, helm, p)
    except H.HelmError as exc:
        raise exc.prefixed(f"helm release {p['namespace']}/{p['name']}: ") from None


def _release(module, helm, p):
    cluster = {"kubeconfig": p["kubeconfig"], "context": p["context"]}
    local = p["chart_path"] is not None
    chart_ref = p["chart_path"] if local else p["chart_ref"]
    H.check_request(p["name"], p["namespace"], chart_ref, p["chart_version"], p["wait_timeout"])
    meta = None
    if local:  # before anything is read from or done to the cluster
        meta = H.check_local_chart(
            H.read_chart_metadata(chart_ref), chart_ref, p["chart_name"], p["chart_version"]
        )
    extra = {"chart": meta} if meta else {}
    chart_name = meta["name"] if meta else H.chart_name_of(chart_ref)
    chart_version = meta["version"] if meta else p["chart_version"]
    row = H.parse_list(
        _run(module, H.list_command(helm, p["name"], p["namespace"], **cluster), "helm list"), p["name"]
    )
    live_values = (
        H.parse_values(
            _run(module, H.values_command(helm, p["name"], p["namespace"], **cluster), "helm get values")
        )
        if row
        else {}
    )
    decision = H.decide(row, live_values, chart_ref, chart_version, p["values"], chart_name=chart_name)
    result = {"changed": decision["action"] != "none", "action": decision["action"], **extra}
    result["reasons"] = decision["reasons"]
    if module._diff and result["changed"]:
        result["diff"] = {
            "before": yaml.safe_dump(live_values, sort_keys=True) if row else "",
            "after": yaml.safe_dump(p["values"], sort_keys=True),
            "before_header": f"{p['namespace']}/{p['name']} {row.get('chart') if row else '(not installed)'}",
            "after_header": f"{p['namespace']}/{p['name']} {chart_name}-{chart_version}",
        }
    if not result["changed"]:
        return dict(result, command=[], release=row)
    # JSON (which YAML readers take as it is): PyYAML would leave a string such as 8948e5 unquoted,
    # and helm's YAML reader would take it for a number
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(p["values"], handle, sort_keys=True, indent=2)
        values_file = handle.name
    try:
        cmd = H.upgrade_command(
            helm,
            p["name"],
            p["namespace"],
            chart_ref,
            chart_version,
            values_file,
            repo_url=None if local else p["repo_url"],
            create_namespace=p["create_namespace"],
            wait=p["wait"],
            timeout=p["wait_timeout"],
            local=local,
            **cluster,
        )
        if module.check_mode:
            return dict(result, command=cmd, release=row)
        _run(module, cmd, f"helm upgrade --install {p['name']}")
    finally:
        os.unlink(values_file)
    after = H.parse_list(
        _run(module, H.list_command(helm, p["name"], p["namespace"], **cluster), "helm list"), p["name"]
    )
    return dict(result, command=cmd, release=after)


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "namespace": {"type": "str", "required": True},
            "chart_ref": {"type": "str"},
            "chart_path": {"type": "path"},
            "chart_name": {"type": "str"},
            "repo_url": {"type": "str"},
            "chart_version": {"type": "str", "required": True},
            "values": {"type": "dict", "default": {}},
            "create_namespace": {"type": "bool", "default": True},
            "wait": {"type": "bool", "default": False},
            "wait_timeout": {"type": "str", "default": "5m0s"},
            "binary_path": {"type": "path", "default": "helm"},
            **CLUSTER_ARGS,
        },
        mutually_exclusive=[("chart_ref", "chart_path"), ("chart_path", "repo_url")],
        required_one_of=[("chart_ref", "chart_path")],
        required_by={"chart_path": "chart_name"},
        supports_check_mode=True,
    )
    if yaml is None:
        module.fail_json(msg=missing_required_lib("PyYAML"), exception=YAML_IMPORT_ERROR)
    p = module.params
    helm = module.get_bin_path(p["binary_path"]) if os.sep not in p["binary_path"] else p["binary_path"]
    if not helm or not os.access(helm, os.X_OK):
        module.fail_json(
            msg=f"the helm binary {p['binary_path']!r} is not found or not executable: install helm 3 or 4"
        )
    with fail_on_refusal(module):
        result = release(module, helm)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
