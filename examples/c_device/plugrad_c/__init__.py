"""The C example device: the skeleton of `python -m plugrad new-plugin C`, completed.

Renderer: the core's C-style renderer as it is. Compiler: `cc -O2 -shared -fPIC`. Runtime: ctypes.
Allocator: host memory held in numpy arrays, reused between realizes.
"""
from __future__ import annotations

from plugrad.plugin import Capabilities, Config, DeviceDecl, DevicePlugin

from plugrad_c.allocator import CAllocator
from plugrad_c.compiler import CC_OPTION, CCompiler, find_cc
from plugrad_c.renderer import CRenderer
from plugrad_c.runtime import CRuntime

NAME = "C"


def probe(config: Config) -> str | None:
  """None when C can run here, else the reason it cannot."""
  return None if find_cc(config.option(CC_OPTION)) else "no C compiler (cc, gcc or clang) on PATH"


class CPlugin(DevicePlugin):
  PLUGRAD_CONTRACT = 2  # the plugin contract this plugin was written against
  names = (NAME,)

  def options(self):
    return [CC_OPTION]

  def devices(self, config):
    return [DeviceDecl(NAME, priority=10, probe=lambda: probe(config), install_hint="install gcc or clang, or set CC",
                       description="C compiled with the system compiler, run with ctypes")]

  def capabilities(self, device, config):
    # host memory, no buffer limit, kernels loop over their outputs
    return Capabilities(max_buffers=None, launch_dims=0, ordered_launch=True, optional_ops=frozenset({"COS"}))

  def renderer(self, device, config):
    return CRenderer(device)

  def compiler(self, device, config):
    return CCompiler(config.cache_dir / NAME.lower(), find_cc(config.option(CC_OPTION)))

  def allocator(self, device, config):
    return CAllocator()

  def runtime(self, device, config):
    return CRuntime()


plugin = CPlugin()
