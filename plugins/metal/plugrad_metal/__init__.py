"""plugrad-metal: Apple GPUs through Metal.

The one plugin object is `plugin`; the entry point `METAL` in the group `plugrad.devices` names it.
Roles: `renderer` (loop program -> Metal Shading Language), `compiler` (newLibraryWithSource on
macOS; a clang syntax check elsewhere when PLUGRAD_METAL_SYNTAX_CHECK=1), `allocator`
(shared-storage MTLBuffers) and `runtime` (compute command encoder). pyobjc is imported only on
macOS and only when a role needs it, so the plugin installs and renders everywhere.
"""
from __future__ import annotations

import platform

from plugrad.plugin import (Allocator, Capabilities, Compiler, Config, ConfigOption, DeviceDecl, DevicePlugin, Renderer,
                            Runtime, default_dtypes_without, dtypes)

from plugrad_metal.renderer import MAX_BUFFERS

__version__ = "0.1.0"

NAME = "METAL"
#: Off macOS, compile by syntax-checking with clang against the Metal shim instead of failing.
SYNTAX_CHECK = ConfigOption("PLUGRAD_METAL_SYNTAX_CHECK", "0",
                            "1: off macOS, METAL 'compiles' by a clang syntax check against a Metal shim (tests, CI)")
#: The clang++ the syntax check runs (default: clang++ on PATH).
CLANG = ConfigOption("PLUGRAD_METAL_CLANG", "", "clang++ for the METAL syntax check (default: found on PATH)")

#: What every Apple GPU since the A11 / M1 offers; the limits a single pipeline may have are lower
#: for register-heavy kernels, which the runtime checks at launch.
CAPABILITIES = Capabilities(
  max_buffers=MAX_BUFFERS,
  dtypes=default_dtypes_without(dtypes.float64),
  launch_dims=3,
  max_global_size=(2**31 - 1, 65535, 65535),
  max_local_size=(1024, 1024, 1024),
  max_workgroup_threads=1024,
  local_memory=32768,
  max_vector_bytes=16,
  supports_images=False,
)


def _probe() -> str | None:
  if platform.system() != "Darwin": return f"Metal needs macOS; this machine runs {platform.system()}"
  try:
    import Metal  # noqa: F401  pyobjc-framework-Metal
  except ImportError as e:
    return f"pyobjc's Metal bindings cannot be imported ({e})"
  if Metal.MTLCreateSystemDefaultDevice() is None: return "this Mac reports no Metal device"
  return None


def syntax_check_mode(config: Config) -> bool:
  """Whether METAL compiles by syntax check: asked for, and not on macOS (where Metal compiles)."""
  return config.option(SYNTAX_CHECK) not in ("", "0") and platform.system() != "Darwin"


class MetalPlugin(DevicePlugin):
  """The hook implementations of the METAL device. Roles are built per call; the registry keeps
  one of each per device."""
  PLUGRAD_CONTRACT = 2  # the plugin contract this plugin was written against
  names = (NAME,)

  def devices(self, config: Config) -> list[DeviceDecl]:
    return [DeviceDecl(NAME, priority=120, probe=_probe,
                       install_hint="on a Mac: pip install plugrad-metal (it pulls pyobjc-framework-Metal)",
                       description="Apple GPUs, Metal Shading Language through pyobjc")]

  def options(self) -> list[ConfigOption]:
    return [SYNTAX_CHECK, CLANG]

  def capabilities(self, device: str, config: Config) -> Capabilities | None:
    return CAPABILITIES

  def renderer(self, device: str, config: Config) -> Renderer | None:
    from plugrad_metal.renderer import MetalRenderer
    return MetalRenderer(device)

  def compiler(self, device: str, config: Config) -> Compiler | None:
    from plugrad_metal.compiler import MetalCompiler
    checker = None
    if syntax_check_mode(config):
      from plugrad_metal.syntax_check import SyntaxChecker
      checker = SyntaxChecker(config.option(CLANG))
    return MetalCompiler(device, config.cache_dir / "metal", syntax_checker=checker)

  def allocator(self, device: str, config: Config) -> Allocator | None:
    from plugrad_metal.allocator import MetalAllocator
    return MetalAllocator(device)

  def runtime(self, device: str, config: Config) -> Runtime | None:
    from plugrad_metal.runtime import MetalRuntime
    return MetalRuntime(device)


plugin = MetalPlugin()

__all__ = ["plugin", "MetalPlugin", "NAME", "CAPABILITIES", "SYNTAX_CHECK", "CLANG", "syntax_check_mode"]
