"""The lab's Kubernetes releases: which one a lab runs, where its binaries are, what is refused."""

from __future__ import annotations

import pytest
import yaml

from lab import components as C
from lab import lab as labctl


def write_manifest(folder, name: str, version: str | None, command=("kube-apiserver", "--v=1")):
    folder.mkdir(parents=True, exist_ok=True)
    container = {"name": name, "command": list(command)}
    if version is not None:
        container["image"] = f"registry.k8s.io/{name}:v{version}"
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [container]}}))
    return path


def test_versions_env_lists_the_default_first_and_every_release_once():
    pins = C.versions()
    releases = C.kube_versions()
    assert releases[0] == pins["KUBE_VERSION"]
    assert len(set(releases)) == len(releases)
    assert set(releases) == set(pins["KUBE_VERSIONS"].split(","))
    assert {r.rsplit(".", 1)[0] for r in releases} >= {"1.35", "1.36", "1.37"}


def test_the_default_release_keeps_its_binaries_in_lab_bin_the_others_a_folder_each():
    default, *others = C.kube_versions()
    assert C.kube_bin(default) == C.BIN
    assert C.kubectl_dirs(default) == []
    for version in others:
        assert C.kube_bin(version) == C.BIN / version
        assert C.kubectl_dirs(version) == [C.BIN / version]


def test_the_requested_release_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(C.KUBE_VERSION_ENV, raising=False)
    assert C.requested_kube_version() == C.versions()["KUBE_VERSION"]
    monkeypatch.setenv(C.KUBE_VERSION_ENV, "v1.36.3")
    assert C.requested_kube_version() == "1.36.3"
    monkeypatch.setenv(C.KUBE_VERSION_ENV, "1.34.0")
    with pytest.raises(
        ValueError, match=r"GPUSPLIT_KUBE_VERSION '1.34.0' is not a release the lab runs.*1\.37\.2"
    ):
        C.requested_kube_version()


def test_a_manifest_runs_the_binary_of_its_images_release(tmp_path):
    path = write_manifest(tmp_path, "kube-apiserver", "1.35.4")
    assert C.manifest_version(path) == "1.35.4"
    assert C.command_from_manifest(path) == [str(C.BIN / "1.35.4" / "kube-apiserver"), "--v=1"]
    default = C.versions()["KUBE_VERSION"]
    path = write_manifest(tmp_path, "kube-apiserver", default)
    assert C.command_from_manifest(path)[0] == str(C.BIN / "kube-apiserver")
    # no image (a hand-written manifest): the default release's binary
    path = write_manifest(tmp_path, "kube-apiserver", None)
    assert C.manifest_version(path) is None
    assert C.command_from_manifest(path)[0] == str(C.BIN / "kube-apiserver")


def test_a_manifest_of_a_release_the_lab_has_no_binaries_for_is_refused(tmp_path):
    path = write_manifest(tmp_path, "kube-scheduler", "1.33.0", command=("kube-scheduler",))
    with pytest.raises(
        ValueError, match=r"kube-scheduler.yaml: the image's release '1.33.0' is not a release"
    ):
        C.command_from_manifest(path)


def test_static_pod_manifests_name_the_requested_release(monkeypatch):
    monkeypatch.setenv(C.KUBE_VERSION_ENV, "1.36.3")
    manifest = C.static_pod_manifest("kube-controller-manager")
    assert manifest["spec"]["containers"][0]["image"] == "registry.k8s.io/kube-controller-manager:v1.36.3"


def test_up_refuses_a_release_other_than_the_one_the_lab_folder_holds(tmp_path, monkeypatch, capsys):
    manifests = tmp_path / "manifests"
    write_manifest(manifests, "kube-apiserver", "1.37.2")
    monkeypatch.setattr(C, "MANIFESTS", manifests)
    monkeypatch.setattr(C, "LAB", tmp_path)
    monkeypatch.setattr(labctl, "supervisor_pid", lambda: None)
    assert labctl.version_conflict("1.37.2") is None
    why = labctl.version_conflict("1.36.3")
    assert "holds a Kubernetes 1.37.2 cluster" in why and "not 1.36.3" in why and "make lab-reset" in why
    monkeypatch.setenv(C.KUBE_VERSION_ENV, "1.36.3")
    started = []
    monkeypatch.setattr(labctl.subprocess, "Popen", lambda *a, **k: started.append(a))
    assert labctl.up(timeout=1) == 2
    assert "holds a Kubernetes 1.37.2 cluster" in capsys.readouterr().err
    assert started == []
    # the lab's release is its manifests', whatever is asked for
    assert C.lab_kube_version() == "1.37.2"


def test_missing_binaries_are_those_of_the_release(tmp_path, monkeypatch):
    monkeypatch.setattr(C, "BIN", tmp_path)
    for name in ("etcd", "kwok", "kube-apiserver", "kube-scheduler", "kube-controller-manager"):
        (tmp_path / name).write_text("")
    assert labctl.missing_binaries(C.versions()["KUBE_VERSION"]) == []
    missing = labctl.missing_binaries("1.36.3")
    assert [m.rsplit("/", 1)[-1] for m in missing] == [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ]
    assert all("1.36.3" in m for m in missing)
