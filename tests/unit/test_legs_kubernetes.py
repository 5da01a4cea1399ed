"""tools/legs.py's Kubernetes legs: one per older release, its binaries, its tests and a lab of its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.tests.unit.tool_module import load_tool
from lab import components as C

ROOT = Path(__file__).resolve().parents[2]

legs = load_tool("legs")
DATA = legs.load()

SUPPORT = """
releases = ["1.9.0", "1.8.0"]
matrix_only = ["tests/integration/test_v.py::test_slow", "tests/integration/test_up.py::test_upgrade"]
[[features]]
name = "a"
[features.cells."1.9.0"]
state = "proven"
tests = ["tests/integration/test_other.py::test_a"]
[features.cells."1.8.0"]
state = "proven"
tests = ["tests/integration/test_v.py::test_fast", "tests/integration/test_other.py::test_a"]
[[features]]
name = "b"
[features.cells."1.8.0"]
state = "refused"
tests = ["tests/integration/test_up.py::test_upgrade", "tests/integration/test_refuse.py::test_r[x]"]
[[features]]
name = "c"
[features.cells."1.8.0"]
state = "not supported"
reason = "no lab run"
tests = ["tests/integration/test_never.py::test_n"]
"""


def tree(tmp_path: Path, versions: str, support: str = SUPPORT) -> Path:
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "versions.env").write_text(versions)
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "kubernetes_support.toml").write_text(support)
    return tmp_path


def test_a_leg_per_release_but_the_default(tmp_path):
    root = tree(
        tmp_path, "# the pins\nKUBE_VERSION=1.9.0\nKUBE_VERSIONS=1.9.0, 1.8.0,1.7.1\nETCD_VERSION=3\n"
    )
    assert legs.kube_legs(root) == [
        {"name": "k8s1.8.0", "kube": "1.8.0"},
        {"name": "k8s1.7.1", "kube": "1.7.1"},
    ]
    (root / "lab" / "versions.env").write_text("KUBE_VERSION=1.9.0\nKUBE_VERSIONS=1.8.0\n")
    with pytest.raises(ValueError, match=r"KUBE_VERSION '1\.9\.0' is not one of KUBE_VERSIONS \['1\.8\.0'\]"):
        legs.kube_legs(root)


def test_the_project_has_a_leg_for_each_older_release():
    releases = [leg["kube"] for leg in legs.kube_legs()]
    assert releases == [v for v in C.kube_versions() if v != C.versions()["KUBE_VERSION"]]
    assert releases, "lab/versions.env lists no release besides the default"


def test_a_release_runs_the_leg_files_and_its_cells_tests_less_the_slow_ones(tmp_path):
    root = tree(tmp_path, "")
    monkey_files = ("tests/integration/test_v.py",)
    run, deselect = legs.kube_tests("1.8.0", root, files=monkey_files)
    # the file whole (its fast test with it), the other cells' tests once each, not the not-supported one's
    assert run == [
        "tests/integration/test_v.py",
        "tests/integration/test_other.py::test_a",
        "tests/integration/test_refuse.py::test_r[x]",
    ]
    # the slow test of the whole file is deselected; the slow one of another file is never named
    assert deselect == ["tests/integration/test_v.py::test_slow"]
    run, deselect = legs.kube_tests("1.9.0", root, files=monkey_files)
    assert run == ["tests/integration/test_v.py", "tests/integration/test_other.py::test_a"]
    with pytest.raises(legs.LegError, match=r"^leg k8s1\.7\.0: tools/kubernetes_support\.toml has no cells"):
        legs.kube_tests("1.7.0", root, files=monkey_files)


def test_each_older_release_runs_its_version_tests_and_the_split():
    for leg in legs.kube_legs():
        run, deselect = legs.kube_tests(leg["kube"])
        assert run[0] == "tests/integration/test_k8s_versions.py"
        assert "tests/integration/test_split_lab.py::test_site_applies_and_verifies_every_node" in run
        # the DRA chart and the stock plugin's chart run on every release; only the upgrade is left to test-matrix
        assert (
            "tests/integration/test_k8s_versions.py::test_dra_host_share_in_the_version_the_release_serves"
            not in (deselect)
        )
        assert any(t.startswith("tests/integration/test_stock_plugin_chart.py::") for t in run)
        for test in run:
            assert (ROOT / test.split("::")[0]).is_file(), test


def test_the_legs_labs_are_apart_from_each_other_and_the_default_labs():
    every = DATA["legs"] + legs.kube_legs()
    envs = {leg["name"]: legs.lab_env(every, leg, ROOT) for leg in every}
    hosts = [env["GPUSPLIT_LAB_HOST"] for env in envs.values() if env]
    assert len(hosts) == len(every) - 1
    # each lab and the four pytest-xdist workers above it (lab/workers.py); the default leg's at 127.0.0.1
    spans = [{int(h.split(".")[1]) + n for n in range(5)} for h in [*hosts, "127.0.0.1"]]
    assert sum(len(s) for s in spans) == len(set().union(*spans))
    assert len({env["GPUSPLIT_LAB_DIR"] for env in envs.values() if env}) == len(hosts)
    for leg in legs.kube_legs():
        env = envs[leg["name"]]
        assert env["GPUSPLIT_KUBE_VERSION"] == leg["kube"] == env["K8S"]
        assert env["GPUSPLIT_LAB_REAL_NODE"] == "0"
        assert env["GPUSPLIT_LAB_DIR"] == str(ROOT / ".lab" / "legs" / leg["name"])
        assert env["GPUSPLIT_OUT_DIR"] == str(ROOT / "out" / "legs" / leg["name"])


def test_no_loopback_address_past_the_eighth_leg_is_a_named_failure():
    many = [{"name": f"k8s1.{i}.0", "kube": f"1.{i}.0"} for i in range(9)]
    assert legs.lab_env(many, many[7])["GPUSPLIT_LAB_HOST"] == "127.224.0.1"
    with pytest.raises(legs.LegError, match=r"^leg k8s1\.8\.0: no loopback address 127\.256\.0\.1"):
        legs.lab_env(many, many[8])


def test_a_kubernetes_legs_environment_is_its_own(tmp_path):
    leg = legs.kube_legs()[0]
    every = DATA["legs"] + legs.kube_legs()
    python = tmp_path / "venv" / "bin" / "python"
    caller = {
        "PATH": "/usr/bin",
        "GPUSPLIT_LAB_HOST": "127.0.9.1",
        "GPUSPLIT_LAB_DIR": "/elsewhere",
        "GPUSPLIT_OUT_DIR": "/elsewhere/out",
        "GPUSPLIT_LAB_REAL_NODE": "1",
        "K8S": "1.37.2",
        "PYTEST_XDIST_WORKER": "gw1",
        "VIRTUAL_ENV": "/v",
    }
    env = legs.leg_env(every, leg, python, ROOT, environ=caller)
    assert env["PATH"].split(":") == [
        str(ROOT / ".lab" / "bin" / leg["kube"]),
        str(python.parent),
        "/usr/bin",
    ]
    assert {k: v for k, v in env.items() if k != "PATH"} == legs.lab_env(every, leg, ROOT)
    assert "GPUSPLIT_KUBE_VERSION" not in legs.leg_env(every, DATA["legs"][1], python, ROOT, environ=caller)


def test_a_kubernetes_legs_parts_build_its_binaries_then_run_its_tests(tmp_path):
    leg = legs.kube_legs()[0]
    python = tmp_path / "bin" / "python"
    (build, build_argv, _), (lab, lab_argv, _) = legs.kube_parts(leg, python, "test")
    assert (build, lab) == ("build", "lab")
    assert build_argv == [
        "env",
        "KUBE_COMPONENTS=kube-apiserver kube-scheduler kube-controller-manager kubectl",
        str(ROOT / "lab" / "build.sh"),
        "kube",
    ]
    run, deselect = legs.kube_tests(leg["kube"])
    assert lab_argv[0] == str(python) and lab_argv[-len(run) :] == run
    assert [lab_argv[i + 1] for i, arg in enumerate(lab_argv) if arg == "--deselect"] == deselect
    matrix = legs.kube_parts(leg, python, "matrix")[1][1]
    assert matrix[-3:] == ["-m", "integration", "tests"] and "--deselect" not in matrix


def test_the_leg_builds_what_its_lab_starts_and_build_sh_knows():
    # the lab starts the control plane from the release's folder (lab/lab.py missing_binaries)
    assert set(C.STATIC_COMPONENTS) <= set(legs.KUBE_LEG_COMPONENTS)
    known = re.search(r'^KUBE_COMMANDS="([^"]+)"', (ROOT / "lab" / "build.sh").read_text(), re.M).group(1)
    assert set(legs.KUBE_LEG_COMPONENTS) <= set(known.split())
    assert "kubeadm" in known.split() and "kubeadm" not in legs.KUBE_LEG_COMPONENTS


def test_build_counts_are_read_off_lab_build_sh():
    built = (
        "[lab-build] building kube-apiserver v1.36.3 (a cold build takes many minutes on two cores)\n"
        "[lab-build] kube-apiserver: done in 9 s (0 packages compiled, 0 modules downloaded)\n"
        "[lab-build] kubectl: done in 3 s (12 packages compiled, 0 modules downloaded)\n"
    )
    assert legs.build_counts(built) == (
        "2 built in 12 s: kube-apiserver 9 s (0 packages compiled), kubectl 3 s (12 packages compiled)"
    )
    cached = "[lab-build] kubernetes v1.35.4 binaries cached (.lab/bin/1.35.4)\n"
    assert legs.build_counts(cached) == "kubernetes v1.35.4 binaries cached"
    failed = "[lab-build] error: could not download k8s.io/kubernetes v1.35.4\n"
    assert legs.build_counts(failed) == "error: could not download k8s.io/kubernetes v1.35.4"


def test_a_failed_build_leaves_the_lab_part_out_as_a_named_failure(monkeypatch):
    leg = legs.kube_legs()[0]
    ran = []

    def run_part(leg_, part, argv, env, counts, logs, log=print):
        ran.append((part, env["GPUSPLIT_KUBE_VERSION"]))
        return f"{leg_['name']} {part} (exit status 1)" if part == "build" else None

    monkeypatch.setattr(legs, "run_part", run_part)
    monkeypatch.setattr(legs, "ensure_venv", lambda leg_, data, log=print: ROOT / ".venv" / "bin" / "python")
    monkeypatch.setattr(legs, "python_version", lambda python: "3.13.0")
    said = []
    every = DATA["legs"] + legs.kube_legs()
    assert legs.run_legs(DATA, [leg], "test", "0", log=said.append, every=every) == 1
    assert ran == [("build", leg["kube"])]
    default_core = legs.pin(next(x for x in DATA["legs"] if x.get("default")), "ansible-core")
    assert said[0] == (
        f"== leg {leg['name']}: Kubernetes {leg['kube']} lab, ansible-core {default_core} on Python 3.13.0 "
        "(.venv/bin/python) =="
    )
    assert f"[{leg['name']}] lab: not run, the release's binaries were not built" in said
    assert said[-1] == (
        f"FAILED: {leg['name']} build (exit status 1); {leg['name']} lab (not run: no binaries of Kubernetes "
        f"{leg['kube']})"
    )


def test_build_runs_lab_build_sh_per_release_and_names_a_failure():
    every = DATA["legs"] + legs.kube_legs()
    calls = []

    def run(argv, cwd, env):
        calls.append((argv[-2:], env["K8S"]))
        return 0 if env["K8S"] != every[-1]["kube"] else 2

    said = []
    assert legs.build_kube_legs(every, legs.kube_legs(), run=run, log=said.append) == 1
    assert calls == [([str(ROOT / "lab" / "build.sh"), "kube"], leg["kube"]) for leg in legs.kube_legs()]
    assert said == [f"[{every[-1]['name']}] FAILED: lab/build.sh kube: exit status 2"]


def test_the_tests_of_a_file_run_in_the_order_it_defines_them(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test_a.py").write_text(
        "def test_first():\n    pass\n\n\ndef test_second():\n    pass\n"
    )
    (tmp_path / "t" / "test_b.py").write_text("def test_only():\n    pass\n")
    given = [
        "t/test_b.py::test_only",
        "t/test_a.py::test_second",
        "t/test_a.py::test_first[x]",
        "t/test_c.py",
    ]
    assert legs.in_file_order(given, tmp_path) == [
        "t/test_b.py::test_only",
        "t/test_a.py::test_first[x]",
        "t/test_a.py::test_second",
        "t/test_c.py",
    ]
    # the project's: the PodDisruptionBudget test comes before evict, as in test_resplit_lab.py
    run, _ = legs.kube_tests(legs.kube_legs()[0]["kube"])
    pdb = "tests/integration/test_resplit_lab.py::test_a_pdb_blocks_evict_and_nothing_changes"
    evict = "tests/integration/test_resplit_lab.py::test_evict_takes_exactly_that_pod_then_the_node_verifies"
    assert run.index(pdb) < run.index(evict)
