"""The renderer role: loop program -> LLVM IR text.

A kernel becomes `void @k_NAME(ptr %d0, ..., ptr %dN-1, i32 %var_NAME..., i64 %start, i64 %end)` (one i32 per
Variable of the kernel, in the program's order, between the buffers and the range). The CPU has no
launch dimensions, so each SPECIAL becomes a loop, the highest dimension outermost (dimension 0
is the fastest-varying one, so the innermost loop walks memory contiguously); the outermost one
runs only start..end-1, which is how the runtime splits a launch across cores. RANGE/ENDRANGE
become counted loops, DEFINE_ACC a stack slot that LLVM promotes to a register (SSA phi), a gated
LOAD a branch around the load (the loop vectoriser turns it into a masked load), a gated STORE a
branch around the store. Where gates compare a launch loop's index with constants (a cat along that axis), that
loop runs in pieces, one function each, in which those gates are constants (`launch_pieces`).

Every op computes what `plugrad.alu` defines: integer division and modulo never trap (x/0 is 0,
x%0 is x, INT_MIN/-1 wraps), shifts use the low bits of the amount, MAX/MIN propagate NaN
(llvm.maximum/minimum), float -> int casts truncate and saturate with NaN and inf giving 0,
bool is i1 in registers and a byte in memory, and bfloat16 is a float in registers rounded to
bfloat16 (round to nearest even) after every op and stored as its upper 16 bits.

Fast-math is limited to the reductions: an ACCUMULATE of floats may be reassociated (so the loop
vectoriser can keep one partial sum per lane), and so may the adds of its terms that an unrolled
reduce axis writes out; the multiplies feeding them may contract into FMAs. In an outer-product
register tile (4 or more accumulators in one loop, products of a broadcast value) each term is added
in turn, a product as one llvm.fmuladd; a tile of 16 or more accumulators is not unrolled further.

Vectors (the device sets Capabilities.vector_ops, so the lowering vectorises register-tiled
reductions such as a matmul): a `scalar.vec(n)` value is an LLVM `<n x T>`; VECTORIZE is an
insertelement chain (a splat when every lane is the same value; a bool vector of a few scalars and
constants, as a padded convolution's gates are, or-ed whole masks), GEP an extractelement, a
vector LOAD/STORE one `load/store <n x T>` of n consecutive elements, and the arithmetic ops LLVM
has for vectors (float add/sub/mul/div/neg/max/min/sqrt, integer add/sub/mul/bitwise,
comparisons, select) stay vector instructions; every other vector op is computed lane by lane
with the scalar code, so each op keeps exactly the scalar semantics.
"""
from __future__ import annotations

import decimal
import json
import math
import re
import struct
from typing import Any

from plugrad.plugin import INTERVAL_OPS, DType, GroupOp, LoopProgram, Ops, Renderer, UOp, dtypes, interval_alu

from plugrad_cpu_llvm.compiler import META_MARKER

_INT_TYPES = {1: "i8", 2: "i16", 4: "i32", 8: "i64"}
_FLOAT_TYPES = {dtypes.float16: "half", dtypes.bfloat16: "float", dtypes.float32: "float", dtypes.float64: "double"}
_FLOAT_SUFFIX = {"half": "f16", "float": "f32", "double": "f64"}
#: the accumulators an innermost loop updates, at least, for their terms to be added one by one (`_chained_terms`)
FMA_CHAIN_ACCUMULATORS = 4
#: the accumulators an innermost loop updates, at least, for LLVM not to unroll it further (`wide_tiles`)
WIDE_TILE_ACCUMULATORS = 16
BOOL_SELECTS = 4  # a bool vector of at most this many distinct run-time lanes is built from whole masks
# bools as LLVM i1 (or vectors of them): arithmetic is the op's truth table (a sum of bools saturates: or)
_BOOL_OPS = {Ops.ADD: "or", Ops.MAX: "or", Ops.OR: "or", Ops.MUL: "and", Ops.MIN: "and", Ops.AND: "and",
             Ops.XOR: "xor", Ops.SUB: "xor"}
_BOOL_CMP = {Ops.CMPLT: "ult", Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}
# 2**f = e**(f ln 2) for |f| <= 1/2: the Taylor coefficients (ln 2)**k / k!, rounded to float32
_EXP2_POLY = [float(struct.unpack("f", struct.pack("f", math.log(2) ** k / math.factorial(k)))[0]) for k in range(8)]


def _f32(v: Any) -> float:
  """`v` rounded to the nearest float32."""
  return float(struct.unpack("f", struct.pack("f", float(v)))[0])


def _f32_types(ty: str) -> tuple[int, DType, DType, str, str]:
  """For inline float32 math on `ty` (float or a vector of floats): its lanes, the float and int32 dtypes of that
  width, and the LLVM types of its int32 and i1 values."""
  lanes = int(ty[1:].split(" x ")[0]) if ty.startswith("<") else 1
  fdt, idt = (dtypes.float32.vec(lanes), dtypes.int32.vec(lanes)) if lanes > 1 else (dtypes.float32, dtypes.int32)
  return lanes, fdt, idt, reg_type(idt), "i1" if lanes == 1 else f"<{lanes} x i1>"


# sin (and cos, its quadrant one on) of an argument known to lie within +-SIN_FAST_LIMIT (its bounds, from the
# expression: Box-Muller's angle) is inline: x = q pi/2 + r with |r| <= pi/4, pi/2 in three float32 parts (each product
# with q exact under an FMA up to this limit), then sin r or cos r by q. The polynomials' coefficients are a
# least-squares fit of (sin r - r) / r**3 and (cos r - 1 + r**2 / 2) / r**4 in r**2 on [0, pi/4], weighted for relative
# error: within 0.8 and 1.3 units in the last place of float32 there. Any other argument takes LLVM's sin or cos (libm,
# accurate for every float)
SIN_FAST_LIMIT = 8192.0
#: the math a half or bfloat16 value takes in float32 (then rounded once, as torch's CPU kernels do)
_WIDENED_MATH = frozenset({Ops.SIN, Ops.COS, Ops.EXP2, Ops.LOG2, Ops.SQRT})
_PI_2 = decimal.Decimal("1.57079632679489661923132169163975144209858469968755291")
_PI_2_PARTS = [_f32(_PI_2)]
for _ in range(2): _PI_2_PARTS.append(_f32(_PI_2 - sum(map(decimal.Decimal, _PI_2_PARTS))))
_SIN_POLY = [-0.16666656732559204, 0.008332310244441032, -0.00019535435421857983]
_COS_POLY = [0.04166664928197861, -0.0013887508539482951, 2.4454982849420048e-05]
# e**x: x = n ln 2 + r with n = rint(x log2 e), ln 2 in two float32 parts (with FMAs the reduction is exact to far below
# an ulp for |n| <= 160), |r| <= ln 2 / 2; e**r by its degree-7 Taylor polynomial (truncation 5e-9), 1/k! rounded
_LN2_PARTS = [_f32(math.log(2)), _f32(math.log(2) - _f32(math.log(2)))]
_EXP_POLY = [_f32(1 / math.factorial(k)) for k in range(8)]
_LOG2E = 1 / math.log(2)  # what Tensor.exp multiplies by before its exp2
# ln(1 + f) = 2 atanh(s) with s = f / (2 + f): 2s + s R(s^2), R(z) = z (2/3 + 2z/5 + 2z^2/7 + 2z^3/9) (|s| <= 0.172: the
# next term is under 1e-9 of the result), those coefficients rounded to float32
_LN_POLY = [_f32(2 / k) for k in (3, 5, 7, 9)]
_INV_LN2_PARTS = [_f32(_LOG2E), _f32(_LOG2E - _f32(_LOG2E))]  # 1 / ln 2 in two float32 parts


def _float_const(u: UOp) -> float | None:
  """The value of a float constant, or of a vector of one float constant in every lane; None for anything else."""
  if u.op is Ops.VECTORIZE and all(s is u.src[0] for s in u.src): u = u.src[0]
  return u.arg if u.op is Ops.CONST and isinstance(u.arg, float) else None


def _log2_times_ln2(srcs: list[UOp]) -> UOp | None:
  """x where the operands are log2(x) and ln 2 (Tensor.log's product), else None."""
  for lg, c in (srcs, srcs[::-1]):
    if lg.op is Ops.LOG2 and (v := _float_const(c)) is not None and abs(v - math.log(2)) < 1e-7: return lg.src[0]
  return None


def _times_log2e(u: UOp) -> tuple[UOp, bool] | None:
  """(x, negated) where `u` is x * log2(e) or x * -log2(e) (what Tensor.exp hands exp2), else None."""
  if u.op is not Ops.MUL: return None
  for x, c in (u.src, u.src[::-1]):
    if (v := _float_const(c)) is not None and abs(abs(v) - _LOG2E) < 1e-6: return x, v < 0
  return None


def reg_type(dt: DType) -> str:
  """The LLVM type a value of `dt` has in registers."""
  if dt.count > 1: return f"<{dt.count} x {reg_type(dt.scalar())}>"
  if dt == dtypes.bool: return "i1"
  if dt.is_float: return _FLOAT_TYPES[dt]
  return _INT_TYPES[dt.itemsize]


def _float_suffix(dt: DType) -> str:
  """The suffix of a float intrinsic on `dt` (f32, v16f32)."""
  sfx = _FLOAT_SUFFIX[reg_type(dt.scalar())]
  return f"v{dt.count}{sfx}" if dt.count > 1 else sfx


def mem_type(dt: DType) -> str:
  """The LLVM type a value of `dt` has in memory."""
  if dt.count > 1: return f"<{dt.count} x {mem_type(dt.scalar())}>"
  if dt == dtypes.bool: return "i8"
  if dt == dtypes.bfloat16: return "i16"
  return reg_type(dt)


def render_const(value: Any, dt: DType) -> str:
  """A constant as an LLVM literal of `reg_type(dt)` (every lane of a vector holds it)."""
  if dt.count > 1:
    sty, lit = reg_type(dt.scalar()), render_const(value, dt.scalar())
    return "<" + ", ".join([f"{sty} {lit}"] * dt.count) + ">"
  if dt == dtypes.bool: return "true" if value else "false"
  if dt.is_int:
    bits = dt.itemsize * 8
    v = int(value) & ((1 << bits) - 1)
    return str(v - (1 << bits) if v >= 1 << (bits - 1) else v)
  if dt == dtypes.float16: return "0xH" + struct.pack(">e", float(value)).hex().upper()
  # float and double literals are written as the double with the same value (exact for floats)
  return "0x" + struct.pack(">d", float(value)).hex().upper()


# the bfloat16 helpers every module carries (unused ones are removed by the optimiser); bf16_round's NaNs as
# plugrad.dtype.f32_to_bf16's
_PRELUDE = """\
define internal float @bf16_round(float %x) alwaysinline {
  %b = bitcast float %x to i32
  %hi = lshr i32 %b, 16
  %lsb = and i32 %hi, 1
  %r0 = add i32 %b, 32767
  %r1 = add i32 %r0, %lsb
  %r2 = and i32 %r1, -65536
  %isnan = fcmp uno float %x, 0.0
  %low = and i32 %b, 65535
  %inexact = icmp ne i32 %low, 0
  %nan = and i1 %isnan, %inexact
  %r3 = select i1 %nan, i32 2143289344, i32 %r2
  %f = bitcast i32 %r3 to float
  ret float %f
}
"""


class LLVMRenderer(Renderer):
  """Loop program -> LLVM IR for the host CPU."""

  def render(self, prog: LoopProgram) -> str:
    fn = "k_" + re.sub(r"\W", "_", prog.name)
    main = _Kernel(prog, fn, "full")
    if (cut := launch_pieces(prog, main.specials)) is not None:
      # a launch loop in pieces, each its own function with the gates on its index constants
      loop, pieces = cut
      inner = loop is not main.specials[0]  # an inner loop's piece is its bounds; the outer one's, start..end clamped
      kernels = [_Kernel(prog, f"{fn}_p{j}", "full", known=gates, bounds={loop: (lo, hi)} if inner else None)
                 for j, (lo, hi, gates) in enumerate(pieces)]
      funcs = [k.render(linkage="internal ") for k in kernels] + [_dispatch(prog, fn, pieces, clamp=not inner)]
      decls = set().union(*(k.decls for k in kernels), _DISPATCH_DECLS)
    else:
      funcs = [main.render()]
      decls = set(main.decls)
    # a symbolic outer launch size ("outer_dim" names its dimension) comes from the launch's global size
    meta: dict[str, Any] = {"fn": fn, "nparams": len(prog.params), "outer": main.specials[0].arg[2] if main.specials else 1,
                            "nvars": len(prog.vars), "outer_dim": main.specials[0].arg[1] if main.specials else None,
                            "splittable": bool(main.specials), "cost": prog.flops + prog.bytes_moved, "reduce_split": None}
    if (plan := reduce_split_plan(prog)) is not None:
      # a kernel with one output element: its outer reduce loop is split in pieces that write
      # partial accumulators, and a finishing function combines them and stores the result
      for mode in ("part", "fin"):
        k = _Kernel(prog, f"{fn}_{mode}", mode, plan)
        funcs.append(k.render())
        decls |= k.decls
      meta["reduce_split"] = {"part": f"{fn}_part", "fin": f"{fn}_fin", "outer": int(plan[1].src[0].arg)}
    head = [META_MARKER + json.dumps(meta, sort_keys=True), f"; {prog.name} global={prog.global_size}", ""]
    # the loop vectoriser may use the widest registers, as the lowering's own vectors do (LLVM's tuning for several
    # Intel server CPUs prefers 256 bits): on the 2-core Xeon with AVX-512, randn 1.06 -> 1.78x torch, exp 0.55 ->
    # 0.71x, log 0.45 -> 0.55x at 1024x1024, the rest alike
    tail = sorted(decls) + ["", 'attributes #0 = { nounwind "frame-pointer"="none" "prefer-vector-width"="512" }', "",
                            '!0 = distinct !{!0, !1}', '!1 = !{!"llvm.loop.vectorize.enable", i1 false}',
                            '!2 = distinct !{!2, !1, !3}', '!3 = !{!"llvm.loop.unroll.disable"}',
                            '!4 = !{!"branch_weights", i32 1, i32 1000}', ""]  # !4: a branch rarely taken
    return "\n".join(head + [_PRELUDE] + funcs + tail)


#: A launch loop whose gates compare its index with constants (the inputs of a cat, a pad at its ends) is cut at
#: those constants into pieces, each a loop over a function in which every such gate is a constant: no branch per
#: element, and a body the loop vectoriser takes (an update m = 0.9 m + 0.1 cat(32 parts) of 100k float32 under
#: TinyJit: 196 -> 15 us, against 10 us for the same update without a cat; (4096, 512) and (4096, 509) side by side
#: along the rows, then x2: 0.93 -> 0.48 ms). Only a loop of at most MAX_LAUNCH_PIECES pieces (each is code to compile)
#: in a kernel of at least MIN_PIECES_WORK elements (below, the gates cost less than compiling the copies).
MAX_LAUNCH_PIECES = 64
MIN_PIECES_WORK = 1 << 12
#: Where an inner loop is cut, the outer loop's iterations go through the pieces in blocks of about this many bytes
#: of output (4-byte elements assumed), which stay in a core's first caches between one piece and the next
INNER_PIECES_BLOCK_BYTES = 32 << 10


def launch_pieces(prog: LoopProgram, specials: list[UOp]) -> tuple[UOp, list[tuple[int, int, dict[UOp, bool]]]] | None:
  """A launch loop whose index is compared with constants (the outermost such, outer loops first), its pieces
  [lo, hi) and each one's values of those comparisons; None where no comparison cuts a loop, or the cut does not
  pay."""
  if not specials or math.prod(prog.global_size) < MIN_PIECES_WORK: return None
  # an inner loop only of an elementwise kernel (a cat along a row): its pieces copy the body whole, which a kernel
  # with reduce loops pays for in compile time (a padded convolution's borders and interior: beautiful_mnist's
  # first step compiled in 5.7 s instead of 3.9, and ran no faster)
  elementwise = not any(u.op is Ops.RANGE for u in prog.uops)
  for g in specials if elementwise else specials[:1]:
    if g.src: continue  # a symbolic size: no constant bounds
    size = g.arg[2]
    cmps: dict[UOp, int] = {}  # comparison -> where it turns (g < c: true below c; c < g: true from c + 1)
    for u in prog.uops:
      if u.op is not Ops.CMPLT or u.src[0].op is u.src[1].op: continue
      if u.src[0] is g and u.src[1].op is Ops.CONST: cmps[u] = u.src[1].arg
      elif u.src[1] is g and u.src[0].op is Ops.CONST: cmps[u] = u.src[0].arg + 1
    cuts = sorted({c for c in cmps.values() if 0 < c < size})
    if not cuts: continue
    if len(cuts) >= MAX_LAUNCH_PIECES: return None
    bounds = [0, *cuts, size]
    return g, [(lo, hi, {u: (hi <= c) if u.src[0] is g else (lo >= c) for u, c in cmps.items()})
               for lo, hi in zip(bounds, bounds[1:])]
  return None


def _kernel_args(prog: LoopProgram) -> list[str]:
  """A kernel function's arguments before its launch range: the buffers, then the Variables' values. Only element
  alignment is promised: Tensor.from_numpy hands kernels numpy's memory, aligned to the element only (for loads,
  the unaligned vector moves cost the same as the aligned ones)."""
  return [f"ptr noalias align {p.dtype.itemsize} %d{p.index}" for p in prog.params] + \
    [f"i32 %var_{v.arg[0]}" for v in prog.vars]


_DISPATCH_DECLS = {"declare i64 @llvm.smax.i64(i64, i64)", "declare i64 @llvm.smin.i64(i64, i64)"}


def _dispatch(prog: LoopProgram, fn: str, pieces: list[tuple[int, int, dict[UOp, bool]]], clamp: bool) -> str:
  """The kernel's function when a launch loop is in pieces: each piece's function over start..end of the outer loop,
  or (`clamp`: the outer loop is the one cut) over the part of start..end that falls in the piece."""
  args = _kernel_args(prog)
  passed = ", ".join(f"{a.split()[0]} {a.split()[-1]}" for a in args)
  lines = [f"define void @{fn}({', '.join(args + ['i64 %start', 'i64 %end'])}) #0 {{", "entry:"]
  if not clamp:
    # an inner loop's pieces, one after the other over each block of the outer loop's iterations small enough to stay
    # in the core's first caches: the output's lines are written whole before the next block (piece after piece over
    # all of start..end wrote each line's parts a pass apart: a (4096, 1021) cat along its rows at half the speed)
    block = max(1, INNER_PIECES_BLOCK_BYTES // max(1, math.prod(prog.global_size[:-1]) * 4))
    lines += ["  %any = icmp slt i64 %start, %end", "  br i1 %any, label %blk, label %done", "blk:",
              "  %r = phi i64 [%start, %entry], [%rn, %blk]", f"  %rb = add i64 %r, {block}",
              "  %rn = call i64 @llvm.smin.i64(i64 %rb, i64 %end)"]
    lines += [f"  call void @{fn}_p{j}({passed}, i64 %r, i64 %rn)" for j in range(len(pieces))]
    return "\n".join(lines + ["  %more = icmp slt i64 %rn, %end", "  br i1 %more, label %blk, label %done", "done:",
                              "  ret void", "}", ""])
  lines.append("  br label %p0")
  for j, (lo, hi, _) in enumerate(pieces):
    lines += [f"p{j}:", f"  %lo{j} = call i64 @llvm.smax.i64(i64 %start, i64 {lo})",
              f"  %hi{j} = call i64 @llvm.smin.i64(i64 %end, i64 {hi})", f"  %ok{j} = icmp slt i64 %lo{j}, %hi{j}",
              f"  br i1 %ok{j}, label %run{j}, label %p{j + 1}", f"run{j}:",
              f"  call void @{fn}_p{j}({passed}, i64 %lo{j}, i64 %hi{j})", f"  br label %p{j + 1}"]
  lines += [f"p{len(pieces)}:", "  ret void", "}", ""]
  return "\n".join(lines)


def reduce_split_plan(prog: LoopProgram) -> tuple[UOp, UOp, UOp] | None:
  """(accumulator, its outermost RANGE, that RANGE's ENDRANGE) when the kernel computes one
  output element from one top-level reduction whose outer loop can be cut in independent pieces;
  None otherwise."""
  if any(u.op is Ops.SPECIAL for u in prog.uops): return None
  depth, top_accs, found = 0, [], None
  uops = prog.uops
  for i, u in enumerate(uops):
    if u.op is Ops.ENDRANGE:
      depth -= 1
      if found is not None and u.src[0] is found[1]: found = (found[0], found[1], u)
    if depth == 0 and u.op is Ops.DEFINE_ACC:
      top_accs.append(u)
      nxt = uops[i + 1] if i + 1 < len(uops) else None
      if nxt is not None and nxt.op is Ops.RANGE and nxt.src[0].op is Ops.CONST and nxt.src[0].arg >= 2: found = (u, nxt, None)
    if depth == 0 and u.op is Ops.RANGE and found is not None and u is not found[1]: return None  # a second top-level loop
    if u.op is Ops.RANGE: depth += 1
  if found is None or found[2] is None or len(top_accs) != 1: return None
  acc = found[0]
  if acc.dtype.itemsize > 8: return None  # a vector accumulator would overrun the runtime's 8-byte partial slots
  ops = {u.arg for u in uops if u.op is Ops.ACCUMULATE and u.src[0] is acc}
  if len(ops) != 1: return None
  return found


class _Kernel:
  """The state of rendering one kernel: emitted lines, value names, open blocks."""

  def __init__(self, prog: LoopProgram, fn: str, mode: str = "full", plan: tuple[UOp, UOp, UOp] | None = None,
               known: dict[UOp, bool] | None = None, bounds: dict[UOp, tuple[int, int]] | None = None):
    self.prog, self.fn, self.mode, self.plan = prog, fn, mode, plan
    self.known = known or {}  # comparisons whose value is known in this function (a piece of a launch loop)
    self.bounds = bounds or {}  # inner launch loops this function runs over part of: their lo..hi
    self.lines: list[str] = []
    self.allocas: list[str] = []
    self.decls: set[str] = set()
    self.vals: dict[UOp, str] = {}
    self.block = "entry"
    self.tmp = 0
    self.nlabel = 0
    self.uses: dict[UOp, list[UOp]] = {u: [] for u in prog.uops}
    for u in prog.uops:
      for s in u.src: self.uses[s].append(u)
    self.addr_only = self._address_only()
    self.fma_muls, self.reduce_adds = self._reduction_terms(prog)
    loops, outer = self._loop_nest()
    # innermost loops that update several accumulators or a vector one (the lowering tiled the output into registers,
    # as for a matmul): vectorising such a loop along its own variable would need a vector per accumulator and
    # gathers for the strided operand; the lowering's vectors (or, on scalar copies, the SLP vectoriser) already run
    # across the outputs
    self.tiled_loops = {r for r, accs in loops.items() if r is not None and r not in outer and
                        sum(4 if a.dtype.count > 1 else 1 for a in accs) >= 4}
    self.chained, self.fused = self._chained_terms(loops)
    # a register tile already as wide as the plan made it: unrolled further, LLVM's scheduler hoisted the copies'
    # loads above each other's FMAs and spilled (5x5, 32 channels at 28x28, 2 vectors by 12 outputs: unrolled 5
    # times, 9.3 ms; 7.9 ms not unrolled)
    self.wide_tiles = {r for r, accs in loops.items() if r is not None and len(accs) >= WIDE_TILE_ACCUMULATORS}
    self.intervals: dict[UOp, tuple[float, float]] = {}  # `interval`'s answers
    specials = sorted((u for u in prog.uops if u.op is Ops.SPECIAL), key=lambda u: -u.arg[1])
    self.upcast_copies = self._upcast_copies()
    self.specials = specials
    self.specials_open = False

  # ---------------------------------------------------------------- helpers

  def _reduction_terms(self, prog: LoopProgram) -> tuple[set[UOp], set[UOp]]:
    """(multiplies, adds) that are part of a float sum: the terms a float ACCUMULATE adds, through the chain of
    adds an unrolled reduce axis makes (a 3x3 convolution adds nine products per iteration). The adds may be
    reassociated and each multiply contracted into an FMA with them, as the ACCUMULATE's own add may."""
    muls: set[UOp] = set()
    adds: set[UOp] = set()
    for u in prog.uops:
      if u.op is not Ops.ACCUMULATE or u.arg is not Ops.ADD or not u.dtype.is_float or u.dtype.scalar() == dtypes.bfloat16:
        continue
      stack = [u.src[1]]
      while stack:
        n = stack.pop()
        if len(self.uses[n]) != 1 or n.dtype != u.dtype: continue  # a value used elsewhere keeps its own rounding
        if n.op is Ops.MUL: muls.add(n)
        elif n.op is Ops.ADD:
          adds.add(n)
          stack.extend(n.src)
    return muls, adds

  def _loop_nest(self) -> tuple[dict[UOp | None, list[UOp]], set[UOp]]:
    """The ACCUMULATEs directly in each RANGE loop (None: outside every loop), and the loops with a loop inside."""
    loops: dict[UOp | None, list[UOp]] = {}
    outer: set[UOp] = set()
    open_: list[UOp] = []
    for u in self.prog.uops:
      if u.op is Ops.RANGE:
        outer.update(open_)
        open_.append(u)
        loops.setdefault(u, [])
      elif u.op is Ops.ENDRANGE: open_.pop()
      elif u.op is Ops.ACCUMULATE: loops.setdefault(open_[-1] if open_ else None, []).append(u)
    return loops, outer

  def _chained_terms(self, loops: dict[UOp | None, list[UOp]]) -> tuple[dict[UOp, list[UOp]], set[UOp]]:
    """The ACCUMULATEs that add their terms to the accumulator one by one, a product as one llvm.fmuladd (each with
    its terms, in order): those of an outer-product register tile, an innermost loop that updates
    FMA_CHAIN_ACCUMULATORS or more accumulators with products of a broadcast value. Left to DAG contraction, a
    product and its add could end up in different blocks once LLVM had threaded the branches around a padded read's
    loads, their values live across the blocks: a 3x3 convolution's input gradient, 64 channels at 8x8 padded by 2
    in 2 weight vectors by 8 outputs, 1.58 ms so and 1.22 ms chained. A dot-product tile (both operands vector loads,
    x @ W.T) measured the same or slower chained, and with fewer accumulators (a row sum's one vector) a chain would
    wait on each add in turn: there the terms stay a tree (`alu`, reassoc and contract). Second value: the adds and
    products the chains render, which are not rendered where they stand."""
    chained: dict[UOp, list[UOp]] = {}
    fused: set[UOp] = set()
    for accumulates in loops.values():
      sums = [u for u in accumulates if u.src[1] in self.fma_muls or u.src[1] in self.reduce_adds]
      if len(sums) < FMA_CHAIN_ACCUMULATORS: continue
      loop_terms: dict[UOp, list[UOp]] = {}
      adds: set[UOp] = set()
      for u in sums:
        terms, stack = [], [u.src[1]]
        while stack:
          t = stack.pop()
          if t in self.reduce_adds:
            adds.add(t)
            stack.extend(reversed(t.src))
          else: terms.append(t)
        loop_terms[u] = terms
      products = [t for terms in loop_terms.values() for t in terms if t in self.fma_muls]
      if not any(s.op is Ops.VECTORIZE and len(set(s.src)) == 1 for t in products for s in t.src): continue
      chained.update(loop_terms)
      fused |= adds | set(products)
    return chained, fused

  def _upcast_copies(self) -> bool:
    """Whether the kernel stores several elements of one buffer per iteration of its innermost launch loop: the
    lowering's copies of an upcast launch dim, scalar where vectors would only gather (each copy's x // c and x % c
    are constants). The loop vectoriser would put the loop's iterations into lanes again and gather; LLVM 22 computed
    most outputs of a 3-D stride-2 convolution's gradient wrong that way (7 iterations, indices (x + 7) // 8), so that
    loop stays scalar, as the plan meant."""
    stores = [u.src[0] for u in self.prog.uops if u.op is Ops.STORE]
    return len(stores) != len(set(stores))

  def _address_only(self) -> set[UOp]:
    """Integer ops whose value only ever feeds a LOAD/STORE index: these cannot overflow (the
    lowering picked an index type that holds every index), so they get `nsw`, which lets LLVM see
    the addresses as affine in the loop variables and vectorise the accesses."""
    addr: set[UOp] = set()
    for u in reversed(self.prog.uops):
      if u.op not in (Ops.ADD, Ops.MUL, Ops.SUB) or u.dtype not in (dtypes.int32, dtypes.int64): continue
      users = self.uses[u]
      if users and all((v.op in (Ops.LOAD, Ops.STORE) and v.src[1] is u and u not in v.src[2:]) or v in addr for v in users):
        addr.add(u)
    return addr

  def new_label(self) -> int:
    self.nlabel += 1
    return self.nlabel

  def t(self) -> str:
    self.tmp += 1
    return f"%t{self.tmp}"

  def emit(self, line: str) -> None: self.lines.append("  " + line)

  def label(self, name: str) -> None:
    self.lines.append(f"{name}:")
    self.block = name

  def op(self, text: str) -> str:
    """Emit `%tN = text` and return %tN."""
    name = self.t()
    self.emit(f"{name} = {text}")
    return name

  def intrinsic(self, name: str, ret: str, args: list[tuple[str, str]], flags: str = "") -> str:
    """A call of LLVM intrinsic `name`, declared once; its value ("" for a void one)."""
    self.decls.add(f"declare {ret} @{name}({', '.join(ty for ty, _ in args)})")
    call = f"call {flags}{ret} @{name}({', '.join(f'{ty} {v}' for ty, v in args)})"
    if ret != "void": return self.op(call)
    self.emit(call)
    return ""

  def val(self, u: UOp) -> str:
    """The LLVM operand of `u` at this point (an accumulator is read from its slot)."""
    if u.op is Ops.DEFINE_ACC: return self.op(f"load {reg_type(u.dtype)}, ptr %acc{u.arg}")
    if u.op is Ops.CONST: return render_const(u.arg, u.dtype)
    return self.vals[u]

  def bf16_round(self, x: str) -> str: return self.op(f"call float @bf16_round(float {x})")

  def index64(self, u: UOp) -> str:
    v = self.val(u)
    if u.dtype.itemsize == 8: return v
    if u.op is Ops.CONST: return str(int(u.arg))
    return self.op(f"sext {reg_type(u.dtype)} {v} to i64")

  # ---------------------------------------------------------------- loops

  def open_loop(self, name: str, ty: str, lo: str, hi: str) -> None:
    pre = self.block
    ok = self.op(f"icmp slt {ty} {lo}, {hi}")
    self.emit(f"br i1 {ok}, label %{name}.body, label %{name}.exit")
    self.label(f"{name}.body")
    self.emit(f"%{name} = phi {ty} [{lo}, %{pre}], [%{name}.next, %{name}.latch]")

  def close_loop(self, name: str, ty: str, hi: str, vectorize: bool = True, unroll: bool = True) -> None:
    self.emit(f"br label %{name}.latch")
    self.label(f"{name}.latch")
    self.emit(f"%{name}.next = add nuw nsw {ty} %{name}, 1")
    more = self.op(f"icmp slt {ty} %{name}.next, {hi}")
    # !0: not vectorised; !2: neither vectorised nor unrolled (a wide tile is in the tiled loops too)
    hint = ", !llvm.loop !2" if not unroll else "" if vectorize else ", !llvm.loop !0"
    self.emit(f"br i1 {more}, label %{name}.body, label %{name}.exit{hint}")
    self.label(f"{name}.exit")

  def open_specials(self) -> None:
    for i, s in enumerate(self.specials):
      ty = reg_type(s.dtype)
      name = f"g{s.arg[1]}"
      if i == 0:
        lo, hi = "%start", "%end"
        if ty != "i64": lo, hi = self.op(f"trunc i64 %start to {ty}"), self.op(f"trunc i64 %end to {ty}")
        self.outer_bounds = (lo, hi)
      elif s in self.bounds: lo, hi = map(str, self.bounds[s])  # this function's piece of an inner loop
      else: lo, hi = "0", self.special_size(s)
      self.open_loop(name, ty, lo, hi)
      self.vals[s] = f"%{name}"
    self.specials_open = True

  def close_specials(self) -> None:
    last = len(self.specials) - 1
    for i, s in reversed(list(enumerate(self.specials))):
      hi = self.outer_bounds[1] if i == 0 else str(self.bounds[s][1]) if s in self.bounds else self.special_size(s)
      self.close_loop(f"g{s.arg[1]}", reg_type(s.dtype), hi, vectorize=not (i == last and self.upcast_copies))

  def special_size(self, s: UOp) -> str:
    """The trip count of a launch loop: its size, or the value of its symbolic size (src[0])."""
    return self.val(s.src[0]) if s.src else str(s.arg[2])

  # ---------------------------------------------------------------- the kernel

  def render(self, linkage: str = "") -> str:
    """The function's definition (its declarations are collected in `decls`)."""
    prog = self.prog
    skipping = False
    for u in prog.uops:
      if self.mode == "fin" and u is self.plan[1]: skipping = True  # the loop ran in the pieces
      if skipping:
        skipping = not (u.op is Ops.ENDRANGE and u.src[0] is self.plan[1])
        continue
      self.render_uop(u)
      if self.mode == "part" and u.op is Ops.ENDRANGE and u.src[0] is self.plan[1]:
        acc = self.plan[0]
        self.emit(f"store {reg_type(acc.dtype)} {self.val(acc)}, ptr %partial")
        break
    if self.specials_open: self.close_specials()
    self.emit("ret void")
    args = _kernel_args(prog) + {"full": ["i64 %start", "i64 %end"],
                                 "part": ["i64 %start", "i64 %end", "ptr noalias %partial"],
                                 "fin": ["ptr noalias %partials", "i64 %nparts"]}[self.mode]
    body = [f"define {linkage}void @{self.fn}({', '.join(args)}) #0 {{", "entry:"]
    return "\n".join(body + ["  " + a for a in self.allocas] + self.lines + ["}", ""])

  def combine_partials(self, acc: UOp) -> None:
    """fin: fold the pieces' accumulators (8-byte slots, in order) into `acc`."""
    ty, op = reg_type(acc.dtype), next(u.arg for u in self.prog.uops if u.op is Ops.ACCUMULATE and u.src[0] is acc)
    self.open_loop("p", "i64", "0", "%nparts")
    slot = self.op("getelementptr inbounds i64, ptr %partials, i64 %p")
    part = self.op(f"load {ty}, ptr {slot}")
    new = self.alu_vals(op, acc.dtype, [self.val(acc), part], [acc.dtype, acc.dtype])
    self.emit(f"store {ty} {new}, ptr %acc{acc.arg}")
    self.close_loop("p", "i64", "%nparts")

  def render_uop(self, u: UOp) -> None:
    op = u.op
    if u in self.known: self.vals[u] = "true" if self.known[u] else "false"
    elif op in (Ops.AND, Ops.OR) and u.dtype == dtypes.bool and (folded := self.fold_gate(u)) is not None:
      self.vals[u] = folded
    elif op is Ops.PARAM: self.vals[u] = f"%d{u.arg[0]}"
    elif op is Ops.DEFINE_VAR: self.vals[u] = f"%var_{u.arg[0]}"
    elif op is Ops.CONST: self.vals[u] = render_const(u.arg, u.dtype)
    elif op is Ops.SPECIAL:
      if not self.specials_open: self.open_specials()
    elif op is Ops.RANGE:
      name, ty = f"r{u.arg}", reg_type(u.dtype)
      if self.mode == "part" and u is self.plan[1]:  # this piece's share of the outer reduce loop
        lo, hi = ("%start", "%end") if ty == "i64" else (self.op(f"trunc i64 %start to {ty}"), self.op(f"trunc i64 %end to {ty}"))
        self.open_loop(name, ty, lo, hi)
      else: self.open_loop(name, ty, "0", self.val(u.src[0]))
      self.vals[u] = f"%{name}"
    elif op is Ops.ENDRANGE:
      r = u.src[0]
      hi = "%end" if self.mode == "part" and r is self.plan[1] else self.val(r.src[0])
      if hi == "%end" and reg_type(r.dtype) != "i64": hi = self.op("trunc i64 %end to " + reg_type(r.dtype))
      self.close_loop(f"r{r.arg}", reg_type(r.dtype), hi, vectorize=r not in self.tiled_loops,
                      unroll=r not in self.wide_tiles)
    elif op is Ops.DEFINE_ACC:
      ty = reg_type(u.dtype)
      # the type's own alignment (64 bytes for 16 floats), which the loads and stores of it assume: an element's
      # left a vector accumulator misaligned, undefined behaviour that crashed at -O0 and miscomputed above it
      self.allocas.append(f"%acc{u.arg} = alloca {ty}")
      self.emit(f"store {ty} {self.val(u.src[0])}, ptr %acc{u.arg}")
      if self.mode == "fin" and u is self.plan[0]: self.combine_partials(u)
    elif op is Ops.ACCUMULATE:
      acc = u.src[0]
      ty = reg_type(acc.dtype)
      if (terms := self.chained.get(u)) is not None: new = self.chain_terms(self.val(acc), terms, acc.dtype)
      else: new = self.alu(u.arg, u.dtype, [acc, u.src[1]], reduce=True)
      self.emit(f"store {ty} {new}, ptr %acc{acc.arg}")
    elif op is Ops.LOAD: self.vals[u] = self.load(u)
    elif op is Ops.STORE: self.store(u)
    elif op is Ops.VECTORIZE: self.vals[u] = self.build_vector([self.val(s) for s in u.src], u.dtype)
    elif op is Ops.GEP: self.vals[u] = self.op(f"extractelement {reg_type(u.src[0].dtype)} {self.val(u.src[0])}, i32 {u.arg}")
    elif op in GroupOp.ALU:
      # a term of a chained ACCUMULATE is rendered there, fused with its add (`chain_terms`)
      if u not in self.fused: self.vals[u] = self.alu(op, u.dtype, list(u.src), node=u)
    else: raise NotImplementedError(f"the CPU renderer cannot render {op}")

  # ---------------------------------------------------------------- memory

  def _gep(self, param: UOp, idx: UOp, inbounds: bool = True) -> str:
    # not inbounds: a masked access's first element may lie outside the buffer
    kw = "inbounds " if inbounds else ""
    return self.op(f"getelementptr {kw}{mem_type(param.dtype)}, ptr {self.val(param)}, i64 {self.index64(idx)}")

  def _from_mem(self, v: str, dt: DType) -> str:
    if dt == dtypes.bool: return self.op(f"icmp ne i8 {v}, 0")
    if dt == dtypes.bfloat16:
      w = self.op(f"zext i16 {v} to i32")
      return self.op(f"bitcast i32 {self.op(f'shl i32 {w}, 16')} to float")
    return v

  def _to_mem(self, v: str, dt: DType) -> str:
    if dt == dtypes.bool: return self.op(f"zext i1 {v} to i8")
    if dt == dtypes.bfloat16:
      b = self.op(f"bitcast float {self.bf16_round(v)} to i32")
      return self.op(f"trunc i32 {self.op(f'lshr i32 {b}, 16')} to i16")
    return v

  def build_vector(self, lanes: list[str], dt: DType) -> str:
    """A `<n x T>` of the lane values (a constant vector when they are constants, a splat when they are all the
    same)."""
    ty, sty = reg_type(dt), reg_type(dt.scalar())
    if not any(v.startswith("%") for v in lanes): return "<" + ", ".join(f"{sty} {v}" for v in lanes) + ">"
    if all(v == lanes[0] for v in lanes):
      one = self.op(f"insertelement {ty} poison, {sty} {lanes[0]}, i32 0")
      return self.op(f"shufflevector {ty} {one}, {ty} poison, <{dt.count} x i32> zeroinitializer")
    if sty == "i1" and len(varying := dict.fromkeys(v for v in lanes if v not in ("true", "false"))) <= BOOL_SELECTS:
      return self.bool_vector(lanes, list(varying))
    vec = "poison"
    for k, v in enumerate(lanes): vec = self.op(f"insertelement {ty} {vec}, {sty} {v}, i32 {k}")
    return vec

  def bool_vector(self, lanes: list[str], varying: list[str]) -> str:
    """A `<n x i1>` whose lanes are constants or one of a few scalars (a padded convolution's gate per lane: the
    row's bound, known only at run time, and the column's, known per lane): each scalar selects its lanes' constant
    mask, or-ed together and with the lanes always true, so the backend builds the mask register from a few
    whole-mask operations instead of inserting lane after lane."""
    ty = f"<{len(lanes)} x i1>"
    def lanes_of(value: str) -> str:
      return "<" + ", ".join(f"i1 {'true' if v == value else 'false'}" for v in lanes) + ">"
    vec = lanes_of("true")
    for s in varying: vec = self.op(f"or {ty} {vec}, {self.op(f'select i1 {s}, {ty} {lanes_of(s)}, {ty} zeroinitializer')}")
    return vec

  def lane(self, v: str, dt: DType, k: int) -> str:
    return self.op(f"extractelement {reg_type(dt)} {v}, i32 {k}")

  def _load_value(self, param: UOp, idx: UOp, dt: DType) -> str:
    """The load itself: a scalar, or n consecutive elements as one vector."""
    sdt, align = dt.scalar(), max(1, param.dtype.itemsize)
    ptr = self._gep(param, idx)
    if dt.count == 1 or sdt == dtypes.bool:  # bool vectors: load the bytes, compare with 0
      v = self.op(f"load {mem_type(dt)}, ptr {ptr}, align {align}")
      return self.op(f"icmp ne {mem_type(dt)} {v}, zeroinitializer") if dt.count > 1 else self._from_mem(v, dt)
    if mem_type(sdt) == reg_type(sdt): return self.op(f"load {mem_type(dt)}, ptr {ptr}, align {align}")
    lanes = []  # bfloat16: lane by lane
    for k in range(dt.count):
      p = self.op(f"getelementptr inbounds {mem_type(sdt)}, ptr {ptr}, i64 {k}")
      lanes.append(self._from_mem(self.op(f"load {mem_type(sdt)}, ptr {p}, align {align}"), sdt))
    return self.build_vector(lanes, dt)

  def masked_load(self, u: UOp) -> str:
    """A vector LOAD with a gate per lane: llvm.masked.load, which reads no masked-off lane, so the address of
    the first element may lie outside the buffer (a GEP without inbounds)."""
    param, dt = u.src[0], u.dtype
    ty, align = reg_type(dt), max(1, param.dtype.itemsize)
    ptr = self._gep(param, u.src[1], inbounds=False)
    sty = reg_type(dt.scalar())
    name = f"llvm.masked.load.v{dt.count}{_FLOAT_SUFFIX.get(sty, sty)}.p0"  # bool and bfloat16: vectorize never asks
    return self.intrinsic(name, ty, [("ptr", ptr), ("i32", str(align)), (reg_type(u.src[2].dtype), self.val(u.src[2])),
                                     (ty, "zeroinitializer")])

  def fold_gate(self, u: UOp) -> str | None:
    """An AND or OR of bools one of which is a known constant: its value without an instruction (None: not known)."""
    a, b = self.val(u.src[0]), self.val(u.src[1])
    absorbing, neutral = ("false", "true") if u.op is Ops.AND else ("true", "false")
    if absorbing in (a, b): return absorbing
    if a == neutral: return b
    return a if b == neutral else None

  def load(self, u: UOp) -> str:
    param, idx = u.src[0], u.src[1]
    if len(u.src) == 2: return self._load_value(param, idx, u.dtype)
    if u.src[2].dtype.count > 1: return self.masked_load(u)
    gate = self.val(u.src[2])
    if gate == "true": return self._load_value(param, idx, u.dtype)
    if gate == "false": return render_const(0, u.dtype) if u.dtype.count == 1 else "zeroinitializer"
    n = self.new_label()
    pre = self.block
    self.emit(f"br i1 {gate}, label %ld{n}.yes, label %ld{n}.done")
    self.label(f"ld{n}.yes")
    v = self._load_value(param, idx, u.dtype)
    yes = self.block
    self.emit(f"br label %ld{n}.done")
    self.label(f"ld{n}.done")
    zero = render_const(0, u.dtype) if u.dtype.count == 1 else "zeroinitializer"
    return self.op(f"phi {reg_type(u.dtype)} [{v}, %{yes}], [{zero}, %{pre}]")

  def masked_store(self, u: UOp) -> None:
    """A vector STORE with a gate per lane (the lanes past the end of a row that the vector width does not divide):
    llvm.masked.store, which writes no masked-off lane; bool and bfloat16, whose memory type differs from their
    register type, lane by lane behind a branch each."""
    param, idx, value, gate = u.src
    sdt, vdt = param.dtype, value.dtype
    ty, align = reg_type(vdt), max(1, sdt.itemsize)
    ptr = self._gep(param, idx, inbounds=False)
    if mem_type(sdt) != reg_type(sdt):
      for k in range(vdt.count):
        n = self.new_label()
        self.emit(f"br i1 {self.lane(self.val(gate), gate.dtype, k)}, label %st{n}.yes, label %st{n}.done")
        self.label(f"st{n}.yes")
        p = self.op(f"getelementptr {mem_type(sdt)}, ptr {ptr}, i64 {k}")
        self.emit(f"store {mem_type(sdt)} {self._to_mem(self.lane(self.val(value), vdt, k), sdt)}, ptr {p}, align {align}")
        self.emit(f"br label %st{n}.done")
        self.label(f"st{n}.done")
      return
    self.intrinsic(f"llvm.masked.store.v{vdt.count}{_FLOAT_SUFFIX.get(reg_type(sdt), reg_type(sdt))}.p0", "void",
                   [(ty, self.val(value)), ("ptr", ptr), ("i32", str(align)), (reg_type(gate.dtype), self.val(gate))])

  def store(self, u: UOp) -> None:
    param, idx, value = u.src[0], u.src[1], u.src[2]
    vdt, sdt = value.dtype, param.dtype
    mt, align = mem_type(sdt), max(1, sdt.itemsize)
    if len(u.src) > 3 and u.src[3].dtype.count > 1: return self.masked_store(u)
    if len(u.src) > 3 and (gate := self.val(u.src[3])) in ("true", "false"):
      if gate == "false": return None
      u = u.replace(src=u.src[:3])
    n = self.new_label()
    if len(u.src) > 3:
      self.emit(f"br i1 {self.val(u.src[3])}, label %st{n}.yes, label %st{n}.done")
      self.label(f"st{n}.yes")
    v, ptr = self.val(value), self._gep(param, idx)
    if vdt.count == 1: self.emit(f"store {mt} {self._to_mem(v, sdt)}, ptr {ptr}, align {align}")
    elif sdt == dtypes.bool:
      self.emit(f"store {mem_type(vdt)} {self.op(f'zext {reg_type(vdt)} {v} to {mem_type(vdt)}')}, ptr {ptr}, align 1")
    elif mt == reg_type(sdt): self.emit(f"store {mem_type(vdt)} {v}, ptr {ptr}, align {align}")
    else:  # bfloat16: lane by lane
      for k in range(vdt.count):
        p = self.op(f"getelementptr inbounds {mt}, ptr {ptr}, i64 {k}")
        self.emit(f"store {mt} {self._to_mem(self.lane(v, vdt, k), sdt)}, ptr {p}, align {align}")
    if len(u.src) > 3:
      self.emit(f"br label %st{n}.done")
      self.label(f"st{n}.done")

  # ---------------------------------------------------------------- arithmetic

  def alu(self, op: Ops, dt: DType, srcs: list[UOp], node: UOp | None = None, reduce: bool = False) -> str:
    if op in _WIDENED_MATH and dt.scalar() in (dtypes.float16, dtypes.bfloat16):
      # in float32, rounded once (torch's opmath): LLVM's half sin called libm element by element (1M: 7.6 ms, 0.15 ms
      # this way), and its half sqrt, exp2 and log2 converted each element on its own (0.8-1.1 ms)
      wide = dtypes.float32.vec(dt.count) if dt.count > 1 else dtypes.float32
      x = self.alu_vals(Ops.CAST, wide, [self.val(srcs[0])], [srcs[0].dtype])
      return self.alu_vals(Ops.CAST, dt, [self.float32_math(op, x, wide, srcs[0])], [wide])
    if op is Ops.EXP2 and dt.scalar() == dtypes.float32 and (exp := _times_log2e(srcs[0])) is not None:
      # Tensor.exp's exp2(x log2 e): e**x from x itself, so the rounding of the product (|x| ulps of error at
      # exp(80): 60 ulp) never reaches the result
      return self.exp_f32(self.val(exp[0]), reg_type(dt), negate=exp[1])
    if op is Ops.MUL and dt.scalar() == dtypes.float32 and (ln := _log2_times_ln2(srcs)) is not None:
      # Tensor.log's log2(x) ln 2: ln x directly, within an ulp where the product of the two rounded values was not
      return self.log_f32(self.val(ln), reg_type(dt))
    if op in (Ops.SIN, Ops.COS) and dt.scalar() == dtypes.float32:
      return self.float32_math(op, self.val(srcs[0]), dt, srcs[0])
    return self.alu_vals(op, dt, [self.val(s) for s in srcs], [s.dtype for s in srcs], node,
                         reduce or node in self.reduce_adds)

  def float32_math(self, op: Ops, x: str, dt: DType, src: UOp) -> str:
    """`op` (_WIDENED_MATH) of the float32 value `x` of `src`: sin and cos by their interval, the rest as float_alu
    renders them (exp2 and log2 inline)."""
    ty = reg_type(dt)
    if op in (Ops.SIN, Ops.COS):
      inside = max(map(abs, self.interval(src))) <= SIN_FAST_LIMIT
      return (self.sin_f32 if inside else self.sin_f32_checked)(x, ty, op is Ops.COS)
    return self.float_alu(op, ty, [x], sfx=_float_suffix(dt))

  def chain_terms(self, acc: str, terms: list[UOp], dt: DType) -> str:
    """`acc` plus each term in turn, a product as one llvm.fmuladd (reassociable, like the tree's adds)."""
    ty = reg_type(dt)
    sfx = _float_suffix(dt)
    for t in terms:
      if t in self.fused:
        args = [(ty, self.val(t.src[0])), (ty, self.val(t.src[1])), (ty, acc)]
        acc = self.intrinsic(f"llvm.fmuladd.{sfx}", ty, args, flags="reassoc contract ")
      else: acc = self.op(f"fadd reassoc contract {ty} {acc}, {self.val(t)}")
    return acc

  def interval(self, u: UOp) -> tuple[float, float]:
    """Bounds of a float node's value, from constants, integer casts and arithmetic on them (infinite: unknown)."""
    if (b := self.intervals.get(u)) is not None: return b
    unknown = (-math.inf, math.inf)
    if u.op is Ops.CONST: b = (float(u.arg), float(u.arg)) if not math.isnan(float(u.arg)) else unknown
    elif u.op is Ops.CAST and (sdt := u.src[0].dtype) is not None and sdt.is_float: b = self.interval(u.src[0])
    elif u.op is Ops.CAST and sdt is not None and sdt != dtypes.bool: b = (float(u.src[0].vmin), float(u.src[0].vmax))
    elif u.op in INTERVAL_OPS: b = interval_alu(u.op, [self.interval(x) for x in u.src])
    elif u.op is Ops.VECTORIZE: b = (min(self.interval(x)[0] for x in u.src), max(self.interval(x)[1] for x in u.src))
    elif u.op is Ops.GEP: b = self.interval(u.src[0])
    else: b = unknown
    if any(math.isnan(v) for v in b): b = unknown  # inf - inf, 0 * inf
    self.intervals[u] = b
    return b

  def sin_f32(self, x: str, ty: str, cos: bool = False) -> str:
    """sin (or `cos`) of a float (or vector of floats) known to lie within +-SIN_FAST_LIMIT, inline (see _SIN_POLY):
    cos x is sin x a quarter turn on, the same reduction with its quadrant one further."""
    _, fdt, idt, ity, bty = _f32_types(ty)
    sfx = _float_suffix(fdt)

    def f(v: float) -> str: return render_const(_f32(v), fdt)

    def fma(a: str, b: str, c: str) -> str: return self.intrinsic(f"llvm.fma.{sfx}", ty, [(ty, a), (ty, b), (ty, c)])
    q = self.intrinsic(f"llvm.rint.{sfx}", ty, [(ty, self.op(f"fmul {ty} {x}, {f(2 / math.pi)}"))])
    nq = self.op(f"fneg {ty} {q}")
    r = x
    for part in _PI_2_PARTS: r = fma(nq, f(part), r)
    r2 = self.op(f"fmul {ty} {r}, {r}")

    def poly(coefs: list[float]) -> str:
      p = f(coefs[-1])
      for c in reversed(coefs[:-1]): p = fma(p, r2, f(c))
      return p
    sin_r = fma(self.op(f"fmul {ty} {r}, {r2}"), poly(_SIN_POLY), r)
    cos_r = fma(self.op(f"fmul {ty} {r2}, {r2}"), poly(_COS_POLY), fma(r2, f(-0.5), f(1.0)))
    qi = self.op(f"fptosi {ty} {q} to {ity}")
    if cos: qi = self.op(f"add {ity} {qi}, {render_const(1, idt)}")
    odd = self.op(f"icmp ne {ity} {self.op(f'and {ity} {qi}, {render_const(1, idt)}')}, {render_const(0, idt)}")
    neg = self.op(f"icmp ne {ity} {self.op(f'and {ity} {qi}, {render_const(2, idt)}')}, {render_const(0, idt)}")
    v = self.op(f"select {bty} {odd}, {ty} {cos_r}, {ty} {sin_r}")
    v = self.op(f"select {bty} {neg}, {ty} {self.op(f'fneg {ty} {v}')}, {ty} {v}")
    if cos: return v
    # sin(-0.0) is -0.0: the polynomial's sum would give +0.0
    return self.op(f"select {bty} {self.op(f'fcmp oeq {ty} {x}, {f(0.0)}')}, {ty} {x}, {ty} {v}")

  def sin_f32_checked(self, x: str, ty: str, cos: bool = False) -> str:
    """sin (or `cos`) of a float (or vector of floats) of unknown bounds: the inline polynomial (`sin_f32`) for every
    lane, and, only when some lane lies beyond +-SIN_FAST_LIMIT or is not finite, LLVM's (libm) for those lanes behind
    a branch. Values from memory (x.sin(), the angles of positional encodings) are almost always within the limit:
    2**20 normal floats took 3.1 ms through libm, lane by lane."""
    lanes, fdt, _, _, bty = _f32_types(ty)
    sfx = _float_suffix(fdt)
    far = self.op(f"fcmp ugt {ty} {self.intrinsic(f'llvm.fabs.{sfx}', ty, [(ty, x)])}, "
                  f"{render_const(SIN_FAST_LIMIT, fdt)}")  # unordered: NaN is far too
    # far lanes take 0 into the polynomial (never an out-of-range conversion); their value comes from libm
    fast = self.sin_f32(self.op(f"select {bty} {far}, {ty} {render_const(0.0, fdt)}, {ty} {x}"), ty, cos)
    any_far = far if lanes == 1 else \
        self.op(f"icmp ne i{lanes} {self.op(f'bitcast {bty} {far} to i{lanes}')}, 0")
    n = self.new_label()
    pre = self.block
    self.emit(f"br i1 {any_far}, label %sin{n}.far, label %sin{n}.done, !prof !4")
    self.label(f"sin{n}.far")
    exact = self.intrinsic(f"llvm.{'cos' if cos else 'sin'}.{sfx}", ty, [(ty, x)])
    mixed = self.op(f"select {bty} {far}, {ty} {exact}, {ty} {fast}")
    far_end = self.block
    self.emit(f"br label %sin{n}.done")
    self.label(f"sin{n}.done")
    return self.op(f"phi {ty} [{fast}, %{pre}], [{mixed}, %{far_end}]")

  def alu_vals(self, op: Ops, dt: DType, vals: list[str], src_dtypes: list[DType], node: UOp | None = None,
               reduce: bool = False) -> str:
    sdt = src_dtypes[0]
    if dt.count > 1 or sdt.count > 1:
      if not self.vector_native(op, dt, sdt):  # lane by lane, with the scalar code
        lanes = [self.alu_vals(op, dt.scalar(), [self.lane(v, d, k) for v, d in zip(vals, src_dtypes)],
                               [d.scalar() for d in src_dtypes], None, reduce) for k in range(dt.count)]
        return self.build_vector(lanes, dt)
      if op is Ops.WHERE: return self.op(f"select {reg_type(sdt)} {vals[0]}, {reg_type(dt)} {vals[1]}, {reg_type(dt)} {vals[2]}")
      if sdt.scalar() == dtypes.bool: return self.bool_alu(op, vals, sdt.count)
      if sdt.is_float:
        return self.float_alu(op, reg_type(sdt), vals, reduce=reduce, contract=node in self.fma_muls,
                              sfx=_float_suffix(sdt))
      return self.int_alu(op, sdt, vals, nsw=False, src_dtypes=src_dtypes)
    if op is Ops.CAST: return self.cast(vals[0], sdt, dt)
    if op is Ops.BITCAST: return self.bitcast(vals[0], sdt, dt)
    if op is Ops.WHERE: return self.op(f"select i1 {vals[0]}, {reg_type(dt)} {vals[1]}, {reg_type(dt)} {vals[2]}")
    if sdt == dtypes.bool: return self.bool_alu(op, vals)
    if sdt.is_float:
      out = self.float_alu(op, reg_type(sdt), vals, reduce=reduce, contract=node in self.fma_muls)
      return self.bf16_round(out) if dt == dtypes.bfloat16 else out
    return self.int_alu(op, sdt, vals, nsw=node in self.addr_only, src_dtypes=src_dtypes)

  @staticmethod
  def vector_native(op: Ops, dt: DType, sdt: DType) -> bool:
    """Whether a vector op is one LLVM vector instruction with the scalar op's exact semantics."""
    if op is Ops.WHERE: return dt.scalar() not in (dtypes.bool, dtypes.bfloat16)
    if sdt.scalar() == dtypes.bool: return op in _BOOL_OPS or op in _BOOL_CMP or op is Ops.NEG  # a gate's lanes at once
    if sdt.scalar() == dtypes.bfloat16: return False
    if op in (Ops.EXP2, Ops.LOG2): return sdt.scalar() == dtypes.float32  # exp2_f32, log2_f32: vectors too
    if sdt.is_float: return op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.NEG, Ops.MAX, Ops.MIN, Ops.SQRT,
                                   Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)
    return op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)

  def bool_alu(self, op: Ops, v: list[str], lanes: int = 1) -> str:
    """`op` on bools (i1), or on vectors of `lanes` bools."""
    ty = "i1" if lanes == 1 else f"<{lanes} x i1>"
    if op in _BOOL_OPS: return self.op(f"{_BOOL_OPS[op]} {ty} {v[0]}, {v[1]}")
    if op is Ops.NEG:
      ones = "true" if lanes == 1 else self.build_vector(["true"] * lanes, dtypes.bool.vec(lanes))
      return self.op(f"xor {ty} {v[0]}, {ones}")
    if op in _BOOL_CMP: return self.op(f"icmp {_BOOL_CMP[op]} {ty} {v[0]}, {v[1]}")
    if op is Ops.TRUNC: return v[0]
    raise NotImplementedError(f"the CPU renderer has no {op} for bool")

  def float_alu(self, op: Ops, ty: str, v: list[str], reduce: bool = False, contract: bool = False,
                sfx: str | None = None) -> str:
    sfx = sfx or _FLOAT_SUFFIX[ty]
    flags = "reassoc contract " if reduce else ("contract " if contract else "")
    binary = {Ops.ADD: "fadd", Ops.SUB: "fsub", Ops.MUL: "fmul", Ops.FDIV: "fdiv"}
    if op in binary: return self.op(f"{binary[op]} {flags}{ty} {v[0]}, {v[1]}")
    if op is Ops.EXP2 and (ty == "float" or ty.endswith(" x float>")): return self.exp2_f32(v[0], ty, sfx)
    if op is Ops.LOG2 and (ty == "float" or ty.endswith(" x float>")): return self.log2_f32(v[0], ty)
    unary = {Ops.SQRT: "sqrt", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.COS: "cos", Ops.TRUNC: "trunc"}
    if op in unary: return self.intrinsic(f"llvm.{unary[op]}.{sfx}", ty, [(ty, v[0])])
    if op is Ops.NEG: return self.op(f"fneg {ty} {v[0]}")
    if op is Ops.RECIP: return self.op(f"fdiv {ty} {render_const(1.0, dtypes.float32 if ty != 'half' else dtypes.float16)}, {v[0]}")
    if op in (Ops.MAX, Ops.MIN):
      name = "maximum" if op is Ops.MAX else "minimum"
      return self.intrinsic(f"llvm.{name}.{sfx}", ty, [(ty, v[0]), (ty, v[1])], flags="nsz ")
    cmp = {Ops.CMPLT: "olt", Ops.CMPNE: "une", Ops.CMPEQ: "oeq"}
    if op in cmp: return self.op(f"fcmp {cmp[op]} {ty} {v[0]}, {v[1]}")
    # alu: float IDIV is trunc(a / b) and MOD is C's fmod, which LLVM's frem is
    if op is Ops.IDIV: return self.intrinsic(f"llvm.trunc.{sfx}", ty, [(ty, self.op(f"fdiv {ty} {v[0]}, {v[1]}"))])
    if op is Ops.MOD: return self.op(f"frem {ty} {v[0]}, {v[1]}")
    raise NotImplementedError(f"the CPU renderer has no {op} for floats")

  def exp2_f32(self, x: str, ty: str = "float", sfx: str = "f32") -> str:
    """2**x for a float, inline: LLVM's exp2 is a call into libm per element, which the loop vectoriser
    cannot vectorise (softmax spent most of its time there). x = n + f with n = rint(x), |f| <= 1/2;
    2**f is the degree-7 Taylor polynomial of e**(f ln 2) (truncation 5e-9, under half an ulp), and
    2**n is applied as two exponent-field scalings 2**(n//2) * 2**(n - n//2) so that results in the
    subnormal range round once; x is clamped to [-160, 160] first (beyond it the result is 0 or inf
    anyway) and NaN gives NaN. `ty` is float or a vector of floats (`sfx` its intrinsic suffix)."""
    c = self.clamp_f32(x, ty, sfx, 160.0)
    n = self.intrinsic(f"llvm.rint.{sfx}", ty, [(ty, c)])
    return self.times_pow2(x, self.poly_f32(self.op(f"fsub {ty} {c}, {n}"), _EXP2_POLY, ty, sfx), n, ty)

  def exp_f32(self, x: str, ty: str, negate: bool = False) -> str:
    """e**x (e**-x with `negate`) for a float or a vector of floats, inline: as `exp2_f32`, the reduction to
    |r| <= ln 2 / 2 taken from x itself in two parts of ln 2 (see _LN2_PARTS), so the result is within about an ulp
    where exp2(x log2 e) of the rounded product was off by up to |x| ulps. x is clamped to [-111, 111] (e**111 is
    inf in float32, e**-111 is 0)."""
    _, fdt, _, _, _ = _f32_types(ty)
    sfx = _float_suffix(fdt)
    if negate: x = self.op(f"fneg {ty} {x}")
    c = self.clamp_f32(x, ty, sfx, 111.0)
    n = self.intrinsic(f"llvm.rint.{sfx}", ty, [(ty, self.op(f"fmul {ty} {c}, {render_const(_f32(_LOG2E), fdt)}"))])
    nn = self.op(f"fneg {ty} {n}")
    r = c
    for part in _LN2_PARTS: r = self.intrinsic(f"llvm.fma.{sfx}", ty, [(ty, nn), (ty, render_const(part, fdt)), (ty, r)])
    return self.times_pow2(x, self.poly_f32(r, _EXP_POLY, ty, sfx), n, ty)

  def clamp_f32(self, x: str, ty: str, sfx: str, limit: float) -> str:
    """x clamped to [-limit, limit]; NaN becomes a bound (maxnum and minnum return the other operand): `times_pow2`
    gives NaN back."""
    _, fdt, _, _, _ = _f32_types(ty)
    c = self.intrinsic(f"llvm.maxnum.{sfx}", ty, [(ty, x), (ty, render_const(-limit, fdt))])
    return self.intrinsic(f"llvm.minnum.{sfx}", ty, [(ty, c), (ty, render_const(limit, fdt))])

  def poly_f32(self, f: str, coefs: list[float], ty: str, sfx: str) -> str:
    """The polynomial with coefficients `coefs` (lowest degree first) at f, by Horner's rule in FMAs."""
    _, fdt, _, _, _ = _f32_types(ty)
    p = render_const(coefs[-1], fdt)
    for coef in reversed(coefs[:-1]):
      p = self.intrinsic(f"llvm.fma.{sfx}", ty, [(ty, p), (ty, f), (ty, render_const(coef, fdt))])
    return p

  def times_pow2(self, x: str, p: str, n: str, ty: str) -> str:
    """p * 2**n (n a whole float in [-160, 160]) as two exponent-field scalings 2**(n//2) * 2**(n - n//2), so that
    results in the subnormal range round once; NaN where the argument x is NaN. Not LLVM's ldexp, one vscalefps on
    AVX-512 (a 1024x1024 exp 10% faster): there every underflowing result takes a microcode assist, and the exp of
    -inf (a causal mask's) ran 15x slower, a tiny LM's TinyJit step 3.7 -> 4.8 ms on the 2-core Xeon."""
    lanes, _, idt, ity, bty = _f32_types(ty)
    ni = self.op(f"fptosi {ty} {n} to {ity}")
    n1 = self.op(f"ashr {ity} {ni}, {render_const(1, idt)}")
    n2 = self.op(f"sub {ity} {ni}, {n1}")
    for k in (n1, n2):
      biased = self.op(f"add {ity} {k}, {render_const(127, idt)}")
      scale = self.op(f"bitcast {ity} {self.op(f'shl {ity} {biased}, {render_const(23, idt)}')} to {ty}")
      p = self.op(f"fmul {ty} {p}, {scale}")
    nan = self.op(f"fcmp uno {ty} {x}, {'0.0' if lanes == 1 else 'zeroinitializer'}")
    return self.op(f"select {bty} {nan}, {ty} {x}, {ty} {p}")

  def log2_f32(self, x: str, ty: str = "float") -> str:
    """log2 of a float, inline (LLVM's is a call into libm per element, which the loop vectoriser cannot
    vectorise: Box-Muller's randn spent a third of its time there). x = 2**e (1 + f) (`log_reduce`), then
    e + ln(1 + f) / ln 2 (`ln_1p`, the quotient in two parts of 1 / ln 2, each added by an FMA): within 1.5 ulps,
    relative, near x = 1 too (an odd series in (m - 1) / (m + 1) with coefficients over ln 2 was off by 2.7). 0 gives
    -inf, a negative x or NaN NaN, inf inf. `ty` is float or a vector of floats."""
    _, fdt, _, ity, _ = _f32_types(ty)
    sfx = _float_suffix(fdt)
    e, f = self.log_reduce(x, ty)
    low = self.ln_1p(f, ty, sfx)
    # e + ln(1 + f) / ln 2, the quotient as ln(1 + f) times 1/ln 2 in two parts
    r = self.intrinsic(f"llvm.fma.{sfx}", ty, [(ty, low), (ty, render_const(_INV_LN2_PARTS[1], fdt)),
                                               (ty, self.op(f"sitofp {ity} {e} to {ty}"))])
    r = self.intrinsic(f"llvm.fma.{sfx}", ty, [(ty, low), (ty, render_const(_INV_LN2_PARTS[0], fdt)), (ty, r)])
    return self.log_specials(x, r, ty)

  def ln_1p(self, f: str, ty: str, sfx: str, extra: str | None = None) -> str:
    """ln(1 + f) for the exact f of `log_reduce`: f - (f²/2 - s (f²/2 + R)) with s = f / (2 + f) and R(s²) the rest of
    2 atanh(s) (_LN_POLY), so f carries the result and the rounded s only a correction; `extra` (a small value: ln's
    e times ln 2's second part) is added inside the correction."""
    _, fdt, _, _, _ = _f32_types(ty)

    def c(v: float) -> str: return render_const(v, fdt)
    s = self.op(f"fdiv {ty} {f}, {self.op(f'fadd {ty} {f}, {c(2.0)}')}")
    r = self.op(f"fmul {ty} {s}, {s}")
    r = self.op(f"fmul {ty} {r}, {self.poly_f32(r, _LN_POLY, ty, sfx)}")
    hfsq = self.op(f"fmul {ty} {self.op(f'fmul {ty} {f}, {f}')}, {c(0.5)}")
    corr = self.intrinsic(f"llvm.fma.{sfx}", ty, [(ty, s), (ty, self.op(f"fadd {ty} {hfsq}, {r}")), (ty, extra or c(0.0))])
    return self.op(f"fsub {ty} {f}, {self.op(f'fsub {ty} {hfsq}, {corr}')}")

  def log_f32(self, x: str, ty: str) -> str:
    """ln x for a float or a vector of floats, inline: x = 2**e (1 + f) from `log_reduce` (f exact), and
    ln(1 + f) = f - (f²/2 - s (f²/2 + R)) with s = f / (2 + f) (see _LN_POLY): f itself carries the result, the rounded
    s only a correction, and e ln 2 is added in two parts, the larger by an FMA: within an ulp, where log2(x) ln 2
    (the product of two rounded values) was off by up to 2.6."""
    _, fdt, _, ity, _ = _f32_types(ty)
    sfx = _float_suffix(fdt)
    e, f = self.log_reduce(x, ty)
    ef = self.op(f"sitofp {ity} {e} to {ty}")
    low = self.ln_1p(f, ty, sfx, self.op(f"fmul {ty} {ef}, {render_const(_LN2_PARTS[1], fdt)}"))
    out = self.intrinsic(f"llvm.fma.{sfx}", ty, [(ty, ef), (ty, render_const(_LN2_PARTS[0], fdt)), (ty, low)])
    return self.log_specials(x, out, ty)

  def log_reduce(self, x: str, ty: str) -> tuple[str, str]:
    """(e, f) with x = 2**e (1 + f), e an integer (`ity`), 1 + f in [sqrt(1/2), sqrt(2)) from the bits (a subnormal x
    scaled by 2**23 first); f = m - 1 is exact."""
    _, fdt, idt, ity, bty = _f32_types(ty)

    def f(v: float) -> str: return render_const(_f32(v), fdt)

    def i(v: int) -> str: return render_const(v, idt)
    sub = self.op(f"fcmp olt {ty} {x}, {f(2.0 ** -126)}")
    xs = self.op(f"select {bty} {sub}, {ty} {self.op(f'fmul {ty} {x}, {f(2.0 ** 23)}')}, {ty} {x}")
    bits = self.op(f"bitcast {ty} {xs} to {ity}")
    biased = self.op(f"and {ity} {self.op(f'lshr {ity} {bits}, {i(23)}')}, {i(255)}")
    e = self.op(f"sub {ity} {biased}, {self.op(f'select {bty} {sub}, {ity} {i(150)}, {ity} {i(127)}')}")
    mantissa = self.op(f"and {ity} {bits}, {i(0x7FFFFF)}")
    m = self.op(f"bitcast {ity} {self.op(f'or {ity} {mantissa}, {i(0x3F800000)}')} to {ty}")
    big = self.op(f"fcmp ogt {ty} {m}, {f(1.4142135)}")
    m = self.op(f"select {bty} {big}, {ty} {self.op(f'fmul {ty} {m}, {f(0.5)}')}, {ty} {m}")
    e = self.op(f"add {ity} {e}, {self.op(f'zext {bty} {big} to {ity}')}")
    return e, self.op(f"fsub {ty} {m}, {f(1.0)}")

  def log_specials(self, x: str, r: str, ty: str) -> str:
    """A logarithm `r` of x with the special values, in the order that makes each win: inf (its m is 1), then 0,
    then negatives and NaN."""
    _, fdt, _, _, bty = _f32_types(ty)

    def f(v: float) -> str: return render_const(v, fdt)
    r = self.op(f"select {bty} {self.op(f'fcmp oeq {ty} {x}, {f(math.inf)}')}, {ty} {f(math.inf)}, {ty} {r}")
    r = self.op(f"select {bty} {self.op(f'fcmp oeq {ty} {x}, {f(0.0)}')}, {ty} {f(-math.inf)}, {ty} {r}")
    return self.op(f"select {bty} {self.op(f'fcmp ult {ty} {x}, {f(0.0)}')}, {ty} {f(math.nan)}, {ty} {r}")

  def int_alu(self, op: Ops, dt: DType, v: list[str], nsw: bool, src_dtypes: list[DType]) -> str:
    ty, signed, bits = reg_type(dt), dt.kind == "i", dt.itemsize * 8
    wrap = "nsw " if nsw else ""
    binary = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul", Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor"}
    if op in binary: return self.op(f"{binary[op]} {wrap if op in (Ops.ADD, Ops.SUB, Ops.MUL) else ''}{ty} {v[0]}, {v[1]}")
    if op is Ops.NEG: return self.op(f"sub {ty} 0, {v[0]}")
    if op is Ops.TRUNC: return v[0]
    if op in (Ops.MAX, Ops.MIN):
      name = ("s" if signed else "u") + ("max" if op is Ops.MAX else "min")
      return self.intrinsic(f"llvm.{name}.{ty}", ty, [(ty, v[0]), (ty, v[1])])
    cmp = {Ops.CMPLT: "slt" if signed else "ult", Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}
    if op in cmp: return self.op(f"icmp {cmp[op]} {ty} {v[0]}, {v[1]}")
    if op in (Ops.SHL, Ops.SHR):
      amount = self.int_resize(v[1], src_dtypes[1], dt)
      amount = self.op(f"and {ty} {amount}, {bits - 1}")
      kind = "shl" if op is Ops.SHL else ("ashr" if signed else "lshr")
      return self.op(f"{kind} {ty} {v[0]}, {amount}")
    if op in (Ops.IDIV, Ops.MOD, Ops.FDIV, Ops.RECIP):
      a, b = ("1", v[0]) if op is Ops.RECIP else (v[0], v[1])
      # never trap: divide by 1 where b == 0 (and for INT_MIN / -1, whose quotient wraps to INT_MIN)
      bad = self.op(f"icmp eq {ty} {b}, 0")
      if signed:
        amin = self.op(f"icmp eq {ty} {a}, {-(1 << (bits - 1))}")
        mone = self.op(f"icmp eq {ty} {b}, -1")
        bad = self.op(f"or i1 {bad}, {self.op(f'and i1 {amin}, {mone}')}")
      safe = self.op(f"select i1 {bad}, {ty} 1, {ty} {b}")
      bz = self.op(f"icmp eq {ty} {b}, 0")
      if op is Ops.MOD:
        r = self.op(f"{'srem' if signed else 'urem'} {ty} {a}, {safe}")
        return self.op(f"select i1 {bz}, {ty} 0, {ty} {r}")  # a % 0 == 0
      q = self.op(f"{'sdiv' if signed else 'udiv'} {ty} {a}, {safe}")
      return self.op(f"select i1 {bz}, {ty} 0, {ty} {q}")
    raise NotImplementedError(f"the CPU renderer has no {op} for {dt.name}")

  def int_resize(self, v: str, src: DType, dst: DType) -> str:
    """An integer (or bool) value converted to another integer width, as C would."""
    sb, db = (1 if src == dtypes.bool else src.itemsize * 8), dst.itemsize * 8
    if sb == db: return v
    if sb > db: return self.op(f"trunc {reg_type(src)} {v} to {reg_type(dst)}")
    ext = "sext" if src.kind == "i" else "zext"
    return self.op(f"{ext} {reg_type(src)} {v} to {reg_type(dst)}")

  def cast(self, v: str, src: DType, dst: DType) -> str:
    st, dt_ = reg_type(src), reg_type(dst)
    if dst == dtypes.bool:
      if src == dtypes.bool: return v
      if src.is_float: return self.op(f"fcmp une {st} {v}, {'0xH0000' if st == 'half' else '0x0'}")
      return self.op(f"icmp ne {st} {v}, 0")
    if dst.is_int:
      if src == dtypes.bool or src.is_int: return self.int_resize(v, src, dst)
      # float -> int: truncate toward zero through int64 as numpy does on x86 (below -2**63:
      # INT64_MIN, from 2**63 up: INT64_MIN, NaN and +-inf: 0), then wrap to the width
      sfx = _FLOAT_SUFFIX[st]
      i = self.intrinsic(f"llvm.fptosi.sat.i64.{sfx}", "i64", [(st, v)])
      if st != "half":  # as numpy on x86: values >= 2**63 clip to 2.0**63, which converts to INT64_MIN
        big = self.op(f"fcmp oge {st} {v}, {render_const(2.0**63, dtypes.float64)}")
        i = self.op(f"select i1 {big}, i64 {-(1 << 63)}, i64 {i}")
        if dst == dtypes.uint64:  # its upper half converts exactly, from 2**64 on to 0 (numpy's and torch's)
          upper = self.intrinsic(f"llvm.fptoui.sat.i64.{sfx}", "i64", [(st, v)])
          i = self.op(f"select i1 {big}, i64 {upper}, i64 {i}")
          past = self.op(f"fcmp oge {st} {v}, {render_const(2.0**64, dtypes.float64)}")
          i = self.op(f"select i1 {past}, i64 0, i64 {i}")
      mag = self.intrinsic(f"llvm.fabs.{sfx}", st, [(st, v)])
      inf = self.op(f"fcmp oeq {st} {mag}, {render_const(float('inf'), src if src != dtypes.bfloat16 else dtypes.float32)}")
      i = self.op(f"select i1 {inf}, i64 0, i64 {i}")
      return i if dst.itemsize == 8 else self.op(f"trunc i64 {i} to {dt_}")
    # to a float
    if src == dtypes.bool: out = self.op(f"uitofp i1 {v} to {dt_}")
    elif src.is_int: out = self.op(f"{'sitofp' if src.kind == 'i' else 'uitofp'} {st} {v} to {dt_}")
    elif st == dt_: out = v
    else:
      widths = {"half": 16, "float": 32, "double": 64}
      out = self.op(f"{'fpext' if widths[dt_] > widths[st] else 'fptrunc'} {st} {v} to {dt_}")
    return self.bf16_round(out) if dst == dtypes.bfloat16 and src != dtypes.bfloat16 else out

  def bitcast(self, v: str, src: DType, dst: DType) -> str:
    if src.itemsize != dst.itemsize: raise NotImplementedError(f"BITCAST between sizes: {src.name} -> {dst.name}")
    if src == dtypes.bfloat16:
      b = self.op(f"bitcast float {v} to i32")
      v, src = self.op(f"trunc i32 {self.op(f'lshr i32 {b}, 16')} to i16"), dtypes.uint16
    if dst == dtypes.bfloat16:
      w = self.op(f"zext i16 {self.bitcast(v, src, dtypes.uint16) if src != dtypes.uint16 else v} to i32")
      return self.op(f"bitcast i32 {self.op(f'shl i32 {w}, 16')} to float")
    st, dt_ = reg_type(src), reg_type(dst)
    if st == dt_: return v
    if "i1" in (st, dt_):
      return self.op(f"icmp ne i8 {v}, 0") if dt_ == "i1" else self.op(f"zext i1 {v} to i8")
    return self.op(f"bitcast {st} {v} to {dt_}")
