"""The plugin contract (version 2): plugins import only `plugrad` and `plugrad.plugin`, everything that module
exports is documented, and `DevicePlugin` answers only for the devices a plugin owns."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

import plugrad.plugin
from plugrad import Tensor
from plugrad.config import Config
from plugrad.plugin import CONTRACT_VERSION, Capabilities, DeviceDecl, DevicePlugin
from plugrad.registry import Registry
from plugrad.builtins.python_device import PythonDevicePlugin

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_PACKAGES = sorted(p for p in [*ROOT.glob("plugins/*/plugrad_*"), ROOT / "examples/c_device/plugrad_c"]
                         if (p / "__init__.py").exists())


def plugrad_imports(package: Path) -> list[str]:
  """Every `plugrad...` module the package's code imports, as 'file:line module'."""
  found = []
  for path in package.rglob("*.py"):
    for node in ast.walk(ast.parse(path.read_text())):
      modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
        [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else []
      found += [f"{path.relative_to(package.parent)}:{node.lineno} {m}" for m in modules if m.split(".")[0] == "plugrad"]
  return found


@pytest.mark.parametrize("package", PLUGIN_PACKAGES, ids=lambda p: p.name)
def test_plugins_import_only_plugrad_and_plugrad_plugin(package):
  assert plugrad_imports(package), f"{package.name} should use plugrad.plugin"
  bad = [i for i in plugrad_imports(package) if i.split()[1] not in ("plugrad", "plugrad.plugin")]
  assert not bad, f"imports outside the plugin contract: {bad}"


def test_the_skeleton_imports_only_the_contract(tmp_path):
  out = tmp_path / "sk"
  subprocess.run([sys.executable, "-m", "plugrad", "new-plugin", "SK", "--dir", str(out)], check=True, capture_output=True)
  bad = [i for i in plugrad_imports(out / "plugrad_sk") if i.split()[1] != "plugrad.plugin"]
  assert not bad, bad


def test_every_export_is_documented():
  assert CONTRACT_VERSION == 2
  for name in plugrad.plugin.__all__:
    obj = getattr(plugrad.plugin, name)
    assert f"`{name}`" in plugrad.plugin.__doc__, f"{name} is not listed in plugrad.plugin's docstring"
    if callable(obj) and not isinstance(obj, type(plugrad.plugin.hookimpl)): assert obj.__doc__, f"{name} has no docstring"


def test_a_plugin_built_for_contract_1_is_refused_naming_both_versions():
  class Old(TwoDevices):
    PLUGRAD_CONTRACT = 1
  ep = type("EP", (), {"name": "ALPHA", "value": "old:plugin", "load": lambda self: Old(),
                       "dist": type("D", (), {"name": "plugrad-old", "version": "0.9"})()})()
  reg = Registry(Config.from_env({}), builtins=[PythonDevicePlugin()],
                 entry_points=lambda g: [ep] if g == "plugrad.devices" else [])
  st = reg.status("ALPHA")
  assert not st.available and "written for plugin contract 1" in st.reason and "contract 2" in st.reason
  assert "upgrade plugrad-old" in st.reason


class TwoDevices(DevicePlugin):
  PLUGRAD_CONTRACT = CONTRACT_VERSION
  names = ("ALPHA", "BETA")

  def __init__(self): self.asked = []
  def devices(self, config): return [DeviceDecl(n, 5) for n in self.names]
  def capabilities(self, device, config):
    self.asked.append(device)
    return Capabilities(max_buffers=7)


def test_a_device_plugin_answers_only_for_its_own_devices():
  plugin = TwoDevices()
  reg = Registry(Config.from_env({}), builtins=[PythonDevicePlugin(), plugin], entry_points=lambda group: [])
  assert reg.device("ALPHA").buffer_limit == 7 and reg.device("beta:0").caps.max_buffers == 7
  assert reg.device("PYTHON").caps.max_buffers is None  # the PYTHON plugin answered, not this one
  assert plugin.asked == ["ALPHA", "BETA"]  # never asked about a device it does not own
  assert plugin.plugrad_renderer(device="ALPHA", config=reg.config) is None  # a role left out answers nothing
  assert plugin.owns("alpha:3") and not plugin.owns("ALPHABET")


def test_transfers_fall_back_to_host_memory_and_plugins_may_provide_one():
  from plugrad import Tensor
  from plugrad.device import HostTransfer, Transfer
  from plugrad.plugin import hookimpl

  class CountingTransfer(Transfer):
    copies = 0
    def _copy(self, dest, src):
      CountingTransfer.copies += 1
      dest.copyin(src.numpy())

  class PeerCopies:
    PLUGRAD_CONTRACT = CONTRACT_VERSION
    @hookimpl
    def plugrad_transfer(self, src_device, dest_device, config):
      return CountingTransfer() if (src_device, dest_device) == ("PYTHON:1", "PYTHON:2") else None

  from plugrad.registry import set_registry
  reg = Registry(Config.from_env({}), builtins=[PythonDevicePlugin(), PeerCopies()], entry_points=lambda group: [])
  prev = set_registry(reg)
  try:
    assert isinstance(reg.transfer("PYTHON:0", "PYTHON:1"), HostTransfer)
    a = Tensor([1.0, 2.0], device="PYTHON:1") * 2
    assert (a.to("PYTHON:2") + 1).tolist() == [3.0, 5.0] and CountingTransfer.copies == 1
    assert (a.to("PYTHON:0") + 1).tolist() == [3.0, 5.0] and CountingTransfer.copies == 1  # the fallback
  finally:
    set_registry(prev)


def test_a_renderer_returning_no_source_is_refused_naming_the_device(monkeypatch):
  # an empty source was compiled as it was: a shadow compile of nothing counted as a pass
  from plugrad.engine import render_for
  from plugrad.registry import get_registry
  device = get_registry().device("PYTHON")
  item = [it for it in (Tensor.ones(4, device="PYTHON") + 1).schedule() if not it.is_copy][0]
  monkeypatch.setattr(device.renderer, "render", lambda prog: None)
  with pytest.raises(TypeError, match=r"PYTHON's renderer returned NoneType for kernel \w+, not its source"):
    render_for(device, item.ast)


def test_an_op_made_of_an_unsupported_one_is_unsupported_too():
  # a device without SIN (and no native COS) was handed cos written as three SINs; a misspelled op declared nothing
  from plugrad.device import UnsupportedError, check_supported
  no_sin = Capabilities(unsupported_ops=frozenset({"SIN"}))
  with pytest.raises(UnsupportedError, match="does not support COS"): check_supported("DEV", no_sin, set(), {"COS"})
  check_supported("DEV", Capabilities(unsupported_ops=frozenset({"SIN"}), optional_ops=frozenset({"COS"})), set(), {"COS"})
  with pytest.raises(ValueError, match="SINE, which are no ops"): Capabilities(unsupported_ops=frozenset({"SINE"}))


def test_a_plugins_renderer_compiler_and_runtime_mistakes_name_the_plugin(monkeypatch):
  # a renderer raising gave a bare ValueError, a _compile returning str "can't concat str to bytes", a runtime's load
  # returning None "'NoneType' object is not callable" at the launch
  from plugrad.device import CompileError, Compiler
  from plugrad.engine import compile as compile_module
  from plugrad.registry import get_registry
  device = get_registry().device("PYTHON")
  item = [it for it in (Tensor.ones(4, device="PYTHON") * 3).schedule() if not it.is_copy][0]

  def broken(prog): raise ValueError("my renderer blew up")
  with monkeypatch.context() as m:
    m.setattr(device.renderer, "render", broken)
    with pytest.raises(CompileError, match=r"PYTHON's renderer failed on kernel \w+: ValueError: my renderer blew up"):
      compile_module.render_for(device, item.ast)

  class TextCompiler(Compiler):
    def _compile(self, src): return "not bytes"
  with pytest.raises(TypeError, match="TextCompiler._compile must return bytes, it returned str"):
    TextCompiler(None).compile("kernel")
  monkeypatch.setattr(device.runtime, "load", lambda name, binary: None)
  with pytest.raises(TypeError, match=r"PYTHON's runtime.load returned NoneType for kernel k, not a Program"):
    compile_module._load(device, "k", "src", b"bin", cached=False)
