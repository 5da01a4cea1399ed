"""The built tarball, installed the way users install it, run against the lab from outside the checkout.

`make dist` builds the tarball once for the file; `ansible-galaxy collection install` puts it into
an empty collections path; from a folder outside the checkout, with no ansible.cfg, ansible-doc
renders every module, role and filter of that install, and the demo's playbooks run by their
collection names (`ansible-playbook gpusplit.k8s.site ...`) against the lab inventory.

Job slicing by --limit (docs/awx.md): two slices of the lab inventory, one after the other, each
planning only its hosts; the second keeps the first's DaemonSets and verify.yml ends with every node
OK. AWX's slicing (each slice's inventory holds only its hosts) with gpusplit_prune_scope=plan: a
slice leaves the other slice's DaemonSets and labels alone.

The quick start (docs/quickstart.md): every command of its shell blocks, read from the page, from a
fresh HOME, against inventory/example with the lab's settings of its two hosts added.

The lab inventory derives gpusplit_lab_root from playbook_dir, which for an installed collection's
playbook is the install, so the run passes the checkout as gpusplit_lab_root (the fakes, fixtures
and lab state live there) and a scratch gpusplit_out_dir.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.split_render import daemonset_name
from lab import components as C
from lab import nodes as labnodes

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
INVENTORY = ROOT / "inventory" / "lab"
PLUGIN_SELECTOR = "app.kubernetes.io/managed-by=gpusplit,app.kubernetes.io/name=gpusplit-device-plugin"
SLICES = (["lab-dgx-01", "lab-ws-01", "lab-ssh-01"], ["lab-h200-01", "lab-hgx-lost-01", "lab-a100-01"])


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    """The collection tarball as `make dist` builds it, once for every test of this file."""
    dist = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "dist.py"), str(dist)], capture_output=True, text=True
    )
    assert build.returncode == 0, build.stdout + build.stderr
    return Path(build.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def installed(tmp_path_factory, tarball) -> dict:
    """The tarball installed into an empty collections path; a working folder outside the checkout."""
    collections = tmp_path_factory.mktemp("collections")
    assert not any(collections.iterdir())
    work = tmp_path_factory.mktemp("work")
    assert ROOT not in work.parents
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_COLLECTIONS_PATH=str(collections),
        ANSIBLE_NOCOLOR="1",
        PATH=f"{BIN}{os.pathsep}{ROOT / '.lab' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
    )
    # kubernetes.core comes with the ansible package in the virtual environment (--no-deps: no Galaxy here)
    install = subprocess.run(
        [
            str(BIN / "ansible-galaxy"),
            "collection",
            "install",
            "--no-deps",
            "-p",
            str(collections),
            str(tarball),
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    listing = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "list", "gpusplit.k8s", "--format", "json"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert listing.returncode == 0, listing.stdout + listing.stderr
    found = json.loads(listing.stdout)
    # the only gpusplit.k8s ansible sees is the install (not the checkout, not its .collections link)
    assert list(found) == [str(collections / "ansible_collections")], found
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    assert found[str(collections / "ansible_collections")]["gpusplit.k8s"]["version"] == version
    out = tmp_path_factory.mktemp("out")
    return {
        "env": env,
        "work": work,
        "out": out,
        "install": collections / "ansible_collections" / "gpusplit" / "k8s",
    }


def playbook(installed, name: str, *extra: str, inventory: Path = INVENTORY) -> subprocess.CompletedProcess:
    """gpusplit.k8s.<name> from the install, run from the folder outside the checkout."""
    run = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            f"gpusplit.k8s.{name}",
            "-i",
            str(inventory),
            "-e",
            json.dumps({"gpusplit_lab_root": str(ROOT), "gpusplit_out_dir": str(installed["out"])}),
            *extra,
        ],
        cwd=installed["work"],
        env=installed["env"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, f"gpusplit.k8s.{name} failed:\n{run.stdout[-6000:]}\n{run.stderr[-3000:]}"
    return run


def report(installed) -> dict:
    return json.loads((installed["out"] / "fleet-report.json").read_text())


def test_ansible_doc_renders_every_module_role_and_filter_of_the_install(installed):
    env, work = installed["env"], installed["work"]
    expected = {
        "module": sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if p.stem != "__init__"),
        "role": sorted(p.parent.parent.name for p in (ROOT / "roles").glob("*/meta/argument_specs.yml")),
        "filter": sorted(p.stem for p in (ROOT / "plugins" / "filter").glob("*.yml")),
    }
    assert sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir()) == expected["role"]
    for kind, names in expected.items():
        listed = subprocess.run(
            [str(BIN / "ansible-doc"), "-t", kind, "--list", "--json", "gpusplit.k8s"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
        )
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert sorted(n.split(".")[-1] for n in json.loads(listed.stdout)) == names, kind
        docs = subprocess.run(
            [str(BIN / "ansible-doc"), "-t", kind, "--json", *(f"gpusplit.k8s.{n}" for n in names)],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
        )
        # (ansible-core 2.21's ansible-doc -t role warns about a collection of its own, which has no version)
        warnings = [
            line
            for line in docs.stderr.splitlines()
            if "WARNING" in line and "/ansible/_internal/ansible_collections/" not in line
        ]
        assert docs.returncode == 0 and warnings == [], docs.stderr[-3000:]
        rendered = json.loads(docs.stdout)
        assert sorted(n.split(".")[-1] for n in rendered) == names, kind
        for name, doc in rendered.items():
            if kind == "role":
                assert doc["entry_points"]["main"]["short_description"], name
                source = Path(doc["path"])
            else:
                assert doc["doc"]["short_description"] and doc["doc"]["description"], name
                source = Path(doc["doc"]["filename"])
            assert source.is_relative_to(installed["install"]), source


def test_site_verify_and_diagnose_run_by_collection_name(lab, kubectl, installed):
    site = playbook(installed, "site")
    assert report(installed)["counts"] == {"OK": 6, "DRIFT": 0, "FAIL": 0}, report(installed)
    (installed["out"] / "fleet-report.json").unlink()
    playbook(installed, "verify")
    assert report(installed)["counts"] == {"OK": 6, "DRIFT": 0, "FAIL": 0}, report(installed)
    playbook(installed, "diagnose")
    json.loads((installed["out"] / "pending.json").read_text())
    svg = ElementTree.parse(installed["out"] / "fleet.svg").getroot()
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    # the picture is drawn from this run's report: every node of the lab is on it
    text = " ".join(t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text"))
    for node in report(installed)["nodes"]:
        assert node["host"] in text, node["host"]
    assert "PLAY RECAP" in site.stdout


def _daemonset_versions(kubectl) -> dict[str, str]:
    items = kubectl.json("get", "daemonsets", "-A", "-l", PLUGIN_SELECTOR)["items"]
    return {d["metadata"]["name"]: d["metadata"]["resourceVersion"] for d in items}


def test_two_limit_slices_one_after_the_other_leave_every_node_ok(lab, kubectl, installed):
    """Each slice plans only its own hosts; the second keeps what the first applied (docs/awx.md)."""
    first = playbook(installed, "split", "--limit", ",".join([*SLICES[0], "localhost"]))
    text = " ".join(first.stdout.split())
    assert "inventory host(s) not planned in this run" in text
    after_first = _daemonset_versions(kubectl)
    # the first slice's split plugins exist (the nodes of its hosts that have a Kubernetes share)
    assert {"gpusplit-dp-lab-dgx-01", "gpusplit-dp-lab-ws-01"} <= set(after_first), after_first

    second = playbook(installed, "split", "--limit", ",".join([*SLICES[1], "localhost"]))
    assert "inventory host(s) not planned in this run" in " ".join(second.stdout.split())
    after_second = _daemonset_versions(kubectl)
    for name in ("gpusplit-dp-lab-dgx-01", "gpusplit-dp-lab-ws-01"):
        assert after_second.get(name) == after_first[name], f"the second slice touched {name}"

    (installed["out"] / "fleet-report.json").unlink(missing_ok=True)
    playbook(installed, "verify")
    assert report(installed)["counts"] == {"OK": 6, "DRIFT": 0, "FAIL": 0}, report(installed)


def _slice_inventory(tmp_path: Path, hosts: list[str]) -> Path:
    """The lab inventory as AWX hands it to one slice of a sliced job: only that slice's GPU hosts."""
    dest = tmp_path / "slice"
    shutil.copytree(INVENTORY, dest)
    doc = yaml.safe_load((dest / "hosts.yml").read_text())
    gpu_nodes = doc["all"]["children"]["gpu_nodes"]["hosts"]
    doc["all"]["children"]["gpu_nodes"]["hosts"] = {h: gpu_nodes[h] for h in hosts}
    (dest / "hosts.yml").write_text(yaml.safe_dump(doc))
    return dest


def _split_labels(kubectl, nodes) -> dict[str, str | None]:
    items = kubectl.json("get", "nodes")["items"]
    return {
        n["metadata"]["name"]: n["metadata"]["labels"].get("gpusplit.io/split")
        for n in items
        if n["metadata"]["name"] in nodes
    }


def test_awx_style_slices_keep_each_others_objects(lab, kubectl, installed, tmp_path):
    """AWX's job slicing: each slice job gets an inventory of its own hosts only; the job template
    sets gpusplit_prune_scope=plan, so a slice touches only the nodes it planned (docs/awx.md)."""
    playbook(installed, "split")  # every node as the full inventory says
    before = _daemonset_versions(kubectl)
    others = [n for n in before if not any(n.endswith(h) for h in SLICES[0])]
    other_nodes = list(SLICES[1])
    labels = _split_labels(kubectl, other_nodes)
    assert others and any(v == "true" for v in labels.values()), (before, labels)
    try:
        run = playbook(
            installed,
            "split",
            "-e",
            "gpusplit_prune_scope=plan",
            inventory=_slice_inventory(tmp_path / "a", SLICES[0]),
        )
        after = _daemonset_versions(kubectl)
        # the other slice's split plugins and labels are as they were: not pruned, not released
        assert all(after.get(n) == before[n] for n in others), (before, after)
        assert _split_labels(kubectl, other_nodes) == labels
        # and the slice's own plugins are still applied
        assert {"gpusplit-dp-lab-dgx-01", "gpusplit-dp-lab-ws-01"} <= set(after), after
        assert "inventory host(s) not planned" not in " ".join(
            run.stdout.split()
        )  # its inventory is its plan
    except AssertionError:
        playbook(installed, "split")  # the lab as the full inventory says, for the tests after this one
        raise


# ---------------------------------------------------------------------------------------------------------
# docs/quickstart.md, end to end: every command of its ```sh blocks, read from the page, in its order

QUICKSTART = ROOT / "docs" / "quickstart.md"
# the quick start's two GPU servers as lab nodes, each with the GPUs of a fixture (docs/quickstart.md: 8 x H100
# and 2 x L40S)
EXAMPLE_HOSTS = {"gpu-01.example.com": "dgx-h100", "gpu-02.example.com": "l40s-pair"}
# what the page says each node gets: (GPUs kept by the host, GPUs to Kubernetes)
EXAMPLE_SPLIT = {"gpu-01.example.com": (2, 6), "gpu-02.example.com": (1, 1)}
# the programs the quick start runs, each run on the lab as on_lab() says
QUICKSTART_PROGRAMS = {"ansible-galaxy", "pip", "cp", "ansible-playbook", "kubectl", "ansible-doc"}
# the cluster's own NVIDIA device plugin that the quick start's cluster has (gpusplit_stock_plugin_action: exclude
# keeps it off the split nodes, the undo hands the GPUs back to it); on the lab it runs on the quick start's nodes only
STOCK_PLUGIN = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "quickstart-stock-plugin", "namespace": "kube-system"},
    "spec": {
        "selector": {"matchLabels": {"app": "quickstart-stock-plugin"}},
        "template": {
            "metadata": {"labels": {"app": "quickstart-stock-plugin"}},
            "spec": {
                "nodeSelector": {"gpusplit.io/lab-quickstart": "true"},
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {"name": "nvidia-device-plugin-ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}
                ],
            },
        },
    },
}


def doc_commands(markdown: str) -> list[str]:
    """The commands of a Markdown page's ```sh blocks, in order: a line ending in a backslash joined with the
    next, comments dropped."""
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", markdown, re.S | re.M):
        for line in re.sub(r"\\\n\s*", "", block).splitlines():
            command = re.sub(r"(^|\s+)#.*$", "", line).strip()
            if command:
                commands.append(command)
    return commands


def on_lab(command: str, lab_vars: Path) -> str:
    """A quick-start command as the lab runs it: the same words, and ansible-playbook also reads the lab's
    settings of the hosts (lab_vars, extra vars: how the lab reaches the hosts and their simulated GPUs)."""
    program = command.split()[0]
    assert program in QUICKSTART_PROGRAMS, (
        f"docs/quickstart.md runs {program!r}: say in tests/integration/test_dist.py (on_lab) how the lab runs it"
    )
    return f"{command} -e @{lab_vars}" if program == "ansible-playbook" else command


def test_doc_commands_reads_sh_blocks_only_joins_continuations_and_drops_comments():
    page = (
        "text `ansible-playbook not-a-command`\n\n```sh\nansible-doc -l x          # the modules\n# a note\n"
        "ansible-playbook -i inventory a.b.c -e x=1 \\\n  -e y=2 --check\n```\n\n```yaml\nall: {}\n```\n\n"
        "```\nplain output\n```\n"
    )
    assert doc_commands(page) == [
        "ansible-doc -l x",
        "ansible-playbook -i inventory a.b.c -e x=1 -e y=2 --check",
    ]
    assert on_lab("ansible-playbook -i inventory a.b.c", Path("/v.json")) == (
        "ansible-playbook -i inventory a.b.c -e @/v.json"
    )
    assert on_lab("kubectl get nodes", Path("/v.json")) == "kubectl get nodes"
    with pytest.raises(AssertionError, match="runs 'helm'"):
        on_lab("helm install x", Path("/v.json"))


def _lab_vars(path: Path) -> Path:
    """The lab's settings of the quick start's hosts, as inventory/lab's group_vars set them for the lab's own:
    every host is this machine over the local connection, its GPUs a fixture's (the fake NVML binding), its
    files under a scratch root; a plan-scoped prune leaves the lab's other split nodes alone."""
    fakes = ROOT / "tests" / "fakes"
    fixtures = {
        host: str(ROOT / "tests" / "fixtures" / "gpus" / f"{f}.json") for host, f in EXAMPLE_HOSTS.items()
    }
    settings = {
        "ansible_connection": "local",
        "ansible_become": False,
        "ansible_python_interpreter": sys.executable,
        "gpusplit_lab_fixtures": fixtures,
        "gpusplit_discovery_environment": {
            "PYTHONPATH": str(fakes),
            "GPUSPLIT_FAKE_NVML_FIXTURE": "{{ gpusplit_lab_fixtures[inventory_hostname] }}",
            "PATH": f"{fakes / 'bin'}{os.pathsep}{os.environ['PATH']}",
        },
        "gpusplit_discovery_proc_root": str(ROOT / "tests" / "fixtures" / "proc"),
        "gpusplit_host_root": f"{C.HOSTS_ROOT}/{{{{ inventory_hostname }}}}",
        # the fixtures' host processes never stop (inventory/lab: the same setting)
        "gpusplit_resplit_host_processes": "ignore",
        "gpusplit_prune_scope": "plan",
    }
    path.write_text(json.dumps(settings))
    return path


def _host_files(host: str) -> dict[str, bytes]:
    """Every file under the host's etc/, by relative path, gpusplit's backups left out."""
    etc = C.HOSTS_ROOT / host / "etc"
    return {
        str(p.relative_to(etc)): p.read_bytes()
        for p in sorted(etc.rglob("*"))
        if p.is_file() and not p.name.endswith(".bak")
    }


def _allocatable(kubectl, host: str) -> str | None:
    return kubectl.json("get", "node", host)["status"].get("allocatable", {}).get("nvidia.com/gpu")


def _example_daemonsets(kubectl) -> dict[str, str]:
    """node -> name of gpusplit's split plugin DaemonSet, for the quick start's nodes."""
    items = kubectl.json("get", "daemonsets", "-n", "kube-system", "-l", PLUGIN_SELECTOR)["items"]
    nodes = {d["metadata"]["annotations"].get("gpusplit.io/node-name"): d["metadata"]["name"] for d in items}
    return {n: name for n, name in nodes.items() if n in EXAMPLE_HOSTS}


def test_the_quick_start_page_is_what_its_end_to_end_run_reads():
    """Without the lab: every command of the page is one the run knows, and what it shows is what ships."""
    page = QUICKSTART.read_text()
    for command in doc_commands(page):
        on_lab(command, Path("/lab-vars.json"))
    shown = next(b for b in re.findall(r"^```yaml\n(.*?)^```", page, re.S | re.M) if "gpu_nodes" in b)
    assert yaml.safe_load(shown) == yaml.safe_load((ROOT / "inventory" / "example" / "hosts.yml").read_text())
    name = re.search(r"`(gpusplit-dp-gpu-01-example-com-[0-9a-f]{8})`", page)[1]
    assert name == daemonset_name("gpu-01.example.com")


def test_the_quick_start_runs_end_to_end_from_the_tarball(lab, kubectl, core_api, tarball, tmp_path):
    """docs/quickstart.md's commands, read from the page, from a fresh HOME (so ~/.ansible/collections is an
    empty collections path and ~/.kube/config the lab's kubeconfig) and a working folder holding the tarball.

    The lab's substitutions, and only these: the two GPU servers are lab nodes of the example's names with
    simulated GPUs, and each ansible-playbook command also reads _lab_vars (extra vars); pip installs from
    the virtual environment only (PIP_NO_INDEX); the cluster's own device plugin is a stand-in on those nodes.
    """
    page = QUICKSTART.read_text()
    commands = doc_commands(page)
    for expected in (
        "ansible-galaxy collection install",
        " --check --diff",
        "gpusplit.k8s.site",
        "gpusplit.k8s.unsplit",
    ):
        assert any(expected in c for c in commands), f"docs/quickstart.md has no command with {expected!r}"
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").symlink_to(C.KUBECONFIG)
    work.mkdir()
    shutil.copy(tarball, work / tarball.name)
    lab_vars = _lab_vars(tmp_path / "lab-vars.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PIP_", "KUBECONFIG"))}
    env.update(
        HOME=str(home),
        ANSIBLE_NOCOLOR="1",
        PIP_NO_INDEX="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PATH=f"{BIN}{os.pathsep}{ROOT / '.lab' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
    )
    install = home / ".ansible" / "collections" / "ansible_collections" / "gpusplit" / "k8s"
    pristine = {}
    for host, fixture in EXAMPLE_HOSTS.items():
        labnodes.ensure_node(core_api, host, fixture, {"gpusplit.io/lab-quickstart": "true"})
        shutil.rmtree(C.HOSTS_ROOT / host, ignore_errors=True)
        labnodes.seed_host_root(host)
        pristine[host] = _host_files(host)
    kubectl("apply", "-f", "-", stdin=json.dumps(STOCK_PLUGIN))
    ran = []
    try:
        kubectl.wait_for(
            lambda: all(_allocatable(kubectl, h) == str(sum(EXAMPLE_SPLIT[h])) for h in EXAMPLE_HOSTS),
            what="the stock plugin advertising every GPU of the quick start's nodes",
        )
        for command in commands:
            started = time.monotonic()
            run = subprocess.run(
                on_lab(command, lab_vars),
                shell=True,
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
            )
            assert run.returncode == 0, f"{command}\nfailed:\n{run.stdout[-6000:]}\n{run.stderr[-3000:]}"
            ran.append((command, round(time.monotonic() - started, 1)))
            _check_quickstart_step(command, run, kubectl, work, install, pristine, page)
        assert [c for c, _ in ran] == commands
        print("\n".join(f"{s:6.1f} s  {c}" for c, s in ran))
    finally:
        kubectl(
            "delete", "daemonset", "-n", "kube-system", "quickstart-stock-plugin", "--wait=true", check=False
        )
        if _example_daemonsets(kubectl):  # a failed step left the split: take it back
            kubectl(
                "delete",
                "daemonset",
                "-n",
                "kube-system",
                *_example_daemonsets(kubectl).values(),
                check=False,
            )
        for host in EXAMPLE_HOSTS:
            kubectl("delete", "node", host, "--wait=false", check=False)
            shutil.rmtree(C.HOSTS_ROOT / host, ignore_errors=True)


def _check_quickstart_step(command, run, kubectl, work, install, pristine, page) -> None:
    """What the quick start says of the command it just ran."""
    out = " ".join(run.stdout.split())
    if command.startswith("ansible-galaxy collection install"):
        assert (install / "MANIFEST.json").is_file(), sorted(install.parent.parent.rglob("MANIFEST.json"))
    elif command == "ansible-galaxy collection list gpusplit.k8s":
        assert f"# {install.parent.parent}" in run.stdout and "gpusplit.k8s" in out, run.stdout
    elif command == "ansible-galaxy collection list kubernetes.core":
        assert "kubernetes.core" in out, run.stdout
    elif command.startswith("cp -r"):
        # the inventory the page shows is the one the collection ships
        shown = next(b for b in re.findall(r"^```yaml\n(.*?)^```", page, re.S | re.M) if "gpu_nodes" in b)
        assert yaml.safe_load((work / "inventory" / "hosts.yml").read_text()) == yaml.safe_load(shown)
    elif command.endswith("gpusplit.k8s.plan"):
        nodes = json.loads((work / "out" / "fleet-plan.json").read_text())["nodes"]
        got = {h: (len(n["host_uuids"]), len(n["kubernetes_uuids"])) for h, n in nodes.items()}
        assert got == EXAMPLE_SPLIT and (work / "out" / "gpus.json").is_file(), got
        assert not _example_daemonsets(kubectl)
    elif re.search(r"gpusplit\.k8s\.(site|split) --check --diff$", command):
        assert "+accept-nvidia-visible-devices-envvar-when-unprivileged = false" in run.stdout, run.stdout[
            -6000:
        ]
        assert not _example_daemonsets(kubectl)
        assert {h: _host_files(h) for h in EXAMPLE_HOSTS} == pristine
    elif command.endswith("gpusplit.k8s.site"):
        assert set(_example_daemonsets(kubectl)) == set(EXAMPLE_HOSTS)
        for host in EXAMPLE_HOSTS:
            files = _host_files(host)
            for path in (
                "nvidia-container-runtime/config.toml",
                "gpusplit/host-gpus.env",
                "gpusplit/host-state.json",
            ):
                assert path in files, (host, sorted(files))
            assert (
                files["nvidia-container-runtime/config.toml"]
                != pristine[host]["nvidia-container-runtime/config.toml"]
            )
        assert "systemd/system/trainer.service.d/50-gpusplit.conf" in _host_files("gpu-01.example.com")
        stock = kubectl.json("-n", "kube-system", "get", "daemonset", "quickstart-stock-plugin")
        assert "gpusplit.io/split" in json.dumps(stock["spec"]["template"]["spec"].get("affinity", {}))
    elif command.endswith("gpusplit.k8s.verify"):
        report = json.loads((work / "out" / "fleet-report.json").read_text())
        assert report["counts"] == {"OK": 2, "DRIFT": 0, "FAIL": 0}, report
        assert (work / "out" / "fleet.svg").is_file()
    elif command.startswith("kubectl get nodes"):
        rows = {line.split()[0]: line.split()[1] for line in run.stdout.splitlines()[1:] if line.strip()}
        assert {h: rows.get(h) for h in EXAMPLE_HOSTS} == {
            h: str(k) for h, (_, k) in EXAMPLE_SPLIT.items()
        }, rows
    elif command.startswith("kubectl -n kube-system get daemonsets"):
        names = set(_example_daemonsets(kubectl).values())
        assert len(names) == 2 and all(name in run.stdout for name in names), run.stdout
        # the name the page gives for gpu-01's
        assert re.search(r"`(gpusplit-dp-gpu-01-example-com-[0-9a-f]{8})`", page)[1] in names, names
    elif command.endswith("gpusplit.k8s.diagnose"):
        assert "counts" in json.loads((work / "out" / "pending.json").read_text())
        # the picture, redrawn from this run's report: both nodes are on it
        svg = ElementTree.parse(work / "out" / "fleet.svg").getroot()
        text = " ".join(t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text"))
        assert all(host in text for host in EXAMPLE_HOSTS), text
    elif "gpusplit.k8s.unsplit" in command and command.endswith("--check --diff"):
        assert set(_example_daemonsets(kubectl)) == set(EXAMPLE_HOSTS)
    elif "gpusplit.k8s.unsplit" in command:
        assert not _example_daemonsets(kubectl)
        labels = {h: kubectl.json("get", "node", h)["metadata"]["labels"] for h in EXAMPLE_HOSTS}
        assert not any(
            k.startswith("gpusplit.io/") and not k.startswith("gpusplit.io/lab-")
            for v in labels.values()
            for k in v
        ), labels
        # "puts config.toml back as it was", gpusplit's files gone
        assert {h: _host_files(h) for h in EXAMPLE_HOSTS} == pristine
        kubectl.wait_for(
            lambda: all(_allocatable(kubectl, h) == str(sum(EXAMPLE_SPLIT[h])) for h in EXAMPLE_HOSTS),
            what="every GPU back with the stock plugin",
        )
    elif command.startswith("ansible-doc -t role gpusplit.k8s.gpu_plan"):
        # (without a terminal, ansible-doc marks bold text with asterisks)
        plain = out.replace("*", "")
        assert "ENTRY POINT: main - Plan the per-node GPU split of the play's hosts" in plain, run.stdout[
            :3000
        ]
        assert "gpusplit_exclude_unhealthy" in out
