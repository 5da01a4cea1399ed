"""The dra_driver role's Helm install, run for real: the module gpusplit.k8s.helm_release, the helm
binary (helm 4, as the lab installs it) and the lab's API server.

The NVIDIA chart itself cannot be fetched here (no registry), so the test packages a chart of its
own under the older NGC chart name (``nvidia-dra-driver-gpu``, chosen with the role's
``gpusplit_dra_chart_name``) whose only template is a ConfigMap holding the merged values, with the
upstream chart's real values.yaml as its defaults, and serves it from a classic chart repository
on 127.0.0.1 (the role's non-OCI branch: chart_repo_url + chart name). What is proven: the release
is installed at the pinned version into its namespace with the values gpusplit renders merged over
the chart's defaults; --check installs nothing; a re-run changes nothing; a changed setting
upgrades the release. (kubernetes.core.helm 6.x fails here: it lists releases with
``helm list --all``, which helm 4 removed.)
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
import yaml
from ansible_output import ansible_playbook, recap

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_VALUES = (
    Path(os.environ.get("GPUSPLIT_REFERENCE_DIR", ROOT.parent / "shared" / "reference"))
    / "kubernetes-sigs_dra-driver-nvidia-gpu"
    / "values.yaml"
)
NGC_CHART = "nvidia-dra-driver-gpu"
CONFIGMAP_TEMPLATE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-values
  namespace: {{ .Release.Namespace }}
data:
  values.json: {{ toJson .Values | quote }}
  chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
"""


def pinned_version():
    defaults = yaml.safe_load((ROOT / "roles" / "dra_driver" / "defaults" / "main.yml").read_text())
    return str(defaults["gpusplit_dra_chart_version"])


@pytest.fixture(scope="module")
def chart_repo(tmp_path_factory):
    """A classic Helm repository on 127.0.0.1 serving one test chart at the pinned version."""
    if not REFERENCE_VALUES.is_file():
        pytest.fail(f"the DRA driver chart's values.yaml is missing: {REFERENCE_VALUES}", pytrace=False)
    base = tmp_path_factory.mktemp("helm")
    chart = base / NGC_CHART
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": NGC_CHART,
                "version": pinned_version(),
                "description": "gpusplit test chart: the DRA driver chart's values, rendered into a ConfigMap",
            }
        )
    )
    shutil.copy(REFERENCE_VALUES, chart / "values.yaml")
    (chart / "templates" / "values.yaml").write_text(CONFIGMAP_TEMPLATE)
    repo = base / "repo"
    repo.mkdir()
    subprocess.run(["helm", "package", str(chart), "-d", str(repo)], check=True, capture_output=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(repo))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    subprocess.run(["helm", "repo", "index", str(repo), "--url", url], check=True, capture_output=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield url
    server.shutdown()


def fleet_plan():
    doc = json.loads((ROOT / "tests" / "fixtures" / "gpus" / "dgx-h100.json").read_text())
    return plan_fleet({"gshelm-dgx-01": {"facts": doc["gpus"], "mode": "dra", "split": {"host_count": 2}}})


def run_install(tmp_path, repo_url, namespace, release, *extra, settings=None):
    playbook = tmp_path / "install.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Install the DRA driver chart",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Helm install through the role",
                            "ansible.builtin.include_role": {
                                "name": "gpusplit.k8s.dra_driver",
                                "tasks_from": "install.yml",
                            },
                        }
                    ],
                }
            ]
        )
    )
    more = extra
    extra = tmp_path / "vars.json"
    extra.write_text(
        json.dumps(
            {
                "gpusplit_fleet_plan": fleet_plan(),
                "gpusplit_kubeconfig": str(ROOT / ".lab" / "kubeconfig"),
                "gpusplit_out_dir": str(tmp_path / "out"),
                "gpusplit_dra_driver_install": True,
                "gpusplit_dra_chart_name": NGC_CHART,
                "gpusplit_dra_chart_repo": repo_url,
                "gpusplit_dra_namespace": namespace,
                "gpusplit_dra_release_name": release,
                "gpusplit_dra_helm_wait": False,
                "gpusplit_dra_driver_settings": settings or {},
            }
        )
    )
    proc = ansible_playbook(
        str(playbook),  # an absolute path: the runner's playbooks/ prefix does not apply
        "localhost,",
        "-c",
        "local",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-e",
        f"@{extra}",
        *more,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return proc


def releases(namespace):
    out = subprocess.run(
        ["helm", "list", "-n", namespace, "-o", "json", "--kubeconfig", str(ROOT / ".lab" / "kubeconfig")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


def test_the_role_installs_the_chart_with_gpusplits_values_and_a_rerun_changes_nothing(
    lab, kubectl, chart_repo, tmp_path
):
    namespace, release = f"gshelm-{uuid.uuid4().hex[:6]}", "nvidia-dra-driver"
    try:
        checked = run_install(tmp_path, chart_repo, namespace, release, "--check", "--diff")
        assert f"helm release {namespace}/{release}: install (the release is not installed)" in " ".join(
            checked.stdout.split()
        )
        assert "gpuResourcesEnabledOverride: true" in checked.stdout  # the values as diff
        assert releases(namespace) == []  # check mode installed nothing

        proc = run_install(tmp_path, chart_repo, namespace, release)
        said = " ".join(proc.stdout.split())
        assert (
            f"helm upgrade --install {release} {chart_repo} {NGC_CHART} --version {pinned_version()}" in said
        )
        assert f"helm release {namespace}/{release}: install" in said
        assert recap(proc.stdout)["localhost"]["changed"] >= 1

        [found] = releases(namespace)
        assert found["name"] == release and found["chart"] == f"{NGC_CHART}-{pinned_version()}"
        assert found["status"] == "deployed"

        cm = kubectl.json("get", "configmap", f"{release}-values", "-n", namespace)
        installed = json.loads(cm["data"]["values.json"])
        rendered = yaml.safe_load((tmp_path / "out" / "dra-driver-values.yaml").read_text())
        reference = yaml.safe_load(REFERENCE_VALUES.read_text())
        # what gpusplit sets deliberately reached the chart ...
        assert installed["kubeletPlugin"]["nodeSelector"] == {"gpusplit.io/mode": "dra"}
        assert installed["gpuResourcesEnabledOverride"] is True
        assert installed["resources"]["gpus"]["enabled"] is True
        assert installed["nvidiaDriverRoot"] == rendered["nvidiaDriverRoot"] == "/"
        # ... merged over the chart's own defaults, which are all still there
        assert set(reference) <= set(installed)

        again = run_install(tmp_path, chart_repo, namespace, release)
        assert recap(again.stdout)["localhost"]["changed"] == 0, again.stdout[-4000:]
        assert "(chart, version and values as wanted)" in " ".join(again.stdout.split())
        assert releases(namespace)[0]["revision"] == found["revision"]

        moved = run_install(
            tmp_path, chart_repo, namespace, release, settings={"driver_root": "/run/nvidia/driver"}
        )
        assert "upgrade (its values differ)" in " ".join(moved.stdout.split())
        assert int(releases(namespace)[0]["revision"]) == int(found["revision"]) + 1
        cm = kubectl.json("get", "configmap", f"{release}-values", "-n", namespace)
        assert json.loads(cm["data"]["values.json"])["nvidiaDriverRoot"] == "/run/nvidia/driver"
    finally:
        subprocess.run(
            [
                "helm",
                "uninstall",
                release,
                "-n",
                namespace,
                "--kubeconfig",
                str(ROOT / ".lab" / "kubeconfig"),
            ],
            capture_output=True,
        )
        kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false")
