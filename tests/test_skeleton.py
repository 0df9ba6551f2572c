"""`python -m plugrad new-plugin` writes an installable plugin; the C example is that skeleton filled in."""
import importlib
import os
import re
import shutil
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


# what a third party writes into the skeleton's TODOs for a device that runs C on the host
FILLED_COMPILER = '''
import subprocess, tempfile
from pathlib import Path

from plugrad.plugin import CompileError, Compiler

FLAGS = ["-O1", "-shared", "-fPIC", "-fwrapv", "-ffp-contract=off", "-std=gnu11", "-w"]


class MycCompiler(Compiler):
  def identity(self) -> str: return "gcc " + " ".join(FLAGS)

  def _compile(self, src: str) -> bytes:
    with tempfile.TemporaryDirectory() as d:
      Path(d, "k.c").write_text(src)
      res = subprocess.run(["gcc", *FLAGS, "k.c", "-o", "k.so"], cwd=d, capture_output=True, text=True)
      if res.returncode: raise CompileError(res.stderr + src)
      return Path(d, "k.so").read_bytes()
'''
FILLED_RUNTIME = '''
import ctypes, os, tempfile, time

from plugrad.plugin import Program, Runtime


class MycProgram(Program):
  def __init__(self, name: str, binary: bytes):
    fd, path = tempfile.mkstemp(suffix=".so")
    with os.fdopen(fd, "wb") as f: f.write(binary)
    self.lib = ctypes.CDLL(path)
    os.unlink(path)
    self.fn = getattr(self.lib, name)

  def __call__(self, *bufs, global_size, local_size, vals=(), wait: bool = False):
    st = time.perf_counter()
    self.fn(*(b.ctypes.data_as(ctypes.c_void_p) for b in bufs), *(ctypes.c_int(v) for v in vals))
    return time.perf_counter() - st if wait else None


class MycRuntime(Runtime):
  def load(self, name: str, binary: bytes) -> Program: return MycProgram(name, binary)
'''


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build the filled-in skeleton's kernels")
def test_filled_in_skeleton_installed_as_a_wheel_passes_conformance(tmp_path):
  # the third-party path end to end: generate, fill in the TODOs, build a wheel, install it (not editable)
  # outside this repository, and run the conformance suite against it in a fresh interpreter
  src = tmp_path / "myc"
  pyrun = lambda *a, **kw: subprocess.run([sys.executable, *a], capture_output=True, text=True, **kw)
  assert pyrun("-m", "plugrad", "new-plugin", "MYC", "--dir", str(src)).returncode == 0
  (src / "plugrad_myc" / "compiler.py").write_text(FILLED_COMPILER)
  (src / "plugrad_myc" / "runtime.py").write_text(FILLED_RUNTIME)
  init = src / "plugrad_myc" / "__init__.py"
  init.write_text(re.sub(r'  return "the MYC compiler and runtime are still TODOs.*\n', '  return None\n', init.read_text()))
  res = pyrun("-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"), str(src))
  assert res.returncode == 0, res.stderr
  (wheel,) = (tmp_path / "dist").glob("plugrad_myc-*.whl")
  site = tmp_path / "site"
  res = pyrun("-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel))
  assert res.returncode == 0, res.stderr
  shutil.rmtree(src)  # only the installed wheel is left
  env = {**os.environ, "PYTHONPATH": str(site)}
  res = pyrun("-m", "plugrad", "conformance", "MYC", "-q", "-x", cwd=tmp_path, env=env)
  assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
  assert " passed" in res.stdout and "failed" not in res.stdout
