"""`plugrad.plugin`: everything a device plugin may use, and nothing else.

A plugin imports only `plugrad` and this module (a test checks every in-tree plugin and the skeleton), so
plugrad may move its internals without breaking third-party plugins. Within one `CONTRACT_VERSION` these
names keep their meaning; the conformance suite (`python -m plugrad conformance NAME`) checks a device
against them.

- contract: `CONTRACT_VERSION`, `hookimpl`, `DevicePlugin` (the base whose hooks answer only for the
  device names a plugin owns), `DeviceDecl`, `Capabilities` (with `OPTIONAL_OPS`, the ops its renderer may take or
  leave, and `TensorCore`, a warp-wide matrix multiply-accumulate it renders as WMMA), `default_dtypes_without`,
  `Config`, `ConfigOption`;
- roles: `Renderer`, `CStyleRenderer` (the C-family base; `var_name` the C name of a Variable's parameter),
  `Compiler`, `Allocator`, `LRUAllocator`, `Transfer`, `Collective` (with `REDUCE_OPS`, the reductions it takes),
  `Graph` and `GraphLaunch` (optional native replay of a TinyJit capture), `Runtime`, `Program`, `Buffer`,
  `ImageSpec`;
- what a renderer reads: `LoopProgram`, `Param` (a loop program and its buffer parameters), `UOp`, `Ops`,
  `GroupOp`, `PatternMatcher`, `UPat` (the IR), `DType`, `dtypes`, `interval_alu` and `INTERVAL_OPS` (the bounds of
  an arithmetic op's value from its sources', as the IR's own integer bounds take them);
- errors: `CompileError`, `DeviceError`, `UnsupportedError`.

The launch ABI: a `Program` is called as `prog(*bufs, global_size=..., local_size=..., wait=...)`, and a kernel
with Variables (symbolic shapes: DEFINE_VAR in its loop program, `LoopProgram.vars`) as
`prog(*bufs, global_size=..., local_size=..., vals=(3, ...), wait=...)`: `vals` are the Variables' values in
the order of `LoopProgram.vars`, passed to the kernel as int32 parameters after the buffers, and
`global_size` is already evaluated for them (a launch size may depend on a Variable).
"""
from __future__ import annotations

import inspect

from typing import ClassVar

from plugrad.codegen.cstyle import CStyleRenderer, var_name
from plugrad.codegen.program import LoopProgram, Param
from plugrad.codegen.renderer import Renderer
from plugrad.config import Config, ConfigOption
from plugrad.device import (OPTIONAL_OPS, REDUCE_OPS, Allocator, Buffer, Capabilities, Collective, CompileError,
                            Compiler, DeviceDecl, DeviceError, Graph, GraphLaunch, ImageSpec, LRUAllocator, Program,
                            Runtime, TensorCore, Transfer, UnsupportedError, default_dtypes_without)
from plugrad.dtype import DType, dtypes
from plugrad.hookspecs import CONTRACT_VERSION, hookimpl
from plugrad.uops import INTERVAL_OPS, GroupOp, Ops, PatternMatcher, UOp, UPat, interval_alu


class DevicePlugin:
  """The base of a device plugin: set `names` (the device names it owns) and `PLUGRAD_CONTRACT`, implement
  `devices` and the role methods; the hooks call a role method only for an owned device (`CPU`, `CPU:1`),
  so no plugin repeats the "is this device mine?" test. A role method left out answers nothing, leaving
  the role to another plugin.

  The role methods receive the full device string (`"CUDA:1"`) and the session's Config; `collective` receives
  the devices of its buffers and is asked only when the plugin owns all of them.
  """
  PLUGRAD_CONTRACT: ClassVar[int]
  names: ClassVar[tuple[str, ...]] = ()
  _declared: frozenset[str] = frozenset()  # the names `devices` declared last (what `names` left out is owned too)

  #: the role methods the hooks call, with the arguments of their definitions below (what `signature_errors` checks an
  #: override against)
  ROLES: ClassVar[tuple[str, ...]] = ("devices", "options", "capabilities", "rewrite_rules", "renderer", "compiler",
                                      "allocator", "runtime", "graph", "collective")

  def signature_errors(self) -> list[str]:
    """The role methods this plugin overrides that the hooks cannot call as they do (`renderer(self, device)`
    without `config`): a plugin so written is refused when it loads, not at its first kernel."""
    errors = []
    for role in self.ROLES:
      method = getattr(self, role)
      if getattr(type(self), role) is getattr(DevicePlugin, role): continue  # not overridden
      args = tuple(inspect.signature(getattr(DevicePlugin, role)).parameters)[1:]  # without self
      try:
        inspect.signature(method).bind(*args)
      except TypeError as e:
        errors.append(f"{role}{inspect.signature(method)} cannot be called as {role}({', '.join(args)}): {e}")
      except ValueError:
        pass  # no signature to read (a builtin): the call will tell
    return errors

  def owns(self, device: str) -> bool:
    """Whether `device` (`NAME` or `NAME:N`) is one of this plugin's devices: named in `names` (in any case) or
    declared by `devices` (a plugin that left `names` out, or wrote them in lower case, lost every role)."""
    name = device.partition(":")[0].upper()
    return name in self._declared or any(n.upper() == name for n in self.names)

  # ---------------------------------------------------------------- what subclasses implement

  def devices(self, config: Config) -> list[DeviceDecl]:
    """The DeviceDecl of each name in `names`."""
    raise NotImplementedError(f"{type(self).__name__} must implement devices(config)")

  def options(self) -> list[ConfigOption]:
    """Environment variables the plugin reads (through `config.option`)."""
    return []

  def capabilities(self, device: str, config: Config) -> Capabilities | None: return None
  def rewrite_rules(self, device: str, config: Config) -> PatternMatcher | None: return None
  def renderer(self, device: str, config: Config) -> Renderer | None: return None
  def compiler(self, device: str, config: Config) -> Compiler | None: return None
  def allocator(self, device: str, config: Config) -> Allocator | None: return None
  def runtime(self, device: str, config: Config) -> Runtime | None: return None
  def graph(self, device: str, config: Config) -> Graph | None: return None
  def collective(self, devices: tuple[str, ...], config: Config) -> Collective | None: return None

  # ---------------------------------------------------------------- the hooks

  @hookimpl
  def plugrad_declare_devices(self, config: Config) -> list[DeviceDecl]:
    decls = self.devices(config)
    self._declared = frozenset(d.name for d in decls if isinstance(d, DeviceDecl))
    return decls

  @hookimpl
  def plugrad_config_options(self) -> list[ConfigOption]: return self.options()

  @hookimpl
  def plugrad_device_capabilities(self, device: str, config: Config) -> Capabilities | None:
    return self.capabilities(device, config) if self.owns(device) else None

  @hookimpl
  def plugrad_rewrite_rules(self, device: str, config: Config) -> PatternMatcher | None:
    return self.rewrite_rules(device, config) if self.owns(device) else None

  @hookimpl
  def plugrad_renderer(self, device: str, config: Config) -> Renderer | None:
    return self.renderer(device, config) if self.owns(device) else None

  @hookimpl
  def plugrad_compiler(self, device: str, config: Config) -> Compiler | None:
    return self.compiler(device, config) if self.owns(device) else None

  @hookimpl
  def plugrad_allocator(self, device: str, config: Config) -> Allocator | None:
    return self.allocator(device, config) if self.owns(device) else None

  @hookimpl
  def plugrad_runtime(self, device: str, config: Config) -> Runtime | None:
    return self.runtime(device, config) if self.owns(device) else None

  @hookimpl
  def plugrad_graph(self, device: str, config: Config) -> Graph | None:
    return self.graph(device, config) if self.owns(device) else None

  @hookimpl
  def plugrad_collective(self, devices: tuple[str, ...], config: Config) -> Collective | None:
    return self.collective(devices, config) if all(self.owns(d) for d in devices) else None


__all__ = ["CONTRACT_VERSION", "hookimpl", "DevicePlugin", "DeviceDecl", "Capabilities", "TensorCore", "default_dtypes_without",
           "Config", "ConfigOption", "Renderer", "CStyleRenderer", "Compiler", "Allocator", "LRUAllocator",
           "Transfer", "Collective", "REDUCE_OPS", "OPTIONAL_OPS", "Graph", "GraphLaunch", "Runtime", "Program",
           "Buffer", "ImageSpec", "LoopProgram", "Param", "UOp", "Ops", "GroupOp", "PatternMatcher", "UPat", "DType",
           "dtypes", "CompileError", "DeviceError", "UnsupportedError", "var_name", "interval_alu", "INTERVAL_OPS"]
