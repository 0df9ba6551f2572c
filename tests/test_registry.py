"""Plugin discovery and device selection, with fake entry points (no packages installed)."""
import importlib.metadata
import os
import warnings
from types import SimpleNamespace

import pytest

from plugrad import CONTRACT_VERSION, Capabilities, DeviceDecl, DeviceError, dtypes, hookimpl
from plugrad.device import UnsupportedError
from plugrad.config import Config
from plugrad import Tensor
from plugrad.registry import PluginWarning, Registry, set_registry
from plugrad.builtins.python_device import PythonDevicePlugin


class FakeEP:
  """Stands in for importlib.metadata.EntryPoint."""
  def __init__(self, name, obj=None, error=None, dist="fake-dist", version="1.2.3"):
    self.name, self.value = name, f"fake_{name.lower()}:plugin"
    self._obj, self._error = obj, error
    self.dist = SimpleNamespace(name=dist, version=version)

  def load(self):
    if self._error: raise self._error
    return self._obj


def device_plugin(name, priority=50, probe=lambda: None, contract=CONTRACT_VERSION, caps=Capabilities(), **decl):
  class Plugin:
    PLUGRAD_CONTRACT = contract
    @hookimpl
    def plugrad_declare_devices(self, config):
      return [DeviceDecl(name, priority, probe, install_hint=f"pip install plugrad-{name.lower()}", **decl)]
    @hookimpl
    def plugrad_device_capabilities(self, device, config): return caps if device.split(":")[0] == name else None
  return Plugin()


def make_registry(eps, env=None, plugins=()):
  groups = {"plugrad.devices": [e for e in eps if not getattr(e, "general", False)],
            "plugrad.plugins": [e for e in eps if getattr(e, "general", False)]}
  return Registry(Config.from_env(env or {}), builtins=[PythonDevicePlugin(), *plugins], entry_points=lambda g: groups[g])


def test_listing_devices_imports_nothing():
  loaded = []
  class Spy(FakeEP):
    def load(self):
      loaded.append(self.name)
      return super().load()
  reg = make_registry([Spy("FAST", device_plugin("FAST")), Spy("SLOW", device_plugin("SLOW"))])
  assert reg.device_names() == ["FAST", "PYTHON", "SLOW"]
  assert loaded == []
  reg.status("FAST")
  assert loaded == ["FAST"]  # asking for one device imports only its plugin


def test_default_device_is_highest_priority_available():
  reg = make_registry([FakeEP("GPU", device_plugin("GPU", 90, probe=lambda: "no driver")),
                       FakeEP("CPU", device_plugin("CPU", 60))])
  assert reg.default_device() == "CPU"
  with pytest.warns(PluginWarning, match="reference interpreter"): assert make_registry([]).default_device() == "PYTHON"


def test_default_device_probes_no_device_that_cannot_win():
  """Devices are probed from the highest priority down until one can run (a probe may import a driver's
  bindings: pyopencl takes 60 ms); listing them all still probes every one."""
  probed = []
  def probe(name, reason=None): return lambda: probed.append(name) or reason
  reg = make_registry([FakeEP("GPU", device_plugin("GPU", 90, probe=probe("GPU", "no driver"))),
                       FakeEP("CPU", device_plugin("CPU", 60, probe=probe("CPU"))),
                       FakeEP("CL", device_plugin("CL", 50, probe=probe("CL")))])
  assert reg.default_device() == "CPU" and probed == ["GPU", "CPU"]
  listed = [(s.name, s.available) for s in reg.all_status()]
  assert listed == [("CL", True), ("CPU", True), ("GPU", False), ("PYTHON", True)]
  assert probed == ["GPU", "CPU", "CL"]


def test_device_env_selects_and_index_is_kept():
  reg = make_registry([FakeEP("CPU", device_plugin("CPU", count=lambda: 2))], env={"DEVICE": "cpu:1"})
  assert reg.default_device() == "CPU:1"


def test_unknown_device_names_the_known_ones_and_a_package():
  reg = make_registry([FakeEP("CPU", device_plugin("CPU"))])
  with pytest.raises(DeviceError) as e: reg.device("TPU")
  msg = str(e.value)
  assert "unknown device 'TPU'" in msg and "CPU" in msg and "PYTHON" in msg and "README" in msg
  assert "plugrad-tpu" not in msg  # no invented package names


def test_unavailable_device_says_why_and_how_to_fix():
  reg = make_registry([FakeEP("GPU", device_plugin("GPU", probe=lambda: "no driver found"))])
  with pytest.raises(DeviceError) as e: reg.device("GPU")
  assert "no driver found" in str(e.value) and "pip install plugrad-gpu" in str(e.value)


def test_broken_plugin_only_breaks_its_device():
  reg = make_registry([FakeEP("BAD", error=ImportError("libfoo.so missing"), dist="plugrad-bad", version="0.3"),
                       FakeEP("CPU", device_plugin("CPU"))])
  st = reg.status("BAD")
  assert not st.available and "libfoo.so missing" in st.reason and "plugrad-bad 0.3" in st.reason
  assert reg.status("CPU").available
  assert reg.default_device() == "CPU"


def test_contract_version_mismatch_is_refused_with_both_versions():
  reg = make_registry([FakeEP("OLD", device_plugin("OLD", contract=CONTRACT_VERSION + 1), dist="plugrad-old")])
  st = reg.status("OLD")
  assert not st.available
  assert f"contract {CONTRACT_VERSION + 1}" in st.reason and f"contract {CONTRACT_VERSION}" in st.reason
  assert "upgrade plugrad" in st.reason


@pytest.mark.parametrize("contract", [str(CONTRACT_VERSION), float(CONTRACT_VERSION), True])
def test_a_contract_that_is_no_number_is_refused_and_isolated(contract):
  # PLUGRAD_CONTRACT = "2" made every plugrad program fail (a TypeError comparing it), whatever device it used
  reg = make_registry([FakeEP("ODD", device_plugin("ODD", contract=contract)), FakeEP("CPU", device_plugin("CPU", 90))])
  assert reg.default_device() == "CPU"
  st = reg.status("ODD")
  assert not st.available and f"PLUGRAD_CONTRACT = {contract!r}, not a contract number" in st.reason


def test_wrong_hook_signature_is_isolated():
  class Wrong:
    PLUGRAD_CONTRACT = CONTRACT_VERSION
    @hookimpl
    def plugrad_renderer(self, device, config, unexpected): return None
  reg = make_registry([FakeEP("WRONG", Wrong()), FakeEP("CPU", device_plugin("CPU"))])
  st = reg.status("WRONG")
  assert not st.available and "invalid hook" in st.reason
  assert reg.status("CPU").available


def test_wrong_return_type_is_reported():
  class Liar:
    PLUGRAD_CONTRACT = CONTRACT_VERSION
    @hookimpl
    def plugrad_declare_devices(self, config): return [DeviceDecl("LIAR", 1)]
    @hookimpl
    def plugrad_device_capabilities(self, device, config): return {"max_buffers": 4} if device == "LIAR" else None
  reg = make_registry([FakeEP("LIAR", Liar())])
  with pytest.raises(DeviceError, match="expected Capabilities"): reg.device("LIAR").caps


def test_same_device_name_from_two_plugins_is_refused_unless_one_replaces_the_other():
  reg = make_registry([FakeEP("CPU", device_plugin("CPU", 10), dist="plugrad-cpu-a"),
                       FakeEP("CPU", device_plugin("CPU", 20), dist="plugrad-cpu-b")])
  with pytest.raises(DeviceError, match=r"declared by .*plugrad-cpu-a.* and .*plugrad-cpu-b.*replaces=True"):
    reg.device("CPU")
  reg = make_registry([FakeEP("CPU", device_plugin("CPU", 10, replaces=True), dist="plugrad-cpu-a"),
                       FakeEP("CPU", device_plugin("CPU", 20), dist="plugrad-cpu-b")])
  with pytest.warns(PluginWarning, match="CPU is provided by CPU \\(plugrad-cpu-a 1.2.3\\), replacing"):
    st = reg.status("CPU")
  assert st.plugin.dist == "plugrad-cpu-a"  # the declared replacement wins, whatever the priorities
  assert [o.dist for o in st.others] == ["plugrad-cpu-b"]


def test_a_built_in_device_is_not_taken_over_without_saying_so():
  intruder = FakeEP("PYTHON", device_plugin("PYTHON", 1000), dist="evil-python")
  reg = make_registry([intruder])
  with pytest.warns(PluginWarning, match="evil-python.*not used for PYTHON.*replaces=True"):
    st = reg.status("PYTHON")
  assert st.available and st.plugin.name.startswith("builtin:")
  assert type(reg.device("PYTHON").renderer).__name__ == "PythonRenderer"
  taker = FakeEP("PYTHON", device_plugin("PYTHON", 1, replaces=True), dist="better-python")
  with pytest.warns(PluginWarning, match="PYTHON is provided by PYTHON \\(better-python"):
    assert make_registry([taker]).status("PYTHON").plugin.dist == "better-python"


def test_entry_points_are_read_once_until_rescan():
  calls = []
  eps = {"plugrad.devices": [FakeEP("CPU", device_plugin("CPU", 60))], "plugrad.plugins": []}
  def entry_points(group):
    calls.append(group)
    return eps[group]
  reg = Registry(Config.from_env({}), builtins=[PythonDevicePlugin()], entry_points=entry_points)
  for _ in range(3):
    assert reg.default_device() == "CPU"
    reg.device_names()
  assert calls.count("plugrad.devices") == 1
  eps["plugrad.devices"].append(FakeEP("GPU", device_plugin("GPU", 90)))
  reg.rescan()
  assert reg.default_device() == "GPU" and calls.count("plugrad.devices") == 2


def test_device_index_beyond_the_plugins_count_is_refused():
  reg = make_registry([FakeEP("GPU", device_plugin("GPU", count=lambda: 2))])
  assert reg.device("GPU:1").name == "GPU:1"
  with pytest.raises(DeviceError, match=r"GPU:2 does not exist: this machine has 2 GPU devices \(GPU:0, GPU:1\)"):
    reg.device("GPU:2")
  with pytest.raises(DeviceError, match="has 8 PYTHON devices"): make_registry([]).device("PYTHON:99")
  # where more of them is a setting, the refusal says which
  hinted = make_registry([FakeEP("GPU", device_plugin("GPU", count=lambda: 2, count_hint="set GPUS=N for N GPUs"))])
  with pytest.raises(DeviceError, match=r"\(GPU:0, GPU:1\); set GPUS=N for N GPUs$"): hinted.device("GPU:2")


def test_only_the_reference_device_warns_once_what_to_install():
  reg = make_registry([FakeEP("GPU", device_plugin("GPU", 90, probe=lambda: "no driver"))])
  with pytest.warns(PluginWarning, match="reference interpreter.*GPU: no driver"):
    assert reg.default_device() == "PYTHON"
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert reg.default_device() == "PYTHON"  # once
  with pytest.warns(PluginWarning, match="pip install"): make_registry([]).default_device()


def test_with_autoload_off_the_warning_says_so_instead_of_what_to_install():
  # it told to pip install the CPU plugin that was installed and only switched off (or misnamed in PLUGRAD_PLUGINS)
  reg = make_registry([FakeEP("CPU", device_plugin("CPU", 60))],
                      env={"PLUGRAD_DISABLE_PLUGIN_AUTOLOAD": "1", "PLUGRAD_PLUGINS": "cpu"})
  with pytest.warns(PluginWarning, match=r"autoloading is off.*\['CPU'\].*\['cpu'\], which are not installed"):
    assert reg.default_device() == "PYTHON"


def general_plugin(name, obj):
  ep = FakeEP(name, obj, dist=f"{name}-dist")
  ep.general = True
  return ep


def test_an_observer_that_raises_is_reported_once_and_disabled():
  calls = []
  class Profiler:
    PLUGRAD_CONTRACT = CONTRACT_VERSION
    @hookimpl
    def plugrad_kernel_ran(self, device, name):
      calls.append(name)
      raise RuntimeError("profiler bug")
  reg = make_registry([general_plugin("profiler", Profiler())])
  reg.load_general_plugins()
  prev = set_registry(reg)
  try:
    with pytest.warns(PluginWarning, match=r"profiler \(profiler-dist 1.2.3\) raised in plugrad_kernel_ran.*profiler bug"):
      assert (Tensor([1.0, 2.0], device="PYTHON") * 3).tolist() == [3.0, 6.0]  # the realize still completes
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      assert (Tensor([1.0], device="PYTHON") + 1).tolist() == [2.0]
  finally:
    set_registry(prev)
  assert len(calls) == 1


def test_junk_rule_tables_name_their_plugin():
  class Junk:
    PLUGRAD_CONTRACT = CONTRACT_VERSION
    @hookimpl
    def plugrad_rewrite_rules(self, device, config): return "not rules"
  reg = make_registry([general_plugin("junk", Junk())])
  reg.load_general_plugins()
  with pytest.warns(PluginWarning, match=r"junk \(junk-dist 1.2.3\) for device PYTHON returned str"):
    assert reg.device("PYTHON").rewrite_rules == []
  class OwnJunk(type(device_plugin("ACC"))):
    @hookimpl
    def plugrad_rewrite_rules(self, device, config): return 42 if device == "ACC" else None
  reg = make_registry([FakeEP("ACC", OwnJunk(), dist="acc-dist")])
  with pytest.raises(DeviceError, match=r"plugrad_rewrite_rules of plugin ACC \(acc-dist 1.2.3\) for device ACC returned int"):
    reg.device("ACC").rewrite_rules


def test_autoload_off_loads_only_named_plugins():
  eps = [FakeEP("CPU", device_plugin("CPU")), FakeEP("GPU", device_plugin("GPU"))]
  reg = make_registry(eps, env={"PLUGRAD_DISABLE_PLUGIN_AUTOLOAD": "1", "PLUGRAD_PLUGINS": "GPU"})
  assert reg.device_names() == ["GPU", "PYTHON"]


def test_a_plugin_can_replace_one_role_of_another_device():
  from plugrad.builtins.python_device import PythonCompiler
  class FastCompiler(PythonCompiler):
    pass
  class Override:
    PLUGRAD_CONTRACT = CONTRACT_VERSION
    @hookimpl(tryfirst=True)
    def plugrad_compiler(self, device, config): return FastCompiler() if device == "PYTHON" else None
  general = FakeEP("fast-compiler", Override())
  general.general = True
  reg = make_registry([general])
  reg.load_general_plugins()
  dev = reg.device("PYTHON")
  assert type(dev.compiler) is FastCompiler
  assert type(dev.renderer).__name__ == "PythonRenderer"  # the other roles stay the original plugin's


def test_real_entry_points_are_read_from_metadata(monkeypatch):
  seen = []
  def fake_entry_points(group):
    seen.append(group)
    return []
  monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)
  reg = Registry(Config.from_env({}), builtins=[PythonDevicePlugin()])
  assert reg.device_names() == ["PYTHON"]
  assert "plugrad.devices" in seen


def test_an_undeclared_dtype_fails_at_the_call_that_asks_for_it():
  narrow = Capabilities(dtypes=frozenset([dtypes.float32, dtypes.int32, dtypes.bool]))
  prev = set_registry(make_registry([FakeEP("NARROW", device_plugin("NARROW", caps=narrow))]))
  try:
    t = Tensor.ones(3, device="NARROW")
    with pytest.raises(UnsupportedError, match="NARROW does not support dtype float64"): t.cast(dtypes.float64)
    with pytest.raises(UnsupportedError, match="float16"): Tensor.ones(3, dtype=dtypes.float16, device="NARROW")
    with pytest.raises(UnsupportedError, match="int64"): Tensor.ones(2, dtype=dtypes.int64, device="PYTHON").to("NARROW")
  finally:
    set_registry(prev)


def test_a_device_index_that_does_not_exist_fails_at_the_first_tensor():
  import subprocess
  import sys
  res = subprocess.run([sys.executable, "-c", "from plugrad import Tensor; Tensor.ones(3)"], capture_output=True, text=True,
                       env={**os.environ, "DEVICE": "PYTHON:8"}, timeout=60)
  assert res.returncode != 0 and "device PYTHON:8 does not exist: this machine has 8 PYTHON devices" in res.stderr


def test_observers_registered_through_pm_are_seen_at_once():
  # observes_launches keeps its answer between registrations: a plugin registered on `registry.pm` directly (as a
  # profiler or the kernels CLI does) must still be seen by the next realize, and its unregistering too
  registry = make_registry([])
  assert not registry.observes_launches()

  class Timing:
    wanted = True
    @hookimpl
    def plugrad_wants_timing(self): return self.wanted or None

  class Launches:
    @hookimpl
    def plugrad_kernel_ran(self, device, name, seconds, flops, bytes_moved, global_size, local_size): pass
  timing, launches = Timing(), Launches()
  registry.pm.register(launches)
  assert registry.observes_launches()
  registry.pm.unregister(launches)
  assert not registry.observes_launches()
  registry.pm.register(timing)
  assert registry.observes_launches()
  timing.wanted = False  # a timing hook is asked every time: its answer may change without a registration
  assert not registry.observes_launches()


def test_context_debug_sets_the_level_for_its_block(capsys):
  from plugrad import Context
  from plugrad.registry import get_registry
  registry, a = get_registry(), Tensor([1.0, 2.0], device="PYTHON")
  (a + 1).realize()
  assert "realized" not in capsys.readouterr().err
  with Context(DEBUG=2):  # tinygrad's form: DEBUG for a block, without the environment variable
    assert registry.observes_launches()
    (a * 3).realize()
  err = capsys.readouterr().err
  assert "realized: 1 kernels" in err and "*** PYTHON" in err
  assert not registry.observes_launches()  # after the block native runs come back
  (a - 1).realize()
  assert "realized" not in capsys.readouterr().err
  from plugrad.config import DEBUG
  with Context(DEBUG=1):  # as DEBUG=1 in the environment: a block with DEBUG=0 silences it
    assert DEBUG >= 1 and registry.observes_launches()
    with Context(DEBUG=0): assert not registry.observes_launches()
    assert registry.observes_launches()


def test_an_entry_point_naming_the_class_is_refused_and_isolated():
  # pluggy called its hooks unbound: every device's capabilities and config options raised a TypeError
  plugin = device_plugin("KLASS")
  reg = make_registry([FakeEP("KLASS", type(plugin)), FakeEP("CPU", device_plugin("CPU", 90))])
  assert reg.default_device() == "CPU" and reg.device("PYTHON").caps is not None
  st = reg.status("KLASS")
  assert not st.available and "names the class Plugin, not an instance" in st.reason


def test_a_probe_returning_no_reason_string_says_so():
  reg = make_registry([FakeEP("YES", device_plugin("YES", probe=lambda: True))])
  assert "its availability probe returned True; a probe returns None" in reg.status("YES").reason


@pytest.mark.parametrize("names", [(), ("odd",)])
def test_a_device_plugin_owns_what_it_declares_whatever_its_names_say(names):
  # `names` left out or in lower case: the device was listed available, and then no role answered for it
  from plugrad.plugin import DevicePlugin

  class Odd(DevicePlugin):
    PLUGRAD_CONTRACT = CONTRACT_VERSION
    def devices(self, config): return [DeviceDecl("ODD", 50)]
    def capabilities(self, device, config): return Capabilities(launch_dims=2)
  Odd.names = names
  reg = make_registry([FakeEP("ODD", Odd())])
  assert reg.device("ODD").caps.launch_dims == 2


def test_an_entry_point_named_otherwise_than_its_device_says_so():
  reg = make_registry([FakeEP("BADI_EP", device_plugin("BADI"), dist="plugrad-badi")])
  st = reg.status("BADI_EP")
  assert not st.available and "installed as the entry point BADI_EP but declares BADI" in st.reason


def test_a_role_method_the_hooks_cannot_call_is_refused_at_load():
  # renderer(self, device) without config was listed available; its first kernel raised a TypeError naming no plugin
  from plugrad.plugin import DevicePlugin

  class Short(DevicePlugin):
    PLUGRAD_CONTRACT = CONTRACT_VERSION
    names = ("SHORT",)
    def devices(self, config): return [DeviceDecl("SHORT", 50)]
    def renderer(self, device): return None
  reg = make_registry([FakeEP("SHORT", Short(), dist="plugrad-short"), FakeEP("CPU", device_plugin("CPU", 90))])
  st = reg.status("SHORT")
  assert not st.available and "renderer(device) cannot be called as renderer(device, config)" in st.reason
  assert "plugrad-short" in st.reason and reg.default_device() == "CPU"


def test_a_role_that_raises_notes_its_plugin():
  # a capabilities() raising KeyError('caps') surfaced as a bare KeyError: 'caps'; its own error now, with a note
  class Raising:
    PLUGRAD_CONTRACT = CONTRACT_VERSION
    @hookimpl
    def plugrad_declare_devices(self, config): return [DeviceDecl("RAISE", 50)]
    @hookimpl
    def plugrad_device_capabilities(self, device, config): raise KeyError("caps")
  reg = make_registry([FakeEP("RAISE", Raising(), dist="plugrad-raise")])
  with pytest.raises(KeyError, match="caps") as raised: reg.device("RAISE").caps
  assert raised.value.__notes__ == ["raised by the capabilities description of device RAISE (plugin RAISE, "
                                    "plugrad-raise 1.2.3)"]
