# Copyright: gpusplit contributors
# Apache-2.0
"""The NVML Python binding (module ``pynvml``, PyPI package ``nvidia-ml-py``): installing it into the
Python that runs the module, inside the discovery's own call. Private to the collection.

The install runs as ``<that python> -m pip install`` (a ``pip`` on PATH may belong to another Python),
with a time limit, and a failure says what to do in the three cases met on fleets: no pip for that
Python, an externally managed system Python (PEP 668), and no route to the package index.

Standard library only.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.schema import GpuFactsError

PACKAGE = "nvidia-ml-py"
# the version installed when none is given (pyproject.toml pins the same one)
DEFAULT_VERSION = "13.615.71"
# pip may wait on a slow or unreachable package index; past this the host fails with the reason
PIP_TIMEOUT = 300.0
INSTALLED_MARK = "Successfully installed"


def pip_argv(python, version, break_system_packages=False):
    """The pip command that installs ``nvidia-ml-py==<version>`` into ``python``."""
    if not isinstance(version, str) or not version.strip() or any(c.isspace() for c in version):
        raise GpuFactsError(
            f"binding_version must be one version of {PACKAGE} such as 13.615.71, got {version!r}"
        )
    argv = [
        python,
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        f"{PACKAGE}=={version}",
    ]
    if break_system_packages:
        argv.append("--break-system-packages")
    return argv


def _last_lines(text, count=3):
    return " ".join(line.strip() for line in (text or "").strip().splitlines()[-count:])


def failure_message(python, version, rc, stderr):
    """Why pip could not install the binding, and what to do about it."""
    if "No module named pip" in (stderr or ""):
        todo = (
            "Install pip for that Python (e.g. the python3-pip package) or set ansible_python_interpreter "
            "to a Python that has it."
        )
    elif "externally-managed" in (stderr or ""):
        todo = (
            "Set gpusplit_nvml_binding_break_system_packages: true (module option break_system_packages) "
            "or use a virtual environment as ansible_python_interpreter."
        )
    else:
        todo = (
            "Check that the host reaches the package index pip uses, or install nvidia-ml-py yourself and "
            "leave gpusplit_install_nvml_binding false."
        )
    return (
        f"gpusplit_install_nvml_binding: pip could not install {PACKAGE}=={version} into {python}, the Python "
        f"that runs the modules on this host (exit code {rc}): {_last_lines(stderr)}. {todo}"
    )


def install(run, python, version, break_system_packages=False, timeout=PIP_TIMEOUT):
    """Install the binding with ``run(argv, timeout)`` -> ``(rc, stdout, stderr)``.

    Returns ``True`` when pip installed it (its "Successfully installed" line), ``False`` when pip had
    nothing to do. Raises GpuFactsError with what to do when pip fails or does not finish in time.
    """
    argv = pip_argv(python, version, break_system_packages)
    try:
        rc, stdout, stderr = run(argv, timeout)
    except GpuFactsError as exc:
        raise GpuFactsError(
            f"gpusplit_install_nvml_binding: {' '.join(argv)} failed or did not finish within {timeout:g} s: "
            f"{str(exc).split(';', maxsplit=1)[0]}. Check that the host reaches the package index pip uses, or install "
            f"{PACKAGE} yourself and leave gpusplit_install_nvml_binding false."
        ) from None
    if rc != 0:
        raise GpuFactsError(failure_message(python, version, rc, stderr))
    return INSTALLED_MARK in (stdout or "")
