"""plugins/module_utils/_gpu/processes.py: which GPU processes run in a container."""

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import processes, schema

CID = "552089a58c2b5749502ad5a902c2143f96deeff51e17dc18ac2b8111dc4a0049"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7c0a1e52_3f4b_4d6e_9a8b_"
            f"0c1d2e3f4a5b.slice/cri-containerd-{CID}.scope\n",
            (True, CID),
        ),
        (
            f"12:memory:/kubepods/besteffort/pod1b2d3f4a-5c6e-4f70-8a9b-0c1d2e3f4a5b/{CID}\n0::/\n",
            (True, CID),
        ),
        (f"0::/system.slice/docker-{CID}.scope\n", (True, CID)),
        (f"11:devices:/docker/{CID}\n", (True, CID)),
        (
            f"0::/kubepods.slice/kubepods-pod0a1b2c3d_4e5f_6a7b_8c9d_0e1f2a3b4c5d.slice/crio-{CID}.scope\n",
            (True, CID),
        ),
        (f"0::/machine.slice/libpod-{CID}.scope/container\n", (True, CID)),
        ("0::/kubepods.slice/kubepods-besteffort.slice\n", (True, None)),
        ("0::/user.slice/user-1000.slice/session-12.scope\n", (False, None)),
        ("0::/system.slice/ollama.service\n", (False, None)),
        ("0::/\n", (False, None)),
        ("", (False, None)),
        (None, (None, None)),
    ],
)
def test_classify_cgroup(text, expected):
    assert processes.classify_cgroup(text) == expected


def test_annotate_processes_reads_each_pid_once():
    reads = []
    files = {"/host/proc/10/cgroup": f"0::/system.slice/docker-{CID}.scope\n"}

    def read_text(path):
        reads.append(path)
        return files.get(path)

    gpus = [
        {"processes": [schema.new_process(10), schema.new_process(11)]},
        {"processes": [schema.new_process(10)]},
        {"processes": None},
    ]
    processes.annotate_processes(gpus, read_text, "/host/proc/")
    assert gpus[0]["processes"][0]["in_container"] is True
    assert gpus[0]["processes"][0]["container_id"] == CID
    assert gpus[0]["processes"][1]["in_container"] is None
    assert gpus[1]["processes"][0]["container_id"] == CID
    assert reads == ["/host/proc/10/cgroup", "/host/proc/11/cgroup"]
