"""Rendered OpenCL C, without hardware: golden files for representative kernels, and the rules of
the dialect (half storage vs native half, bfloat16, images, local memory).

Regenerate the golden files with `PLUGRAD_UPDATE_GOLDEN=1 python -m pytest tests/test_render.py`
and review the diff: it is how codegen changes show up in review.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from plugrad import Tensor, dtypes
from plugrad.codegen.lowerer import lower
from plugrad.codegen.program import LoopProgram, Param
from plugrad.uops import Ops, UOp

from plugrad_opencl_qcom import capabilities
from plugrad_opencl_qcom.cldevice import ADRENO_INFO, CL, GENERIC_INFO, QCOM, DeviceInfo
from plugrad_opencl_qcom.compiler import clang_extensions_flag, find_clang
from plugrad_opencl_qcom.renderer import OpenCLRenderer

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("PLUGRAD_UPDATE_GOLDEN", "") not in ("", "0")
# a device without cl_khr_fp16 (like pocl 3.1) and with doubles: half is storage only
POCL_LIKE = dataclasses.replace(GENERIC_INFO, name="pocl-like", extensions=frozenset({"cl_khr_fp64"}))


def _arr(shape, dtype=np.float32, seed=0):
  return np.random.default_rng(seed).uniform(-2, 2, shape).astype(dtype)


def programs(out: Tensor, kind: str, info: DeviceInfo) -> list[LoopProgram]:
  """The loop programs of the kernels that realize `out`, lowered for a `kind` device like `info`."""
  caps = capabilities(kind, info)
  return [lower(it.ast, caps) for it in out.schedule() if not it.is_copy]


def render_all(out: Tensor, kind: str, info: DeviceInfo, images: dict[int, tuple[int, int]] | None = None) -> str:
  r = OpenCLRenderer(kind, info.extensions)
  srcs = []
  for prog in programs(out, kind, info):
    if images: prog = dataclasses.replace(prog, params=tuple(dataclasses.replace(p, image=images.get(p.index))
                                                              for p in prog.params))
    srcs.append(f"// {prog.name} global={prog.global_size} local={prog.local_size}\n" + r.render(prog))
  return "\n".join(srcs)


def T(a): return Tensor(a, device="PYTHON")


CASES = {
  # name: (build the output, device kind, device profile, image params)
  "elementwise": (lambda: ((T(_arr((4, 8))) + T(_arr((4, 8), seed=1))) * 2).relu(), CL, POCL_LIKE, None),
  "pad_gated": (lambda: T(_arr((3, 4))).exp().pad(((1, 1), (2, 0))) + 1, CL, POCL_LIKE, None),
  "reduce_small": (lambda: T(_arr((4, 7))).max(1), CL, POCL_LIKE, None),
  "reduce_group": (lambda: T(_arr((4, 100))).sum(1), CL, POCL_LIKE, None),
  "matmul": (lambda: T(_arr((8, 8))) @ T(_arr((8, 8), seed=1)), CL, POCL_LIKE, None),
  "half_storage": (lambda: (T(_arr((4, 4), np.float16)) * T(_arr((4, 4), np.float16)) + 1).sqrt(), CL, POCL_LIKE, None),
  "half_native": (lambda: (T(_arr((4, 4), np.float16)) * T(_arr((4, 4), np.float16)) + 1).sqrt(), QCOM, ADRENO_INFO, None),
  "bfloat16": (lambda: (T(_arr((4, 4))).cast(dtypes.bfloat16) * 3).cast(dtypes.float32), CL, POCL_LIKE, None),
  "int_dtypes": (lambda: (T(np.arange(6, dtype=np.int64)) * 3 + 2**40 < T(np.arange(6, dtype=np.uint64)).cast(dtypes.int64)),
                 CL, POCL_LIKE, None),
  "image_read": (lambda: (T(_arr((3, 5, 4))) * 2).permute(2, 0, 1).contiguous(), QCOM, ADRENO_INFO, {1: (3, 5)}),
  "image_read_half": (lambda: T(_arr((2, 3, 4), np.float16)).sum(2), QCOM, ADRENO_INFO, {1: (2, 3)}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name):
  build, kind, info, images = CASES[name]
  src = render_all(build(), kind, info, images)
  path = GOLDEN / f"{name}.cl"
  if UPDATE:
    GOLDEN.mkdir(exist_ok=True)
    path.write_text(src)
  assert path.exists(), f"no golden file {path.name}: run with PLUGRAD_UPDATE_GOLDEN=1 to create it"
  assert src == path.read_text(), f"rendered source of {name} changed; review it and regenerate with PLUGRAD_UPDATE_GOLDEN=1"


@pytest.mark.usefixtures("needs_cl")
@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c[2] is POCL_LIKE))
def test_golden_builds_on_device(name):
  """The pocl-profile goldens build on the OpenCL device here (half storage, doubles)."""
  import pyopencl as cl
  from plugrad_opencl_qcom.cldevice import enumerate_devices
  dev = enumerate_devices(CL, False)[0]
  if "cl_khr_fp64" not in dev.extensions and name == "int_dtypes": pytest.skip("device lacks doubles")
  cl.Program(cl.Context([dev]), (GOLDEN / f"{name}.cl").read_text()).build()


@pytest.mark.skipif(find_clang() is None, reason="no clang to check OpenCL C for the Adreno profile")
@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_compiles_with_clang(name):
  """Every golden is valid OpenCL C 1.2 for its profile (doubles need cl_khr_fp64; see
  clang_extensions_flag for half)."""
  _, kind, info, _ = CASES[name]
  res = subprocess.run([find_clang(), "-x", "cl", "-cl-std=CL1.2", "-target", "spir64", "-Xclang", "-finclude-default-header",
                        "-Xclang", clang_extensions_flag(info.extensions), "-fsyntax-only", str(GOLDEN / f"{name}.cl")],
                       capture_output=True, text=True)
  assert res.returncode == 0, res.stderr


# ------------------------------------------------------------------ dialect rules

def test_half_follows_the_device_extensions():
  out = (T(_arr((4,), np.float16)) * 2).exp()
  storage = render_all(out, CL, POCL_LIKE)
  assert "vload_half" in storage and "vstore_half_rte" in storage and "cl_khr_fp16" not in storage
  assert "plugrad_round_half" in storage  # half arithmetic rounds like the reference
  native = render_all(out, QCOM, ADRENO_INFO)
  assert "#pragma OPENCL EXTENSION cl_khr_fp16 : enable" in native and "vload_half" not in native
  assert "__global half*" in native


def test_doubles_only_with_fp64():
  assert dtypes.float64 in capabilities(CL, POCL_LIKE).dtypes
  assert dtypes.float64 not in capabilities(QCOM, ADRENO_INFO).dtypes
  src = render_all(T(np.arange(3, dtype=np.float64)) * 2, CL, POCL_LIKE)
  assert "#pragma OPENCL EXTENSION cl_khr_fp64 : enable" in src and "double" in src


def test_bool_buffers_are_bytes():
  src = render_all(T(_arr((5,))) < 0, CL, POCL_LIKE)
  assert "__global uchar* restrict data0" in src  # bool may not be a kernel argument type


def _image_prog(written: bool) -> LoopProgram:
  p0 = UOp(Ops.PARAM, dtypes.float32, (), (0, 8))
  p1 = UOp(Ops.PARAM, dtypes.float32, (), (1, 8))
  g = UOp(Ops.SPECIAL, dtypes.int32, (), ("gidx0", 0, 8))
  ld = UOp(Ops.LOAD, dtypes.float32, (p1, g))
  st = UOp(Ops.STORE, None, (p0, g, ld))
  params = (Param(0, dtypes.float32, 8, True, (1, 2) if written else None), Param(1, dtypes.float32, 8, False, (1, 2)))
  return LoopProgram("copy", (p0, p1, g, ld, st), params, (8,), (8,), 0, 64)


def test_image_params_read_with_read_imagef():
  src = OpenCLRenderer(QCOM, ADRENO_INFO.extensions).render(_image_prog(written=False))
  assert "read_only image2d_t data1" in src and "read_imagef" in src
  assert "CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_NEAREST" in src
  assert "plugrad_read_image(data1, (int)(gidx0), 2)" in src


def test_written_image_is_refused_clearly():
  with pytest.raises(NotImplementedError, match="cannot write images"):
    OpenCLRenderer(QCOM, ADRENO_INFO.extensions).render(_image_prog(written=True))


def test_local_memory_and_barrier():
  src = render_all(T(_arr((2, 300))).sum(1), CL, POCL_LIKE)
  assert "__local float temp0[" in src and "barrier(CLK_LOCAL_MEM_FENCE);" in src and "get_local_id(0)" in src


@pytest.mark.parametrize("dtype, ctype", [(np.int8, "char"), (np.int16, "short"), (np.int32, "int"), (np.int64, "long")])
def test_integer_abs_uses_the_builtin(dtype, ctype):
  # the select clang turns into llvm.abs, which oclgrind cannot load: OpenCL's abs() instead, the type's minimum
  # passed through a select of its own (pocl's compiler took abs's result cast back for non-negative)
  x = T(np.array([-3, 4], dtype))
  src = render_all(x.abs(), CL, POCL_LIKE)
  lowest = OpenCLRenderer(CL).render_const(int(np.iinfo(dtype).min), dtypes.from_any(dtype))
  assert f"(val0 == {lowest} ? val0 : (({ctype})abs(val0)))" in src and "? alu" not in src, src
  assert f"(-(val0 == {lowest} ? val0 : (({ctype})abs(val0))))" in render_all((x < 0).where(x, -x), CL, POCL_LIKE)
  assert "abs(" not in render_all(T(np.array([-3.0, 4.0], np.float32)).abs(), CL, POCL_LIKE)  # floats keep the select
