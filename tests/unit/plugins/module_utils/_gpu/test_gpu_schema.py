"""plugins/module_utils/_gpu/schema.py: the keys of a GPU record and the order of GPUs."""

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import schema


def _gpu(**changes):
    gpu = schema.new_gpu(0)
    gpu.update(changes)
    return gpu


def test_sort_gpus_by_bus_id_unknown_last():
    gpus = [
        _gpu(index=2, pci_bus_id="00000000:9A:00.0"),
        _gpu(index=5, pci_bus_id=None),
        _gpu(index=0, pci_bus_id="00000000:18:00.0"),
        _gpu(index=1, pci_bus_id=None),
    ]
    assert [gpu["index"] for gpu in schema.sort_gpus(gpus)] == [0, 2, 1, 5]


def test_new_gpu_has_exactly_the_schema_keys():
    assert tuple(schema.new_gpu()) == schema.GPU_KEYS
    assert tuple(schema.new_mig_device()) == schema.MIG_DEVICE_KEYS
    assert tuple(schema.new_process(1)) == schema.PROCESS_KEYS
