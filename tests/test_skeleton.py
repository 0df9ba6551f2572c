"""`python -m plugrad new-plugin` writes an installable plugin; the C example is that skeleton filled in."""
import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from plugrad import CompileError, Tensor
from plugrad.config import Config
from plugrad.engine import render_for
from plugrad.registry import PluginWarning, Registry
from plugrad.builtins.python_device import PythonDevicePlugin

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def skeleton(tmp_path):
  out = tmp_path / "mydev"
  res = subprocess.run([sys.executable, "-m", "plugrad", "new-plugin", "MYDEV", "--dir", str(out)], capture_output=True, text=True)
  assert res.returncode == 0, res.stderr
  sys.path.insert(0, str(out))
  yield out
  sys.path.remove(str(out))
  for mod in [m for m in sys.modules if m.startswith("plugrad_mydev")]: del sys.modules[mod]


def test_skeleton_files_and_entry_point(skeleton):
  names = sorted(str(p.relative_to(skeleton)) for p in skeleton.rglob("*") if p.is_file())
  assert names == ["README.md", "plugrad_mydev/__init__.py", "plugrad_mydev/allocator.py", "plugrad_mydev/compiler.py",
                   "plugrad_mydev/renderer.py", "plugrad_mydev/runtime.py", "pyproject.toml", "tests/test_conformance.py"]
  meta = tomllib.loads((skeleton / "pyproject.toml").read_text())
  assert meta["project"]["entry-points"]["plugrad.devices"] == {"MYDEV": "plugrad_mydev:plugin"}
  assert "TODO" in (skeleton / "plugrad_mydev/compiler.py").read_text()


def test_skeleton_registers_renders_and_says_what_is_missing(skeleton):
  plugin = importlib.import_module("plugrad_mydev").plugin
  ep = type("EP", (), {"name": "MYDEV", "value": "plugrad_mydev:plugin", "load": lambda self: plugin,
                       "dist": type("D", (), {"name": "plugrad-mydev", "version": "0.1.0"})()})()
  reg = Registry(Config.from_env({}), builtins=[PythonDevicePlugin()], entry_points=lambda g: [ep] if g == "plugrad.devices" else [])
  st = reg.status("MYDEV")
  assert not st.available and "compiler and runtime are still TODOs" in st.reason  # never the default by mistake
  with pytest.warns(PluginWarning, match="reference interpreter"): assert reg.default_device() == "PYTHON"
  dev = reg.render_device("MYDEV")
  a = Tensor(np.ones(4, np.float32), device="PYTHON")
  (item,) = (a + 1).schedule()
  _, src = render_for(dev, item.ast)
  assert "void E_4" in src
  with pytest.raises(CompileError, match="TODO"): dev.compiler._compile(src)


def test_c_example_is_the_skeleton_filled_in(skeleton):
  example = ROOT / "examples" / "c_device"
  ours = sorted(str(p.relative_to(skeleton)).replace("mydev", "c") for p in skeleton.rglob("*") if p.is_file())
  # a non-editable `pip install examples/c_device` leaves build/ and *.egg-info beside the sources
  theirs = sorted(str(p.relative_to(example)) for p in example.rglob("*") if p.is_file() and "__pycache__" not in str(p)
                  and ".egg-info" not in str(p) and p.relative_to(example).parts[0] != "build")
  assert ours == theirs
  assert "TODO" not in "".join((example / "plugrad_c" / f).read_text() for f in ("compiler.py", "runtime.py", "__init__.py"))
