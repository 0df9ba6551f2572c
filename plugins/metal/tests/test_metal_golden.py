"""Golden tests: the MSL of representative kernels, pinned in tests/golden/*.metal.

A change in the renderer or the core's lowering shows up here as a diff to review. To accept new
output, regenerate the files:

    PLUGRAD_METAL_UPDATE_GOLDEN=1 python -m pytest plugins/metal/tests/test_metal_golden.py

and read the diff before committing it.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from metal_support import GOLDEN, metal_kernels
from plugrad import Tensor, dtypes

UPDATE = os.environ.get("PLUGRAD_METAL_UPDATE_GOLDEN", "") not in ("", "0")


def _t(*shape, dtype=np.float32, seed=0):
  return Tensor(np.random.default_rng(seed).random(shape).astype(dtype), device="PYTHON")


# name -> a function building the tensor(s) whose kernels are pinned
CASES = {
  # elementwise: fused multiply-add chain with precise:: math
  "elementwise": lambda: ((_t(4, 8) * _t(4, 8, seed=1) + 1).exp2().sqrt()),
  # a reduction split across a threadgroup: threadgroup memory, barrier, gated store by lidx0 == 0
  "reduce_threadgroup": lambda: _t(1000).sum(),
  # max over rows: NaN-propagating max, -INFINITY identity, group reduce per output row
  "reduce_max_rows": lambda: _t(4, 300).max(1),
  # matmul (16x24 @ 24x8): the reduction over k runs across a threadgroup
  "matmul": lambda: _t(16, 24) @ _t(24, 8, seed=1),
  # half: native half arithmetic, casts in and out of half, relu's max
  "half": lambda: (_t(8, 8, dtype=np.float16) * _t(8, 8, dtype=np.float16, seed=1)).relu() + 0.5,
  # bfloat16: ushort storage, float compute, round-to-nearest-even on store
  "bfloat16": lambda: _t(8).cast(dtypes.bfloat16) * 2,
  # integers and bits: int division guard, shifts, bitcast through as_type
  "int_bits": lambda: ((_t(16) * 100).cast(dtypes.int32) // 7 + (_t(16, seed=1).bitcast(dtypes.int32) >> 3)),
}


def render_case(name: str) -> str:
  parts = [f"// kernel {prog.name} global={prog.global_size} local={prog.local_size}\n{src}"
           for _, prog, src in metal_kernels(CASES[name])]
  return "\n".join(parts)


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name):
  got = render_case(name)
  path = GOLDEN / f"{name}.metal"
  if UPDATE:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(got)
  assert path.exists(), f"{path} is missing: run with PLUGRAD_METAL_UPDATE_GOLDEN=1 to create it"
  assert got == path.read_text(), (f"the MSL of {name!r} changed; if the change is intended, regenerate with "
                                   f"PLUGRAD_METAL_UPDATE_GOLDEN=1 and review the diff of {path}")


def test_golden_cases_pass_the_syntax_check(clang_checker):
  """Every pinned kernel is also well-formed MSL as far as the Linux check can tell."""
  for name in CASES:
    for _, _, src in metal_kernels(CASES[name]): clang_checker.check(src)


def test_reduce_golden_uses_threadgroup_memory():
  src = render_case("reduce_threadgroup")
  assert "threadgroup float temp0[" in src and "threadgroup_barrier(mem_flags::mem_threadgroup);" in src
  assert "lid.x" in src
