"""nvidia_gpu_facts run the way Ansible runs it: ansible-doc, an ad-hoc `ansible` call and the
discover playbook with its role, the fake NVML binding and nvidia-smi reached through the environment."""

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpusplit.k8s.plugins.modules import nvidia_gpu_facts

ROOT = Path(__file__).resolve().parents[4]
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


def discover_argv(inventory, out):
    """ansible-playbook playbooks/discover.yml on ``inventory``, its reports written to ``out``."""
    return [
        str(BIN / "ansible-playbook"),
        "-i",
        str(inventory),
        str(ROOT / "playbooks" / "discover.yml"),
        "-e",
        f"gpusplit_out_dir={out}",
    ]


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


def test_gpu_ansible_doc_renders_examples():
    """EXAMPLES is shown, between the options and RETURN VALUES, with every example task."""
    rc, output = run([str(BIN / "ansible-doc"), "gpusplit.k8s.nvidia_gpu_facts"], ansible_env())
    assert rc == 0, output
    assert "EXAMPLES:" in output and "RETURN VALUES:" in output
    examples = output[output.index("EXAMPLES:") : output.index("RETURN VALUES:")]
    tasks = yaml.safe_load(nvidia_gpu_facts.EXAMPLES)
    assert len(tasks) >= 2
    for task in tasks:
        assert f"- name: {task['name']}" in examples, task["name"]
    assert "backend: nvidia-smi" in examples


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
    assert "changed=1" in output  # out/ and gpus.json, one out_files task on the controller

    # Idempotent: the second run changes nothing; check mode neither.
    rc, output = run(argv, env)
    assert rc == 0 and "changed=0" in output, output
    rc, output = run([*argv, "--check"], env)
    assert rc == 0 and "changed=0" in output, output


def test_gpu_discover_lab_inventory(tmp_path):
    """discover.yml on the lab inventory: every lab GPU host is read through the fake NVML with its own
    fixture, and out/gpus.json holds them all."""
    env = ansible_env()
    listed = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", "inventory/lab", "--list"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stdout + listed.stderr
    inventory = json.loads(listed.stdout)  # stdout alone: a library's warning goes to stderr
    # lab-ssh-01 is reached through the lab's sshd (lab/sshd.py), which a unit test does not start;
    # tests/integration/test_ssh_host.py covers it
    hosts = [
        h
        for h in inventory["gpu_nodes"]["hosts"]
        if inventory["_meta"]["hostvars"][h].get("ansible_connection") != "ssh"
    ]
    assert len(hosts) >= 4
    fixtures = {
        host: json.loads(
            (FIXTURES / f"{inventory['_meta']['hostvars'][host]['gpusplit_lab_fixture']}.json").read_text()
        )
        for host in hosts
    }
    out = tmp_path / "out"
    argv = [
        str(BIN / "ansible-playbook"),
        "-i",
        "inventory/lab",
        "playbooks/discover.yml",
        "--limit",
        ",".join([*hosts, "localhost"]),
        "-e",
        f"gpusplit_out_dir={out}",
    ]
    rc, output = run(argv, ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="yaml"))
    assert rc == 0, output
    report = json.loads((out / "gpus.json").read_text())
    assert sorted(report) == sorted(hosts)
    for host, data in fixtures.items():
        got = report[host]
        assert got["backend"] == "nvml", (host, got["msg"])
        assert got["driver_version"] == data["driver_version"], host
        assert len(got["gpus"]) == len(data["gpus"]), host
        assert sorted(gpu["uuid"] for gpu in got["gpus"]) == sorted(gpu["uuid"] for gpu in data["gpus"]), host
        assert got["msg"].startswith(f"{len(data['gpus'])} NVIDIA GPU(s) through NVML"), host
        for gpu in data["gpus"]:
            assert re.search(rf"{re.escape(host)}\s+{gpu['index']}\s+.*{gpu['uuid']}", output), (
                host,
                gpu["uuid"],
            )
    assert "using nvidia-smi instead" not in output
    lost = report["lab-hgx-lost-01"]["gpus"]
    assert [gpu["health"]["status"] for gpu in lost].count("lost") == 1


def _pinned_binding_version():
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [dep for dep in pins if dep.startswith("nvidia-ml-py==")]
    return pin.split("==", 1)[1]


def _purelib(python):
    """The site-packages folder of ``python``."""
    done = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(done.stdout.strip())


def _give_packaging(python):
    """Put the library packaging into ``python``'s site-packages, as a host's Python has it (ansible.builtin.pip
    needs packaging or setuptools there; a fresh virtual environment has neither)."""
    import packaging

    shutil.copytree(Path(packaging.__file__).parent, _purelib(python) / "packaging")


def test_gpu_discovery_role_installs_the_binding(tmp_path):
    """gpusplit_install_nvml_binding: true pip-installs the pinned nvidia-ml-py (from the package index)
    into the Python that runs the modules, with ansible.builtin.pip, then reads the GPUs again; a Python
    without pip stops the role with what to do, before anything is installed."""
    version = _pinned_binding_version()
    defaults = yaml.safe_load((ROOT / "roles" / "gpu_discovery" / "defaults" / "main.yml").read_text())
    assert defaults["gpusplit_nvml_binding_version"] == version
    with_pip, without_pip = tmp_path / "with-pip", tmp_path / "without-pip"
    for venv, flags in ((with_pip, []), (without_pip, ["--without-pip"])):
        done = subprocess.run(
            [sys.executable, "-m", "venv", *flags, str(venv)], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        _give_packaging(venv / "bin" / "python")
    python = with_pip / "bin" / "python"
    probe = [str(python), "-c", "import importlib.metadata as m, pynvml; print(m.version('nvidia-ml-py'))"]
    assert subprocess.run(probe, capture_output=True, check=False).returncode != 0  # not there yet

    inventory = {
        "all": {
            "hosts": {
                "with-pip": {"ansible_python_interpreter": str(python)},
                "without-pip": {"ansible_python_interpreter": str(without_pip / "bin" / "python")},
            },
            "vars": {"ansible_connection": "local"},
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    reports = tmp_path / "reports"
    reports.mkdir()
    (tmp_path / "play.yml").write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Discovery with the NVML binding installed",
                    "hosts": "all",
                    "gather_facts": False,
                    "roles": [{"role": "gpusplit.k8s.gpu_discovery"}],
                    "tasks": [
                        {
                            "name": "Keep what the module said",
                            "ansible.builtin.copy": {
                                "content": "{{ {'report': gpu_discovery_reports[inventory_hostname], "
                                "'warnings': gpu_discovery_result.warnings | default([])} | to_json }}",
                                "dest": f"{reports}/{{{{ inventory_hostname }}}}.json",
                                "mode": "0644",
                            },
                            "delegate_to": "localhost",
                        }
                    ],
                }
            ]
        )
    )
    argv = [
        str(BIN / "ansible-playbook"),
        "-i",
        str(tmp_path / "hosts.yml"),
        str(tmp_path / "play.yml"),
        "-e",
        "gpusplit_install_nvml_binding=true",
        "-e",
        "gpusplit_discovery_nvidia_smi_path=",
    ]
    # no stand-in nvidia-smi and no fake binding: what the module sees is the real, freshly installed one
    env = ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="yaml", PATH=os.defpath, PYTHONPATH="")
    rc, output = run(argv, env)
    assert rc != 0, output  # the host without pip fails
    assert re.search(
        r"with-pip\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0\s+skipped=\d+\s+rescued=1", output
    ), output[-1500:]
    # the facts module changed nothing: its first reading stops both hosts (the binding is missing), and the
    # rescue installs it; ansible.builtin.pip changed the host that has pip
    gather = output[output.index("TASK [gpusplit.k8s.gpu_discovery : Gather NVIDIA GPU facts]") :]
    gather = gather[: gather.index("TASK [", 10)]
    assert "fatal: [with-pip]" in gather and "fatal: [without-pip]" in gather and "changed: [" not in gather
    assert "importable: false" in gather, gather
    install = output[
        output.index("TASK [gpusplit.k8s.gpu_discovery : Install the NVML binding nvidia-ml-py") :
    ]
    install = install[: install.index("TASK [", 10)]
    assert "changed: [with-pip]" in install and "without-pip" not in install, install
    assert re.search(r"without-pip\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=1", output), output
    assert f"{without_pip / 'bin' / 'python'} has no pip" in " ".join(output.split())
    assert "Install pip for that Python" in " ".join(output.split())

    done = subprocess.run(probe, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.strip() == version, done.stderr
    kept = json.loads((reports / "with-pip.json").read_text())
    warnings = " ".join(kept["warnings"])
    assert "not importable" not in warnings
    # the module imported the binding: NVML was read, or (no driver here) nvmlInit is what failed
    assert kept["report"]["backend"] == "nvml" or "nvmlInit failed" in kept["report"]["msg"] + warnings
    assert not (reports / "without-pip.json").exists()


# --- a fleet: no pip on re-runs, one fallback note, one wedged host -------------------------------

STAND_IN_PIP = FAKES / "pip_standin"


def _venv_with_stand_in_pip(path):
    """A virtual environment without pip whose `python -m pip` is tests/fakes/pip_standin (records calls)."""
    done = subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    python = path / "bin" / "python"
    _give_packaging(python)
    (_purelib(python) / "gpusplit-pip-standin.pth").write_text(f"{STAND_IN_PIP}\n")
    return python


def _pip_calls(venv):
    log = venv / "pip-calls.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_gpu_discovery_fleet_pip_only_when_asked_and_missing_then_never_again(tmp_path):
    """Two hosts whose Python lacks the NVML binding, one wedged host whose nvidia-smi hangs:
    without gpusplit_install_nvml_binding nothing is installed and the nvidia-smi fallback is said once;
    the wedged host fails on the timeout naming nvidia-smi while the others complete; with the variable,
    pip runs once per host missing the binding, and a second run makes no pip call at all."""
    venvs = {name: tmp_path / name for name in ("gpu-a", "gpu-b")}
    pythons = {name: _venv_with_stand_in_pip(venv) for name, venv in venvs.items()}
    wedged_fixture = tmp_path / "wedged.json"
    data = json.loads((FIXTURES / "h200.json").read_text())
    data["smi_hangs_on"] = "all"
    wedged_fixture.write_text(json.dumps(data))
    smi_path = f"{FAKES / 'bin'}{os.pathsep}{os.environ['PATH']}"

    def host(python, fixture):
        return {
            "ansible_connection": "local",
            "ansible_python_interpreter": str(python),
            "gpusplit_discovery_environment": {"GPUSPLIT_FAKE_NVML_FIXTURE": str(fixture), "PATH": smi_path},
        }

    inventory = {
        "all": {
            "children": {
                "gpu_nodes": {
                    "hosts": {
                        "gpu-a": host(pythons["gpu-a"], FIXTURES / "h200.json"),
                        "gpu-b": host(pythons["gpu-b"], FIXTURES / "dgx-h100.json"),
                        "gpu-wedged": host(sys.executable, wedged_fixture),
                        # the binding imports here: the install costs this host no task
                        "gpu-c": host(sys.executable, FIXTURES / "h200.json"),
                        # a first reading that fails for another reason keeps its message
                        "gpu-bad": {
                            **host(sys.executable, FIXTURES / "h200.json"),
                            "gpusplit_discovery_backend": "nvidia-smi",
                            "gpusplit_discovery_nvidia_smi_path": str(tmp_path / "no-such-nvidia-smi"),
                        },
                    }
                }
            },
            "vars": {"gpusplit_discovery_timeout": 3, "gpusplit_discovery_proc_root": str(PROC)},
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    out = tmp_path / "out"
    base = discover_argv(tmp_path / "hosts.yml", out)
    env = ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="yaml", PYTHONPATH="")

    # 1. not asked to install: no pip, one fleet note, the wedged host fails on its own
    rc, output = run([*base, "-e", "gpusplit_hosts=gpu-a:gpu-b:gpu-wedged"], env)
    assert rc != 0, output
    assert all(_pip_calls(venv) == [] for venv in venvs.values())
    note = "is not importable on 2 host(s), whose GPUs were read with nvidia-smi instead: gpu-a, gpu-b"
    assert " ".join(output.split()).count(note) == 1, output
    assert "using nvidia-smi instead" not in output  # no per-host warning
    assert f"{FAKES / 'bin' / 'nvidia-smi'} --query-gpu=" in output
    assert "did not finish within 3 s (timeout) and was killed" in output
    assert re.search(r"gpu-wedged\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=1", output), output
    for name in ("gpu-a", "gpu-b"):
        assert re.search(rf"{name}\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0", output), output
    report = json.loads((out / "gpus.json").read_text())
    assert report["gpu-a"]["backend"] == "nvidia-smi" and len(report["gpu-b"]["gpus"]) == 8
    assert report["gpu-wedged"]["msg"] == "GPU discovery did not finish on this host"

    # 2. asked to install: pip once per host that lacks the binding, then NVML is read
    healthy = [*base, "-e", "gpusplit_hosts=gpu-a:gpu-b:gpu-c", "-e", "gpusplit_install_nvml_binding=true"]
    # (in check mode first: nothing is installed, and the second reading goes through nvidia-smi)
    rc, output = run([*healthy, "--check"], env)
    assert rc == 0, output
    assert not [call for venv in venvs.values() for call in _pip_calls(venv) if call[0] == "install"]
    for name in ("gpu-a", "gpu-b"):
        assert re.search(
            rf"{name}\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0\s+skipped=\d+\s+rescued=1", output
        )
    rc, output = run(healthy, env)
    assert rc == 0, output
    for venv in venvs.values():
        (call,) = [call for call in _pip_calls(venv) if call[0] == "install"]
        assert call[0] == "install" and call[-1] == f"nvidia-ml-py=={_pinned_binding_version()}", call
    report = json.loads((out / "gpus.json").read_text())
    assert {report[name]["backend"] for name in venvs} == {"nvml"}
    assert {report[name]["nvml_binding"]["importable"] for name in venvs} == {True}
    assert "not importable" not in output
    install = output[
        output.index("TASK [gpusplit.k8s.gpu_discovery : Install the NVML binding nvidia-ml-py") :
    ]
    install = install[: install.index("TASK [", 10)]
    assert "changed: [gpu-a]" in install and "changed: [gpu-b]" in install, install
    assert "gpu-c" not in install, install
    # only the hosts without the binding reach the rescue; they end rescued, not failed
    assert re.search(
        r"gpu-c\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=0\s+skipped=0\s+rescued=0", output
    ), output[-1500:]
    for name in ("gpu-a", "gpu-b"):
        assert re.search(
            rf"{name}\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0\s+skipped=\d+\s+rescued=1", output
        ), output[-1500:]
    assert report["gpu-c"]["nvml_binding"]["importable"] is True

    # 3. again: the binding imports everywhere, so no host runs pip
    rc, output = run(healthy, env)
    assert rc == 0, output
    assert all(
        len([call for call in _pip_calls(venv) if call[0] == "install"]) == 1 for venv in venvs.values()
    )
    gather = output[output.index("TASK [gpusplit.k8s.gpu_discovery : Gather NVIDIA GPU facts]") :]
    gather = gather[: gather.index("TASK [", 10)]
    assert "ok: [gpu-a]" in gather and "ok: [gpu-b]" in gather and "changed:" not in gather, gather
    assert "Install the NVML binding nvidia-ml-py" not in output  # no host reaches the rescue
    assert "rescued=1" not in output and "skipping:" not in output, output
    report = json.loads((out / "gpus.json").read_text())
    assert {report[name]["backend"] for name in venvs} == {"nvml"}

    # 4. with the variable, a reading that fails for another reason stops the host with its own message
    rc, output = run([*base, "-e", "gpusplit_hosts=gpu-bad", "-e", "gpusplit_install_nvml_binding=true"], env)
    assert rc != 0, output
    flat = " ".join(output.split())
    assert (
        flat.count(f"nvidia_smi_path {tmp_path / 'no-such-nvidia-smi'} does not exist or is not executable")
        >= 2
    )
    stop = output[
        output.index("TASK [gpusplit.k8s.gpu_discovery : Stop where the reading failed for another reason") :
    ]
    assert "fatal: [gpu-bad]" in stop and "does not exist or is not executable" in " ".join(stop.split()), (
        stop
    )
    assert "Install the NVML binding nvidia-ml-py" not in output
    assert re.search(r"gpu-bad\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=1", output), output


def test_discover_checks_the_roles_variables_once_and_each_hosts_values_in_its_module(tmp_path):
    """discover.yml takes the role's entry point fleet: the argument check runs on one host of the play,
    not on each; a bad value of one host fails that host (the module's own check, naming the option)
    while the others are read; a bad play-wide value stops the run at the check, naming the variable,
    before any host is read."""
    base = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "gpusplit_discovery_environment": {
            "PYTHONPATH": str(FAKES),
            "GPUSPLIT_FAKE_NVML_FIXTURE": str(FIXTURES / "h200.json"),
        },
        "gpusplit_discovery_proc_root": str(PROC),
    }
    hosts = {f"gpu-{i}": {} for i in range(3)}
    hosts["gpu-bad"] = {"gpusplit_discovery_backend": "cuda"}
    hosts["gpu-maybe"] = {"gpusplit_discovery_pod_resources": "maybe"}  # not coerced to false
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": hosts}}, "vars": base}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    out = tmp_path / "out"
    argv = discover_argv(tmp_path / "hosts.yml", out)
    env = ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="yaml")
    rc, output = run(argv, env)
    assert rc != 0, output
    check = output[output.index("TASK [gpusplit.k8s.gpu_discovery : Check the discovery's variables once") :]
    check = check[: check.index("TASK [", 10)]
    assert len(re.findall(r"^ok: \[", check, flags=re.M)) == 1, check  # one host, not five
    assert "Validating arguments against arg spec" not in output  # no per-host check of the role's main
    assert "value of backend must be one of: auto, nvml, nvidia-smi, got: cuda" in output
    assert re.search(r"gpu-bad\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=1", output), output
    assert re.search(r"argument 'pod_resources' is of type .*str.* unable to convert to bool", output), output
    assert re.search(r"gpu-maybe\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=1", output), output
    report = json.loads((out / "gpus.json").read_text())
    assert report["gpu-bad"]["msg"] == "GPU discovery did not finish on this host"
    assert all(
        len(report[f"gpu-{i}"]["gpus"]) == len(json.loads((FIXTURES / "h200.json").read_text())["gpus"])
        for i in range(3)
    )

    # a bad value for the whole play: refused by the check, by its variable's name, before any module runs
    rc, output = run(
        [*argv, "-e", "gpusplit_hosts=gpu-0:gpu-1", "-e", "gpusplit_discovery_timeout=soon"], env
    )
    assert rc != 0, output
    assert "gpusplit_discovery_timeout" in output, output
    assert "TASK [gpusplit.k8s.gpu_discovery : Gather NVIDIA GPU facts]" not in output, output
