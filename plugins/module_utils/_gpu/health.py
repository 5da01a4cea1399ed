# Copyright: gpusplit contributors
# Apache-2.0
"""The health verdict of one GPU (ok, degraded, lost) and why. Private to the collection.

Pure: the collectors hand over what they read; both backends judge a GPU the same way.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.schema import (
    HEALTH_DEGRADED,
    HEALTH_LOST,
    HEALTH_OK,
)

# Why a GPU cannot be opened at all (nvmlDeviceGetHandleByIndex's error codes, nvml.h; nvidia-smi prints
# the same causes as text) and what the operator can do about it. Lost causes make the GPU lost; every
# other cause leaves a GPU that is there but cannot be used: degraded. Used by both backends.
UNOPENED_ADVICE = {
    "NVML_ERROR_GPU_IS_LOST": "the GPU fell off the bus or stopped answering (reset it or reboot the host)",
    "NVML_ERROR_RESET_REQUIRED": "the GPU needs a reset (reset it or reboot the host)",
    "NVML_ERROR_NO_PERMISSION": (
        "the user running the module may not open this GPU: run the task as root (become: true) or give "
        "that user read/write access to /dev/nvidiactl and the GPU's /dev/nvidia<minor> device file "
        "(in a container: expose that device to it)"
    ),
    "NVML_ERROR_NOT_SUPPORTED": (
        "the installed driver cannot manage this GPU through NVML (a GPU this driver branch does not "
        "support): install a driver that supports it; nvidia-smi and the kernel log (dmesg) say more"
    ),
    "NVML_ERROR_INSUFFICIENT_POWER": (
        "the GPU's external power cables are not connected properly: connect them and power-cycle the host"
    ),
    "NVML_ERROR_IRQ_ISSUE": (
        "the kernel driver saw an interrupt problem with this GPU: look for Xid errors in the kernel log "
        "(dmesg)"
    ),
}
UNOPENED_ADVICE_DEFAULT = "nvidia-smi and the kernel log (dmesg) may say why"
UNOPENED_LOST = ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_RESET_REQUIRED")
# nvidia-smi's "Unable to determine the device handle for GPU<bus id>: <cause>" causes, as NVML errors
_SMI_UNOPENED_CAUSES = (
    ("insufficient permissions", "NVML_ERROR_NO_PERMISSION"),
    ("not supported", "NVML_ERROR_NOT_SUPPORTED"),
    ("external power", "NVML_ERROR_INSUFFICIENT_POWER"),
    ("requires reset", "NVML_ERROR_RESET_REQUIRED"),
    ("reset required", "NVML_ERROR_RESET_REQUIRED"),
    ("gpu is lost", "NVML_ERROR_GPU_IS_LOST"),
)


def smi_unopened_cause(text):
    """The NVML error name behind nvidia-smi's cause text; an unknown cause counts as a lost GPU."""
    low = str(text or "").lower()
    for needle, name in _SMI_UNOPENED_CAUSES:
        if needle in low:
            return name
    return "NVML_ERROR_GPU_IS_LOST"


def unopened_health(error_name, what):
    """The health of a GPU that could not be opened: lost or degraded, with ``what`` and the advice."""
    status = HEALTH_LOST if error_name in UNOPENED_LOST else HEALTH_DEGRADED
    advice = UNOPENED_ADVICE.get(error_name, UNOPENED_ADVICE_DEFAULT)
    return {"status": status, "reasons": [f"{what}; {advice}"]}


def compute_health(gpu, lost_reasons=()):
    """Judge one GPU record: lost > degraded > ok, with one reason per finding.

    lost_reasons: what the collector saw that says the GPU is gone (NVML_ERROR_GPU_IS_LOST, nvidia-smi's
    '[GPU requires reset]'). A lost GPU is not judged further: its counters could not be read.
    """
    lost_reasons = [reason for reason in lost_reasons if reason]
    if lost_reasons:
        return {"status": HEALTH_LOST, "reasons": lost_reasons}
    reasons = []
    ecc = gpu.get("ecc") or {}
    volatile = ecc.get("uncorrected_volatile")
    if volatile:
        reasons.append(f"{volatile} uncorrected ECC error(s) since the driver loaded (volatile counter)")
    rows = gpu.get("remapped_rows") or {}
    if rows.get("failure"):
        reasons.append("row remapping failed on this GPU: it cannot repair its memory any more")
    if rows.get("pending"):
        reasons.append("row remapping pending: reset the GPU to apply it")
    pages = gpu.get("retired_pages") or {}
    if pages.get("double_bit_pending"):
        reasons.append("page retirement pending: reset the GPU or reboot to apply it")
    return {"status": HEALTH_DEGRADED if reasons else HEALTH_OK, "reasons": reasons}
