"""Kernels with Variables (symbolic shapes) render for CUDA with one int parameter per Variable after the
buffers, and compile to PTX (no GPU needed)."""
from __future__ import annotations

import numpy as np

from plugrad import Tensor, Variable, get_registry
from plugrad.engine import lower_for
from plugrad.tensor import _schedule


def _cuda_sources() -> list[tuple]:
  v = Variable("n", 1, 64)
  k = Tensor(np.ones((64, 8), np.float32), device="PYTHON").realize()
  q = Tensor(np.ones((2, 8), np.float32), device="PYTHON").realize()
  att = (q @ k[:v.bind(5)].T).softmax(-1) @ k[:v.bind(5)]
  device = get_registry().render_device("CUDA")
  out = []
  for item in _schedule([att]):
    if item.is_copy: continue
    prog = lower_for(device, item.ast)
    out.append((prog, device.renderer.render(prog)))
  return out


def test_variables_are_int_parameters_after_the_buffers(compiles) -> None:
  sources = _cuda_sources()
  assert any(prog.vars for prog, _ in sources)
  c = compiles()
  for prog, src in sources:
    signature = next(ln for ln in src.splitlines() if "__global__" in ln)
    if prog.vars: assert signature.endswith("const int var_n) {")
    assert b".entry" in c._compile(src)
