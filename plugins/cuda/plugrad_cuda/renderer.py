"""Loop program -> CUDA C.

A kernel is `extern "C" __global__ void __launch_bounds__(N) name(T* __restrict__ data0, ...)`
with N the work-group size; launch indices come from blockIdx/blockDim/threadIdx, work-group
memory is `__shared__` and the barrier is `__syncthreads()`.

Types: half is CUDA's native `half` (cuda_fp16.h): add, subtract, multiply (the `_rn` forms, never
fused), compare, negate and max/min run in half, which rounds like numpy's float16 (the exact
result rounded once); divide, reciprocal and the math functions go through float and round back,
as numpy does.
bfloat16 is stored as `__nv_bfloat16` (cuda_bf16.h) and computed as float, rounded to nearest
even when stored or cast to bfloat16, as the reference device does. Source needs no host headers
(NVRTC has none): infinities and NaNs are written as bit patterns.
"""
from __future__ import annotations

from plugrad.plugin import CStyleRenderer, DType, LoopProgram, Ops, TensorCore, UOp, dtypes

CUDA_TYPES: dict[DType, str] = {
  dtypes.bool: "bool", dtypes.int8: "signed char", dtypes.int16: "short", dtypes.int32: "int", dtypes.int64: "long long",
  dtypes.uint8: "unsigned char", dtypes.uint16: "unsigned short", dtypes.uint32: "unsigned int",
  dtypes.uint64: "unsigned long long", dtypes.float16: "half", dtypes.bfloat16: "__nv_bfloat16",
  dtypes.float32: "float", dtypes.float64: "double",
}

# half add/sub/mul with an explicit rounding, which the compiler may not fuse into an FMA (plain
# operators may be contracted, rounding once where the reference rounds twice)
_HALF_RN = {Ops.ADD: "__hadd_rn", Ops.SUB: "__hsub_rn", Ops.MUL: "__hmul_rn"}
_MATH = {Ops.SQRT: "sqrt", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.COS: "cos", Ops.TRUNC: "trunc"}
# reinterpreting bits between floats and same-size integers: CUDA's intrinsics, no memcpy needed
_FLOAT_FROM_BITS = {dtypes.float32: "__int_as_float((int)({}))", dtypes.float64: "__longlong_as_double((long long)({}))",
                    dtypes.float16: "__short_as_half((short)({}))",
                    dtypes.bfloat16: "__bfloat162float(__short_as_bfloat16((short)({})))"}
_BITS_OF_FLOAT = {dtypes.float32: ("__float_as_int({})", dtypes.int32), dtypes.float64: ("__double_as_longlong({})", dtypes.int64),
                  dtypes.float16: ("__half_as_short({})", dtypes.int16),
                  dtypes.bfloat16: ("__bfloat16_as_short(plugrad_f32_to_bf16({}))", dtypes.int16)}
# a bfloat16 value (computed as float) into its storage: cuda_bf16.h's rounding, except that a float that is a bfloat16
# already keeps its bits, a NaN's sign and payload included (a bitcast's; cuda_bf16.h makes every NaN 0x7fff): the
# reference's rule (plugrad.dtype.f32_to_bf16)
_BF16_STORE = ["__device__ __forceinline__ __nv_bfloat16 plugrad_f32_to_bf16(float f) { unsigned u = __float_as_uint(f); "
               "return (u & 0xffffu) ? __float2bfloat16(f) : __ushort_as_bfloat16((unsigned short)(u >> 16)); }"]
_INF_BITS = {dtypes.float32: ("__int_as_float(0x7f800000)", "__int_as_float(0x7fc00000)"),
             dtypes.float64: ("__longlong_as_double(0x7ff0000000000000ll)", "__longlong_as_double(0x7ff8000000000000ll)"),
             dtypes.float16: ("__ushort_as_half((unsigned short)0x7c00)", "__ushort_as_half((unsigned short)0x7e00)")}


# mma.sync's m16n8k16 fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"): lane = 4 * group + t; A holds rows
# group and group + 8, columns 2t, 2t + 1, 2t + 8, 2t + 9; B rows (k) 2t, 2t + 1, 2t + 8, 2t + 9 of column group; C rows
# group and group + 8 of columns 2t and 2t + 1. Element pairs share a 32-bit register, the first in its low half.
_M16N8K16 = dict(dims=(16, 8, 16), dtype_acc=dtypes.float32, threads=32, pair_loads=True,
                 a=(("l2", "l3", "l4", "e1"), ("e0", "l0", "l1", "e2")), b=(("e0", "l0", "l1", "e1"), ("l2", "l3", "l4")),
                 c=(("l2", "l3", "l4", "e1"), ("e0", "l0", "l1")))
#: the tensor cores of sm_80 and newer, as the lowering uses them (float16 and bfloat16 in, float32 accumulated)
TENSOR_CORES = (TensorCore("mma_m16n8k16_f16_f32", dtype_in=dtypes.float16, **_M16N8K16),
                TensorCore("mma_m16n8k16_bf16_f32", dtype_in=dtypes.bfloat16, **_M16N8K16))
_PTX_MMA = {"mma_m16n8k16_f16_f32": "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
            "mma_m16n8k16_bf16_f32": "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"}
_VECTOR_NAMES = {dtypes.float16: "half", dtypes.bfloat16: "bf16", dtypes.float32: "float"}


class CUDARenderer(CStyleRenderer):
  """CUDA C for NVRTC or nvcc; see the module docstring for how each dtype is computed."""
  kernel_prefix = 'extern "C" __global__ '
  restrict = "__restrict__ "
  launch_as_loops = False
  bf16_storage = True
  bf16_round = "__bfloat162float(__float2bfloat16("  # cuda_bf16.h rounds to nearest even
  half_storage = False
  types = CUDA_TYPES

  # ---------------------------------------------------------------- names, types, constants

  def render_inf(self, dtype: DType) -> str: return _INF_BITS[self._float_kind(dtype)][0]
  def render_nan(self, dtype: DType) -> str: return _INF_BITS[self._float_kind(dtype)][1]

  def _float_kind(self, dtype: DType) -> DType:
    # bfloat16 values are computed as float, so its constants are float constants
    return dtypes.float32 if dtype == dtypes.bfloat16 else dtype

  def prelude(self, prog: LoopProgram) -> list[str]:
    used = {p.dtype for p in prog.params} | {u.dtype for u in prog.uops if u.dtype is not None}
    scalars = {d.scalar() for d in used}
    lines = []
    if dtypes.float16 in scalars: lines.append("#include <cuda_fp16.h>")
    if dtypes.bfloat16 in scalars: lines += ["#include <cuda_bf16.h>", *_BF16_STORE]
    for d in sorted((d for d in used if d.count > 1), key=lambda d: (d.name, d.count)):
      lines.append(f"struct __align__({min(16, d.itemsize)}) {self.vector_type(d)} {{ {self.types[d.scalar()]} v[{d.count}]; }};")
    for wmma in {u.arg: u for u in prog.uops if u.op is Ops.WMMA}.values(): lines += self._mma_function(wmma)
    return lines

  # ---------------------------------------------------------------- vectors and tensor cores

  def vector_type(self, dtype: DType) -> str:
    if dtype.scalar() not in _VECTOR_NAMES: raise NotImplementedError(f"CUDA renders no vectors of {dtype.scalar().name}")
    return f"plugrad_{_VECTOR_NAMES[dtype.scalar()]}{dtype.count}"

  def render_vectorize(self, srcs: list[str], dtype: DType) -> str:
    # bfloat16 values are computed as float: stored back into the fragment's bfloat16 (exact, they came from one; a
    # NaN's bits do not matter to a tensor core, so cuda_bf16.h's conversion, not plugrad_f32_to_bf16's test, in the
    # loop)
    lanes = [f"__float2bfloat16({x})" for x in srcs] if dtype.scalar() == dtypes.bfloat16 else srcs
    return f"{self.vector_type(dtype)}{{{{{', '.join(lanes)}}}}}"

  def render_gep(self, x: str, lane: int, dtype: DType) -> str:
    return f"__bfloat162float({x}.v[{lane}])" if dtype.scalar() == dtypes.bfloat16 else f"{x}.v[{lane}]"

  def render_wmma(self, arg: tuple, a: str, b: str, c: str, dtypes_in: tuple[DType, DType, DType]) -> str:
    return f"plugrad_{arg[0]}({a}, {b}, {c})"

  def _mma_function(self, wmma: UOp) -> list[str]:
    """The device function of the tensor core `wmma` computes: its fragments as 32-bit registers into one mma.sync."""
    name = wmma.arg[0]
    if name not in _PTX_MMA: raise NotImplementedError(f"CUDA has no tensor core {name}")
    (ta, tb, tc), n_a, n_b, n_c = (self.vector_type(s.dtype) for s in wmma.src), *(s.dtype.count for s in wmma.src)
    regs_a, regs_b = n_a // 2, n_b // 2  # two 16-bit inputs per register
    outs = ", ".join(f"%{i}" for i in range(n_c))
    ins_a = ", ".join(f"%{n_c + i}" for i in range(regs_a))
    ins_b = ", ".join(f"%{n_c + regs_a + i}" for i in range(regs_b))
    c_regs = ", ".join('"+f"(c.v[%d])' % i for i in range(n_c))
    in_regs = ", ".join(['"r"(ra[%d])' % i for i in range(regs_a)] + ['"r"(rb[%d])' % i for i in range(regs_b)])
    return [f"__device__ __forceinline__ {tc} plugrad_{name}({ta} a, {tb} b, {tc} c) {{",
            "  const unsigned *ra = reinterpret_cast<const unsigned *>(&a), *rb = reinterpret_cast<const unsigned *>(&b);",
            f'  asm("{_PTX_MMA[name]} {{{outs}}}, {{{ins_a}}}, {{{ins_b}}}, {{{outs}}};" : {c_regs} : {in_regs});',
            "  return c;", "}"]

  def render_signature(self, prog: LoopProgram) -> str:
    threads = 1
    for s in prog.local_size or (): threads *= s
    return f"{self.kernel_prefix}void __launch_bounds__({threads}) {prog.name}({', '.join(self.render_params(prog))})"

  def render_special(self, u: UOp, prog: LoopProgram) -> str:
    name, dim, _ = u.arg
    axis = "xyz"[dim]
    ct = self.ctype(u.dtype)
    if name.startswith("lidx"): return f"{ct} {name} = threadIdx.{axis};"
    block = f"(({ct})blockIdx.{axis})" if u.dtype.itemsize > 4 else f"blockIdx.{axis}"
    return f"{ct} {name} = {block}*blockDim.{axis}+threadIdx.{axis};"

  def render_define_local(self, name: str, dtype: DType, size: int) -> str:
    return f"__shared__ {self.ctype(dtype)} {name}[{size}];"

  def render_barrier(self) -> str: return "__syncthreads();"

  # ---------------------------------------------------------------- memory

  def render_load(self, buf: str, idx: str, dtype: DType) -> str:
    if dtype.count > 1: return f"(*(const {self.vector_type(dtype)} *)({buf} + {idx}))"  # a fragment's pair, aligned
    if dtype == dtypes.bfloat16: return f"__bfloat162float({buf}[{idx}])"
    return f"{buf}[{idx}]"

  def render_store(self, buf: str, idx: str, value: str, dtype: DType) -> str:
    if dtype == dtypes.bfloat16: return f"{buf}[{idx}] = plugrad_f32_to_bf16({value});"
    return f"{buf}[{idx}] = {value};"

  # ---------------------------------------------------------------- conversions

  def render_cast(self, x: str, dtype: DType, src: DType) -> str:
    if dtype == src: return x
    if src == dtypes.float16:
      if dtype == dtypes.bool: return f"(__half2float({x}) != 0.0f)"
      x, src = f"__half2float({x})", dtypes.float32  # exact: every half is a float
    if dtype == dtypes.bool: return f"({x} != 0)"
    if dtype == dtypes.float16:
      if src == dtypes.float64: return f"__double2half({x})"
      return f"__float2half({x})" if src.is_float else f"__float2half((float)({x}))"
    if dtype == dtypes.bfloat16:
      # like the reference: through float32, then rounded to nearest even
      return f"__bfloat162float(__float2bfloat16({x}))" if src.is_float and src.itemsize <= 4 else \
        f"__bfloat162float(__float2bfloat16((float)({x})))"
    if dtype == dtypes.uint64 and src.is_float:
      # the upper half [2**63, 2**64) converts exactly (cvt.rzi.u64); below it through int64 as the reference
      return f"({x} >= 9223372036854775808.0 ? (unsigned long long)({x}) : (unsigned long long)(long long)({x}))"
    if dtype.is_int and src.is_float and dtype != dtypes.int64:
      # float -> int truncates through int64 as the reference does: wraps instead of saturating
      return f"(({self.ctype(dtype)})(long long)({x}))"
    return f"(({self.ctype(dtype)})({x}))"

  def render_bitcast(self, x: str, dtype: DType, src: DType) -> str:
    if src.is_float:
      bits, bits_dtype = _BITS_OF_FLOAT[src]
      if dtype.is_float: return _FLOAT_FROM_BITS[dtype].format(bits.format(x))  # half <-> bfloat16: through the 16 bits
      return bits.format(x) if dtype == bits_dtype else f"(({self.ctype(dtype)}){bits.format(x)})"
    if dtype.is_float: return _FLOAT_FROM_BITS[dtype].format(x)
    return f"(({self.ctype(dtype)})({x}))"  # integers of one size: a C conversion keeps the bits

  # ---------------------------------------------------------------- math and ALU

  def render_math(self, op: Ops, x: str, dtype: DType) -> str:
    name = _MATH[op]
    if dtype == dtypes.float16: return f"__float2half({name}f(__half2float({x})))"
    return f"{name}{'' if dtype == dtypes.float64 else 'f'}({x})"

  def render_alu(self, op: Ops, srcs: list[str], dtype: DType, src_dtypes: list[DType], const_srcs: list[UOp | None]) -> str:
    if dtype == dtypes.float16:
      if op is Ops.FDIV: return f"__float2half(__half2float({srcs[0]}) / __half2float({srcs[1]}))"
      if op is Ops.RECIP: return f"__float2half(1.0f / __half2float({srcs[0]}))"
      if op in _HALF_RN: return f"{_HALF_RN[op]}({srcs[0]}, {srcs[1]})"
      if op is Ops.MAX: return f"__hmax_nan({srcs[0]}, {srcs[1]})"
      if op is Ops.MIN: return f"__hmin_nan({srcs[0]}, {srcs[1]})"
    if op is Ops.RECIP and dtype.is_float: return f"({'1.0' if dtype == dtypes.float64 else '1.0f'} / {srcs[0]})"
    return super().render_alu(op, srcs, dtype, src_dtypes, const_srcs)


__all__ = ["CUDARenderer", "CUDA_TYPES", "TENSOR_CORES"]
