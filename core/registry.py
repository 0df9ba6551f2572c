"""Plugin discovery and the device registry.

Device plugins are found through entry points in the group `plugrad.devices`, the entry point's
name being the device name, so asking for one device imports only that device's plugin. General
plugins (profilers, role overrides) come from the group `plugrad.plugins`. Built-in features (the
PYTHON reference device, DEBUG output) are plugins too, registered the same way.

A plugin that fails to import, targets another contract version or implements a hook wrongly is
recorded against its devices with the reason; every other device keeps working.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import threading
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator

import pluggy

from plugrad import hookspecs
from plugrad.codegen.renderer import Renderer
from plugrad.config import DEBUG, Config
from plugrad.device import (Allocator, Capabilities, Collective, Compiler, DeviceDecl, DeviceError, Graph,
                            HostTransfer, Runtime, Transfer)
from plugrad.builtins.debug import DebugPlugin
from plugrad.builtins.python_device import PythonDevicePlugin
from plugrad.plugin import DevicePlugin
from plugrad.multi import SingleProcess, TransferCollective
from plugrad.uops import PatternMatcher

DEVICE_GROUP = "plugrad.devices"
PLUGIN_GROUP = "plugrad.plugins"
#: Where a user who has only the reference device is pointed (the README's device table lists every plugin).
INSTALL_A_DEVICE = "install a device plugin, e.g. `pip install plugrad-cpu-llvm` for this machine's CPU"


class PluginWarning(UserWarning):
  """A plugin misbehaved (an observer raised, a rule table is junk, a device name was taken over);
  plugrad carries on without the misbehaving part and says so once."""


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


class _PluginManager(pluggy.PluginManager):
  """pluggy's manager, counting its registrations: what the registry derives from the plugins registered (whether
  any observes launches, asked on every realize) is kept until the count changes. Plugins may be registered through
  `registry.pm` directly (a profiler, a test's observer), so the count lives here, not in the registry's own calls."""

  def __init__(self, project_name: str) -> None:
    super().__init__(project_name)
    self.generation = 0

  def register(self, plugin: Any, name: str | None = None) -> str | None:
    self.generation += 1
    return super().register(plugin, name)

  def unregister(self, plugin: Any = None, name: str | None = None) -> Any:
    self.generation += 1
    return super().unregister(plugin, name)


class Registry:
  """The plugin manager plus what it knows about devices. Build one per configuration; tests build
  their own with fake entry points instead of touching the process-wide one."""

  def __init__(self, config: Config | None = None, builtins: Iterable[Any] | None = None,
               entry_points: Callable[[str], Iterable[importlib.metadata.EntryPoint]] | None = None):
    self.config = config or Config.from_env()
    self._entry_points = entry_points or (lambda group: importlib.metadata.entry_points(group=group))
    self.pm = _PluginManager("plugrad")
    self.pm.add_hookspecs(hookspecs)
    self._lock = threading.RLock()
    self._loaded: dict[str, list[PluginInfo]] = {}   # device name -> plugins loaded for it
    self._devices: dict[str, Device] = {}
    self._transfers: dict[tuple[str, str], Transfer] = {}
    self._collectives: dict[tuple[str, ...], Collective] = {}
    self._process_group: Collective | None = None
    self._general_loaded = False
    self._general: list[PluginInfo] = []
    self.plugin_errors: list[PluginInfo] = []
    self._shadowed: dict[str, list[PluginInfo]] = {}  # plugins that lost a device name to a higher priority
    self._status: dict[str, DeviceStatus] = {}
    self._declared: dict[str, DeviceStatus] = {}  # `status` before its probe: who provides a device, at what priority
    self._ep_cache: dict[str, list[importlib.metadata.EntryPoint]] = {}
    self._default: str | None = None
    self._disabled_observers: set[tuple[int, str]] = set()  # (id of plugin object, hook name)
    # (pm.generation, whether a plugin implements a launch observer, whether one implements plugrad_wants_timing)
    self._observers: tuple[int, bool, bool] = (-1, False, False)
    self._debug: DebugPlugin | None = None
    if builtins is None:
      builtins = [PythonDevicePlugin()]
      # DEBUG output observes every launch (which keeps schedules off the devices' graph roles): registered only
      # while its level, the environment's or a Context block's, prints something
      self._debug = DebugPlugin(self.config, follow=True)
      DEBUG.watch(self._debug_level_changed)
      self._debug_level_changed()
    self._builtin_names: set[str] = set()
    for plugin in builtins:
      info = PluginInfo(name=f"builtin:{type(plugin).__name__}", version=_plugrad_version(), obj=plugin)
      self._register(plugin, info)
      for decl in _call_declare(plugin, self.config): self._builtin_names.add(decl.name)

  def _debug_level_changed(self) -> None:
    debug = self._debug
    if debug is None: return
    with self._lock:
      if (debug.level > 0) != self.pm.is_registered(debug):
        if debug.level > 0: self.pm.register(debug, name="builtin:DebugPlugin")
        else: self.pm.unregister(debug)

  # ---------------------------------------------------------------- discovery

  def _eps(self, group: str) -> list[importlib.metadata.EntryPoint]:
    """The entry points of `group`, read from the installed distributions' metadata once per registry
    (reading it costs milliseconds; creating a tensor must not)."""
    if (eps := self._ep_cache.get(group)) is None:
      eps = list(self._entry_points(group))
      if self.config.disable_autoload: eps = [ep for ep in eps if ep.name in self.config.plugins]
      self._ep_cache[group] = eps
    return eps

  def rescan(self) -> None:
    """Read the entry points again (after installing a plugin into a running process); devices already
    resolved keep their plugins."""
    with self._lock:
      self._ep_cache.clear()
      self._default = None
      self._status = {k: v for k, v in self._status.items() if v.available}
      self._declared = {k: v for k, v in self._declared.items() if k in self._status}

  def device_names(self) -> list[str]:
    """Every device name known without importing any plugin (entry-point metadata and built-ins)."""
    return sorted(self._builtin_names | {ep.name.upper() for ep in self._eps(DEVICE_GROUP)})

  def _register(self, obj: Any, info: PluginInfo) -> bool:
    if isinstance(obj, type):  # pluggy would call its hooks unbound: every device's calls would then raise
      info.error = (f"plugin {info.name} ({info.label()}): its entry point names the class {obj.__name__}, not an "
                    f"instance; point it at an object (plugin = {obj.__name__}())")
      return False
    declared = getattr(obj, "PLUGRAD_CONTRACT", None)
    if declared is None:
      info.error = (f"plugin {info.name} ({info.label()}) does not declare PLUGRAD_CONTRACT; set it to "
                    f"{hookspecs.CONTRACT_VERSION} after checking the plugin against contract {hookspecs.CONTRACT_VERSION}")
      return False
    if not isinstance(declared, int) or isinstance(declared, bool):
      info.error = (f"plugin {info.name} ({info.label()}) declares PLUGRAD_CONTRACT = {declared!r}, not a contract "
                    f"number; set it to the int {hookspecs.CONTRACT_VERSION} (plugrad.CONTRACT_VERSION)")
      return False
    if declared != hookspecs.CONTRACT_VERSION:
      newer = "plugrad" if declared > hookspecs.CONTRACT_VERSION else info.dist
      info.error = (f"plugin {info.name} ({info.label()}) was written for plugin contract {declared}, but this plugrad "
                    f"({_plugrad_version()}) implements contract {hookspecs.CONTRACT_VERSION}: upgrade {newer}")
      return False
    if isinstance(obj, DevicePlugin) and (wrong := obj.signature_errors()):
      info.error = f"plugin {info.name} ({info.label()}) has a role method the hooks cannot call: {'; '.join(wrong)}"
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
      self._general = [self._load_entry_point(ep) for ep in self._eps(PLUGIN_GROUP)]

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
    if (st := self._status.get(name)) is None:
      st = self._declaration(name)
      if st.reason is None and st.decl is not None:
        try:
          reason = st.decl.probe()
        except Exception as e:
          reason = f"availability probe raised {type(e).__name__}: {e}"
        if reason is not None and not isinstance(reason, str):  # `lambda: True` meaning "available" read as a reason
          reason = f"its availability probe returned {reason!r}; a probe returns None when the device can run, else the reason"
        if reason is not None and st.decl.install_hint: reason = f"{reason} ({st.decl.install_hint})"
        st = replace(st, reason=reason)
      self._status[name] = st
    return st

  def _declaration(self, name: str) -> DeviceStatus:
    """`status` without the device's probe (which may load a driver): the plugin that provides it and its
    declaration, or the reason no plugin can. Kept, as `status` is."""
    if (st := self._declared.get(name)) is None: st = self._declared[name] = self._compute_declaration(name)
    return st

  def _compute_declaration(self, name: str) -> DeviceStatus:
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
      for i in infos:  # installed under this name, declaring others: the entry point's name is the device's
        try:
          names = sorted({d.name for d in _call_declare(i.obj, self.config)}) if i.obj is not None else []
        except Exception:
          continue
        return DeviceStatus(name, i, reason=f"plugin {i.name} ({i.label()}) is installed as the entry point {name} but "
                                            f"declares {', '.join(names) or 'no device'}: an entry point of "
                                            f"{DEVICE_GROUP} is named after the device it declares (upper case)")
      known = ", ".join(self.device_names())
      return DeviceStatus(name, PluginInfo(name="?", dist="?"),
                          reason=f"unknown device {name!r}: no installed plugin declares it (known devices: {known}); device "
                                 f"plugins are separate packages, listed in plugrad's README")
    # several plugins may claim one name: only one that declares `replaces=True` may take it over (the
    # highest priority among those), the takeover is reported, and the others' roles never answer
    claimants = {id(i.obj) for _, i in candidates}
    if len(claimants) > 1:
      takers = [c for c in candidates if c[0].replaces]
      builtin = [c for c in candidates if c[1].name.startswith("builtin:")]
      if not takers and builtin:  # plugrad's own device stays; the intruder is reported, never used
        for _, i in candidates:
          if i.obj is not builtin[0][1].obj:
            i.error = f"not used for {name}: it declares plugrad's built-in device without DeviceDecl(replaces=True)"
            warnings.warn(f"plugin {i.name} ({i.label()}) is {i.error}", PluginWarning, stacklevel=2)
        candidates = builtin + [c for c in candidates if c not in builtin]
      elif not takers:
        names = " and ".join(sorted({f"{i.name} ({i.label()})" for _, i in candidates}))
        return DeviceStatus(name, candidates[0][1], decl=None, others=[i for _, i in candidates[1:]],
                            reason=f"device {name} is declared by {names}, and none declares that it replaces the other "
                                   f"(DeviceDecl(replaces=True)); uninstall one of them")
      else:
        candidates = sorted(takers, key=lambda c: -c[0].priority) + [c for c in candidates if not c[0].replaces]
        taker = candidates[0][1]
        replaced = sorted({f"{i.name} ({i.label()})" for _, i in candidates[1:] if i.obj is not taker.obj})
        warnings.warn(f"device {name} is provided by {taker.name} ({taker.label()}), replacing {', '.join(replaced)}, "
                      f"as it declares", PluginWarning, stacklevel=2)
    else:
      candidates.sort(key=lambda c: -c[0].priority)
    decl, info = candidates[0]
    for _, loser in candidates[1:]:
      if loser.obj is not info.obj and self.pm.is_registered(loser.obj) and \
         all(d.name == name for d in _call_declare(loser.obj, self.config)):
        self.pm.unregister(loser.obj)
        loser.error = loser.error or f"not used for {name}: {info.name} ({info.label()}) provides it"
        self._shadowed.setdefault(name, []).append(loser)
    others: list[PluginInfo] = []
    for i in [i for _, i in candidates[1:]] + self._shadowed.get(name, []) + [i for i in infos if i.error]:
      if i is not info and i not in others: others.append(i)
    return DeviceStatus(name, info, decl=decl, others=others)

  def _info_for(self, plugin: Any, infos: list[PluginInfo]) -> PluginInfo:
    for i in infos:
      if i.obj is plugin: return i
    return PluginInfo(name=self.pm.get_name(plugin) or "?", version=_plugrad_version(), obj=plugin)

  def all_status(self) -> list[DeviceStatus]:
    """Status of every known device (imports every device plugin)."""
    return [self.status(n) for n in self.device_names()]

  @contextlib.contextmanager
  def default_device_as(self, device: str) -> Iterator[None]:
    """Tensors made inside the block default to `device` (the CLI builds a listing's graph on PYTHON); the default
    before it is back after it, whether or not it had been decided yet."""
    saved, self._default = self._default, canonical_device(device)
    try:
      yield
    finally:
      self._default = saved

  def default_device(self) -> str:
    """DEVICE if set, else the available device with the highest priority (decided once per registry).
    When that is the reference device, a PluginWarning says once what to install."""
    if self._default is not None: return self._default
    with self._lock:
      if self.config.device:
        self.device(self.config.device)  # DEVICE names a device that cannot run here: say so at the first tensor
        self._default = canonical_device(self.config.device)
      else:
        # probed from the highest priority down, stopping at the first that can run: a device that cannot win is
        # not probed (the OpenCL plugin's probe imports pyopencl and wakes the platforms)
        declared = [s for s in map(self._declaration, self.device_names()) if s.decl is not None and s.reason is None]
        declared.sort(key=lambda s: -s.decl.priority)  # type: ignore[union-attr]
        top = next((s for s in declared if self.status(s.name).available), None)
        if top is None: raise DeviceError("no device is available; the built-in PYTHON device should always be: reinstall plugrad")
        if top.name in self._builtin_names:
          statuses = self.all_status()
          if sum(s.available and s.decl is not None for s in statuses) == 1:
            self._warn_reference_device(top.name, statuses)
        self._default = top.name
      return self._default

  def set_default_device(self, device: str) -> None:
    """Make `device` the default for what is created from now on (raising DeviceError when it cannot run here)."""
    self.device(device)
    self._default = canonical_device(device)

  def _warn_reference_device(self, name: str, statuses: list[DeviceStatus]) -> None:
    unavailable = [f"{s.name}: {s.reason}" for s in statuses if not s.available and s.name not in self._builtin_names]
    fix = f"devices installed but unavailable: {'; '.join(unavailable)}" if unavailable else INSTALL_A_DEVICE
    if self.config.disable_autoload and not unavailable:  # installed, but switched off: installing is not the fix
      installed = sorted({ep.name for ep in self._entry_points(DEVICE_GROUP)})
      unknown = sorted(set(self.config.plugins) - set(installed))
      fix = (f"plugin autoloading is off (PLUGRAD_DISABLE_PLUGIN_AUTOLOAD) and PLUGRAD_PLUGINS names none of the "
             f"installed device plugins {installed}" + (f" (it names {unknown}, which are not installed)" if unknown else ""))
    warnings.warn(f"plugrad is running on {name}, the reference interpreter, which checks rather than computes fast: {fix}",
                  PluginWarning, stacklevel=4)

  # ---------------------------------------------------------------- devices

  def device(self, device: str | None = None) -> Device:
    """The Device object for `device` (the default device when None), raising DeviceError with the
    reason and the fix when it cannot run here."""
    if device and (d := self._devices.get(device)) is not None: return d  # already canonical: every tensor op asks
    device = canonical_device(device) if device else self.default_device()
    if (d := self._devices.get(device)) is not None: return d
    with self._lock:
      st = self.status(device)
      if not st.available:
        avail = ", ".join(s.name for s in self.all_status() if s.available)
        raise DeviceError(f"device {device} cannot be used: {st.reason}. Available devices: {avail}")
      index = split_device(device)[1]
      if index and index >= (count := _device_count(st)):
        hint = f"; {st.decl.count_hint}" if st.decl is not None and st.decl.count_hint else ""
        raise DeviceError(f"device {device} does not exist: this machine has {count} {st.name} device"
                          f"{'s' if count != 1 else ''} ({', '.join(f'{st.name}:{i}' for i in range(count))}){hint}")
      d = self._devices[device] = Device(device, self)
      return d

  def render_device(self, device: str) -> Device:
    """A Device usable for rendering (and compiling) only: it needs the device's plugin, not its hardware."""
    device = canonical_device(device)
    if (d := self._devices.get(device)) is not None: return d
    st = self.status(device)
    if st.decl is None: raise DeviceError(f"device {device} cannot be used: {st.reason}")
    return Device(device, self)

  def transfer(self, src_device: str, dest_device: str) -> Transfer:
    """How buffers are copied from `src_device` to `dest_device`: a plugin's transfer role for the pair,
    else plugrad's HostTransfer (decided once per pair)."""
    key = (src_device, dest_device)
    if (t := self._transfers.get(key)) is None:
      t = self.pm.hook.plugrad_transfer(src_device=src_device, dest_device=dest_device, config=self.config)
      t = HostTransfer() if t is None else self.checked(t, "plugrad_transfer", Transfer, f" for {src_device} -> {dest_device}")
      self._transfers[key] = t
    return t

  def collective(self, devices: tuple[str, ...]) -> Collective:
    """Collectives over buffers on `devices` of this process: a plugin's collective role for them, else plugrad's
    fallback through the host (decided once per tuple of devices)."""
    key = tuple(devices)
    if (c := self._collectives.get(key)) is None:
      self.load_general_plugins()
      c = self.pm.hook.plugrad_collective(devices=key, config=self.config) or TransferCollective()
      self._collectives[key] = self.checked(c, "plugrad_collective", Collective)
    return c

  def process_group(self) -> Collective:
    """The group of processes this one belongs to (a plugin's, e.g. MPI under mpirun), else a group of one."""
    if self._process_group is None:
      self.load_general_plugins()
      g = self.pm.hook.plugrad_process_group(config=self.config) or SingleProcess()
      self._process_group = self.checked(g, "plugrad_process_group", Collective)
    return self._process_group

  def first_result(self, hook: str, expected: type | tuple[type, ...], device: str, what: str) -> Any:
    """Call a first-result hook for `device` and check the type of what it returns."""
    try:
      result = getattr(self.pm.hook, hook)(device=device, config=self.config)
    except DeviceError:
      raise
    except Exception as e:  # a plugin's role raising: its own error, noting whose role it was (a bare KeyError came)
      owner = self.status(device).plugin
      e.add_note(f"raised by the {what} of device {device} (plugin {owner.name}, {owner.label()})")
      raise
    if result is None:
      raise DeviceError(f"no plugin provides a {what} for device {device} (hook {hook}); is its plugin installed?")
    return self.checked(result, hook, expected, f" for device {device}")

  def checked(self, result: Any, hook: str, expected: type | tuple[type, ...], subject: str = "") -> Any:
    """`result` of `hook` when it is an `expected`, else a DeviceError naming the plugins that implement the hook."""
    if not isinstance(result, expected):
      names = [self.pm.get_name(i.plugin) for i in getattr(self.pm.hook, hook).get_hookimpls()]
      raise DeviceError(f"{hook}{subject} returned {type(result).__name__}, expected {_typename(expected)} "
                        f"(plugins implementing it: {', '.join(names)})")
    return result

  def wants_timing(self) -> bool: return any(self.notify("plugrad_wants_timing"))

  def memory_in_use(self) -> int:
    """Bytes that live buffers hold, over every device whose allocator has been used (cached free blocks excluded)."""
    allocators = {id(a): a for d in list(self._devices.values()) if (a := d._roles.get("plugrad_allocator")) is not None}
    return sum(a.stats.in_use for a in allocators.values())

  def observes_launches(self) -> bool:
    """Whether an observer wants each kernel launch or schedule run told (or timed): then a schedule runs from
    Python, launch by launch, instead of as one call into a device's graph role. Asked on every realize: which hooks
    are implemented is kept until a plugin is registered or unregistered; only a timing hook is asked each time."""
    generation, launches, timing = self._observers
    if generation != self.pm.generation:
      hooks = self.pm.hook
      launches = bool(hooks.plugrad_kernel_ran.get_hookimpls() or hooks.plugrad_schedule_ran.get_hookimpls())
      timing = bool(hooks.plugrad_wants_timing.get_hookimpls())
      self._observers = (self.pm.generation, launches, timing)
    return launches or (timing and self.wants_timing())

  def observed(self, hook: str) -> bool:
    """Whether any plugin implements the observe-phase `hook` (so what it would be told is worth computing)."""
    return bool(getattr(self.pm.hook, hook).get_hookimpls())

  def notify(self, hook: str, **kwargs: Any) -> list[Any]:
    """Call every implementation of an observe-phase hook and return their results. An observer
    that raises is reported once (PluginWarning, naming its plugin) and not called again in this
    process: a profiler's bug must not stop every realize on every device."""
    results = []
    for impl in getattr(self.pm.hook, hook).get_hookimpls():
      key = (id(impl.plugin), hook)
      if key in self._disabled_observers: continue
      try:
        result = impl.function(*[kwargs[a] for a in impl.argnames])
      except Exception as e:
        self._disabled_observers.add(key)
        warnings.warn(f"plugin {self._plugin_label(impl.plugin)} raised in {hook} ({type(e).__name__}: {e}); "
                      f"it is not called for {hook} again in this process", PluginWarning, stacklevel=2)
        continue
      if result is not None: results.append(result)
    return results

  def rewrite_rules(self, device: str) -> list[PatternMatcher]:
    """The rule tables plugins add to `device`'s lowering, each checked to be a PatternMatcher. Junk
    from the device's own plugin is a DeviceError for that device; junk from any other plugin is
    reported once (PluginWarning, naming it) and left out, so it cannot break every device."""
    owner = self.status(device).plugin.obj
    tables: list[PatternMatcher] = []
    for impl in self.pm.hook.plugrad_rewrite_rules.get_hookimpls():
      if (id(impl.plugin), "plugrad_rewrite_rules") in self._disabled_observers: continue
      try:
        table = impl.function(device=device, config=self.config)
        problem = None if table is None or isinstance(table, PatternMatcher) else \
          f"returned {type(table).__name__} {table!r:.60}, not a PatternMatcher"
      except Exception as e:
        table, problem = None, f"raised {type(e).__name__}: {e}"
      if problem is None:
        if table is not None: tables.append(table)
        continue
      msg = f"plugrad_rewrite_rules of plugin {self._plugin_label(impl.plugin)} for device {device} {problem}"
      if impl.plugin is owner: raise DeviceError(msg)
      self._disabled_observers.add((id(impl.plugin), "plugrad_rewrite_rules"))
      warnings.warn(f"{msg}; its rules are left out", PluginWarning, stacklevel=2)
    return tables

  def _plugin_label(self, plugin: Any) -> str:
    for i in [*self._general, *(i for infos in self._loaded.values() for i in infos)]:
      if i.obj is plugin: return f"{i.name} ({i.label()})"
    return self.pm.get_name(plugin) or type(plugin).__name__


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
  def renderer(self) -> Renderer: return self._role("plugrad_renderer", Renderer, "renderer")
  @property
  def compiler(self) -> Compiler: return self._role("plugrad_compiler", Compiler, "compiler")
  @property
  def allocator(self) -> Allocator:
    if "plugrad_allocator" not in self._roles:  # first use: the session's settings (PLUGRAD_ALLOC_CACHE) apply
      self._role("plugrad_allocator", Allocator, "allocator").configure(self.registry.config)
    return self._roles["plugrad_allocator"]
  @property
  def runtime(self) -> Runtime: return self._role("plugrad_runtime", Runtime, "runtime")

  @property
  def graph(self) -> Graph | None:
    """The device's native replay of captured launches, None when its plugin has none (an optional role)."""
    if "plugrad_graph" not in self._roles:
      g = self.registry.pm.hook.plugrad_graph(device=self.name, config=self.registry.config)
      self._roles["plugrad_graph"] = None if g is None else self.registry.checked(g, "plugrad_graph", Graph,
                                                                                  f" for device {self.name}")
    return self._roles["plugrad_graph"]

  @property
  def buffer_limit(self) -> int | None:
    """The most buffers one kernel may bind (`Capabilities.max_buffers`; None: no limit)."""
    return self.caps.max_buffers

  @property
  def rewrite_rules(self) -> list[PatternMatcher]:
    if "rules" not in self._roles: self._roles["rules"] = self.registry.rewrite_rules(self.name)
    return self._roles["rules"]

  def synchronize(self) -> None:
    """Wait until every launch on the device has finished (tinygrad's `Device[name].synchronize()`)."""
    self.runtime.synchronize()

  def __repr__(self) -> str: return f"<Device {self.name}>"


class DeviceTable:
  """The user API's `Device`, as tinygrad's: `Device.DEFAULT` is the default device's name (assigning it changes
  the device of what is created afterwards), `Device["CPU"]` a device's roles (`.allocator`, `.runtime`,
  `.synchronize()`), `Device.canonicalize("cpu:1")` a name as plugrad writes it ("CPU:1")."""

  @property
  def DEFAULT(self) -> str: return get_registry().default_device()  # noqa: N802 (tinygrad's name)
  @DEFAULT.setter
  def DEFAULT(self, device: str) -> None: get_registry().set_default_device(device)  # noqa: N802

  def __getitem__(self, device: str) -> Device: return get_registry().device(device)
  @staticmethod
  def canonicalize(device: str) -> str: return canonical_device(device)
  def __repr__(self) -> str: return f"<Device table: DEFAULT={self.DEFAULT}>"


#: tinygrad's `Device` (plugrad.Device)
DEVICES = DeviceTable()


def _call_declare(plugin: Any, config: Config) -> list[DeviceDecl]:
  fn = getattr(plugin, "plugrad_declare_devices", None)
  if fn is None: return []
  decls = fn(config=config) or []
  if not all(isinstance(d, DeviceDecl) for d in decls):
    raise DeviceError(f"plugrad_declare_devices of {plugin!r} must return a list of DeviceDecl, got {decls!r}")
  return list(decls)


def _device_count(st: DeviceStatus) -> int:
  try:
    return max(1, int(st.decl.count()))
  except Exception as e:  # a broken count only costs the extra indices
    warnings.warn(f"device {st.name}: its plugin's device count raised {type(e).__name__}: {e}; assuming one",
                  PluginWarning, stacklevel=3)
    return 1


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
  """The registry of this process, built from the environment on first use (which also raises the garbage
  collector's threshold: `Config.raise_gc_threshold`)."""
  global _registry
  if _registry is None:
    with _registry_lock:
      if _registry is None:
        config = Config.from_env()
        config.raise_gc_threshold()
        _registry = Registry(config)
  return _registry


def set_registry(registry: Registry | None) -> Registry | None:
  """Replace the process-wide registry (tests, embedding); returns the previous one."""
  global _registry
  prev, _registry = _registry, registry
  return prev
