"""Renderer details that the golden files do not isolate: hand-built loop programs with local
memory, float64 handling, bit casts, launch indices and the argument table."""
from __future__ import annotations

import numpy as np
import pytest

from metal_support import metal_kernels
from plugrad import Tensor, dtypes
from plugrad.codegen.program import LoopProgram, Param
from plugrad.uops import Ops, UOp
from plugrad_metal.renderer import (MAX_BUFFERS, InvalidProgramError, MetalRenderer, UnsupportedDTypeError, count_buffers,
                                    unsupported_dtypes)

i32, f32 = dtypes.int32, dtypes.float32


def _const(dt, v): return UOp(Ops.CONST, dt, (), v)


def group_sum_program(dtype=f32, threads=64, local_inside_loop=False) -> LoopProgram:
  """out[0] = sum(in[0:threads]) by hand: every thread stores its element to local memory, a
  barrier, then thread 0 adds them up. With `local_inside_loop`, the DEFINE_LOCAL is placed
  inside a loop in program order, which MSL forbids: the renderer must hoist it."""
  out, inp = UOp(Ops.PARAM, dtype, (), (0, 1)), UOp(Ops.PARAM, dtype, (), (1, threads))
  lid = UOp(Ops.SPECIAL, i32, (), ("lidx0", 0, threads))
  local = UOp(Ops.DEFINE_LOCAL, dtype, (), (0, threads))
  val = UOp(Ops.LOAD, dtype, (inp, lid))
  st = UOp(Ops.STORE, None, (local, lid, val))
  bar = UOp(Ops.BARRIER, dtype, (st,))
  zero, n, i0, one = _const(dtype, 0), _const(i32, threads), _const(i32, 0), _const(i32, 1)
  acc = UOp(Ops.DEFINE_ACC, dtype, (zero,), 0)
  r = UOp(Ops.RANGE, i32, (n,), 0)
  ld = UOp(Ops.LOAD, dtype, (bar, r))
  accum = UOp(Ops.ACCUMULATE, dtype, (acc, ld), Ops.ADD)
  end = UOp(Ops.ENDRANGE, None, (r,))
  is0 = UOp(Ops.CMPEQ, dtypes.bool, (lid, i0))
  store = UOp(Ops.STORE, None, (out, i0, acc, is0))
  consts = (zero, n, i0, one)
  if local_inside_loop:
    r0 = UOp(Ops.RANGE, i32, (one,), 1)
    uops = (out, inp, *consts, r0, local, UOp(Ops.ENDRANGE, None, (r0,)), lid, val, st, bar, acc, r, ld, accum, end, is0, store)
  else:
    uops = (out, inp, *consts, local, lid, val, st, bar, acc, r, ld, accum, end, is0, store)
  params = (Param(0, dtype, 1, True), Param(1, dtype, threads, False))
  return LoopProgram("group_sum", uops, params, (threads,), (threads,), threads, threads * dtype.itemsize)


def test_hand_built_local_memory_program():
  src = MetalRenderer("METAL").render(group_sum_program())
  body = src.split("{", 1)[1]
  assert body.lstrip().startswith("threadgroup float temp0[64];")
  assert "temp0[lidx0] = val" in src
  assert "threadgroup_barrier(mem_flags::mem_threadgroup);" in src
  assert "int lidx0 = (int)lid.x;" in src
  assert "if (alu" in src and "data0[0] = acc0;" in src


def test_threadgroup_array_is_hoisted_to_kernel_scope(clang_checker):
  src = MetalRenderer("METAL").render(group_sum_program(local_inside_loop=True))
  lines = src.split("\n")
  head = next(i for i, s in enumerate(lines) if s.startswith("kernel void"))
  assert lines[head + 1] == "  threadgroup float temp0[64];", src
  clang_checker.check(src)


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16, dtypes.int32])
def test_local_memory_of_other_dtypes(dtype, clang_checker):
  src = MetalRenderer("METAL").render(group_sum_program(dtype))
  clang_checker.check(src)
  ctype = {dtypes.float16: "half", dtypes.bfloat16: "float", dtypes.int32: "int"}[dtype]
  assert f"threadgroup {ctype} temp0[64];" in src  # locals hold computing values: bfloat16 as float


def test_float64_raises_a_clear_error():
  prog = _f64_program()
  assert unsupported_dtypes(prog) == [dtypes.float64]
  with pytest.raises(UnsupportedDTypeError, match="float64.*Metal.*cast to float32"):
    MetalRenderer("METAL").render(prog)


def test_float64_tensor_kernel_is_refused_before_rendering():
  """float64 is not in METAL's Capabilities.dtypes, so the core refuses the kernel (and test runs skip it)."""
  from plugrad import get_registry
  from plugrad.device import UnsupportedError
  from plugrad.engine import lower_for
  from plugrad.tensor import _schedule
  t = Tensor(np.ones(4), device="PYTHON", dtype=dtypes.float64) * 2
  item, = [it for it in _schedule([t], limit_device="METAL") if not it.is_copy]
  with pytest.raises(UnsupportedError, match="float64"):
    lower_for(get_registry().render_device("METAL"), item.ast)


def test_float64_cast_inside_a_kernel_is_also_unsupported():
  out, inp = UOp(Ops.PARAM, f32, (), (0, 4)), UOp(Ops.PARAM, f32, (), (1, 4))
  gid = UOp(Ops.SPECIAL, i32, (), ("gidx0", 0, 4))
  v = UOp(Ops.LOAD, f32, (inp, gid))
  wide = UOp(Ops.CAST, dtypes.float64, (v,))
  back = UOp(Ops.CAST, f32, (wide,))
  prog = LoopProgram("k", (out, inp, gid, v, wide, back, UOp(Ops.STORE, None, (out, gid, back))),
                     (Param(0, f32, 4, True), Param(1, f32, 4, False)), (4,), (4,), 0, 32)
  with pytest.raises(UnsupportedDTypeError): MetalRenderer("METAL").render(prog)


def _f64_program() -> LoopProgram:
  f64 = dtypes.float64
  out, inp = UOp(Ops.PARAM, f64, (), (0, 4)), UOp(Ops.PARAM, f64, (), (1, 4))
  gid = UOp(Ops.SPECIAL, i32, (), ("gidx0", 0, 4))
  v = UOp(Ops.LOAD, f64, (inp, gid))
  return LoopProgram("E_4", (out, inp, gid, v, UOp(Ops.STORE, None, (out, gid, v))),
                     (Param(0, f64, 4, True), Param(1, f64, 4, False)), (4,), (4,), 0, 64)


def test_launch_indices_use_all_three_dimensions():
  # read reversed, so no two axes merge into one
  x = np.arange(2 * 3 * 5 * 7, dtype=np.float32).reshape(7, 5, 3, 2)
  (_, prog, src), = metal_kernels(lambda: Tensor(x, device="PYTHON").permute(3, 2, 1, 0) + 1)
  for line in ("(int)gid.x;", "(int)gid.y;", "(int)gid.z;"): assert line in src
  assert len(prog.global_size) == 3


def test_signature_binds_consecutive_buffers():
  (_, prog, src), = metal_kernels(lambda: sum((Tensor(np.full(4, i, np.float32), device="PYTHON") for i in range(5)),
                                              start=Tensor(np.zeros(4, np.float32), device="PYTHON")))
  assert count_buffers(src) == len(prog.params)
  for p in prog.params: assert f"data{p.index} [[buffer({p.index})]]" in src
  assert src.count("device float* data0 [[buffer(0)]]") == 1 and "const device float* data0" not in src


def test_too_many_buffers_is_refused():
  params = tuple(Param(i, f32, 4, i == 0) for i in range(MAX_BUFFERS + 1))
  prog = LoopProgram("k", tuple(UOp(Ops.PARAM, f32, (), (i, 4)) for i in range(MAX_BUFFERS + 1)), params, (4,), (4,), 0, 0)
  with pytest.raises(ValueError, match="31"): MetalRenderer("METAL").render(prog)


@pytest.mark.parametrize("src,dst,expect", [
  (dtypes.float32, dtypes.uint32, "as_type<uint>(x)"),
  (dtypes.int16, dtypes.float16, "as_type<half>(x)"),
  (dtypes.bfloat16, dtypes.int16, "as_type<short>(plugrad_f32_to_bf16(x))"),
  (dtypes.uint16, dtypes.bfloat16, "plugrad_bf16_to_f32(as_type<ushort>(x))"),
])
def test_bitcast(src, dst, expect):
  assert MetalRenderer("METAL").render_bitcast("x", dst, src) == expect


@pytest.mark.parametrize("op,dtype,expect", [
  (Ops.SIN, dtypes.float32, "precise::sin(x)"), (Ops.EXP2, dtypes.float32, "precise::exp2(x)"),
  (Ops.SQRT, dtypes.float16, "metal::sqrt(x)"), (Ops.TRUNC, dtypes.float32, "metal::trunc(x)"),
  (Ops.LOG2, dtypes.bfloat16, "precise::log2(x)"),
])
def test_math(op, dtype, expect):
  assert MetalRenderer("METAL").render_math(op, "x", dtype) == expect


def test_nan_and_infinity():
  r = MetalRenderer("METAL")
  assert r.render_const(float("nan"), f32) == "NAN"
  assert r.render_const(float("-inf"), f32) == "-INFINITY"
  assert r.render_const(float("inf"), dtypes.float16) == "((half)INFINITY)"


def test_launch_index_outside_the_launch_is_refused():
  """A program reading gid.y while launching one dimension would compute garbage on a GPU."""
  out = UOp(Ops.PARAM, f32, (), (0, 4))
  gid = UOp(Ops.SPECIAL, i32, (), ("gidx1", 1, 4))
  one = _const(f32, 1.0)
  prog = LoopProgram("k", (out, one, gid, UOp(Ops.STORE, None, (out, gid, one))), (Param(0, f32, 4, True),), (4,), (4,), 0, 16)
  with pytest.raises(InvalidProgramError, match="gidx1.*does not match the launch"):
    MetalRenderer("METAL").render(prog)
  ok = LoopProgram("k", prog.uops, prog.params, (1, 4), (1, 4), 0, 16)
  assert "int gidx1 = (int)gid.y;" in MetalRenderer("METAL").render(ok)
