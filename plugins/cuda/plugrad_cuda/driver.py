"""The CUDA driver API (libcuda), bound with ctypes: the few calls plugrad-cuda makes.

The driver is the one thing a GPU machine always has, so the plugin needs no compiled extension
(pycuda or cuda-python): NVRTC compiles, and these calls load, launch, copy and time. Every
function here raises `DriverError` with the driver's own name and text of a failing result.
"""
from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any

LIBCUDA = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"

CUresult = ctypes.c_int
CUdevice = ctypes.c_int
CUdeviceptr = ctypes.c_uint64
_handle = ctypes.c_void_p  # CUcontext, CUmodule, CUfunction, CUevent, CUgraph, CUgraphExec, CUgraphNode

#: the CUdevice_attribute values plugrad reads (cuda.h)
ATTRIBUTES = {"MAX_THREADS_PER_BLOCK": 1, "MAX_BLOCK_DIM_X": 2, "MAX_BLOCK_DIM_Y": 3, "MAX_BLOCK_DIM_Z": 4,
              "MAX_GRID_DIM_X": 5, "MAX_GRID_DIM_Y": 6, "MAX_GRID_DIM_Z": 7, "MAX_SHARED_MEMORY_PER_BLOCK": 8,
              "COMPUTE_CAPABILITY_MAJOR": 75, "COMPUTE_CAPABILITY_MINOR": 76}
OUT_OF_MEMORY = 2       # CUDA_ERROR_OUT_OF_MEMORY
DEINITIALIZED = 4       # CUDA_ERROR_DEINITIALIZED: the driver is shutting down (interpreter exit)


class DriverError(RuntimeError):
  """A CUDA driver call failed; `code` is its CUresult."""

  def __init__(self, call: str, code: int, text: str):
    super().__init__(f"{call} failed: {text} (CUresult {code})")
    self.call, self.code = call, code


class KernelNodeParams(ctypes.Structure):
  """CUDA_KERNEL_NODE_PARAMS_v2 (CUDA 12+): one kernel launch of a graph."""
  _fields_ = [("func", _handle), ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
              ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
              ("sharedMemBytes", ctypes.c_uint), ("kernelParams", ctypes.POINTER(ctypes.c_void_p)),
              ("extra", ctypes.POINTER(ctypes.c_void_p)), ("kern", _handle), ("ctx", _handle)]


_P, _U, _SZ = ctypes.POINTER, ctypes.c_uint, ctypes.c_size_t
# name -> argument types; every call returns a CUresult
_SIGNATURES: dict[str, list[Any]] = {
  "cuInit": [_U],
  "cuDeviceGetCount": [_P(ctypes.c_int)],
  "cuDeviceGet": [_P(CUdevice), ctypes.c_int],
  "cuDeviceGetName": [ctypes.c_char_p, ctypes.c_int, CUdevice],
  "cuDeviceGetAttribute": [_P(ctypes.c_int), ctypes.c_int, CUdevice],
  "cuDeviceTotalMem_v2": [_P(_SZ), CUdevice],
  "cuDevicePrimaryCtxRetain": [_P(_handle), CUdevice],
  "cuCtxPushCurrent_v2": [_handle],
  "cuCtxPopCurrent_v2": [_P(_handle)],
  "cuCtxSynchronize": [],
  "cuModuleLoadData": [_P(_handle), ctypes.c_void_p],
  "cuModuleUnload": [_handle],
  "cuModuleGetFunction": [_P(_handle), _handle, ctypes.c_char_p],
  "cuLaunchKernel": [_handle, _U, _U, _U, _U, _U, _U, _U, _handle, _P(ctypes.c_void_p), _P(ctypes.c_void_p)],
  "cuMemAlloc_v2": [_P(CUdeviceptr), _SZ],
  "cuMemFree_v2": [CUdeviceptr],
  "cuMemcpyHtoD_v2": [CUdeviceptr, ctypes.c_void_p, _SZ],
  "cuMemcpyDtoH_v2": [ctypes.c_void_p, CUdeviceptr, _SZ],
  "cuEventCreate": [_P(_handle), _U],
  "cuEventRecord": [_handle, _handle],
  "cuEventSynchronize": [_handle],
  "cuEventElapsedTime": [_P(ctypes.c_float), _handle, _handle],
  "cuEventDestroy_v2": [_handle],
  "cuGraphCreate": [_P(_handle), _U],
  "cuGraphAddKernelNode_v2": [_P(_handle), _handle, _P(_handle), _SZ, _P(KernelNodeParams)],
  "cuGraphInstantiateWithFlags": [_P(_handle), _handle, ctypes.c_ulonglong],
  "cuGraphExecKernelNodeSetParams_v2": [_handle, _handle, _P(KernelNodeParams)],
  "cuGraphLaunch": [_handle, _handle],
  "cuGraphExecDestroy": [_handle],
  "cuGraphDestroy": [_handle],
}


class Driver:
  """libcuda's functions as Python callables that raise DriverError instead of returning a CUresult."""

  def __init__(self, lib: ctypes.CDLL):
    self.lib = lib
    lib.cuGetErrorName.argtypes = lib.cuGetErrorString.argtypes = [CUresult, _P(ctypes.c_char_p)]

  def error_text(self, code: int) -> str:
    name, text = ctypes.c_char_p(), ctypes.c_char_p()
    self.lib.cuGetErrorName(code, ctypes.byref(name))
    self.lib.cuGetErrorString(code, ctypes.byref(text))
    return ": ".join(s.value.decode() for s in (name, text) if s.value) or "unknown error"

  def __getattr__(self, name: str) -> Any:
    # typed on first use, so a driver older than one call (AttributeError) fails only where that call is needed
    if name not in _SIGNATURES: raise AttributeError(name)
    fn = getattr(self.lib, name)
    fn.argtypes, fn.restype = _SIGNATURES[name], CUresult

    def call(*args: Any) -> None:
      if (code := fn(*args)) != 0: raise DriverError(name, code, self.error_text(code))
    setattr(self, name, call)  # bound once: later lookups skip __getattr__
    return call


@functools.lru_cache(maxsize=None)
def driver() -> Driver:
  """The driver, loaded and initialised once (OSError: no libcuda; DriverError: cuInit failed)."""
  drv = Driver(ctypes.CDLL(LIBCUDA))
  drv.cuInit(0)
  return drv


def device_count() -> int:
  count = ctypes.c_int()
  driver().cuDeviceGetCount(ctypes.byref(count))
  return count.value


def kernel_args(values: list[Any]) -> tuple[Any, Any]:
  """(storage, kernelParams): ctypes values (device pointers as c_uint64, Variables as c_int32) and the
  void* array of their addresses that a launch takes. Keep `storage` alive while the array is used."""
  storage = tuple(values)
  return storage, (ctypes.c_void_p * len(storage))(*(ctypes.addressof(v) for v in storage))


__all__ = ["ATTRIBUTES", "DriverError", "KernelNodeParams", "LIBCUDA", "driver", "device_count", "kernel_args",
           "OUT_OF_MEMORY", "DEINITIALIZED"]
