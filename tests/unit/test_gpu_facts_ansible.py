"""nvidia_gpu_facts run the way Ansible runs it: ansible-doc, an ad-hoc `ansible` call and the
discover playbook with its role, the fake NVML binding and nvidia-smi reached through the environment."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FIXTURES = ROOT / "tests" / "fixtures" / "gpus"
PROC = ROOT / "tests" / "fixtures" / "proc"
FAKES = ROOT / "tests" / "fakes"


def ansible_env(**extra):
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
            "ANSIBLE_NOCOLOR": "1",
        }
    )
    env.update(extra)
    return env


def run(argv, env, timeout=240):
    done = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    return done.returncode, done.stdout + done.stderr


def adhoc(module_args, env):
    argv = [
        str(BIN / "ansible"),
        "localhost",
        "-i",
        "localhost,",
        "-c",
        "local",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-m",
        "gpusplit.k8s.nvidia_gpu_facts",
        "-a",
        module_args,
    ]
    rc, output = run(argv, env)
    start = output.find("=> {")
    assert start >= 0, output
    result = json.JSONDecoder().raw_decode(output[start + 3 :])[0]
    return rc, result, output


def test_gpu_ansible_doc_renders():
    for argv, needles in (
        (["gpusplit.k8s.nvidia_gpu_facts"], ["nvidia_gpu_facts", "backend", "RETURN VALUES", "nvidia_gpus"]),
        (["-t", "filter", "gpusplit.k8s.gpu_table"], ["gpu_table"]),
        (["-t", "role", "gpusplit.k8s.gpu_discovery"], ["gpusplit_discovery_environment"]),
    ):
        rc, output = run([str(BIN / "ansible-doc"), *argv], ansible_env())
        assert rc == 0, output
        for needle in needles:
            assert needle in output, (argv, needle)


@pytest.mark.parametrize("backend", ["nvml", "nvidia-smi"])
def test_gpu_adhoc_module_run(backend):
    env = ansible_env(
        PYTHONPATH=str(FAKES),
        PATH=f"{FAKES / 'bin'}{os.pathsep}{os.environ['PATH']}",
        GPUSPLIT_FAKE_NVML_FIXTURE=str(FIXTURES / "dgx-h100.json"),
    )
    rc, result, output = adhoc(f"backend={backend} proc_root={PROC}", env)
    assert rc == 0, output
    facts = result["ansible_facts"]
    assert facts["nvidia_gpu_backend"] == backend
    assert len(facts["nvidia_gpus"]) == 8
    assert facts["nvidia_gpus"][4]["processes"][0]["in_container"] is True
    assert result["changed"] is False


def test_gpu_adhoc_no_driver_required_fails():
    env = ansible_env(
        PYTHONPATH=str(FAKES),
        PATH=f"{FAKES / 'bin'}{os.pathsep}{os.environ['PATH']}",
        GPUSPLIT_FAKE_NVML_FIXTURE=str(FIXTURES / "nodriver.json"),
    )
    rc, result, output = adhoc("required=true", env)
    assert rc != 0
    assert result["msg"].startswith("No NVIDIA driver on this host: NVML: nvmlInit failed: Driver Not Loaded")
    assert "couldn't communicate with the NVIDIA driver" in result["msg"]


def test_gpu_discover_playbook(tmp_path):
    out = tmp_path / "out"
    extra = {
        "gpusplit_hosts": "localhost",
        "gpusplit_out_dir": str(out),
        "ansible_python_interpreter": sys.executable,
        "gpusplit_discovery_environment": {
            "PYTHONPATH": str(FAKES),
            "GPUSPLIT_FAKE_NVML_FIXTURE": str(FIXTURES / "a100-mig.json"),
        },
        "gpusplit_discovery_proc_root": str(PROC),
    }
    (tmp_path / "vars.json").write_text(json.dumps(extra))
    argv = [
        str(BIN / "ansible-playbook"),
        "-i",
        "localhost,",
        "-c",
        "local",
        str(ROOT / "playbooks" / "discover.yml"),
        "-e",
        f"@{tmp_path / 'vars.json'}",
    ]
    env = ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="yaml")
    rc, output = run(argv, env)
    assert rc == 0, output
    report = json.loads((out / "gpus.json").read_text())
    assert list(report) == ["localhost"]
    host = report["localhost"]
    assert (host["backend"], host["driver_version"], host["cuda_version"]) == ("nvml", "570.172.08", "12.8")
    assert [gpu["pci_bus_id"] for gpu in host["gpus"]][0] == "00000000:07:00.0"
    assert "on 3x1g.10gb,1x3g.40gb" in output and "GPU-9ac6c221-b7d0-5977-3f67-437835bad8c1" in output
    assert "changed=2" in output

    # Idempotent: the second run changes nothing; check mode neither.
    rc, output = run(argv, env)
    assert rc == 0 and "changed=0" in output, output
    rc, output = run([*argv, "--check"], env)
    assert rc == 0 and "changed=0" in output, output
