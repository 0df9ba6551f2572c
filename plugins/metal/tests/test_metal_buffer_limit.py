"""Metal binds at most 31 buffers per kernel: the plugin declares 31 as Capabilities.max_buffers and
the core scheduler must split any fusion that would bind more."""
from __future__ import annotations

import subprocess
import sys

import numpy as np

from metal_support import metal_kernels
from plugrad import Tensor, get_registry
from plugrad.tensor import _schedule
from plugrad_metal.renderer import MAX_BUFFERS, count_buffers

N = 40


def _inputs():
  rng = np.random.default_rng(0)
  arrays = [rng.random(8).astype(np.float32) for _ in range(N)]
  return arrays, [Tensor(a, device="PYTHON") for a in arrays]


def _sum(tensors):
  out = tensors[0]
  for t in tensors[1:]: out = out + t
  return out


def test_limit_comes_from_the_hook():
  assert get_registry().render_device("METAL").buffer_limit == MAX_BUFFERS == 31


def test_sum_of_40_inputs_is_split_to_fit():
  arrays, tensors = _inputs()
  kernels = metal_kernels(lambda: _sum(tensors))
  assert len(kernels) >= 2, "40 inputs cannot fit one Metal kernel"
  for item, prog, src in kernels:
    assert len(item.bufs) <= MAX_BUFFERS, f"{prog.name} binds {len(item.bufs)} buffers"
    assert count_buffers(src) == len(prog.params) <= MAX_BUFFERS
  # every input is read by some kernel: the buffers read that no kernel writes are the 40 inputs
  written = {id(item.bufs[0]) for item, _, _ in kernels}
  inputs = {id(b) for item, _, _ in kernels for b in item.bufs[1:]} - written
  assert len(inputs) == N


def test_split_schedule_computes_the_right_sum():
  arrays, tensors = _inputs()
  out = _sum(tensors)
  items = [it for it in _schedule([out], limit_device="METAL") if not it.is_copy]  # kernelizes with METAL's limit
  assert len(items) >= 2 and all(len(it.bufs) <= MAX_BUFFERS for it in items)
  np.testing.assert_allclose(out.numpy(), np.sum(arrays, axis=0), rtol=1e-5)  # runs those kernels on PYTHON


def test_cli_renders_kernels_within_the_limit():
  code = ("ts=[Tensor(np.full(8, i, np.float32)) for i in range(40)]\n"
          "out=ts[0]\n"
          "for t in ts[1:]: out = out + t")
  res = subprocess.run([sys.executable, "-m", "plugrad", "kernels", "--device", "METAL", "-c", code],
                       capture_output=True, text=True, timeout=120)
  assert res.returncode == 0, res.stderr
  kernels = res.stdout.split("// kernel ")[1:]
  assert len(kernels) >= 2
  assert all(count_buffers(k) <= MAX_BUFFERS for k in kernels), [count_buffers(k) for k in kernels]
  assert sum(count_buffers(k) - 1 for k in kernels) >= N  # every input is bound somewhere
