"""Loop program -> OpenCL C.

One renderer per device, made from the device's extensions: half is native (`half` arithmetic,
`cl_khr_fp16`) where the device has it and storage-only (`vload_half`/`vstore_half_rte`, computed
in float and rounded to half after every operation, like the reference) where it does not;
doubles need `cl_khr_fp64`; bfloat16 is 16-bit storage computed in float.

Images: a Param with `image=(h, w)` is a `read_only image2d_t` (RGBA, FLOAT or HALF_FLOAT); flat
element i lives at pixel (x=(i/4) % w, y=i / (4*w)), channel i % 4, read with `read_imagef`.
Kernels never write images (see `render_param`).
"""
from __future__ import annotations

import threading

from plugrad.plugin import CStyleRenderer, DType, LoopProgram, Ops, Param, UOp, dtypes

CL_TYPES: dict[DType, str] = {
  dtypes.bool: "bool", dtypes.int8: "char", dtypes.int16: "short", dtypes.int32: "int", dtypes.int64: "long",
  dtypes.uint8: "uchar", dtypes.uint16: "ushort", dtypes.uint32: "uint", dtypes.uint64: "ulong",
  dtypes.float16: "half", dtypes.bfloat16: "ushort", dtypes.float32: "float", dtypes.float64: "double",
}

# bfloat16 as the upper 16 bits of a float32, rounded to nearest even on the way in (NaNs: plugrad.dtype.f32_to_bf16)
BF16_HELPERS_CL = [
  "static inline float plugrad_bf16_to_f32(ushort x) { return as_float(((uint)x) << 16); }",
  "static inline ushort plugrad_f32_to_bf16(float f) { uint u = as_uint(f); if (f != f && (u & 0xffffu)) return (ushort)0x7fc0; "
  "return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }",
]
# half without cl_khr_fp16: a float rounded through 16 bits of private storage
HALF_HELPERS_CL = [
  "static inline ushort plugrad_f32_to_half_bits(float f) { ushort h; vstore_half_rte(f, 0, (half*)&h); return h; }",
  "static inline float plugrad_half_bits_to_f32(ushort h) { return vload_half(0, (const half*)&h); }",
  "static inline float plugrad_round_half(float f) { return plugrad_half_bits_to_f32(plugrad_f32_to_half_bits(f)); }",
]
IMAGE_HELPERS_CL = [
  "__constant sampler_t plugrad_smp = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_NEAREST;",
  # a balanced select (oclgrind 21.10 miscomputes the chained form c == 0 ? .x : c == 1 ? .y : ...)
  "static inline float plugrad_channel(float4 p, int c) { return c < 2 ? (c == 0 ? p.x : p.y) : (c == 2 ? p.z : p.w); }",
  "static inline float plugrad_read_image(read_only image2d_t img, int i, int w) {",
  "  return plugrad_channel(read_imagef(img, plugrad_smp, (int2)((i >> 2) % w, (i >> 2) / w)), i & 3);",
  "}",
]

# ops whose result needs no rounding to half/bfloat16 (exact, or rounded by render_cast)
_EXACT = (Ops.CAST, Ops.BITCAST, Ops.WHERE, Ops.MAX, Ops.MIN, Ops.NEG)


class OpenCLRenderer(CStyleRenderer):
  """OpenCL C 1.2. `half_storage` is True for devices without `cl_khr_fp16`.

  :param extensions: the device's OpenCL extensions (decides half and double handling).
  """
  kernel_prefix = "__kernel "
  buffer_prefix = "__global "
  restrict = "restrict "
  launch_as_loops = False
  bf16_storage = True
  types = CL_TYPES
  float_suffix = {dtypes.float32: "f", dtypes.float16: "", dtypes.float64: "", dtypes.bfloat16: "f"}

  def __init__(self, device: str, extensions: frozenset[str] = frozenset()):
    super().__init__(device)
    self.extensions = frozenset(extensions)
    self.half_storage = "cl_khr_fp16" not in self.extensions
    self._state = threading.local()  # the image params of the program being rendered (per thread)

  # ---------------------------------------------------------------- types and constants

  def storage_type(self, dtype: DType) -> str:
    # bool has no defined size in OpenCL C and may not appear in kernel arguments: keep it as a byte
    return "uchar" if dtype == dtypes.bool else self.types[dtype]

  def render_const(self, value, dtype: DType) -> str:
    if dtype == dtypes.int64 and not isinstance(value, bool):
      return "(-9223372036854775807L-1)" if value == -2**63 else f"{int(value)}L"
    if dtype == dtypes.uint64: return f"{int(value)}UL"
    return super().render_const(value, dtype)

  # ---------------------------------------------------------------- kernel and parameters

  def prelude(self, prog: LoopProgram) -> list[str]:
    used = {p.dtype for p in prog.params} | {u.dtype for u in prog.uops if u.dtype is not None}
    lines: list[str] = []
    if dtypes.float16 in used and not self.half_storage: lines.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
    if dtypes.float64 in used: lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    if dtypes.bfloat16 in used: lines += BF16_HELPERS_CL
    if dtypes.float16 in used and self.half_storage: lines += HALF_HELPERS_CL
    if any(p.image is not None for p in prog.params): lines += IMAGE_HELPERS_CL
    return lines

  def render_param(self, p: Param) -> str:
    if p.image is not None:
      if p.written:
        raise NotImplementedError(f"kernels cannot write images yet: parameter data{p.index} is an image {p.image} and is "
                                  f"written (the core must keep kernel outputs as plain buffers)")
      if p.dtype not in (dtypes.float32, dtypes.float16):
        raise NotImplementedError(f"image parameter data{p.index} has dtype {p.dtype.name}; images hold float32 or float16")
      return f"read_only image2d_t data{p.index}"
    const = "" if p.written else "const "
    return f"{self.buffer_prefix}{const}{self.storage_type(p.dtype)}* {self.restrict}data{p.index}"

  def render_special(self, u: UOp, prog: LoopProgram) -> str:
    name, dim, _ = u.arg
    ct = self.ctype(u.dtype)
    if name.startswith("lidx"): return f"{ct} {name} = ({ct})get_local_id({dim});"
    if prog.local_size is None: return f"{ct} {name} = ({ct})get_global_id({dim});"
    return f"{ct} {name} = ({ct})(get_group_id({dim}) * get_local_size({dim}) + get_local_id({dim}));"

  def render_define_local(self, name: str, dtype: DType, size: int) -> str:
    return f"__local {self.ctype(dtype)} {name}[{size}];"

  def render_barrier(self) -> str: return "barrier(CLK_LOCAL_MEM_FENCE);"

  # ---------------------------------------------------------------- values

  def render_cast(self, x: str, dtype: DType, src: DType) -> str:
    if dtype == dtypes.bool: return f"({x} != 0)"
    if dtype == dtypes.float16 and self.half_storage: return f"plugrad_round_half((float)({x}))"
    if dtype == dtypes.bfloat16: return f"plugrad_bf16_to_f32(plugrad_f32_to_bf16((float)({x})))"
    return f"(({self.ctype(dtype)})({x}))"

  def _bits(self, x: str, dtype: DType) -> str:
    """A value as an expression of its storage bits' type (half and bfloat16 held as float)."""
    if dtype == dtypes.bfloat16: return f"plugrad_f32_to_bf16({x})"
    if dtype == dtypes.float16 and self.half_storage: return f"plugrad_f32_to_half_bits({x})"
    return x

  def render_bitcast(self, x: str, dtype: DType, src: DType) -> str:
    bits = self._bits(x, src)
    if dtype == dtypes.bfloat16: return f"plugrad_bf16_to_f32(as_ushort({bits}))"
    if dtype == dtypes.float16 and self.half_storage: return f"plugrad_half_bits_to_f32(as_ushort({bits}))"
    if dtype == dtypes.bool: return f"(as_uchar({bits}) != 0)"
    if src == dtypes.bool: bits = f"((uchar)({x}))"
    return f"as_{self.types[dtype]}({bits})"

  def render_math(self, op: Ops, x: str, dtype: DType) -> str:
    name = {Ops.SQRT: "sqrt", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.COS: "cos",
            Ops.TRUNC: "trunc"}[op]
    return f"{name}({x})"  # OpenCL's math builtins are overloaded for half, float and double

  def render_int_abs(self, x: str, dtype: DType) -> str:
    # OpenCL's abs builtin (unsigned result, cast back), not the select: clang turns the select into llvm.abs, an
    # intrinsic oclgrind (and older OpenCL runtimes) cannot load. INT_MIN takes a select of its own, which gives it
    # back as -x does: pocl's compiler took abs's result cast back for non-negative and made `abs(x) % -3` an
    # unsigned remainder, so INT64_MIN gave -1 instead of -2 (found by the long random-graph fuzz)
    return f"({x} == {self.render_const(dtype.min, dtype)} ? {x} : (({self.ctype(dtype)})abs({x})))"

  def render_alu(self, op: Ops, srcs: list[str], dtype: DType, src_dtypes: list[DType], const_srcs: list[UOp | None]) -> str:
    expr = super().render_alu(op, srcs, dtype, src_dtypes, const_srcs)
    if op in _EXACT: return expr
    # computed in float, held as half or bfloat16: round after every operation, as the reference does
    if dtype == dtypes.float16 and self.half_storage: return f"plugrad_round_half({expr})"
    if dtype == dtypes.bfloat16: return f"plugrad_bf16_to_f32(plugrad_f32_to_bf16({expr}))"
    return expr

  # ---------------------------------------------------------------- memory

  def render(self, prog: LoopProgram) -> str:
    for p in prog.params: self.render_param(p)  # refuse what cannot be rendered before any work
    self._state.images = {f"data{p.index}": p.image for p in prog.params if p.image is not None}
    try:
      return super().render(prog)
    finally:
      self._state.images = {}

  def _image(self, buf: str) -> tuple[int, int] | None: return getattr(self._state, "images", {}).get(buf)

  def render_load(self, buf: str, idx: str, dtype: DType) -> str:
    if (image := self._image(buf)) is not None:
      val = f"plugrad_read_image({buf}, (int)({idx}), {image[1]})"
      return f"(({self.ctype(dtype)}){val})" if self.ctype(dtype) != "float" else val
    if dtype == dtypes.float16 and self.half_storage: return f"vload_half({idx}, {buf})"
    return super().render_load(buf, idx, dtype)

  def render_store(self, buf: str, idx: str, value: str, dtype: DType) -> str:
    if self._image(buf) is not None: raise NotImplementedError(f"kernels cannot write images yet ({buf})")
    if dtype == dtypes.float16 and self.half_storage: return f"vstore_half_rte({value}, {idx}, {buf});"
    return super().render_store(buf, idx, value, dtype)


__all__ = ["OpenCLRenderer", "CL_TYPES"]
