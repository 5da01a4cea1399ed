"""plugins/module_utils/_k8s/helm.py: the helm commands, the parsing of helm's JSON and the install/upgrade decision."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s import helm as H

ROW = {
    "name": "dra",
    "namespace": "dra-ns",
    "revision": "2",
    "status": "deployed",
    "chart": "dra-driver-nvidia-gpu-0.4.1",
    "app_version": "v0.4.1",
}
OCI = "oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu"


def test_commands_use_only_flags_helm_3_and_4_share():
    listed = H.list_command("helm", "dra", "dra-ns", kubeconfig="/k", context="lab")
    assert listed == [
        "helm", "list", "-n", "dra-ns", "--filter", "^dra$", "-o", "json", "--kubeconfig", "/k", "--kube-context", "lab"
    ]  # fmt: skip
    assert "--all" not in listed  # removed in helm 4
    assert H.values_command("helm", "dra", "dra-ns") == [
        "helm",
        "get",
        "values",
        "dra",
        "-n",
        "dra-ns",
        "-o",
        "json",
    ]
    oci = H.upgrade_command(
        "helm",
        "dra",
        "dra-ns",
        OCI,
        "0.4.1",
        "/v.yaml",
        repo_url="https://ignored",
        wait=True,
        timeout="10m0s",
    )
    assert oci == [
        "helm", "upgrade", "--install", "dra", OCI, "--version", "0.4.1", "-n", "dra-ns",
        "--create-namespace", "--reset-values", "-f", "/v.yaml", "--wait", "--timeout", "10m0s",
    ]  # fmt: skip
    classic = H.upgrade_command(
        "helm",
        "op",
        "gpu-operator",
        "gpu-operator",
        "v25.10.0",
        "/v.yaml",
        repo_url="https://helm.ngc.nvidia.com/nvidia",
        create_namespace=False,
    )
    assert classic[classic.index("--repo") + 1] == "https://helm.ngc.nvidia.com/nvidia"
    assert "--create-namespace" not in classic and "--wait" not in classic


def test_durations():
    assert H.duration("10m0s") == "10m0s" and H.duration(600) == "600s" and H.duration("90") == "90s"
    for bad in ("ten minutes", "", "-5s", True, 0):
        with pytest.raises(H.HelmError, match="not a duration"):
            H.duration(bad)


def test_requests_helm_would_refuse_are_refused_first():
    H.check_request("dra", "dra-ns", OCI, "0.4.1", "10m0s")
    with pytest.raises(H.HelmError) as caught:
        H.check_request("Bad_Name", "ns", OCI, "", "soon")
    text = str(caught.value)
    assert "release name 'Bad_Name'" in text and "chart_version is empty" in text and "'soon'" in text
    with pytest.raises(H.HelmError, match="53"):
        H.check_request("a" * 54, "ns", OCI, "1")


def test_parse_list_and_values():
    assert (
        H.parse_list('[{"name": "other"}, {"name": "dra", "status": "deployed"}]', "dra")["status"]
        == "deployed"
    )
    assert H.parse_list("[]", "dra") is None
    with pytest.raises(H.HelmError, match="not JSON"):
        H.parse_list("Error: Kubernetes cluster unreachable", "dra")
    assert H.parse_values("null") == {}
    assert H.parse_values('{"a": {"b": 1}}') == {"a": {"b": 1}}


@pytest.mark.parametrize(
    ("row", "live", "values", "action", "reason"),
    [
        (None, {}, {"a": 1}, "install", "not installed"),
        (ROW, {"a": 1}, {"a": 1}, "none", None),
        (
            {**ROW, "chart": "dra-driver-nvidia-gpu-0.4.0"},
            {"a": 1},
            {"a": 1},
            "upgrade",
            "0.4.0 is installed",
        ),
        ({**ROW, "status": "failed"}, {"a": 1}, {"a": 1}, "upgrade", "failed, not deployed"),
        (ROW, {"a": 1}, {"a": 2}, "upgrade", "values differ"),
        (ROW, {"a": {"b": True}}, {"a": {"b": True}}, "none", None),
    ],
)
def test_decide(row, live, values, action, reason):
    decision = H.decide(row, live, OCI, "0.4.1", values)
    assert decision["action"] == action
    if reason:
        assert any(reason in r for r in decision["reasons"]), decision
    else:
        assert decision["reasons"] == []


def test_the_chart_name_of_a_reference():
    assert H.chart_name_of(OCI) == "dra-driver-nvidia-gpu"
    assert H.chart_name_of("nvidia-dra-driver-gpu") == "nvidia-dra-driver-gpu"
    assert H.is_oci(OCI) and not H.is_oci("gpu-operator")


def test_values_that_are_not_a_mapping_are_refused():
    with pytest.raises(H.HelmError, match="helm get values printed a list, not a mapping"):
        H.parse_values("[1, 2]")


def test_the_module_names_the_release_in_a_refusal(tmp_path, capsys):
    import json

    from ansible.module_utils.testing import patch_module_args

    from ansible_collections.gpusplit.k8s.plugins.modules import helm_release

    helm = tmp_path / "helm"
    helm.write_text("#!/bin/sh\nexit 0\n")
    helm.chmod(0o755)
    args = {
        "name": "Not_A_Label",
        "namespace": "dra-ns",
        "chart_ref": OCI,
        "chart_version": "0.4.1",
        "binary_path": str(helm),
    }
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        helm_release.main()
    out = json.loads(capsys.readouterr().out)
    assert exc.value.code == 1
    assert out["msg"].startswith(
        "helm release dra-ns/Not_A_Label: release name 'Not_A_Label' must be a DNS label"
    )


def write_chart(base, name, version, app_version=None, subchart=None):
    folder = base / name
    (folder / "templates").mkdir(parents=True)
    meta = f"apiVersion: v2\nname: {name}\nversion: {version}\n"
    if app_version:
        meta += f"appVersion: {app_version}\n"
    (folder / "Chart.yaml").write_text(meta)
    if subchart:  # a vendored subchart's Chart.yaml must not be taken for the chart's
        sub = folder / "charts" / subchart
        sub.mkdir(parents=True)
        (sub / "Chart.yaml").write_text(f"apiVersion: v2\nname: {subchart}\nversion: 0.19.0\n")
    return folder


def package(folder, dest):
    import tarfile

    with tarfile.open(dest, "w:gz") as archive:
        archive.add(folder, arcname=folder.name)
    return dest


def test_a_local_chart_is_read_from_a_folder_or_a_packaged_tgz(tmp_path):
    folder = write_chart(tmp_path, "gpu-operator", "v26.7.0", "v26.7.0", subchart="node-feature-discovery")
    tgz = package(folder, tmp_path / "gpu-operator-v26.7.0.tgz")
    want = {"name": "gpu-operator", "version": "v26.7.0", "app_version": "v26.7.0"}
    assert H.read_chart_metadata(str(folder)) == want
    assert H.read_chart_metadata(str(tgz)) == want
    with pytest.raises(H.HelmError, match="neither a chart folder nor a packaged chart"):
        H.read_chart_metadata(str(tmp_path / "missing"))
    (tmp_path / "junk.tgz").write_bytes(b"not a tarball")
    with pytest.raises(H.HelmError, match="cannot read the Chart.yaml of the local chart .*junk.tgz"):
        H.read_chart_metadata(str(tmp_path / "junk.tgz"))


@pytest.mark.parametrize(
    "name, version, app_version, message",
    [
        ("dra-driver-nvidia-gpu", "0.4.1", None, None),
        ("dra-driver-nvidia-gpu", "v0.4.1", None, None),  # a leading v aside
        (
            "nvidia-device-plugin",
            "0.20.0",
            None,
            "is nvidia-device-plugin 0.20.0, but gpusplit was built for dra-driver-nvidia-gpu 0.4.1",
        ),
        (
            "dra-driver-nvidia-gpu",
            "0.4.0",
            None,
            "is dra-driver-nvidia-gpu 0.4.0, but gpusplit was built for dra-driver-nvidia-gpu 0.4.1",
        ),
        (
            "dra-driver-nvidia-gpu",
            "v1.0.0-devel",
            "main-latest",
            "v1.0.0-devel (appVersion main-latest), an unreleased source checkout, not the released "
            "dra-driver-nvidia-gpu 0.4.1 gpusplit was built for",
        ),
    ],
)
def test_a_local_chart_must_be_the_one_gpusplit_was_built_for(name, version, app_version, message):
    meta = {"name": name, "version": version, "app_version": app_version or ""}
    if message is None:
        assert H.check_local_chart(meta, "/c", "dra-driver-nvidia-gpu", "0.4.1") == meta
    else:
        with pytest.raises(H.HelmError) as refused:
            H.check_local_chart(meta, "/c", "dra-driver-nvidia-gpu", "0.4.1")
        assert message in str(refused.value)
        if "devel" in version:
            assert str(refused.value).endswith("helm package /c --version 0.4.1 --app-version 0.4.1")


def test_a_local_chart_is_installed_without_version_and_repo_flags():
    cmd = H.upgrade_command("helm", "dra", "dra-ns", "/c/dra.tgz", "0.4.1", "/v.yaml", local=True)
    assert cmd[:5] == ["helm", "upgrade", "--install", "dra", "/c/dra.tgz"]
    assert "--version" not in cmd and "--repo" not in cmd
    assert (
        H.decide(ROW, {}, "/c/dra.tgz", "0.4.1", {}, chart_name="dra-driver-nvidia-gpu")["action"] == "none"
    )


def test_the_module_refuses_a_local_chart_of_another_version_before_running_helm(tmp_path, capsys):
    import json

    from ansible.module_utils.testing import patch_module_args

    from ansible_collections.gpusplit.k8s.plugins.modules import helm_release

    ran = tmp_path / "helm-ran"
    helm = tmp_path / "helm"
    helm.write_text(f"#!/bin/sh\ntouch {ran}\nexit 0\n")
    helm.chmod(0o755)
    folder = write_chart(tmp_path, "gpu-operator", "v1.0.0-devel", "main-latest")
    args = {
        "name": "gpu-operator",
        "namespace": "gpu-operator",
        "chart_path": str(folder),
        "chart_name": "gpu-operator",
        "chart_version": "v26.7.0",
        "binary_path": str(helm),
    }
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        helm_release.main()
    out = json.loads(capsys.readouterr().out)
    assert exc.value.code == 1
    assert out["msg"].startswith(
        f"helm release gpu-operator/gpu-operator: the local chart {folder} is gpu-operator v1.0.0-devel"
    )
    assert f"helm package {folder} --version v26.7.0 --app-version v26.7.0" in out["msg"]
    assert not ran.exists()  # refused before helm ran at all
