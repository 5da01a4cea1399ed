"""plugins/module_utils/_gpu/smi_parse.py: reading nvidia-smi's output."""

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import smi_parse as sp

# --- nvidia-smi parsing ----------------------------------------------------------------------------

FIELDS = sp.SMI_REQUIRED_FIELDS + sp.SMI_OPTIONAL_FIELDS
HEADER = ", ".join(f"{field} [MiB]" if field == "memory.total" else field for field in FIELDS)


def _row(**values):
    base = {
        "index": "0",
        "uuid": "GPU-5b1e2a3c-7d4f-4e8a-9b0c-1d2e3f4a5b6c",
        "name": "NVIDIA H100 80GB HBM3",
        "pci.bus_id": "00000000:18:00.0",
        "memory.total": "81559 MiB",
        "driver_version": "570.172.08",
        "persistence_mode": "Enabled",
        "mig.mode.current": "Disabled",
        "mig.mode.pending": "Disabled",
        "ecc.mode.current": "Enabled",
        "ecc.errors.uncorrected.volatile.total": "0",
        "ecc.errors.uncorrected.aggregate.total": "0",
        "retired_pages.double_bit.count": "[N/A]",
        "retired_pages.pending": "[N/A]",
        "remapped_rows.correctable": "0",
        "remapped_rows.uncorrectable": "0",
        "remapped_rows.pending": "No",
        "remapped_rows.failure": "No",
    }
    base.update({key.replace("_DOT_", "."): value for key, value in values.items()})
    return ",   ".join(base[field] for field in FIELDS)


def test_parse_gpu_query_with_units_and_extra_spaces():
    rows = sp.parse_gpu_query(f"{HEADER}\n{_row()}\n\n", FIELDS)
    gpu, lost, warnings = sp.gpu_from_smi_row(rows[0])
    assert lost == [] and warnings == []
    assert gpu["memory_total_mib"] == 81559
    assert gpu["pci_bus_id"] == "00000000:18:00.0"
    assert gpu["persistence_mode"] is True
    assert gpu["mig_mode"] == {"current": "disabled", "pending": "disabled"}
    assert gpu["ecc"] == {"mode_current": "enabled", "uncorrected_volatile": 0, "uncorrected_aggregate": 0}
    assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert gpu["retired_pages"] is None


def test_parse_gpu_query_placeholders_become_null():
    line = _row(
        persistence_mode="[Not Supported]",
        mig_DOT_mode_DOT_current="[N/A]",
        mig_DOT_mode_DOT_pending="N/A",
        ecc_DOT_mode_DOT_current="[N/A]",
        ecc_DOT_errors_DOT_uncorrected_DOT_volatile_DOT_total="[N/A]",
        ecc_DOT_errors_DOT_uncorrected_DOT_aggregate_DOT_total="[N/A]",
        remapped_rows_DOT_correctable="[N/A]",
        remapped_rows_DOT_uncorrectable="[N/A]",
        remapped_rows_DOT_pending="[N/A]",
        remapped_rows_DOT_failure="[N/A]",
    )
    gpu, _, _ = sp.gpu_from_smi_row(sp.parse_gpu_query(f"{HEADER}\n{line}\n", FIELDS)[0])
    assert gpu["persistence_mode"] is None
    assert gpu["mig_mode"] == {"current": None, "pending": None}
    assert gpu["ecc"] is None and gpu["remapped_rows"] is None


def test_parse_gpu_query_lost_gpu():
    line = _row(memory_DOT_total="[GPU requires reset]", persistence_mode="[Unknown Error]")
    gpu, lost, _ = sp.gpu_from_smi_row(sp.parse_gpu_query(f"{HEADER}\n{line}\n", FIELDS)[0])
    assert gpu["memory_total_mib"] is None
    assert len(lost) == 1 and "[GPU requires reset]" in lost[0] and "memory.total" in lost[0]


def test_parse_gpu_query_no_permission_warns():
    line = _row(remapped_rows_DOT_pending="[Insufficient Permissions]")
    gpu, lost, warnings = sp.gpu_from_smi_row(sp.parse_gpu_query(f"{HEADER}\n{line}\n", FIELDS)[0])
    assert lost == [] and gpu["remapped_rows"]["pending"] is None
    assert "remapped_rows.pending" in warnings[0]


def test_parse_gpu_query_wrong_column_count_quotes_line():
    bad = "0, GPU-5b1e2a3c-7d4f-4e8a-9b0c-1d2e3f4a5b6c, NVIDIA H100 80GB HBM3"
    with pytest.raises(sp.SmiParseError) as caught:
        sp.parse_gpu_query(f"{HEADER}\n{bad}\n", FIELDS)
    assert "expected 18 columns, got 3" in str(caught.value)
    assert bad in str(caught.value)


def test_parse_gpu_query_non_numeric_quotes_line():
    line = _row(memory_DOT_total="lots MiB")
    row = sp.parse_gpu_query(f"{HEADER}\n{line}\n", FIELDS)[0]
    with pytest.raises(sp.SmiParseError) as caught:
        sp.gpu_from_smi_row(row)
    assert "memory.total is 'lots MiB', expected a number" in str(caught.value)
    assert line.strip() in str(caught.value)


def test_parse_gpu_query_bad_bool_and_bus_id():
    for line, needle in (
        (_row(persistence_mode="Maybe"), "persistence_mode is 'Maybe'"),
        (_row(pci_DOT_bus_id="slot 3"), "pci.bus_id is 'slot 3'"),
    ):
        row = sp.parse_gpu_query(f"{HEADER}\n{line}\n", FIELDS)[0]
        with pytest.raises(sp.SmiParseError, match=needle):
            sp.gpu_from_smi_row(row)


def test_parse_gpu_query_unexpected_header():
    with pytest.raises(sp.SmiParseError, match="unexpected header"):
        sp.parse_gpu_query("index, uuid\n0, GPU-x\n", FIELDS)
    with pytest.raises(sp.SmiParseError, match="printed nothing"):
        sp.parse_gpu_query("\n", FIELDS)


def test_parse_compute_apps():
    text = (
        "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
        "GPU-aaa, 2841, /usr/bin/python3, 1024 MiB\n"
        "GPU-bbb, 48213, python train.py --tags a,b, 30546 MiB\n"
        "GPU-ccc, 777, [Insufficient Permissions], [N/A]\n"
    )
    apps = sp.parse_compute_apps(text)
    assert apps[0] == {
        "gpu_uuid": "GPU-aaa",
        "pid": 2841,
        "name": "/usr/bin/python3",
        "used_memory_mib": 1024,
    }
    assert apps[1]["name"] == "python train.py --tags a,b"
    assert apps[1]["used_memory_mib"] == 30546
    assert apps[2]["name"] is None and apps[2]["used_memory_mib"] is None
    assert sp.parse_compute_apps("gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n") == []
    assert sp.parse_compute_apps("No running processes found\n") == []


def test_parse_compute_apps_garbage():
    with pytest.raises(sp.SmiParseError, match="pid 'abc' is not a number"):
        sp.parse_compute_apps("gpu_uuid, pid, process_name, used_gpu_memory [MiB]\nGPU-a, abc, x, 1 MiB\n")


def test_parse_list_gpus():
    text = (
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-9ac6c221-b7d0-5977-3f67-437835bad8c1)\n"
        "  MIG 3g.40gb     Device  0: (UUID: MIG-94eb40e4-7a12-853d-1248-bca084ea36a6)\n"
        "  MIG 1g.10gb     Device  1: (UUID: MIG-b98fa930-d262-5dfb-b2f5-93b596ace04a)\n"
        "Unable to determine the device handle for GPU1: 0000:0F:00.0: GPU is lost.\n"
        "GPU 2: NVIDIA A100-SXM4-80GB (UUID: GPU-7cba93ac-8127-8bf1-1cf1-a3ffd2ba23bf)\n"
    )
    listed = sp.parse_list_gpus(text)
    assert listed["GPU-9ac6c221-b7d0-5977-3f67-437835bad8c1"] == [
        {"index": 0, "profile": "3g.40gb", "uuid": "MIG-94eb40e4-7a12-853d-1248-bca084ea36a6"},
        {"index": 1, "profile": "1g.10gb", "uuid": "MIG-b98fa930-d262-5dfb-b2f5-93b596ace04a"},
    ]
    assert listed["GPU-7cba93ac-8127-8bf1-1cf1-a3ffd2ba23bf"] == []


XML = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
  <driver_version>570.172.08</driver_version>
  <cuda_version>12.8</cuda_version>
  <gpu id="00000000:07:00.0">
    <mig_devices>
      <mig_device>
        <index>0</index>
        <gpu_instance_id>1</gpu_instance_id>
        <compute_instance_id>0</compute_instance_id>
        <fb_memory_usage><total>40192 MiB</total></fb_memory_usage>
      </mig_device>
    </mig_devices>
    <minor_number>3</minor_number>
  </gpu>
  <gpu id="0000:0F:00.0">
    <mig_devices>None</mig_devices>
    <minor_number>N/A</minor_number>
  </gpu>
</nvidia_smi_log>
"""


def test_parse_query_xml():
    parsed = sp.parse_query_xml(XML)
    assert parsed["cuda_version"] == "12.8"
    assert parsed["driver_version"] == "570.172.08"
    assert parsed["attached_gpus"] is None  # not in this excerpt
    assert parsed["gpus"]["00000000:07:00.0"] == {
        "minor_number": 3,
        "uuid": None,
        "mig_devices": {0: {"gpu_instance_id": 1, "compute_instance_id": 0, "memory_total_mib": 40192}},
    }
    assert parsed["gpus"]["00000000:0F:00.0"] == {"minor_number": None, "uuid": None, "mig_devices": {}}


def test_parse_query_xml_garbage():
    with pytest.raises(sp.SmiParseError, match="'Segmentation fault'"):
        sp.parse_query_xml("Segmentation fault\n<oops")
    with pytest.raises(sp.SmiParseError, match="expected <nvidia_smi_log>"):
        sp.parse_query_xml("<html></html>")


@pytest.mark.parametrize(
    ("rc", "stdout", "expected"),
    [
        (
            9,
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
            "the latest NVIDIA driver is installed and running.\n",
            True,
        ),
        (12, "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.\n", True),
        (18, "Failed to initialize NVML: Driver/library version mismatch\n", False),
        (0, "index\n0\n", False),
    ],
)
def test_smi_says_no_driver(rc, stdout, expected):
    assert sp.smi_says_no_driver(rc, stdout, "") is expected


def test_parse_unopenable_gpus():
    text = (
        "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n"
        "Unable to determine the device handle for GPU 2: 0000:4c:00.0: GPU is lost.  Reboot the system\n"
    )
    assert sp.parse_unopenable_gpus(text, "") == [
        ("00000000:3B:00.0", "Unknown Error"),
        ("00000000:4C:00.0", "GPU is lost.  Reboot the system"),
    ]
    header = ", ".join(sp.SMI_REQUIRED_FIELDS)
    assert sp.parse_gpu_query(f"{header}\n{text}", sp.SMI_REQUIRED_FIELDS) == []


def test_smi_unknown_field():
    text = 'Field "remapped_rows.pending" is not a valid field to query.\n\n'
    assert sp.smi_unknown_field(text, "") == "remapped_rows.pending"
    assert sp.smi_unknown_field("all good", "") is None
