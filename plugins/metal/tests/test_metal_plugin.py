"""The plugin object, its discovery, and how it behaves where Metal cannot run."""
from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

import plugrad
from metal_support import IS_MACOS
from plugrad.config import Config
from plugrad.device import CompileError, DeviceError
from plugrad.dtype import dtypes
from plugrad_metal import CAPABILITIES, SYNTAX_CHECK, plugin, syntax_check_mode
from plugrad_metal.compiler import SYNTAX_CHECKED, MetalCompiler

not_macos = pytest.mark.skipif(IS_MACOS, reason="checks the behaviour off macOS")


def test_entry_point_names_the_plugin_object():
  eps = [ep for ep in importlib.metadata.entry_points(group="plugrad.devices") if ep.name == "METAL"]
  assert len(eps) == 1 and eps[0].value == "plugrad_metal:plugin"
  assert eps[0].load() is plugin
  assert plugin.PLUGRAD_CONTRACT == plugrad.plugin.CONTRACT_VERSION == 2


def test_import_does_not_touch_pyobjc():
  code = "import sys, plugrad_metal; from plugrad_metal import renderer, compiler, allocator, runtime; " \
         "print(any(m == 'Metal' or m.startswith('objc') for m in sys.modules))"
  res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
  assert res.stdout.strip() == "False", res.stderr


def test_hooks_ignore_other_devices():
  cfg = Config()
  for hook in ("plugrad_device_capabilities", "plugrad_renderer", "plugrad_compiler", "plugrad_allocator",
               "plugrad_runtime"):
    assert getattr(plugin, hook)(device="CUDA", config=cfg) is None
  assert plugin.plugrad_renderer(device="METAL:1", config=cfg) is not None


def test_capabilities():
  assert dtypes.float64 not in CAPABILITIES.dtypes
  assert {dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.int64} <= CAPABILITIES.dtypes
  assert CAPABILITIES.max_buffers == 31 and CAPABILITIES.launch_dims == 3 and CAPABILITIES.local_memory > 0
  assert plugin.plugrad_device_capabilities(device="METAL", config=Config()).max_buffers == 31  # the one place it is said


def test_config_option_is_declared_and_read_through_config():
  assert SYNTAX_CHECK in plugin.plugrad_config_options()
  assert syntax_check_mode(Config.from_env({"PLUGRAD_METAL_SYNTAX_CHECK": "1"})) is (not IS_MACOS)
  assert syntax_check_mode(Config.from_env({})) is False


@not_macos
def test_probe_says_metal_needs_macos():
  decl, = plugin.plugrad_declare_devices(config=Config())
  assert "Metal needs macOS" in decl.probe()


@not_macos
def test_devices_cli_shows_why():
  res = subprocess.run([sys.executable, "-m", "plugrad", "devices"], capture_output=True, text=True, timeout=60)
  line = next(s for s in res.stdout.splitlines() if s[2:].startswith("METAL"))
  assert "plugrad-metal" in line and "unavailable: Metal needs macOS" in line
  assert "PLUGRAD_METAL_SYNTAX_CHECK" in res.stdout


@not_macos
def test_compiler_refuses_off_macos(tmp_path):
  compiler = plugin.plugrad_compiler(device="METAL", config=Config(cache_dir=tmp_path))
  with pytest.raises(CompileError, match="needs macOS.*PLUGRAD_METAL_SYNTAX_CHECK=1"):
    compiler.compile("kernel void k() {}")


@not_macos
def test_compiler_in_syntax_check_mode(tmp_path, clang_checker):
  from plugrad_metal.compiler import STATS
  before = (STATS.checked, STATS.failed)
  cfg = Config.from_env({"PLUGRAD_METAL_SYNTAX_CHECK": "1", "PLUGRAD_CACHE_DIR": str(tmp_path)})
  compiler = plugin.plugrad_compiler(device="METAL", config=cfg)
  assert isinstance(compiler, MetalCompiler) and compiler.cache_dir is None  # a check is never cached
  good = ("#include <metal_stdlib>\nusing namespace metal;\n"
          "kernel void k(device float* data0 [[buffer(0)]], uint3 gid [[thread_position_in_grid]]) {\n"
          "  data0[gid.x] = 1.0f;\n}\n")
  assert compiler.compile(good) == (SYNTAX_CHECKED, False)
  with pytest.raises(CompileError, match="Metal syntax check failed"):
    compiler.compile(good.replace("1.0f", "sqrtf(2.0f)"))
  assert not any(tmp_path.rglob("*"))
  assert (STATS.checked, STATS.failed) == (before[0] + 1, before[1] + 1)
  STATS.checked, STATS.failed = before  # keep this process's exit summary about real runs only


@not_macos
def test_runtime_and_allocator_refuse_off_macos():
  runtime = plugin.plugrad_runtime(device="METAL", config=Config())
  with pytest.raises(DeviceError, match="Metal needs macOS"):
    runtime.load("k", SYNTAX_CHECKED)
  allocator = plugin.plugrad_allocator(device="METAL", config=Config())
  with pytest.raises(DeviceError, match="Metal needs macOS"):
    allocator.alloc(16)


@not_macos
def test_asking_for_metal_fails_loudly():
  with pytest.raises(DeviceError, match="Metal needs macOS"):
    plugrad.Tensor([1.0, 2.0], device="METAL")
