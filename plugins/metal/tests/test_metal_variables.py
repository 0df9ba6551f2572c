"""Kernels with Variables (symbolic shapes) render for Metal with a `constant int&` per Variable at the buffer
indices after the buffers, and pass the MSL syntax check."""
from __future__ import annotations

import numpy as np

from metal_support import metal_kernels
from plugrad import Tensor, Variable


def test_variables_are_constant_ints_after_the_buffers(clang_checker) -> None:
  v = Variable("n", 1, 64)

  def build():
    k = Tensor(np.ones((64, 8), np.float32), device="PYTHON").realize()
    q = Tensor(np.ones((2, 8), np.float32), device="PYTHON").realize()
    return (q @ k[:v.bind(5)].T).softmax(-1) @ k[:v.bind(5)]
  kernels = metal_kernels(build)
  assert any(prog.vars for _, prog, _ in kernels)
  for _, prog, src in kernels:
    if prog.vars: assert f"constant int& var_n [[buffer({len(prog.params)})]]" in src
    clang_checker.check(src)
