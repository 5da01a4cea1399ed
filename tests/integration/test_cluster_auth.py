"""The cluster modules find the lab cluster as kubernetes.core users expect (plugins/module_utils/_k8s/client.py):
from K8S_AUTH_KUBECONFIG when no kubeconfig is given, else from ~/.kube/config; one that is not there
fails the play naming it. playbooks/diagnose.yml sets the cluster once, through module_defaults for
the action group gpusplit.k8s.cluster; here gpusplit_kubeconfig is emptied so that the fallbacks count."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from ansible_output import recap

from lab import components as C

ROOT = Path(__file__).resolve().parents[2]


def diagnose(tmp_path: Path, **environ: str) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KUBECONFIG", "K8S_AUTH_KUBECONFIG", "K8S_AUTH_CONTEXT")
    }
    env.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", **environ)
    extra = json.dumps({"gpusplit_kubeconfig": "", "gpusplit_out_dir": str(tmp_path / "out")})
    return subprocess.run(
        ["ansible-playbook", "-i", str(ROOT / "inventory" / "lab"), str(ROOT / "playbooks" / "diagnose.yml"), "-e", extra],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
    )  # fmt: skip


def test_k8s_auth_kubeconfig_is_used_when_no_kubeconfig_is_given(lab, tmp_path):
    proc = diagnose(tmp_path, K8S_AUTH_KUBECONFIG=str(C.KUBECONFIG), K8S_AUTH_CONTEXT="")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert recap(proc.stdout)["localhost"]["failed"] == 0
    assert "pods" in json.loads((tmp_path / "out" / "pending.json").read_text())


def test_home_kube_config_is_the_last_fallback(lab, tmp_path):
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    shutil.copy(C.KUBECONFIG, home / ".kube" / "config")
    proc = diagnose(tmp_path, HOME=str(home))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_a_missing_kubeconfig_fails_naming_it(lab, tmp_path):
    missing = tmp_path / "nowhere" / "kubeconfig"
    proc = diagnose(tmp_path, K8S_AUTH_KUBECONFIG=str(missing))
    assert proc.returncode != 0
    assert f"kubeconfig {missing} does not exist" in proc.stdout, proc.stdout[-4000:]
