"""plugins/module_utils/_gpu/health.py: the health verdict of one GPU."""

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import schema
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.health import compute_health


def _gpu(**changes):
    gpu = schema.new_gpu(0)
    gpu.update(changes)
    return gpu


def test_health_ok():
    gpu = _gpu(
        ecc=schema.ecc_or_none("enabled", 0, 3),
        remapped_rows=schema.remapped_rows_or_none(4, 0, False, False),
        retired_pages=schema.retired_pages_or_none(False, 1),
    )
    assert compute_health(gpu) == {"status": "ok", "reasons": []}


def test_health_degraded_has_one_reason_per_finding():
    gpu = _gpu(
        ecc=schema.ecc_or_none("enabled", 2, 5),
        remapped_rows=schema.remapped_rows_or_none(0, 3, True, True),
        retired_pages=schema.retired_pages_or_none(True, 2),
    )
    health = compute_health(gpu)
    assert health["status"] == "degraded"
    assert len(health["reasons"]) == 4
    assert "2 uncorrected ECC" in health["reasons"][0]
    assert any("remapping failed" in reason for reason in health["reasons"])
    assert any("remapping pending" in reason for reason in health["reasons"])
    assert any("page retirement pending" in reason for reason in health["reasons"])


def test_health_lost_wins():
    gpu = _gpu(ecc=schema.ecc_or_none("enabled", 2, 5))
    health = compute_health(gpu, ["GPU is lost"])
    assert health == {"status": "lost", "reasons": ["GPU is lost"]}


def test_health_ignores_unknown_counters():
    assert compute_health(schema.new_gpu(1))["status"] == "ok"
