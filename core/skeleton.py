"""`python -m plugrad new-plugin NAME --dir PATH`: write an installable device-plugin folder.

The skeleton renders C with the core's C-style renderer and keeps buffers in host memory, so it
installs and renders at once; the compiler and runtime carry TODOs where a device's own toolchain
and launch code go. `examples/c_device` is this skeleton with those TODOs filled in.
"""
from __future__ import annotations

import re
from pathlib import Path

from plugrad.hookspecs import CONTRACT_VERSION

FILES: dict[str, str] = {
  "pyproject.toml": '''\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "plugrad device plugin for {NAME}"
requires-python = ">=3.11"
dependencies = ["plugrad", "numpy"]

[project.optional-dependencies]
test = ["pytest", "hypothesis"]

# the entry point's name is the device name: DEVICE={NAME} imports only this package
[project.entry-points."plugrad.devices"]
{NAME} = "{pkg}:plugin"

[tool.setuptools]
packages = ["{pkg}"]
''',
  "README.md": '''\
# {dist}

A plugrad device plugin providing the device `{NAME}`.

```sh
pip install -e .                # registers the device through its entry point
python -m plugrad devices       # {NAME} is listed, with why it is or is not available
python -m pytest tests          # the plugrad conformance suite against {NAME}
```

Fill in the TODOs in `{pkg}/compiler.py` and `{pkg}/runtime.py` (and adapt `renderer.py` to
your dialect), then the probe in `{pkg}/__init__.py` (until then it reports the device unavailable,
so it is never picked by mistake), then make the conformance suite pass: it runs under pytest, so
install plugrad's test extra (`pip install 'plugrad[test]'`). See plugrad's
`docs/writing-a-device-plugin.md` for the contract, including the kernel ABI.
''',
  "{pkg}/__init__.py": '''\
"""The {NAME} device plugin: one object answering plugrad's hooks for the device {NAME}."""
from __future__ import annotations

from plugrad.plugin import Capabilities, Config, DeviceDecl, DevicePlugin

from {pkg}.allocator import {Cls}Allocator
from {pkg}.compiler import {Cls}Compiler
from {pkg}.renderer import {Cls}Renderer
from {pkg}.runtime import {Cls}Runtime

NAME = "{NAME}"


def probe(config: Config) -> str | None:
  """None when {NAME} can run here, else the reason it cannot."""
  # TODO: check for your driver or toolchain and return a reason string when it is missing;
  # settings come from `config` (declare them in options()), never from os.environ.
  # Until the compiler and runtime are written the device must not be picked (it would become the
  # default device of a machine with no other plugin): delete this line when they are.
  return "the {NAME} compiler and runtime are still TODOs ({pkg}/compiler.py, {pkg}/runtime.py)"


class {Cls}Plugin(DevicePlugin):
  PLUGRAD_CONTRACT = {contract}  # the plugin contract this plugin was written against
  names = (NAME,)  # the hooks below are asked only for these devices

  def devices(self, config):
    return [DeviceDecl(NAME, priority=10, probe=lambda: probe(config), install_hint="pip install {dist}",
                       description="{NAME} device")]

  def capabilities(self, device, config):
    # TODO: report your device's real limits; the scheduler and lowering read only these
    return Capabilities(max_buffers=None, launch_dims=0)

  def renderer(self, device, config):
    return {Cls}Renderer(device)

  def compiler(self, device, config):
    return {Cls}Compiler(config.cache_dir / NAME.lower())

  def allocator(self, device, config):
    return {Cls}Allocator()

  def runtime(self, device, config):
    return {Cls}Runtime()


plugin = {Cls}Plugin()
''',
  "{pkg}/renderer.py": '''\
"""Loop program -> source text. The C-style base renders C; override what your dialect changes."""
from plugrad.plugin import CStyleRenderer


class {Cls}Renderer(CStyleRenderer):
  # TODO: for a GPU dialect set launch_as_loops = False and implement render_special (thread
  # indices), kernel_prefix and buffer_prefix (qualifiers), render_define_local and render_barrier
  kernel_prefix = ""
  buffer_prefix = ""
''',
  "{pkg}/compiler.py": '''\
"""Source -> binary bytes. plugrad caches the result on disk (private, signed entries) under a key of the
source, identity() and the plugrad and plugin versions."""
from plugrad.plugin import CompileError, Compiler


class {Cls}Compiler(Compiler):
  def identity(self) -> str:
    # TODO: everything besides the source that changes the binary (compiler version, target, flags)
    return "{NAME}-compiler-0"

  def _compile(self, src: str) -> bytes:
    # TODO: run your compiler on `src` and return the binary; raise CompileError(log + source) on failure
    raise CompileError(f"TODO: the {NAME} compiler is not written yet; it was asked to compile:\\n{{src}}")
''',
  "{pkg}/allocator.py": '''\
"""Device memory. Host memory held in numpy arrays; replace with your device's allocation calls."""
import numpy as np

from plugrad.plugin import LRUAllocator


class {Cls}Allocator(LRUAllocator):
  # TODO: allocate, free and copy with your device's API (LRUAllocator reuses freed blocks by size, up to
  # PLUGRAD_ALLOC_CACHE: a share of _memory_total(), the host's memory unless you return your device's);
  # raise MemoryError when the device is out of memory, so the cached blocks are released and it is retried
  def _alloc(self, nbytes: int, options) -> np.ndarray: return np.empty(nbytes, dtype=np.uint8)
  def _copyin(self, raw: np.ndarray, src: memoryview) -> None: raw[:len(src)] = np.frombuffer(src, dtype=np.uint8)
  def _copyout(self, dest: memoryview, raw: np.ndarray) -> None: np.frombuffer(dest, dtype=np.uint8)[:] = raw[:len(dest)]
''',
  "{pkg}/runtime.py": '''\
"""Binary -> launchable program."""
import time

from plugrad.plugin import Program, Runtime


class {Cls}Program(Program):
  def __init__(self, name: str, binary: bytes):
    self.name, self.binary = name, binary
    # TODO: load `binary` and look up the kernel function `name`

  def __call__(self, *bufs, global_size, local_size, wait: bool = False):
    st = time.perf_counter()
    # TODO: launch the kernel on the raw buffers (the allocator's objects), in PARAM order
    raise NotImplementedError(f"TODO: launching {{self.name}} on {NAME} is not written yet")
    return time.perf_counter() - st if wait else None


class {Cls}Runtime(Runtime):
  def load(self, name: str, binary: bytes) -> Program: return {Cls}Program(name, binary)
''',
  "tests/test_conformance.py": '''\
"""Runs plugrad's conformance suite (allocator, dtypes, ops and graphs against numpy, limits,
compile cache, error paths) against {NAME}."""
import subprocess
import sys


def test_conformance_suite_passes():
  cmd = [sys.executable, "-m", "plugrad", "conformance", "{NAME}", "-q"]
  res = subprocess.run(cmd, capture_output=True, text=True)
  assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
''',
}


def new_plugin(name: str, directory: Path) -> list[Path]:
  """Write the skeleton of a plugin for device `name` into `directory`; returns the files written."""
  if not re.fullmatch(r"[A-Z][A-Z0-9_]*", name.upper()): raise ValueError(f"device names are letters, digits and _: {name!r}")
  NAME = name.upper()
  low = NAME.lower()
  fields = {"NAME": NAME, "dist": f"plugrad-{low.replace('_', '-')}", "pkg": f"plugrad_{low}",
            "Cls": "".join(p.capitalize() for p in low.split("_")), "contract": CONTRACT_VERSION}
  directory = Path(directory)
  if directory.exists() and any(directory.iterdir()): raise FileExistsError(f"{directory} exists and is not empty")
  written = []
  for rel, template in FILES.items():
    path = directory / rel.format(**fields)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(template.format(**fields))
    written.append(path)
  return written
