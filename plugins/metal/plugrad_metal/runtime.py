"""Running Metal kernels through pyobjc (macOS only; nothing here is imported on other systems).

A `MetalContext` per device holds the MTLDevice, one command queue and the command buffers still
in flight. A kernel launch encodes one compute command (dispatchThreadgroups with the program's
local size as the threadgroup size: the lowering guarantees it divides the global size) and
commits it without waiting, unless timing is asked for (DEBUG=2), in which case it waits and
returns the GPU's own start-to-end time (GPUStartTime/GPUEndTime).
"""
from __future__ import annotations

import platform
import struct
import threading
from math import prod
from typing import Any

from plugrad.plugin import CompileError, DeviceError, Program, Runtime

#: The compiler's "binary" starts with this, followed by the validated MSL source (see compiler.py).
SOURCE_MAGIC = b"plugrad-metal-source\0"


def is_macos() -> bool: return platform.system() == "Darwin"


def import_metal() -> Any:
  """The pyobjc Metal module, or a DeviceError saying what is missing."""
  if not is_macos(): raise DeviceError(f"Metal needs macOS (this is {platform.system()})")
  try:
    import Metal  # pyobjc-framework-Metal
  except ImportError as e:
    raise DeviceError(f"pyobjc's Metal bindings cannot be imported ({e}): pip install pyobjc-framework-Metal") from None
  return Metal


class MetalContext:
  """One Metal device, its command queue, and the command buffers not yet known to be finished."""

  def __init__(self, index: int) -> None:
    Metal = self.Metal = import_metal()
    if index == 0: self.device = Metal.MTLCreateSystemDefaultDevice()
    else:
      devices = list(Metal.MTLCopyAllDevices() or [])
      if index >= len(devices): raise DeviceError(f"METAL:{index} does not exist: this Mac has {len(devices)} Metal device(s)")
      self.device = devices[index]
    if self.device is None: raise DeviceError("this Mac reports no Metal device")
    self.queue = self.device.newCommandQueue()
    self.inflight: list[Any] = []
    self.lock = threading.Lock()

  def compile_options(self) -> Any:
    """Compile options: fast math off, so NaN tests (x != x) and infinities keep their meaning."""
    opts = self.Metal.MTLCompileOptions.new()
    if hasattr(opts, "setMathMode_") and hasattr(self.Metal, "MTLMathModeSafe"): opts.setMathMode_(self.Metal.MTLMathModeSafe)
    else: opts.setFastMathEnabled_(False)
    return opts

  def new_library(self, src: str) -> Any:
    lib, err = self.device.newLibraryWithSource_options_error_(src, self.compile_options(), None)
    if lib is None:
      raise CompileError(f"Metal could not compile the kernel:\n{_describe(err)}\n--- source ---\n{src}")
    return lib

  def check(self, cb: Any) -> None:
    if (err := cb.error()) is not None: raise DeviceError(f"a Metal kernel failed: {_describe(err)}")

  def synchronize(self) -> None:
    with self.lock:
      pending, self.inflight = self.inflight, []
    for cb in pending:
      cb.waitUntilCompleted()
      self.check(cb)


_contexts: dict[int, MetalContext] = {}
_contexts_lock = threading.Lock()


def metal_context(device: str) -> MetalContext:
  """The shared context of a device string ("METAL", "METAL:1")."""
  _, _, idx = device.partition(":")
  index = int(idx or 0)
  with _contexts_lock:
    if index not in _contexts: _contexts[index] = MetalContext(index)
    return _contexts[index]


def _describe(err: Any) -> str:
  if err is None: return "(no error description)"
  try:
    return str(err.localizedDescription())
  except Exception:
    return str(err)


def _pad3(size: tuple[int, ...] | None) -> tuple[int, int, int]:
  size = tuple(size or ())
  if len(size) > 3: raise DeviceError(f"Metal launches have at most 3 dimensions, got {size}")
  return tuple(size) + (1,) * (3 - len(size))  # type: ignore[return-value]


class MetalProgram(Program):
  """A compute pipeline for one kernel."""

  def __init__(self, ctx: MetalContext, name: str, binary: bytes) -> None:
    if not binary.startswith(SOURCE_MAGIC):
      raise DeviceError(f"kernel {name}: not a plugrad-metal binary (was it compiled by the Linux syntax check?)")
    self.ctx, self.name = ctx, name
    lib = ctx.new_library(binary[len(SOURCE_MAGIC):].decode())
    fn = lib.newFunctionWithName_(name)
    if fn is None: raise DeviceError(f"the Metal library has no kernel function {name!r}")
    self.pipeline, err = ctx.device.newComputePipelineStateWithFunction_error_(fn, None)
    if self.pipeline is None: raise DeviceError(f"Metal could not build a pipeline for {name}: {_describe(err)}")

  def __call__(self, *bufs: Any, global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    Metal, ctx = self.ctx.Metal, self.ctx
    gs, ls = _pad3(global_size), _pad3(local_size)
    if any(g % l for g, l in zip(gs, ls)):
      raise DeviceError(f"kernel {self.name}: local size {ls} does not divide global size {gs}")
    if prod(ls) > (most := self.pipeline.maxTotalThreadsPerThreadgroup()):
      raise DeviceError(f"kernel {self.name}: {prod(ls)} threads per threadgroup, this pipeline allows {most} "
                        f"(lower Capabilities.max_workgroup_threads)")
    cb = ctx.queue.commandBuffer()
    enc = cb.computeCommandEncoder()
    enc.setComputePipelineState_(self.pipeline)
    for i, b in enumerate(bufs): enc.setBuffer_offset_atIndex_(b, 0, i)
    # the Variables' values: 4-byte ints at the buffer indices after the buffers
    for i, v in enumerate(vals): enc.setBytes_length_atIndex_(struct.pack("<i", v), 4, len(bufs) + i)
    enc.dispatchThreadgroups_threadsPerThreadgroup_(Metal.MTLSize(*(g // l for g, l in zip(gs, ls))), Metal.MTLSize(*ls))
    enc.endEncoding()
    cb.commit()
    if not wait:
      with ctx.lock: ctx.inflight.append(cb)
      return None
    cb.waitUntilCompleted()
    ctx.check(cb)
    return float(cb.GPUEndTime() - cb.GPUStartTime())


class MetalRuntime(Runtime):
  """Loads compiled kernels as compute pipelines on one device."""

  def __init__(self, device: str) -> None:
    self.device = device

  def load(self, name: str, binary: bytes) -> Program: return MetalProgram(metal_context(self.device), name, binary)

  def synchronize(self) -> None:
    if is_macos(): metal_context(self.device).synchronize()


__all__ = ["MetalContext", "MetalProgram", "MetalRuntime", "metal_context", "import_metal", "is_macos", "SOURCE_MAGIC"]
