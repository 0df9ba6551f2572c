"""Golden tests: the CUDA C of representative kernels, pinned in tests/golden/*.cu.

Codegen changes show up here as a diff to review. After an intended change, regenerate with
`PLUGRAD_UPDATE_GOLDEN=1 python -m pytest plugins/cuda/tests/test_cuda_golden.py`. Every golden kernel
is also compiled (PTX for sm_80 and sm_90, and cubin, which runs the assembler too).
"""
from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

from plugrad.__main__ import main as plugrad_cli
from plugrad.codegen.program import LoopProgram, Param
from plugrad.dtype import dtypes
from plugrad.uops import Ops, UOp

from plugrad_cuda.renderer import CUDARenderer

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("PLUGRAD_UPDATE_GOLDEN", "") not in ("", "0")

#: name -> code binding `out`, rendered through `python -m plugrad kernels --device CUDA` (inputs from Tensor.empty:
#: Tensor.rand would list its own kernels first)
CASES = {
  "elementwise": "a, b, c = Tensor.empty(64, 64), Tensor.empty(64, 64), Tensor.empty(64, 64); out = ((a*b+c).relu()*2)",
  "reduce_shared": "out = Tensor.empty(4096).sum()",
  "reduce_rows": "out = Tensor.empty(64, 1024).max(1)",
  "matmul": "out = Tensor.empty(64, 32) @ Tensor.empty(32, 48)",
  # float16 on tensor cores (mma.sync m16n8k16): fragments loaded per lane, one mma per tile and step into its accumulator
  "matmul_tensor_cores": "out = Tensor.empty(64, 32, dtype=dtypes.half) @ Tensor.empty(32, 64, dtype=dtypes.half)",
  "half": "a = Tensor.empty(32, 32).cast(dtypes.half); out = ((a*a+1).sqrt() / a).exp().maximum(a)",
  "bfloat16": "a = Tensor.empty(32, 32).cast(dtypes.bfloat16); out = (a*a+1).sum(1)",
  "casts": "a = Tensor.empty(256) * 300 - 150; out = [a.cast(dtypes.uint8), a.bitcast(dtypes.int32) >> 3, "
           "a.cast(dtypes.half).bitcast(dtypes.int16), (a.cast(dtypes.int64) // 7).cast(dtypes.float64)]",
  # one kernel, three outputs: each row is read once, its three reductions split across a block (shared memory each)
  "siblings": "x = Tensor.empty(64, 1024).realize(); out = [x.sum(1), x.max(1), (x*x).sum(1)]",
}


def render_case(code: str) -> str:
  buf = io.StringIO()
  with contextlib.redirect_stdout(buf):
    assert plugrad_cli(["kernels", "--device", "CUDA", "-c", code]) == 0
  return buf.getvalue()


def group_reduce_by_hand() -> LoopProgram:
  """A work-group sum written out by hand: 128 threads each fold a strided eighth of 1024 floats,
  meet in __shared__ memory, and thread 0 adds the partials up and stores the total."""
  i32, f32 = dtypes.int32, dtypes.float32
  c0, c8, c128, zero = UOp.const(i32, 0), UOp.const(i32, 8), UOp.const(i32, 128), UOp.const(f32, 0.0)
  out, inp = UOp(Ops.PARAM, f32, (), (0, 1)), UOp(Ops.PARAM, f32, (), (1, 1024))
  local = UOp(Ops.DEFINE_LOCAL, f32, (), (0, 128))
  lid = UOp(Ops.SPECIAL, i32, (), ("lidx0", 0, 128))
  acc = UOp(Ops.DEFINE_ACC, f32, (zero,), 0)
  r = UOp(Ops.RANGE, i32, (c8,), 0)
  scaled = UOp(Ops.MUL, i32, (r, c128))
  idx = UOp(Ops.ADD, i32, (scaled, lid))
  ld = UOp(Ops.LOAD, f32, (inp, idx))
  accum = UOp(Ops.ACCUMULATE, f32, (acc, ld), Ops.ADD)
  end = UOp(Ops.ENDRANGE, None, (r,))
  st = UOp(Ops.STORE, None, (local, lid, acc))
  bar = UOp(Ops.BARRIER, f32, (st,))
  acc2 = UOp(Ops.DEFINE_ACC, f32, (zero,), 1)
  j = UOp(Ops.RANGE, i32, (c128,), 1)
  ld2 = UOp(Ops.LOAD, f32, (bar, j))
  accum2 = UOp(Ops.ACCUMULATE, f32, (acc2, ld2), Ops.ADD)
  end2 = UOp(Ops.ENDRANGE, None, (j,))
  first = UOp(Ops.CMPEQ, dtypes.bool, (lid, c0))
  st_out = UOp(Ops.STORE, None, (out, c0, acc2, first))
  uops = (out, inp, local, lid, c0, c8, c128, zero, acc, r, scaled, idx, ld, accum, end, st, bar,
          acc2, j, ld2, accum2, end2, first, st_out)
  params = (Param(0, f32, 1, True), Param(1, f32, 1024, False))
  return LoopProgram("group_sum_1024", uops, params, (128,), (128,), 1024, 4100)


def sources() -> dict[str, str]:
  out = {name: render_case(code) for name, code in CASES.items()}
  out["group_reduce_by_hand"] = CUDARenderer("CUDA").render(group_reduce_by_hand())
  return out


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]: return sources()


@pytest.mark.parametrize("name", [*CASES, "group_reduce_by_hand"])
def test_golden(name: str, rendered: dict[str, str]) -> None:
  path = GOLDEN / f"{name}.cu"
  if UPDATE:
    path.parent.mkdir(exist_ok=True)
    path.write_text(rendered[name])
  assert path.exists(), f"{path} is missing: run with PLUGRAD_UPDATE_GOLDEN=1 to create it"
  assert rendered[name] == path.read_text(), f"CUDA codegen of {name} changed; if intended, regenerate with PLUGRAD_UPDATE_GOLDEN=1"


def _kernels(text: str) -> list[str]:
  """The kernels in a golden file (the CLI separates them with `// kernel NAME` lines)."""
  parts = [p.split("\n", 1)[1] if p.startswith(" ") else p for p in text.split("// kernel")]
  return [p for p in parts if "__global__" in p]


@pytest.mark.parametrize("target", [("sm_80", "ptx"), ("sm_90", "ptx"), ("sm_80", "cubin"), ("sm_90", "cubin")],
                         ids=lambda t: "-".join(t))
def test_golden_kernels_compile(target: tuple[str, str], rendered: dict[str, str], compiles) -> None:
  c = compiles(*target)
  for name, text in rendered.items():
    for src in _kernels(text):
      binary = c._compile(src)
      if target[1] == "ptx": assert f".target {target[0]}".encode() in binary, name
      else: assert binary.startswith(b"\x7fELF"), name


def test_tensor_core_rendering(rendered: dict[str, str]) -> None:
  src = rendered["matmul_tensor_cores"]
  assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in src
  # each accumulator is the mma's C and D: no separate add of a product
  assert re.search(r"acc(\d+) = plugrad_mma_m16n8k16_f16_f32\(vec\d+, vec\d+, acc\1\);", src)


def test_shared_memory_and_barrier_rendering(rendered: dict[str, str]) -> None:
  src = rendered["group_reduce_by_hand"]
  assert "__shared__ float temp0[128];" in src
  assert src.index("temp0[lidx0] = acc0;") < src.index("__syncthreads();") < src.index("temp0[ridx1]")
  assert "__launch_bounds__(128)" in src and "if (alu" in src
  assert "__shared__" in rendered["reduce_shared"] and "__syncthreads();" in rendered["reduce_shared"]
