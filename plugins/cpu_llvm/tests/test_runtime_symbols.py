"""Kernels never call into nothing: the half-conversion helpers LLVM may emit are provided by the
plugin and round exactly as numpy does, and any other unresolved symbol is a CompileError at load."""
import ctypes

import numpy as np
import pytest

from plugrad import CompileError
from plugrad_cpu_llvm.compiler import LLVMCompiler, _llvm, host_target
from plugrad_cpu_llvm.compiler import jit_target_machine
from plugrad_cpu_llvm.runtime import CPURuntime
from plugrad_cpu_llvm.support import HELPERS, install_helpers, undefined_symbols

# one loop per helper, calling it explicitly: in[i] -> out[i]
_DRIVER = """
declare half @__truncsfhf2(float)
declare half @__truncdfhf2(double)
declare float @__extendhfsf2(half)

define void @run_{name}(ptr %in, ptr %out, i64 %n) {{
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %pi = getelementptr {src}, ptr %in, i64 %i
  %x = load {src}, ptr %pi
  %y = call {dst} @{name}({src} %x)
  %po = getelementptr {dst}, ptr %out, i64 %i
  store {dst} %y, ptr %po
  %next = add i64 %i, 1
  %done = icmp eq i64 %next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret void
}}
"""
_SIGS = {"__truncsfhf2": ("float", "half"), "__truncdfhf2": ("double", "half"), "__extendhfsf2": ("half", "float")}


def run_helper(name: str, x: np.ndarray, out_dtype) -> np.ndarray:
  llvm = _llvm()
  install_helpers(llvm, jit_target_machine)
  src, dst = _SIGS[name]
  mod = llvm.parse_assembly(_DRIVER.format(name=name, src=src, dst=dst))
  mod.triple = host_target()[0]
  engine = llvm.create_mcjit_compiler(mod, jit_target_machine())
  engine.finalize_object()
  fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(engine.get_function_address(f"run_{name}"))
  x = np.ascontiguousarray(x)
  out = np.empty(x.shape, dtype=out_dtype)
  fn(x.ctypes.data, out.ctypes.data, x.size)
  return out


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
  nan = np.isnan(want)
  np.testing.assert_array_equal(np.isnan(got), nan)  # any NaN payload is a NaN
  bits = {2: np.uint16, 4: np.uint32}[want.itemsize]
  np.testing.assert_array_equal(got[~nan].view(bits), want[~nan].view(bits))


def test_every_half_extends_exactly():
  halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
  same_bits(run_helper("__extendhfsf2", halves, np.float32), halves.astype(np.float32))


@pytest.mark.parametrize("name,np_dtype", [("__truncsfhf2", np.float32), ("__truncdfhf2", np.float64)])
def test_truncation_rounds_to_nearest_even(name, np_dtype):
  rng = np.random.default_rng(0)
  halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np_dtype)
  finite = halves[np.isfinite(halves)]
  # every half, the midpoints between neighbours (ties to even), and just either side of them
  mids = (np.sort(finite)[:-1] + np.diff(np.sort(finite)) / 2).astype(np_dtype)
  near = np.concatenate([np.nextafter(mids, np_dtype(np.inf)), np.nextafter(mids, np_dtype(-np.inf))])
  wide = (rng.standard_normal(20000) * 10.0 ** rng.integers(-12, 8, 20000)).astype(np_dtype)
  edges = np.array([65504, 65519.99, 65520, 1e300 if np_dtype == np.float64 else 3e38, 2.0**-25, 2.0**-26, 2.0**-24,
                    -0.0, np.inf, -np.inf, np.nan], dtype=np_dtype)
  x = np.concatenate([halves, mids, near, wide, edges])
  with np.errstate(over="ignore"):
    same_bits(run_helper(name, x, np.float16), x.astype(np.float16))


def test_object_symbols_are_listed():
  obj = LLVMCompiler().compile_object('declare void @plugrad_no_such_symbol()\n'
                                      'define void @f() {\n  call void @plugrad_no_such_symbol()\n  ret void\n}\n')
  assert "plugrad_no_such_symbol" in undefined_symbols(obj)
  assert undefined_symbols(b"not an object file") is None


def test_unresolved_symbol_is_a_compile_error_at_load():
  from plugrad_cpu_llvm.compiler import pack_binary
  obj = LLVMCompiler().compile_object('declare void @plugrad_no_such_symbol()\n'
                                      'define void @k(i64 %s, i64 %e) {\n  call void @plugrad_no_such_symbol()\n'
                                      '  ret void\n}\n')
  binary = pack_binary({"fn": "k", "nparams": 0, "outer": 1, "splittable": False, "cost": 0}, obj)
  with pytest.raises(CompileError, match="plugrad_no_such_symbol"):
    CPURuntime().load("k", binary)


def test_helpers_cover_what_llvm_emits_without_f16c():
  # on a CPU without F16C every half conversion is a helper call: each must be one plugrad provides
  llvm = _llvm()
  triple, cpu, feats = host_target()
  feats = ",".join(f for f in feats.split(",") if f not in ("+f16c", "+avx512fp16")) + ",-f16c,-avx512fp16"
  pairs = [("half", "float", "fpext"), ("float", "half", "fptrunc"), ("double", "half", "fptrunc"),
           ("half", "double", "fpext"), ("i64", "half", "sitofp"), ("half", "i32", "fptosi")]
  src = "".join(f"define {b} @f{i}({a} %x) {{\n  %y = {op} {a} %x to {b}\n  ret {b} %y\n}}\n"
                for i, (a, b, op) in enumerate(pairs))
  mod = llvm.parse_assembly(src)
  mod.triple = triple
  tm = llvm.Target.from_triple(triple).create_target_machine(cpu="x86-64" if "x86" in triple else cpu, features=feats,
                                                             opt=2, reloc="pic")
  called = set(undefined_symbols(bytes(tm.emit_object(mod))) or ()) - {"_GLOBAL_OFFSET_TABLE_"}
  assert called <= set(HELPERS), f"LLVM calls helpers plugrad does not provide: {called - set(HELPERS)}"


_CONSTANTS = """
define void @scale(ptr %p) {
  %v = load <4 x float>, ptr %p
  %w = fmul <4 x float> %v, <float 1.5, float 2.5, float 3.5, float 4.5>
  store <4 x float> %w, ptr %p
  ret void
}
"""


@pytest.mark.skipif(not host_target()[0].startswith("x86_64"), reason="x86-64's code models only")
def test_kernels_reach_their_constants_wherever_mcjit_maps_them():
  # MCJIT maps code and constants apart; a 32-bit rip-relative reach aborted loads (or read the wrong address) once
  # they landed over 2 GiB apart, as they did with CUDA's context in the process on a 16-core machine
  asm = LLVMCompiler().assembly(_CONSTANTS)
  assert ".LCPI" in asm and "movabs" in asm
  assert not [line for line in asm.splitlines() if ".LCPI" in line and "(%rip)" in line]
