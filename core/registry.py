"""Plugin discovery and the device registry.

Device plugins are found through entry points in the group `plugrad.devices`, the entry point's
name being the device name, so asking for one device imports only that device's plugin. General
plugins (profilers, role overrides) come from the group `plugrad.plugins`. Built-in features (the
PYTHON reference device, DEBUG output) are plugins too, registered the same way.

A plugin that fails to import, targets another contract version or implements a hook wrongly is
recorded against its devices with the reason; every other device keeps working.
"""
from __future__ import annotations

import functools
import importlib.metadata
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import pluggy

from plugrad import hookspecs
from plugrad.config import Config
from plugrad.device import Allocator, Capabilities, Compiler, DeviceDecl, DeviceError, Runtime

DEVICE_GROUP = "plugrad.devices"
PLUGIN_GROUP = "plugrad.plugins"


@dataclass
class PluginInfo:
  """Where a plugin came from: entry point, distribution and version (for messages)."""
  name: str
  dist: str = "plugrad"
  version: str = ""
  error: str | None = None
  obj: Any = None

  def label(self) -> str: return f"{self.dist} {self.version}".strip()


@dataclass
class DeviceStatus:
  """One row of `python -m plugrad devices`."""
  name: str
  plugin: PluginInfo
  decl: DeviceDecl | None = None
  reason: str | None = None  # None: available
  others: list[PluginInfo] = field(default_factory=list)  # other plugins claiming the same name

  @property
  def available(self) -> bool: return self.reason is None


def split_device(device: str) -> tuple[str, int]:
  """'cuda:1' -> ('CUDA', 1); raises ValueError for a malformed name."""
  name, _, idx = device.partition(":")
  if not name or (idx and not idx.isdigit()): raise ValueError(f"malformed device name {device!r}: expected NAME or NAME:N")
  return name.upper(), int(idx or 0)


def canonical_device(device: str) -> str:
  name, idx = split_device(device)
  return name if idx == 0 else f"{name}:{idx}"


class Registry:
  """The plugin manager plus what it knows about devices. Build one per configuration; tests build
  their own with fake entry points instead of touching the process-wide one."""

  def __init__(self, config: Config | None = None, builtins: Iterable[Any] | None = None,
               entry_points: Callable[[str], Iterable[importlib.metadata.EntryPoint]] | None = None):
    self.config = config or Config.from_env()
    self._entry_points = entry_points or (lambda group: importlib.metadata.entry_points(group=group))
    self.pm = pluggy.PluginManager("plugrad")
    self.pm.add_hookspecs(hookspecs)
    self._lock = threading.RLock()
    self._loaded: dict[str, list[PluginInfo]] = {}   # device name -> plugins loaded for it
    self._devices: dict[str, Device] = {}
    self._general_loaded = False
    self.plugin_errors: list[PluginInfo] = []
    self._shadowed: dict[str, list[PluginInfo]] = {}  # plugins that lost a device name to a higher priority
    self._status: dict[str, DeviceStatus] = {}
    if builtins is None:
      from plugrad.runtime.debug import DebugPlugin
      from plugrad.runtime.python_device import PythonDevicePlugin
      builtins = [PythonDevicePlugin(), DebugPlugin(self.config)]
    self._builtin_names: set[str] = set()
    for plugin in builtins:
      info = PluginInfo(name=f"builtin:{type(plugin).__name__}", version=_plugrad_version(), obj=plugin)
      self._register(plugin, info)
      for decl in _call_declare(plugin, self.config): self._builtin_names.add(decl.name)

  # ---------------------------------------------------------------- discovery

  def _eps(self, group: str) -> list[importlib.metadata.EntryPoint]:
    eps = list(self._entry_points(group))
    if self.config.disable_autoload: eps = [ep for ep in eps if ep.name in self.config.plugins]
    return eps

  def device_names(self) -> list[str]:
    """Every device name known without importing any plugin (entry-point metadata and built-ins)."""
    return sorted(self._builtin_names | {ep.name.upper() for ep in self._eps(DEVICE_GROUP)})

  def _register(self, obj: Any, info: PluginInfo) -> bool:
    declared = getattr(obj, "PLUGRAD_CONTRACT", None)
    if declared is None:
      info.error = (f"plugin {info.name} ({info.label()}) does not declare PLUGRAD_CONTRACT; set it to "
                    f"{hookspecs.CONTRACT_VERSION} after checking the plugin against contract {hookspecs.CONTRACT_VERSION}")
      return False
    if declared != hookspecs.CONTRACT_VERSION:
      newer = "plugrad" if declared > hookspecs.CONTRACT_VERSION else info.dist
      info.error = (f"plugin {info.name} ({info.label()}) was written for plugin contract {declared}, but this plugrad "
                    f"({_plugrad_version()}) implements contract {hookspecs.CONTRACT_VERSION}: upgrade {newer}")
      return False
    try:
      self.pm.register(obj, name=f"{info.name}:{info.dist}" if self.pm.has_plugin(info.name) else info.name)
      self.pm.check_pending()
    except Exception as e:  # pluggy's PluginValidationError: wrong hook name or signature
      if self.pm.is_registered(obj): self.pm.unregister(obj)
      info.error = f"plugin {info.name} ({info.label()}) has an invalid hook implementation: {e}"
      return False
    info.obj = obj
    return True

  def _load_entry_point(self, ep: importlib.metadata.EntryPoint) -> PluginInfo:
    dist = getattr(ep, "dist", None)
    info = PluginInfo(name=ep.name, dist=getattr(dist, "name", None) or ep.value.split(":")[0].split(".")[0],
                      version=getattr(dist, "version", "") or "")
    try:
      obj = ep.load()
    except Exception as e:
      info.error = f"plugin {ep.name} ({info.label()}) failed to import: {type(e).__name__}: {e}"
      self.plugin_errors.append(info)
      return info
    if self.pm.is_registered(obj):  # one plugin object may serve several device names
      info.obj = obj
      return info
    if not self._register(obj, info): self.plugin_errors.append(info)
    return info

  def load_general_plugins(self) -> None:
    """Import the `plugrad.plugins` entry points (once)."""
    with self._lock:
      if self._general_loaded: return
      self._general_loaded = True
      for ep in self._eps(PLUGIN_GROUP): self._load_entry_point(ep)

  def _load_device_plugins(self, name: str) -> list[PluginInfo]:
    with self._lock:
      if name not in self._loaded:
        self.load_general_plugins()
        self._loaded[name] = [self._load_entry_point(ep) for ep in self._eps(DEVICE_GROUP) if ep.name.upper() == name]
      return self._loaded[name]

  def status(self, device: str) -> DeviceStatus:
    """Whether `device` can run here, and if not, why (imports only that device's plugin). The
    answer is kept: availability is decided once per registry."""
    name, _ = split_device(device)
    if (st := self._status.get(name)) is None: st = self._status[name] = self._compute_status(name)
    return st

  def _compute_status(self, name: str) -> DeviceStatus:
    infos = self._load_device_plugins(name)
    candidates: list[tuple[DeviceDecl, PluginInfo]] = []
    for impl in self.pm.hook.plugrad_declare_devices.get_hookimpls():
      info = self._info_for(impl.plugin, infos)
      try:
        decls = _call_declare(impl.plugin, self.config)
      except Exception as e:  # a broken plugin only loses its own devices
        info.error = f"plugin {info.name} ({info.label()}) failed to declare its devices: {type(e).__name__}: {e}"
        if info.name.upper() == name: infos = infos + [info] if info not in infos else infos
        continue
      candidates.extend((decl, info) for decl in decls if decl.name == name)
    if not candidates:
      failed = [i for i in infos if i.error]
      if failed: return DeviceStatus(name, failed[0], reason=failed[0].error, others=failed[1:])
      known = ", ".join(self.device_names())
      return DeviceStatus(name, PluginInfo(name="?", dist="?"),
                          reason=f"unknown device {name!r}; known devices: {known}. Device plugins are separate packages, "
                                 f"e.g. `pip install plugrad-{name.lower().replace('_', '-')}`")
    # several plugins may claim one name: the highest priority wins (its roles answer the hooks),
    # and the others are reported, never silently mixed in
    candidates.sort(key=lambda c: -c[0].priority)
    decl, info = candidates[0]
    for _, loser in candidates[1:]:
      if loser.obj is not info.obj and self.pm.is_registered(loser.obj) and \
         all(d.name == name for d in _call_declare(loser.obj, self.config)):
        self.pm.unregister(loser.obj)
        loser.error = f"not used for {name}: {info.name} ({info.label()}) declares it with a higher priority"
        self._shadowed.setdefault(name, []).append(loser)
    others: list[PluginInfo] = []
    for i in [i for _, i in candidates[1:]] + self._shadowed.get(name, []) + [i for i in infos if i.error]:
      if i is not info and i not in others: others.append(i)
    try:
      reason = decl.probe()
    except Exception as e:
      reason = f"availability probe raised {type(e).__name__}: {e}"
    if reason is not None and decl.install_hint: reason = f"{reason} ({decl.install_hint})"
    return DeviceStatus(name, info, decl=decl, reason=reason, others=others)

  def _info_for(self, plugin: Any, infos: list[PluginInfo]) -> PluginInfo:
    for i in infos:
      if i.obj is plugin: return i
    return PluginInfo(name=self.pm.get_name(plugin) or "?", version=_plugrad_version(), obj=plugin)

  def all_status(self) -> list[DeviceStatus]:
    """Status of every known device (imports every device plugin)."""
    return [self.status(n) for n in self.device_names()]

  def default_device(self) -> str:
    """DEVICE if set, else the available device with the highest priority."""
    if self.config.device: return canonical_device(self.config.device)
    best = [s for s in self.all_status() if s.available and s.decl is not None]
    if not best: raise DeviceError("no device is available; the built-in PYTHON device should always be: reinstall plugrad")
    return max(best, key=lambda s: s.decl.priority).name

  # ---------------------------------------------------------------- devices

  def device(self, device: str | None = None) -> Device:
    """The Device object for `device` (the default device when None), raising DeviceError with the
    reason and the fix when it cannot run here."""
    device = canonical_device(device) if device else self.default_device()
    if (d := self._devices.get(device)) is not None: return d
    with self._lock:
      st = self.status(device)
      if not st.available:
        avail = ", ".join(s.name for s in self.all_status() if s.available)
        raise DeviceError(f"device {device} cannot be used: {st.reason}. Available devices: {avail}")
      d = self._devices[device] = Device(device, self)
      return d

  def render_device(self, device: str) -> Device:
    """A Device usable for rendering (and compiling) only: it needs the device's plugin, not its hardware."""
    device = canonical_device(device)
    if (d := self._devices.get(device)) is not None: return d
    st = self.status(device)
    if st.decl is None: raise DeviceError(f"device {device} cannot be used: {st.reason}")
    return Device(device, self)

  def first_result(self, hook: str, expected: type | tuple[type, ...], device: str, what: str) -> Any:
    """Call a first-result hook for `device` and check the type of what it returns."""
    result = getattr(self.pm.hook, hook)(device=device, config=self.config)
    if result is None:
      raise DeviceError(f"no plugin provides a {what} for device {device} (hook {hook}); is its plugin installed?")
    if not isinstance(result, expected):
      names = [self.pm.get_name(i.plugin) for i in getattr(self.pm.hook, hook).get_hookimpls()]
      raise DeviceError(f"{hook} for device {device} returned {type(result).__name__}, expected {_typename(expected)} "
                        f"(plugins implementing it: {', '.join(names)})")
    return result

  def wants_timing(self) -> bool: return any(self.pm.hook.plugrad_wants_timing())


class Device:
  """A device's roles, resolved through the hooks on first use."""

  def __init__(self, name: str, registry: Registry):
    self.name, self.registry = name, registry
    self._roles: dict[str, Any] = {}

  def _role(self, hook: str, expected: type, what: str) -> Any:
    if hook not in self._roles: self._roles[hook] = self.registry.first_result(hook, expected, self.name, what)
    return self._roles[hook]

  @property
  def caps(self) -> Capabilities: return self._role("plugrad_device_capabilities", Capabilities, "capabilities description")
  @property
  def renderer(self):
    from plugrad.codegen.renderer import Renderer
    return self._role("plugrad_renderer", Renderer, "renderer")
  @property
  def compiler(self) -> Compiler: return self._role("plugrad_compiler", Compiler, "compiler")
  @property
  def allocator(self) -> Allocator: return self._role("plugrad_allocator", Allocator, "allocator")
  @property
  def runtime(self) -> Runtime: return self._role("plugrad_runtime", Runtime, "runtime")

  @property
  def buffer_limit(self) -> int | None:
    if "limit" not in self._roles:
      limit = self.registry.pm.hook.plugrad_buffer_limit(device=self.name, config=self.registry.config)
      self._roles["limit"] = limit if limit is not None else self.caps.max_buffers
    return self._roles["limit"]

  @property
  def rewrite_rules(self) -> list:
    if "rules" not in self._roles:
      self._roles["rules"] = [r for r in self.registry.pm.hook.plugrad_rewrite_rules(device=self.name, config=self.registry.config)
                              if r is not None]
    return self._roles["rules"]

  def __repr__(self) -> str: return f"<Device {self.name}>"


def _call_declare(plugin: Any, config: Config) -> list[DeviceDecl]:
  fn = getattr(plugin, "plugrad_declare_devices", None)
  if fn is None: return []
  decls = fn(config=config) or []
  if not all(isinstance(d, DeviceDecl) for d in decls):
    raise DeviceError(f"plugrad_declare_devices of {plugin!r} must return a list of DeviceDecl, got {decls!r}")
  return list(decls)


def _typename(t: type | tuple[type, ...]) -> str:
  return " or ".join(x.__name__ for x in t) if isinstance(t, tuple) else t.__name__


@functools.lru_cache(maxsize=None)
def _plugrad_version() -> str:
  try:
    return importlib.metadata.version("plugrad")
  except importlib.metadata.PackageNotFoundError:
    return "dev"


# ---------------------------------------------------------------- the process-wide registry

_registry: Registry | None = None
_registry_lock = threading.Lock()


def get_registry() -> Registry:
  """The registry of this process, built from the environment on first use."""
  global _registry
  if _registry is None:
    with _registry_lock:
      if _registry is None: _registry = Registry(Config.from_env())
  return _registry


def set_registry(registry: Registry | None) -> Registry | None:
  """Replace the process-wide registry (tests, embedding); returns the previous one."""
  global _registry
  prev, _registry = _registry, registry
  return prev
