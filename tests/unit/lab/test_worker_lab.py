"""lab/workers.py: each pytest-xdist worker past the first gets a lab of its own (state folder, loopback
address, output folder), and lab/components.py and inventory/lab follow those variables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab import components as C
from lab.workers import worker_lab

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("environ", [{}, {"PYTEST_XDIST_WORKER": "gw0"}, {"PYTEST_XDIST_WORKER": "master"}])
def test_the_first_worker_and_a_plain_run_use_the_checkouts_lab(environ):
    assert worker_lab(environ, ROOT) == {}


def test_a_later_worker_gets_its_own_folder_address_and_outputs():
    assert worker_lab({"PYTEST_XDIST_WORKER": "gw1"}, ROOT) == {
        "GPUSPLIT_LAB_HOST": "127.1.0.1",
        "GPUSPLIT_LAB_DIR": str(ROOT / ".lab" / "workers" / "gw1"),
        "GPUSPLIT_OUT_DIR": str(ROOT / "out" / "workers" / "gw1"),
    }
    assert worker_lab({"PYTEST_XDIST_WORKER": "gw3"}, ROOT)["GPUSPLIT_LAB_HOST"] == "127.3.0.1"


def test_a_second_checkouts_lab_moves_with_it(tmp_path):
    environ = {
        "PYTEST_XDIST_WORKER": "gw1",
        "GPUSPLIT_LAB_HOST": "127.0.0.2",
        "GPUSPLIT_LAB_DIR": str(tmp_path / "lab"),
        "GPUSPLIT_OUT_DIR": str(tmp_path / "out"),
    }
    assert worker_lab(environ, ROOT) == {
        "GPUSPLIT_LAB_HOST": "127.1.0.2",
        "GPUSPLIT_LAB_DIR": str(tmp_path / "lab" / "workers" / "gw1"),
        "GPUSPLIT_OUT_DIR": str(tmp_path / "out" / "workers" / "gw1"),
    }


def test_no_address_outside_the_loopback_range():
    with pytest.raises(ValueError, match="no loopback address for the lab of pytest-xdist worker gw1"):
        worker_lab({"PYTEST_XDIST_WORKER": "gw1", "GPUSPLIT_LAB_HOST": "127.255.0.1"}, ROOT)


def test_the_lab_and_its_inventory_follow_the_variables(tmp_path):
    env = {
        **os.environ,
        "GPUSPLIT_LAB_HOST": "127.4.0.1",
        "GPUSPLIT_LAB_DIR": str(tmp_path / "lab"),
        "GPUSPLIT_OUT_DIR": str(tmp_path / "out"),
    }
    code = (
        "import json; from lab import components as C, nodes; "
        "print(json.dumps([C.HOST, str(C.LAB), str(C.KUBECONFIG), str(C.HOSTS_ROOT), str(C.OUT), str(C.BIN),"
        " C.etcd_command()[3]]))"
    )
    shown = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
        ).stdout
    )
    assert shown == [
        "127.4.0.1",
        str(tmp_path / "lab"),
        str(tmp_path / "lab" / "kubeconfig"),
        str(tmp_path / "lab" / "hosts"),
        str(tmp_path / "out"),
        str(ROOT / ".lab" / "bin"),  # the binaries are the checkout's, whichever lab
        "--listen-client-urls=http://127.4.0.1:2379",
    ]
    inventory = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-inventory"),
            "-i",
            str(ROOT / "inventory" / "lab"),
            "--host",
            "lab-ssh-01",
        ],
        cwd=ROOT,
        env={**env, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert '"ansible_host": "{{ gpusplit_lab_address }}"' in inventory.stdout  # resolved in a play, below
    play = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible"),
            "-i",
            str(ROOT / "inventory" / "lab"),
            "lab-cp-01",
            "-m",
            "ansible.builtin.debug",
            "-a",
            "msg={{ [ansible_host | default(''), gpusplit_lab_dir, gpusplit_kubeconfig, gpusplit_out_dir,"
            " gpusplit_host_root, gpusplit_cp_manifest_dir, gpusplit_cp_endpoints,"
            " hostvars['lab-ssh-01'].ansible_host] | to_json }}",
        ],
        cwd=ROOT,
        env={
            **env,
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_STDOUT_CALLBACK": "json",
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        },
        capture_output=True,
        text=True,
        check=True,
    )
    msg = json.loads(json.loads(play.stdout)["plays"][0]["tasks"][0]["hosts"]["lab-cp-01"]["msg"])
    assert msg[1:] == [
        str(tmp_path / "lab"),
        str(tmp_path / "lab" / "kubeconfig"),
        str(tmp_path / "out"),
        str(tmp_path / "lab" / "hosts" / "lab-cp-01"),
        str(tmp_path / "lab" / "manifests"),
        C.control_plane_endpoints("127.4.0.1"),
        "127.4.0.1",
    ]
    assert msg[6]["kube-apiserver"]["health_url"] == "https://127.4.0.1:6443/readyz"


def _lab_literals(path: Path) -> list[str]:
    """Where a test names the first worker's lab itself: a string with 127.0.0.1 in it, or
    ``ROOT / ".lab"`` / ``ROOT / "out"`` (``ROOT / ".lab" / "bin"``, the shared binaries, is fine)."""
    import ast

    tree = ast.parse(path.read_text(), str(path))
    shared = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Div)
            and isinstance(node.right, ast.Constant)
            and node.right.value == "bin"
        ):
            shared.add(id(node.left))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "127.0.0.1" in node.value:
            found.append(f"{path.name}:{node.lineno}: {node.value!r}")
        elif (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Div)
            and isinstance(node.left, ast.Name)
            and node.left.id == "ROOT"
            and isinstance(node.right, ast.Constant)
            and node.right.value in (".lab", "out")
            and id(node) not in shared
        ):
            found.append(f"{path.name}:{node.lineno}: ROOT / {node.right.value!r}")
    return sorted(found, key=lambda hit: int(hit.split(":")[1]))


def test_lab_tests_name_their_lab_through_lab_components():
    # a lab test in the second group runs against the second worker's lab; a literal address or
    # folder of the first lab would probe or change the other one (docs/dev/lab.md, "Tests")
    found = [
        hit for path in sorted((ROOT / "tests" / "integration").glob("*.py")) for hit in _lab_literals(path)
    ]
    assert found == []


def test_the_lab_literal_check_finds_what_it_looks_for(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        'URL = "https://127.0.0.1:6443/readyz"\n'
        'STATE = ROOT / ".lab" / "state.json"\n'
        'OUT = ROOT / "out"\n'
        'BIN = ROOT / ".lab" / "bin"\n'
        'TMP = tmp_path / "out"\n'
    )
    assert _lab_literals(sample) == [
        "test_sample.py:1: 'https://127.0.0.1:6443/readyz'",
        "test_sample.py:2: ROOT / '.lab'",
        "test_sample.py:3: ROOT / 'out'",
    ]
