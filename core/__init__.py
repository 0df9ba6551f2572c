"""plugrad: a lazy tensor library whose devices are pip-installable plugins."""
from plugrad.dtype import DType, dtypes
from plugrad.tensor import Tensor
from plugrad.uops import Variable
from plugrad.engine import TinyJit
from plugrad.config import Context, ContextVar
from plugrad.hookspecs import CONTRACT_VERSION, hookimpl
from plugrad.device import (Allocator, Buffer, Capabilities, CompileError, Compiler, DeviceDecl, DeviceError,
                            LRUAllocator, Program, Runtime)
from plugrad.registry import DEVICES as Device, get_registry
from plugrad.engine.counters import GlobalCounters
from plugrad.helpers import fetch, getenv
from plugrad import nn  # after Tensor, which the layers build on
from plugrad import device as _device_module

# tinygrad programs write `from tinygrad.device import Device`: the registry's Device, reachable there too (set here,
# where both layers are loaded: the device module sits below the registry)
_device_module.Device = Device  # type: ignore[attr-defined]

__version__ = "0.1.0"
__all__ = ["Tensor", "Variable", "TinyJit", "nn", "Context", "ContextVar", "DType", "dtypes", "Device", "GlobalCounters",
           "getenv", "fetch", "CONTRACT_VERSION", "hookimpl",
           "Allocator", "Buffer", "Capabilities", "CompileError", "Compiler", "DeviceDecl", "DeviceError", "LRUAllocator",
           "Program", "Runtime", "get_registry"]
