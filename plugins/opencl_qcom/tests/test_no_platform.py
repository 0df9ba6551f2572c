"""Without any OpenCL platform: the devices say why in `python -m plugrad devices`, using them fails
with the reason and the fix, the plugin still renders, and the hardware tests skip saying so."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from plugrad import DeviceError
from plugrad.config import Config
from plugrad.registry import Registry

import plugrad_opencl_qcom.cldevice as cldevice
from plugrad_opencl_qcom import plugin

HERE = Path(__file__).parent


def _no_platform(kind, any_images):
  raise RuntimeError("no OpenCL platform found (clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR)")


def test_isolated_registry_reports_the_probe_failure(monkeypatch):
  monkeypatch.setattr(cldevice, "enumerate_devices", _no_platform)
  monkeypatch.setattr(cldevice, "adreno_possible", lambda: True)  # as on an ARM host, where QCOM asks the platforms
  monkeypatch.setattr(cldevice, "_opened", {})
  reg = Registry(Config.from_env({}), builtins=[plugin], entry_points=lambda group: [])
  for name in ("CL", "QCOM"):
    st = reg.status(name)
    assert not st.available and "no OpenCL platform found" in st.reason
  assert "pocl-opencl-icd" in reg.status("CL").reason  # the fix comes with the reason
  with pytest.raises(DeviceError, match="no OpenCL platform found"): reg.device("CL")
  # rendering needs no hardware: the generic profile's capabilities and renderer
  dev = reg.render_device("CL")
  assert dev.caps.launch_dims == 3 and type(dev.renderer).__name__ == "OpenCLRenderer"


def test_qcom_without_adreno_names_the_switch(monkeypatch):
  monkeypatch.setattr(cldevice, "enumerate_devices", lambda kind, any_images: [])
  monkeypatch.setattr(cldevice, "adreno_possible", lambda: True)
  reason = cldevice.probe("QCOM", False)
  assert "Adreno" in reason and "PLUGRAD_QCOM_ANY=1" in reason


def test_qcom_on_a_host_without_adrenos_asks_no_platform(monkeypatch):
  """QCOM outranks the CPU device: on an x86 host its probe answers without pyopencl (the default device's choice
  asks it on every start); with the switch on it asks the platforms as before."""
  asked = []
  monkeypatch.setattr(cldevice, "enumerate_devices", lambda kind, any_images: asked.append(kind) or [])
  monkeypatch.setattr(cldevice.platform, "machine", lambda: "x86_64")
  reason = cldevice.probe("QCOM", False)
  assert "x86_64 host" in reason and "PLUGRAD_QCOM_ANY=1" in reason and asked == []
  cldevice.probe("QCOM", True)
  cldevice.probe("CL", False)
  assert asked == ["QCOM", "CL"]


def _env_without_platforms(tmp_path: Path) -> dict[str, str]:
  empty = tmp_path / "vendors"
  empty.mkdir()
  return {**os.environ, "OCL_ICD_VENDORS": str(empty), "PLUGRAD_CACHE_DIR": str(tmp_path / "cache")}


def test_devices_command_reports_the_reason(tmp_path):
  res = subprocess.run([sys.executable, "-m", "plugrad", "devices"], env=_env_without_platforms(tmp_path),
                       capture_output=True, text=True, timeout=120)
  assert res.returncode == 0, res.stderr
  rows = {ln[2:].split()[0]: ln for ln in res.stdout.splitlines() if ln[2:].startswith(("CL ", "QCOM "))}
  assert "unavailable: no OpenCL platform found" in rows["CL"], res.stdout
  # QCOM asks the platforms only where an Adreno can be (ARM hosts)
  want = "no OpenCL platform found" if cldevice.adreno_possible() else "host and Adrenos come in ARM"
  assert "unavailable: " in rows["QCOM"] and want in rows["QCOM"], res.stdout


def test_hardware_tests_skip_saying_why(tmp_path):
  res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(HERE / "test_device.py"),
                        str(HERE / "test_images.py")], env=_env_without_platforms(tmp_path), capture_output=True, text=True,
                       timeout=300, cwd=HERE.parent)
  assert res.returncode == 0, res.stdout + res.stderr
  assert "SKIPPED" in res.stdout and "no OpenCL platform found" in res.stdout, res.stdout
  assert "failed" not in res.stdout.splitlines()[-1]
