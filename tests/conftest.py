"""Shared pytest setup.

- the collection imports as ansible_collections.gpusplit.k8s: from the tree the checkout sits in when
  it is laid out as ansible_collections/gpusplit/k8s (ansible-test), else from .collections (`make venv`);
- the lab fixtures (`lab`, `kubectl`, `core_api`): the lab control plane is started once per
  session by the first test that asks for it. It is never skipped: if it cannot be built or
  started, those tests error with the reason (and in CI, CI=true, the run fails);
- in CI (CI=true) a test or module that ends skipped fails instead, unless its skip reason is on
  CI_ALLOWED_SKIPS below: a missing reference file, tool or module cache is a broken CI machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def collections_root(root: Path = ROOT) -> Path:
    """The folder that holds ansible_collections/ for this checkout.

    Where the checkout itself sits at ansible_collections/gpusplit/k8s (as ansible-test lays a
    collection out, or an installed collection), that tree's root; otherwise the .collections
    link that `make venv` makes.
    """
    if root.parent.parent.name == "ansible_collections" and root.parent.name == "gpusplit":
        return root.parents[2]
    return root / ".collections"


COLLECTIONS = collections_root()
# the ansible commands that tests start (ansible-doc, ansible-playbook, molecule) find the
# collection there too, whichever layout this is (the variable wins over ansible.cfg)
os.environ.setdefault("ANSIBLE_COLLECTIONS_PATH", str(COLLECTIONS))

for path in (COLLECTIONS, ROOT):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from lab.workers import worker_lab  # noqa: E402

# this pytest-xdist worker's own lab, before lab.components is imported below (it reads them once)
os.environ.update(worker_lab(os.environ, ROOT))

from lab import components as C  # noqa: E402
from lab import lab as labctl  # noqa: E402
from lab.gates import enable_generic_workload  # noqa: E402
from lab.lab import TRANSIENT_ERRORS as TRANSIENT  # noqa: E402

# Skips that CI accepts: (folder or file under tests/, skip-reason pattern, why it is legitimate).
# Anything else that skips when CI=true fails the run, naming this list.
CI_ALLOWED_SKIPS: tuple[tuple[str, str, str], ...] = (
    ("bench/", r"benchmarks are off", "timing-only: measured by `make bench`, not by `make test`"),
    ("bench/", r"memory growth runs with --benchmark-enable", "timing-only: `make bench`"),
    ("bench/", r"applies 2,000 DaemonSets", "a load measurement: `make bench`"),
    ("unit/test_host_files_render.py", r"needs systemd-analyze$", "systemd is optional on a build machine"),
    (
        "unit/plugins/modules/test_managed_host_pythons.py",
        r"no Python 3\.8-3\.10 here",
        "older Pythons come from pyenv, a developer-machine extra; .ci/run installs none",
    ),
    (
        "integration/test_ssh_host.py",
        r"needs pyenv's Python 3\.(9|10) ",
        "pyenv's interpreters are a developer-machine extra; .ci/run installs none",
    ),
    (
        "integration/test_k8s_upgrade.py",
        r"upgrades a 1\.36 lab to 1\.37",
        "the upgrade starts from a 1.36 lab; make test runs the default release, a 1.36.3 lab runs it",
    ),
)
TESTS = Path(__file__).resolve().parent


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


def skip_allowed_in_ci(path: Path, reason: str) -> bool:
    """True when a skip of the test file at path, for this reason, is on CI_ALLOWED_SKIPS."""
    try:
        rel = path.resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return False
    return any(
        (rel == where or (where.endswith("/") and rel.startswith(where))) and re.search(pattern, reason)
        for where, pattern, _why in CI_ALLOWED_SKIPS
    )


def _fail_skip_in_ci(report, path: Path) -> None:
    if not (_ci() and report.skipped and not hasattr(report, "wasxfail")):
        return
    reason = _skip_reason(report)
    if skip_allowed_in_ci(path, reason):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"skipped in CI (CI=true), which fails the run: {reason}\n"
        "Make what it needs available to CI (.ci/run, make venv, lab/build.sh), or, if the skip is "
        "legitimate on every CI machine, add it to CI_ALLOWED_SKIPS in tests/conftest.py."
    )


# the fixtures that reach the lab: every test that uses one runs in the pytest-xdist worker of its lab
# group, one after the other in the order collected, while the other workers take the rest
LAB_FIXTURES = {"lab", "kubectl", "core_api", "generic_workload"}
# The lab tests in two groups, one per worker: each worker has a lab of its own (worker_lab), so the two
# groups run at the same time. A file listed here is in "lab-b"; every other lab test is in "lab-a". A
# test file stays whole in one group (its module fixtures set its lab up once). Chosen from a serial run's
# --durations=0 (2026-12-02): lab-a about 1,950 s, lab-b about 1,690 s; the tests outside the lab
# (about 500 s) go to the worker that finishes its group first, lab-b's.
LAB_GROUP_B = frozenset(
    {
        "integration/test_feature_gates_rollout.py",
        "integration/test_resplit_lab.py",
        "integration/test_gpu_operator_lab.py",
        "integration/test_ssh_host.py",
        "integration/test_dist.py",
        "integration/test_stock_plugin_chart.py",
        "integration/test_diagnose_lab.py",
    }
)


def lab_group(path: Path) -> str:
    """The xdist group of a lab test file: lab-b where LAB_GROUP_B lists it, else lab-a."""
    try:
        rel = path.resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return "lab-a"
    return "lab-b" if rel in LAB_GROUP_B else "lab-a"


def pytest_configure(config):
    stale = sorted(name for name in LAB_GROUP_B if not (TESTS / name).is_file())
    if stale:
        raise pytest.UsageError(
            f"LAB_GROUP_B in tests/conftest.py names test files that do not exist: {stale}"
        )


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups off the items
def pytest_collection_modifyitems(config, items):
    for item in items:
        in_lab = "integration" in Path(str(item.path)).parts or item.get_closest_marker("integration")
        if in_lab or LAB_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group(lab_group(Path(str(item.path)))))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_skip_in_ci(outcome.get_result(), Path(str(item.path)))


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    path = getattr(collector, "path", None)
    if path is not None:
        _fail_skip_in_ci(outcome.get_result(), Path(str(path)))


class Kubectl:
    def __init__(self, kubeconfig: Path):
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig)}

    def __call__(
        self, *args: str, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            ["kubectl", *args], input=stdin, capture_output=True, text=True, env=self.env, timeout=120
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def retrying(self, *args: str, check: bool = True, stdin: str | None = None, timeout: float = 90):
        """kubectl, retried while the shared lab's apiserver restarts (feature-gate tests)."""
        deadline = time.time() + timeout
        while True:
            proc = self(*args, check=False, stdin=stdin)
            if proc.returncode == 0 or not any(t in proc.stderr for t in TRANSIENT) or time.time() > deadline:
                break
            time.sleep(2)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def json(self, *args: str) -> dict:
        return json.loads(self(*args, "-o", "json").stdout)

    def namespace(self, name: str, labels: dict | None = None, timeout: float = 90) -> str:
        """Create a namespace and wait for its default ServiceAccount.

        Until the service-account controller has made it, the apiserver refuses every pod in the
        namespace ("serviceaccount default not found"), which is not what a test is about.
        """
        self.retrying("create", "namespace", name)
        if labels:
            self.retrying("label", "namespace", name, *[f"{k}={v}" for k, v in labels.items()])
        self.wait_for(
            lambda: self("-n", name, "get", "serviceaccount", "default", check=False).returncode == 0,
            timeout=timeout,
            what=f"the default ServiceAccount of namespace {name}",
        )
        return name

    def wait_running(self, ns: str, count: int, timeout: float = 120, what: str | None = None) -> None:
        """Wait until ``count`` pods of namespace ``ns`` are Running."""

        def running():
            return sum(
                p["status"].get("phase") == "Running" for p in self.json("-n", ns, "get", "pods")["items"]
            )

        self.wait_for(
            lambda: running() == count, timeout=timeout, what=what or f"{count} pods running in {ns}"
        )

    def wait_for(self, predicate, timeout: float = 60, interval: float = 0.5, what: str = "condition"):
        timeout = timeout * C.wait_scale()
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


@pytest.fixture(scope="session")
def lab():
    """The running lab. Started here if it was not running, and stopped at the end if so."""
    was_running = labctl.supervisor_pid() is not None
    missing = labctl.missing_binaries()
    if missing:
        pytest.fail(f"lab binaries missing ({', '.join(missing)}): run `make lab-build`", pytrace=False)
    rc = labctl.up(timeout=240)
    if rc != 0:
        pytest.fail("the lab control plane did not become healthy (see the log tails above)", pytrace=False)
    yield C
    if not was_running and os.environ.get("GPUSPLIT_KEEP_LAB") != "1":
        labctl.down()


@pytest.fixture(scope="session")
def kubectl(lab) -> Kubectl:
    return Kubectl(C.KUBECONFIG)


@pytest.fixture(scope="session")
def core_api(lab):
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config(str(C.KUBECONFIG)))


@pytest.fixture(scope="session")
def generic_workload(lab, kubectl):
    """GenericWorkload on in the lab (through the control_plane_gates role), for gang tests.

    Enabled only when scheduling.k8s.io/v1beta1 is not already served; the lab's manifests are
    put back as they were at the end of the session.
    """
    if "scheduling.k8s.io/v1beta1" in kubectl("api-versions").stdout.split():
        yield
        return
    found = {p.name: p.read_bytes() for p in C.MANIFESTS.glob("*.yaml")}
    enable_generic_workload()
    assert "scheduling.k8s.io/v1beta1" in kubectl("api-versions").stdout.split()
    yield
    for name, data in found.items():
        (C.MANIFESTS / name).write_bytes(data)
    labctl.wait_healthy(180)
