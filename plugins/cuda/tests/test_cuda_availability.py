"""Availability: why CUDA cannot run here, said the same way by the probe, `python -m plugrad
devices` and DEVICE=CUDA; and what still works without a GPU (capabilities, render, compile)."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest

import plugrad_cuda
from plugrad.config import Config
from plugrad.device import DeviceError
from plugrad.registry import Registry
from plugrad_cuda import DEFAULT_CAPS, DRIVER_MISSING, plugin, probe
from plugrad_cuda.driver import Driver, DriverError


@pytest.fixture
def no_driver(monkeypatch):
  real = ctypes.CDLL

  def cdll(name, *args, **kwargs):
    if str(name).startswith(("libcuda.so", "nvcuda")): raise OSError(f"{name}: cannot open shared object file")
    return real(name, *args, **kwargs)
  monkeypatch.setattr(ctypes, "CDLL", cdll)
  monkeypatch.setattr(sys, "platform", "linux")
  plugrad_cuda._gpu_present.cache_clear()  # the plugin remembers whether a GPU is there
  plugrad_cuda.driver.driver.cache_clear()  # and the loaded driver
  yield
  plugrad_cuda._gpu_present.cache_clear()
  plugrad_cuda.driver.driver.cache_clear()


def test_no_driver(no_driver) -> None:
  assert probe() == DRIVER_MISSING == "no NVIDIA driver: libcuda.so.1 not found"


class FakeLibcuda:
  """libcuda's calls as Python functions returning CUresults: cuInit fails as on a machine without a GPU."""

  def __init__(self) -> None:
    self.cuInit = lambda flags: 100  # CUDA_ERROR_NO_DEVICE

  @staticmethod
  def cuGetErrorName(code, out) -> int:
    ctypes.cast(out, ctypes.POINTER(ctypes.c_char_p))[0] = b"CUDA_ERROR_NO_DEVICE"
    return 0

  @staticmethod
  def cuGetErrorString(code, out) -> int:
    ctypes.cast(out, ctypes.POINTER(ctypes.c_char_p))[0] = b"no CUDA-capable device is detected"
    return 0


def test_driver_calls_raise_with_the_drivers_words() -> None:
  drv = Driver(FakeLibcuda())  # type: ignore[arg-type]
  with pytest.raises(DriverError, match=r"cuInit failed: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected "
                                        r"\(CUresult 100\)") as e:
    drv.cuInit(0)
  assert e.value.code == 100
  with pytest.raises(AttributeError):
    drv.cuNotACall  # only the bound calls exist


def test_driver_that_does_not_start(monkeypatch) -> None:
  # libcuda loads, but cuInit fails: the reason carries the driver's words
  monkeypatch.setattr(sys, "platform", "linux")
  monkeypatch.setattr(ctypes, "CDLL", lambda name, *a, **k: FakeLibcuda())
  plugrad_cuda.driver.driver.cache_clear()
  try:
    assert probe() == ("the CUDA driver did not start: cuInit failed: CUDA_ERROR_NO_DEVICE: "
                       "no CUDA-capable device is detected (CUresult 100)")
  finally:
    plugrad_cuda.driver.driver.cache_clear()


def test_registry_reports_the_reason_and_device_cuda_fails_with_it(no_driver) -> None:
  reg = Registry(Config.from_env({}))
  st = reg.status("CUDA")
  assert not st.available and st.reason == DRIVER_MISSING
  with pytest.raises(DeviceError, match="device CUDA cannot be used: no NVIDIA driver: libcuda.so.1 not found"):
    reg.device("CUDA")
  # rendering and compiling need the plugin only
  assert reg.render_device("CUDA").caps == DEFAULT_CAPS


def test_default_capabilities_without_gpu(no_driver) -> None:
  caps = plugin.plugrad_device_capabilities(device="CUDA", config=Config.from_env({}))
  assert caps.launch_dims == 3 and caps.max_local_size == (1024, 1024, 64) and caps.max_workgroup_threads == 1024
  assert caps.local_memory == 48 * 1024 and caps.max_global_size == (2**31 - 1, 65535, 65535)
  assert plugin.plugrad_device_capabilities(device="PYTHON", config=Config.from_env({})) is None


def test_tensor_cores_by_architecture(no_driver) -> None:
  from plugrad_cuda import tensor_cores
  assert [tc.name for tc in tensor_cores("sm_90")] == ["mma_m16n8k16_f16_f32", "mma_m16n8k16_bf16_f32"]
  assert tensor_cores("sm_80") == tensor_cores("sm_90a") == tensor_cores("sm_120")
  assert tensor_cores("sm_75") == () and tensor_cores("junk") == ()  # m16n8k16 in float16 and bfloat16 needs sm_80
  caps = lambda env: plugin.plugrad_device_capabilities(device="CUDA", config=Config.from_env(env))  # noqa: E731
  assert caps({}).tensor_cores == tensor_cores("sm_80")  # what an sm_80 has, for the default target
  assert caps({"PLUGRAD_CUDA_ARCH": "sm_75"}).tensor_cores == ()  # kernels compiled for sm_75 use none


def test_arch_option_picks_the_compile_target(no_driver) -> None:
  c90 = plugin.plugrad_compiler(device="CUDA", config=Config.from_env({"PLUGRAD_CUDA_ARCH": "sm_90"}))
  c80 = plugin.plugrad_compiler(device="CUDA:1", config=Config.from_env({}))
  assert (c90.arch, c90.output) == ("sm_90", "ptx") and (c80.arch, c80.output) == ("sm_80", "ptx")
  with pytest.raises(ValueError, match="PLUGRAD_CUDA_COMPILER"):
    plugin.plugrad_compiler(device="CUDA", config=Config.from_env({"PLUGRAD_CUDA_COMPILER": "clang"}))


@pytest.mark.skipif(probe() is None, reason="a CUDA GPU is present: the unavailable path is not taken")
def test_device_cuda_fails_with_the_reason_end_to_end() -> None:
  env = {k: v for k, v in os.environ.items() if not k.startswith("PLUGRAD_")} | {"DEVICE": "CUDA"}
  res = subprocess.run([sys.executable, "-c", "from plugrad import Tensor; Tensor([1.0, 2.0]).numpy()"],
                       capture_output=True, text=True, env=env, timeout=120)
  assert res.returncode != 0
  assert f"device CUDA cannot be used: {probe()}" in res.stderr
  devices = subprocess.run([sys.executable, "-m", "plugrad", "devices"], capture_output=True, text=True,
                           env={k: v for k, v in env.items() if k != "DEVICE"}, timeout=120).stdout
  row = next(line for line in devices.splitlines() if line[2:].startswith("CUDA "))
  assert "plugrad-cuda" in row and f"unavailable: {probe()}" in row


def test_with_a_gpu_the_compiler_targets_it(monkeypatch) -> None:
  # a GPU (faked): its own architecture, as cubin; an explicit PLUGRAD_CUDA_ARCH still gives PTX for that
  monkeypatch.setattr(plugrad_cuda, "_gpu_present", lambda: True)
  monkeypatch.setattr(plugrad_cuda, "_gpu_caps", lambda index: (DEFAULT_CAPS, "sm_86"))
  c = plugin.plugrad_compiler(device="CUDA", config=Config.from_env({}))
  assert (c.arch, c.output) == ("sm_86", "cubin")
  c = plugin.plugrad_compiler(device="CUDA", config=Config.from_env({"PLUGRAD_CUDA_ARCH": "sm_90"}))
  assert (c.arch, c.output) == ("sm_90", "ptx")
