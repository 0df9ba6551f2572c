"""Loop program -> Metal Shading Language (MSL).

A kernel looks like this (an elementwise add):

    #include <metal_stdlib>
    using namespace metal;
    kernel void E_4(device float* data0 [[buffer(0)]], const device float* data1 [[buffer(1)]],
                    const device float* data2 [[buffer(2)]], uint3 gid [[thread_position_in_grid]],
                    uint3 lid [[thread_position_in_threadgroup]]) {
      int gidx0 = (int)gid.x;
      float val0 = data1[gidx0];
      ...

Choices, each stated once here:

- float64: Metal has no 64-bit float. The device's Capabilities leave float64 out of its dtypes,
  so the core refuses such kernels before lowering (UnsupportedError; test runs skip them); a
  kernel that still reaches the renderer with a float64 value raises `UnsupportedDTypeError`.
- half is native (`half`). bfloat16 is storage only: buffers hold `ushort`, values are computed
  in float and rounded to nearest even when stored. Metal's native `bfloat` needs MSL 3.1
  (macOS 14); storage-only bfloat16 runs on every Metal GPU and OS plugrad supports.
- Math: float32 transcendentals use `precise::` (sqrt, exp2, log2, sin), so results do not depend
  on the fast-math compile option; the compiler also turns fast math off, because fast math
  folds the `x != x` NaN tests that MAX/MIN rely on. half uses the `metal::` functions.
- Bit casts are `as_type<T>(x)`; NaN and infinity are `NAN` and `INFINITY`.
- `threadgroup` arrays (DEFINE_LOCAL) are declared at kernel scope, as MSL requires, whatever the
  position of the DEFINE_LOCAL in the program; BARRIER is
  `threadgroup_barrier(mem_flags::mem_threadgroup);`.
"""
from __future__ import annotations

import re

from plugrad.plugin import CStyleRenderer, DType, LoopProgram, Ops, Param, UnsupportedError, UOp, dtypes, var_name

#: Metal binds at most 31 buffers to one compute kernel (argument table entries 0..30).
MAX_BUFFERS = 31

#: dtypes Metal cannot compute with.
UNSUPPORTED_DTYPES: frozenset[DType] = frozenset({dtypes.float64})

METAL_TYPES: dict[DType, str] = {
  dtypes.bool: "bool", dtypes.int8: "char", dtypes.int16: "short", dtypes.int32: "int", dtypes.int64: "long",
  dtypes.uint8: "uchar", dtypes.uint16: "ushort", dtypes.uint32: "uint", dtypes.uint64: "ulong",
  dtypes.float16: "half", dtypes.bfloat16: "ushort", dtypes.float32: "float",
}

# bfloat16 as 16 bits of storage: the upper half of a float32, rounded to nearest even on the way in (NaNs:
# plugrad.dtype.f32_to_bf16).
# The NaN test is done on the bits, so it holds even if a kernel is compiled with fast math.
BF16_HELPERS_METAL = [
  "inline float plugrad_bf16_to_f32(ushort x) { return as_type<float>(uint(x) << 16); }",
  "inline ushort plugrad_f32_to_bf16(float f) { uint u = as_type<uint>(f); "
  "if ((u & 0x7fffffffu) > 0x7f800000u && (u & 0xffffu)) return ushort(0x7fc0); return ushort((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }",
]

_LAUNCH_VARS = {"gidx": "gid", "lidx": "lid"}
_BUFFER_ATTR = re.compile(r"\[\[\s*buffer\(\s*(\d+)\s*\)\s*\]\]")


class UnsupportedDTypeError(UnsupportedError):
  """A kernel uses a dtype Metal cannot compute with (float64)."""


class InvalidProgramError(ValueError):
  """The loop program contradicts itself (a launch index outside its launch sizes): a bug in the
  lowering that produced it, refused here because the kernel would silently compute garbage."""


def check_launch(prog: LoopProgram) -> None:
  """Every gidxD/lidxD must index a launch dimension D that exists, with the size it was given:
  Metal launches exactly `global_size` threads in `local_size` groups."""
  for u in prog.uops:
    if u.op is not Ops.SPECIAL: continue
    name, dim, size = u.arg
    if u.src: size = u.src[0]  # a size that depends on a Variable: the launch evaluates the same expression
    sizes = prog.global_size if name.startswith("gidx") else (prog.local_size or ())
    if dim >= len(sizes) or sizes[dim] != size:  # a UOp compares by identity
      raise InvalidProgramError(f"kernel {prog.name}: launch index {name} (dimension {dim}, size {size}) does not match the "
                                f"launch global={prog.global_size} local={prog.local_size}: the lowering produced an "
                                f"inconsistent program (a plugrad core bug, please report it)")


def count_buffers(src: str) -> int:
  """How many `[[buffer(n)]]` arguments a rendered kernel binds."""
  return len(_BUFFER_ATTR.findall(src))


def unsupported_dtypes(prog: LoopProgram) -> list[DType]:
  """The dtypes of `prog` (buffers or values) that Metal cannot compute with, sorted by name."""
  found = {p.dtype for p in prog.params} | {u.dtype for u in prog.uops if u.dtype is not None}
  return sorted(found & UNSUPPORTED_DTYPES, key=lambda d: d.name)


class MetalRenderer(CStyleRenderer):
  """Metal Shading Language for Apple GPUs."""
  kernel_prefix = "kernel "
  buffer_prefix = "device "
  restrict = ""
  launch_as_loops = False
  bf16_storage = True
  half_storage = False
  types = METAL_TYPES

  # ---------------------------------------------------------------- pieces of the C-style base

  def prelude(self, prog: LoopProgram) -> list[str]:
    lines = ["#include <metal_stdlib>", "using namespace metal;"]
    if any(p.dtype == dtypes.bfloat16 for p in prog.params) or any(u.dtype == dtypes.bfloat16 for u in prog.uops):
      lines += BF16_HELPERS_METAL
    return lines

  def render_param(self, p: Param) -> str:
    if p.image is not None: raise NotImplementedError(f"Metal kernels take plain buffers, not images (param {p.index})")
    const = "" if p.written else "const "
    return f"{const}device {self.storage_type(p.dtype)}* data{p.index} [[buffer({p.index})]]"

  def render_signature(self, prog: LoopProgram) -> str:
    if len(prog.params) > MAX_BUFFERS:
      raise ValueError(f"kernel {prog.name} binds {len(prog.params)} buffers; Metal allows {MAX_BUFFERS} "
                       f"(the scheduler should have split it: this is a plugrad bug, please report it)")
    args = self.render_params(prog)
    args += ["uint3 gid [[thread_position_in_grid]]", "uint3 lid [[thread_position_in_threadgroup]]"]
    return f"kernel void {prog.name}({', '.join(args)})"

  def render_var_param(self, var: UOp, position: int) -> str:
    # a scalar argument is bytes at the next buffer index (the runtime sets them with setBytes)
    return f"constant int& {var_name(var)} [[buffer({position})]]"

  def render_special(self, u: UOp, prog: LoopProgram) -> str:
    name, dim, _ = u.arg
    kind = name[:4]
    if kind not in _LAUNCH_VARS or not 0 <= dim <= 2:
      raise NotImplementedError(f"Metal has no launch index {name!r} (dim {dim}): expected gidx0-2 or lidx0-2")
    return f"{self.ctype(u.dtype)} {name} = ({self.ctype(u.dtype)}){_LAUNCH_VARS[kind]}.{'xyz'[dim]};"

  def render_cast(self, x: str, dtype: DType, src: DType) -> str:
    if dtype == dtypes.bool: return f"({x} != 0)"
    return f"(({self.ctype(dtype)})({x}))"

  def render_bitcast(self, x: str, dtype: DType, src: DType) -> str:
    # bfloat16 is held as float while computing: go through its 16 storage bits
    if src == dtypes.bfloat16: x, src = f"plugrad_f32_to_bf16({x})", dtypes.uint16
    if dtype == dtypes.bfloat16: return f"plugrad_bf16_to_f32(as_type<ushort>({x}))"
    return f"as_type<{self.ctype(dtype)}>({x})"

  def render_math(self, op: Ops, x: str, dtype: DType) -> str:
    name = {Ops.SQRT: "sqrt", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.COS: "cos",
            Ops.TRUNC: "trunc"}[op]
    if op is Ops.TRUNC: return f"metal::trunc({x})"  # exact in every mode
    return f"{'precise' if self.ctype(dtype) == 'float' else 'metal'}::{name}({x})"

  def render_nan(self, dtype: DType) -> str: return "NAN" if self.ctype(dtype) == "float" else f"(({self.ctype(dtype)})NAN)"
  def render_inf(self, dtype: DType) -> str:
    return "INFINITY" if self.ctype(dtype) == "float" else f"(({self.ctype(dtype)})INFINITY)"

  def render_define_local(self, name: str, dtype: DType, size: int) -> str:
    """A work-group array; it holds computing values (bfloat16 as float), as the base stores them."""
    return f"threadgroup {self.ctype(dtype)} {name}[{size}];"

  def render_barrier(self) -> str:
    return "threadgroup_barrier(mem_flags::mem_threadgroup);"

  # ---------------------------------------------------------------- the kernel

  def render(self, prog: LoopProgram) -> str:
    if bad := unsupported_dtypes(prog):
      raise UnsupportedDTypeError(f"kernel {prog.name} uses {', '.join(d.name for d in bad)}, which Metal does not support "
                                  f"(Metal has no 64-bit float): cast to float32 before moving the tensor to METAL")
    check_launch(prog)
    return _hoist_threadgroup(super().render(prog))


def _hoist_threadgroup(src: str) -> str:
  """Move `threadgroup T x[n];` declarations to the top of the kernel body: MSL allows them only
  at kernel function scope, not inside loops or blocks."""
  lines = src.split("\n")
  decls = [i for i, s in enumerate(lines) if s.lstrip().startswith("threadgroup ") and s.rstrip().endswith(";")]
  if not decls: return src
  head = next(i for i, s in enumerate(lines) if s.startswith("kernel void "))
  moved = ["  " + lines[i].strip() for i in decls]
  rest = [s for i, s in enumerate(lines) if i not in set(decls)]
  return "\n".join(rest[:head + 1] + moved + rest[head + 1:])


__all__ = ["MetalRenderer", "MAX_BUFFERS", "InvalidProgramError", "check_launch", "UNSUPPORTED_DTYPES", "UnsupportedDTypeError",
           "count_buffers", "unsupported_dtypes", "BF16_HELPERS_METAL"]
