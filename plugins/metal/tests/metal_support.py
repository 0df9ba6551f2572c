"""Shared helpers for plugrad-metal's tests (imported by name: conftest.py puts this folder on sys.path).

Kernels are built on the PYTHON reference device and rendered for METAL: rendering needs the
METAL plugin, not a Mac. `metal_kernels(build)` returns (LoopProgram, MSL source) per kernel.
"""
from __future__ import annotations

import platform
from pathlib import Path


HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
#: The core conformance suite (op and graph tests), when this runs from a plugrad source checkout.
CORE_TESTS = HERE.parents[2] / "core" / "testing"

IS_MACOS = platform.system() == "Darwin"
NOT_MACOS_REASON = f"Metal needs macOS; this machine runs {platform.system()}"


def metal_kernels(build, limit_device: str = "METAL"):
  """Run `build()` (returns a Tensor or list of Tensors built on PYTHON), schedule it with the
  buffer limit of `limit_device`, and return [(item, program, source)] for every compute kernel."""
  from plugrad import get_registry
  from plugrad.engine import lower_for
  from plugrad.tensor import _schedule
  out = build()
  tensors = list(out) if isinstance(out, (list, tuple)) else [out]
  device = get_registry().render_device("METAL")
  result = []
  for item in _schedule(tensors, limit_device=limit_device):
    if item.is_copy: continue
    prog = lower_for(device, item.ast)
    result.append((item, prog, device.renderer.render(prog)))
  return result
