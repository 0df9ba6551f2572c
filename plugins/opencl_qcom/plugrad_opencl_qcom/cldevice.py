"""Finding OpenCL devices and describing them.

Every role of a device (renderer, compiler, allocator, runtime) works from one `CLDevice`: the
pyopencl device with its context and profiling queue, built once per (kind, index, switch) and
shared. `DeviceInfo` is the plain description the renderer and the capabilities are made from; it
exists without hardware too (a generic OpenCL profile for CL, an Adreno profile for QCOM), so the
plugin always renders. pyopencl is imported only here and only when a device is asked for.
"""
from __future__ import annotations

import platform
import threading
from dataclasses import dataclass
from typing import Any

from plugrad.plugin import Config, ConfigOption

CL, QCOM = "CL", "QCOM"

#: PLUGRAD_QCOM_ANY=1: the QCOM device runs on any OpenCL device with images (pocl in CI).
QCOM_ANY = ConfigOption("PLUGRAD_QCOM_ANY", "0",
                        "1: the QCOM device (Adreno tuning, images) runs on any OpenCL device with image support")

#: Adreno's row pitch alignment for 2D images, in bytes.
ADRENO_PITCH_ALIGNMENT = 64


def qcom_any(config: Config) -> bool:
  """Whether the QCOM switch is on."""
  raw = config.option(QCOM_ANY).strip().lower()
  if raw in ("", "0", "false", "no", "off"): return False
  if raw in ("1", "true", "yes", "on"): return True
  raise ValueError(f"{QCOM_ANY.env}={raw!r} must be 0 or 1")


@dataclass(frozen=True)
class DeviceInfo:
  """What plugrad needs to know about one OpenCL device (all from clGetDeviceInfo).

  :param name: device name; :param driver: driver version; :param platform: platform version.
  :param extensions: the device's extension names.
  :param param_size: CL_DEVICE_MAX_PARAMETER_SIZE (bytes of kernel arguments).
  :param pointer_bytes: CL_DEVICE_ADDRESS_BITS // 8 (the size of one buffer argument).
  :param images: CL_DEVICE_IMAGE_SUPPORT; :param image2d_max: (height, width) in pixels.
  :param correctly_rounded_div_sqrt: whether `-cl-fp32-correctly-rounded-divide-sqrt` is allowed.
  """
  name: str
  driver: str
  platform: str
  vendor: str
  is_gpu: bool
  extensions: frozenset[str]
  param_size: int
  pointer_bytes: int
  max_work_item_sizes: tuple[int, ...]
  max_work_group_size: int
  local_mem_size: int
  images: bool
  image2d_max: tuple[int, int]
  correctly_rounded_div_sqrt: bool = False

  @property
  def has_fp16(self) -> bool: return "cl_khr_fp16" in self.extensions
  @property
  def has_fp64(self) -> bool: return "cl_khr_fp64" in self.extensions


#: What CL renders for when no OpenCL device is present: the OpenCL 1.2 full profile minimums,
#: storage-only half and no doubles (the most portable choice).
GENERIC_INFO = DeviceInfo("generic OpenCL 1.2", "", "", "", True, frozenset(), 1024, 8, (1024, 1024, 64), 256, 32768,
                          False, (8192, 8192))
#: What QCOM renders for when no Adreno is present: an Adreno 6xx/7xx (native half, images, no doubles).
ADRENO_INFO = DeviceInfo("Adreno (profile)", "", "", "QUALCOMM", True, frozenset({"cl_khr_fp16", "cl_khr_3d_image_writes"}),
                         1024, 8, (1024, 1024, 1024), 1024, 32768, True, (16384, 16384))


def _is_qualcomm(dev: Any) -> bool:
  return "qualcomm" in dev.vendor.lower() or "qualcomm" in dev.platform.name.lower()


def enumerate_devices(kind: str, any_images: bool) -> list[Any]:
  """The pyopencl devices `kind` may run on, in index order (CL:0, CL:1, ...).

  CL: every device, GPUs first, then accelerators, then CPUs. QCOM: Qualcomm (Adreno) GPUs; with
  the switch on, every other device with image support after them.
  Raises RuntimeError (with the reason) when pyopencl or an OpenCL platform is missing.
  """
  import pyopencl as cl
  try:
    platforms = cl.get_platforms()
  except cl.Error as e:
    raise RuntimeError(f"no OpenCL platform found ({e})") from None
  devs = []
  for p in platforms:
    try:
      devs.extend(p.get_devices())
    except cl.Error:  # a platform with no devices raises DEVICE_NOT_FOUND
      continue
  def rank(d: Any) -> int:
    if d.type & cl.device_type.GPU: return 0
    if d.type & cl.device_type.ACCELERATOR: return 1
    return 2
  devs.sort(key=rank)  # stable: platform order within a type
  if kind == CL: return devs
  adreno = [d for d in devs if _is_qualcomm(d) and d.type & cl.device_type.GPU]
  if not any_images: return adreno
  return adreno + [d for d in devs if d not in adreno and d.image_support]


#: the machines an Adreno GPU comes with: Qualcomm's Snapdragon SoCs are ARM
ADRENO_MACHINES = frozenset({"aarch64", "arm64", "armv8l", "armv7l"})


def adreno_possible() -> bool:
  """Whether this host's CPU is one an Adreno GPU can sit beside (an ARM SoC)."""
  return platform.machine().lower() in ADRENO_MACHINES


def probe(kind: str, any_images: bool) -> str | None:
  """None when `kind` can run here, else why not. QCOM outranks the CPU device, so choosing the default device asks
  it first: on a host no Adreno can be in, it answers without importing pyopencl or waking the OpenCL platforms
  (59 ms on the 2-core x86 machine, with pocl)."""
  if kind == QCOM and not any_images and not adreno_possible():
    return (f"no Qualcomm Adreno GPU: this is a {platform.machine()} host and Adrenos come in ARM Snapdragon SoCs "
            f"(set {QCOM_ANY.env}=1 to run the QCOM code paths on any OpenCL device with images)")
  try:
    import pyopencl  # noqa: F401
  except ImportError as e:
    return f"pyopencl cannot be imported ({e})"
  try:
    devs = enumerate_devices(kind, any_images)
  except RuntimeError as e:
    return str(e)
  if devs: return None
  if kind == CL: return "the OpenCL platforms have no devices"
  return (f"no Qualcomm Adreno GPU among the OpenCL devices (set {QCOM_ANY.env}=1 to run the QCOM code paths on any "
          f"OpenCL device with images)")


def describe(dev: Any) -> DeviceInfo:
  """The DeviceInfo of a pyopencl device."""
  import pyopencl as cl
  try:
    crds = bool(dev.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT)
  except cl.Error:
    crds = False
  return DeviceInfo(name=dev.name.strip(), driver=dev.driver_version.strip(), platform=dev.platform.version.strip(),
                    vendor=dev.vendor.strip(), is_gpu=bool(dev.type & cl.device_type.GPU),
                    extensions=frozenset(dev.extensions.split()), param_size=int(dev.max_parameter_size),
                    pointer_bytes=max(4, int(dev.address_bits) // 8),
                    max_work_item_sizes=tuple(int(x) for x in dev.max_work_item_sizes),
                    max_work_group_size=int(dev.max_work_group_size), local_mem_size=int(dev.local_mem_size),
                    images=bool(dev.image_support),
                    image2d_max=(int(dev.image2d_max_height), int(dev.image2d_max_width)) if dev.image_support else (0, 0),
                    correctly_rounded_div_sqrt=crds)


class CLDevice:
  """One OpenCL device opened for plugrad: context, an in-order profiling queue and its DeviceInfo."""

  def __init__(self, kind: str, index: int, cl_device: Any):
    import pyopencl as cl
    self.kind, self.index, self.device = kind, index, cl_device
    self.info = describe(cl_device)
    self.context = cl.Context([cl_device])
    self.queue = cl.CommandQueue(self.context, cl_device, properties=cl.command_queue_properties.PROFILING_ENABLE)

  def __repr__(self) -> str: return f"<CLDevice {self.kind}:{self.index} {self.info.name}>"


_opened: dict[tuple[str, int, bool], CLDevice] = {}
_lock = threading.Lock()


def open_device(device: str, config: Config) -> CLDevice:
  """The CLDevice behind a device string such as "CL" or "QCOM:1" (opened once, then shared)."""
  kind, _, idx = device.partition(":")
  kind, index, sw = kind.upper(), int(idx or 0), qcom_any(config)
  key = (kind, index, sw if kind == QCOM else False)
  with _lock:
    if (d := _opened.get(key)) is None:
      devs = enumerate_devices(kind, sw)
      if index >= len(devs):
        raise RuntimeError(f"{device}: there are only {len(devs)} {kind} device(s) here "
                           f"({', '.join(x.name.strip() for x in devs) or 'none'})")
      d = _opened[key] = CLDevice(kind, index, devs[index])
    return d


def device_info(device: str, config: Config) -> DeviceInfo:
  """The device's DeviceInfo; without OpenCL hardware, the kind's profile (so rendering still works)."""
  try:
    return open_device(device, config).info
  except Exception:  # no pyopencl, no platform, no such index: render for the profile
    return ADRENO_INFO if device.split(":")[0].upper() == QCOM else GENERIC_INFO
