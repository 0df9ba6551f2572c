"""plugrad-opencl-qcom: OpenCL devices for plugrad.

- `CL`: any OpenCL device (GPUs before accelerators before CPUs; `CL:N` is the N-th).
- `QCOM`: an OpenCL device tuned for Qualcomm Adreno GPUs: 2D images for (h, w, 4) float
  tensors, native half, 64-byte image row pitch, work-groups of at most 128 threads. Available
  where an Adreno is present; with PLUGRAD_QCOM_ANY=1 on any OpenCL device with images.

The one plugin object is `plugin`; the entry points `CL` and `QCOM` in the group
`plugrad.devices` both name it. pyopencl is imported only when a device is opened, so the plugin
always imports and renders (for a generic OpenCL or an Adreno profile when no device is here).
"""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from plugrad.plugin import (Allocator, Capabilities, Compiler, Config, ConfigOption, DeviceDecl, DevicePlugin, Renderer,
                            Runtime, default_dtypes_without, dtypes)

from plugrad_opencl_qcom.cldevice import (ADRENO_PITCH_ALIGNMENT, CL, QCOM, QCOM_ANY, DeviceInfo, device_info,
                                          enumerate_devices, open_device, probe, qcom_any)

__version__ = "0.1.0"
PLUGRAD_CONTRACT = 2  # the plugin contract this plugin was written against

#: Most buffers one kernel binds, whatever the parameter size allows.
MAX_BUFFERS_CAP = 128
#: Work-group limits on QCOM: Adreno runs waves of 64 or 128 fibers, and big groups cost registers.
QCOM_MAX_THREADS, QCOM_MAX_LOCAL = 128, (128, 128, 64)
_HAS_IMAGE_LIMIT = "max_image2d" in {f.name for f in fields(Capabilities)}


def _kind(device: str) -> str:
  """CL or QCOM, for a device string the plugin owns."""
  return device.split(":")[0].upper()


def buffer_limit(info: DeviceInfo) -> int:
  """Buffers per kernel: every buffer (or image) argument takes a pointer's worth of parameter space."""
  return max(1, min(info.param_size // info.pointer_bytes, MAX_BUFFERS_CAP))


def capabilities(kind: str, info: DeviceInfo) -> Capabilities:
  """The Capabilities of a `kind` device described by `info`."""
  missing = () if info.has_fp64 else (dtypes.float64,)
  local = tuple(info.max_work_item_sizes[:3]) + (1,) * (3 - len(info.max_work_item_sizes[:3]))
  threads = info.max_work_group_size
  if kind == QCOM:
    local = tuple(min(a, b) for a, b in zip(local, QCOM_MAX_LOCAL))
    threads = min(threads, QCOM_MAX_THREADS)
  extra = {"max_image2d": info.image2d_max} if _HAS_IMAGE_LIMIT and info.images else {}
  return Capabilities(max_buffers=buffer_limit(info), dtypes=default_dtypes_without(*missing), launch_dims=3,
                      max_global_size=(2**31 - 1, 2**31 - 1, 2**31 - 1), max_local_size=local,
                      max_workgroup_threads=threads, local_memory=info.local_mem_size, max_vector_bytes=16,
                      supports_images=kind == QCOM and info.images, optional_ops=frozenset({"COS"}), **extra)


class OpenCLPlugin(DevicePlugin):
  """The hook implementations of the CL and QCOM devices. Roles share one opened device (context and
  queue) per device string, so buffers from the allocator are valid in the runtime's kernels."""
  PLUGRAD_CONTRACT = PLUGRAD_CONTRACT
  names = (CL, QCOM)

  def devices(self, config: Config) -> list[DeviceDecl]:
    sw = QCOM_ANY.env
    return [
      DeviceDecl(CL, priority=50, probe=lambda: probe(CL, False),
                 install_hint="pip install pyopencl and an OpenCL driver, e.g. apt-get install pocl-opencl-icd",
                 description="any OpenCL device (GPU preferred), via pyopencl",
                 count=lambda: len(enumerate_devices(CL, False))),
      # an Adreno outranks the CPU device; the test switch must not make pocl the default device
      DeviceDecl(QCOM, priority=60 if qcom_any(config) else 110, probe=lambda: probe(QCOM, qcom_any(config)),
                 install_hint=f"needs a Qualcomm Adreno GPU with its OpenCL driver, or {sw}=1 with any OpenCL device "
                              f"with images",
                 description="OpenCL tuned for Qualcomm Adreno: images, half, 64-byte pitch",
                 count=lambda: len(enumerate_devices(QCOM, qcom_any(config)))),
    ]

  def options(self) -> list[ConfigOption]:
    return [QCOM_ANY]

  def capabilities(self, device: str, config: Config) -> Capabilities | None:
    kind = _kind(device)
    return capabilities(kind, device_info(device, config))

  def renderer(self, device: str, config: Config) -> Renderer | None:
    from plugrad_opencl_qcom.renderer import OpenCLRenderer
    return OpenCLRenderer(device, device_info(device, config).extensions)

  def compiler(self, device: str, config: Config) -> Compiler | None:
    kind = _kind(device)
    from plugrad_opencl_qcom.compiler import CLCompiler, NoDeviceCompiler, ProfileCompiler, find_clang
    cache = Path(config.cache_dir) / "opencl" / kind.lower()
    try:
      cldev = open_device(device, config)
    except Exception as e:  # no hardware: check the source against the device profile with clang, if there is one
      clang = find_clang()
      if clang is None: return NoDeviceCompiler(device, f"{e}; and no clang to check OpenCL C against the profile")
      return ProfileCompiler(cache, device, device_info(device, config), clang)
    return CLCompiler(cache, cldev)

  def allocator(self, device: str, config: Config) -> Allocator | None:
    kind = _kind(device)
    from plugrad_opencl_qcom.allocator import CLAllocator
    return CLAllocator(open_device(device, config), ADRENO_PITCH_ALIGNMENT if kind == QCOM else None)

  def runtime(self, device: str, config: Config) -> Runtime | None:
    from plugrad_opencl_qcom.runtime import CLRuntime
    return CLRuntime(open_device(device, config))


plugin = OpenCLPlugin()

__all__ = ["plugin", "OpenCLPlugin", "capabilities", "buffer_limit", "PLUGRAD_CONTRACT", "QCOM_ANY"]
