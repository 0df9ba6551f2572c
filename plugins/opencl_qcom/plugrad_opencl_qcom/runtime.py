"""Loading program binaries and launching kernels with global and local sizes; profiling events
give kernel times when timing is asked for (DEBUG=2)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from plugrad.plugin import DeviceError, Program, Runtime

from plugrad_opencl_qcom.cldevice import CLDevice


def _fit_local(global_size: tuple[int, ...], local_size: tuple[int, ...], limit: int) -> tuple[int, ...]:
  """Shrink a work-group to at most `limit` threads, keeping every size a divisor of its global size."""
  local = list(local_size)
  while math.prod(local) > limit:
    d = max(range(len(local)), key=lambda i: local[i])
    local[d] = max(x for x in range(1, local[d]) if global_size[d] % x == 0) if local[d] > 1 else 1
  return tuple(local)


def _build_log(program, cldev: CLDevice) -> str:
  """The driver's build log of `program`, as a message suffix ('' when it has none)."""
  import pyopencl as cl
  try:
    log = program.get_build_info(cldev.device, cl.program_build_info.LOG).strip()
  except cl.Error:
    return ""
  return f"\n--- build log ---\n{log}\n---" if log else ""


class CLProgram(Program):
  """One kernel of a built program."""

  def __init__(self, cldev: CLDevice, name: str, binary: bytes):
    import pyopencl as cl
    self.cldev, self.name = cldev, name
    self.program = None
    try:
      self.program = cl.Program(cldev.context, [cldev.device], [binary]).build()
      self.kernel = cl.Kernel(self.program, name)
    except cl.Error as e:
      # the binary is this driver's own build of the source (cache entries are keyed by the driver and its version),
      # so clearing the cache cannot help: the driver cannot run what it compiled
      log = _build_log(self.program, cldev) if self.program is not None else ""
      raise DeviceError(f"{cldev.info.name} could not load kernel {name} from the binary it built: {e}{log}\n"
                        f"Clearing the cache will not help (entries are per driver version). Run with DEBUG=4 to "
                        f"see the kernel's source and report it to plugrad-opencl-qcom with any driver messages "
                        f"above.") from e
    wi = cl.kernel_work_group_info
    self.max_threads = int(self.kernel.get_work_group_info(wi.WORK_GROUP_SIZE, cldev.device))
    self.uses_local = int(self.kernel.get_work_group_info(wi.LOCAL_MEM_SIZE, cldev.device)) > 0

  def __call__(self, *bufs: Any, global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    import pyopencl as cl
    gsz = tuple(global_size) or (1,)
    lsz = tuple(local_size) if local_size else None
    if lsz is not None:
      lsz = lsz + (1,) * (len(gsz) - len(lsz)) if lsz else (1,) * len(gsz)
      if math.prod(lsz) > self.max_threads:
        # the kernel needs more registers than a full work-group has: shrink it, unless it shares local memory
        if self.uses_local:
          raise DeviceError(f"kernel {self.name} needs work-groups of {math.prod(lsz)} threads with local memory, but "
                            f"{self.cldev.info.name} allows only {self.max_threads} for it")
        lsz = _fit_local(gsz, lsz, self.max_threads)
    self.kernel.set_args(*bufs, *(np.int32(v) for v in vals))  # the Variables' values follow the buffers
    event = cl.enqueue_nd_range_kernel(self.cldev.queue, self.kernel, gsz, lsz)
    if not wait: return None
    event.wait()
    return (event.profile.end - event.profile.start) * 1e-9


class CLRuntime(Runtime):
  def __init__(self, cldev: CLDevice):
    self.cldev = cldev

  def load(self, name: str, binary: bytes) -> Program: return CLProgram(self.cldev, name, binary)

  def synchronize(self) -> None: self.cldev.queue.finish()
