"""What every ALU op computes, written with numpy. This is the definition that the reference
device executes and that constant folding uses; rendered code on any device must agree with it.

Edge cases that C leaves undefined are defined here: integer division and modulo by zero give 0
(numpy's answer), integer arithmetic wraps, shifts use the low bits of the shift amount. On floats
IDIV is trunc(a / b) and MOD is C's fmod (exact, with the sign of the dividend; x % 0 and
inf % x are NaN): the Tensor's `//` and `%` are built from these the way torch builds them.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from plugrad.dtype import DType, bf16_to_f32, dtypes, f32_to_bf16
from plugrad.uops import Ops, UOp


def _idiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  # floats: trunc(a / b) with IEEE results for b == 0 (what a renderer's trunc of a division gives)
  if a.dtype.kind == "f": return np.trunc(a / b)
  # integers: truncating division (C semantics) with x/0 -> 0 and INT_MIN/-1 wrapping to INT_MIN. a - fmod(a, b)
  # is an exact multiple of b, so floor division of it truncates; np.abs would overflow at INT_MIN instead
  safe = np.where(b == 0, 1, b)
  q = (a - np.fmod(a, safe)) // safe
  return np.where(b == 0, 0, q).astype(a.dtype)


def _mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  if a.dtype.kind == "f": return np.fmod(a, b)  # C's fmod: exact, no rounded quotient involved
  # remainder with the sign of the dividend (C semantics: numpy's fmod on integers) with x%0 -> 0 (numpy's answer)
  return np.where(b == 0, 0, np.fmod(a, np.where(b == 0, 1, b))).astype(a.dtype)


def _shift(a: np.ndarray, b: np.ndarray, left: bool) -> np.ndarray:
  bits = a.dtype.itemsize * 8
  amount = (b.astype(np.int64) & (bits - 1)).astype(a.dtype)
  return np.left_shift(a, amount) if left else np.right_shift(a, amount)


_NP_ALU: dict[Ops, Callable[..., np.ndarray]] = {
  Ops.NEG: lambda a: np.logical_not(a) if a.dtype == np.bool_ else np.negative(a),
  Ops.RECIP: lambda a: np.reciprocal(a), Ops.SQRT: np.sqrt, Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin,
  Ops.COS: np.cos, Ops.TRUNC: np.trunc,
  Ops.ADD: lambda a, b: np.logical_or(a, b) if a.dtype == np.bool_ else a + b,
  Ops.SUB: lambda a, b: a - b,
  Ops.MUL: lambda a, b: np.logical_and(a, b) if a.dtype == np.bool_ else a * b,
  Ops.FDIV: lambda a, b: a / b, Ops.IDIV: _idiv, Ops.MOD: _mod,
  Ops.MAX: np.maximum, Ops.MIN: np.minimum,
  Ops.CMPLT: lambda a, b: a < b, Ops.CMPNE: lambda a, b: a != b, Ops.CMPEQ: lambda a, b: a == b,
  Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor,
  Ops.SHL: lambda a, b: _shift(a, b, True), Ops.SHR: lambda a, b: _shift(a, b, False),
  Ops.WHERE: lambda c, a, b: np.where(c, a, b),
}


def to_np_compute(x: Any, dtype: DType) -> np.ndarray:
  """A value as a numpy array of the dtype used to compute with `dtype` (float32 for bfloat16)."""
  return np.asarray(x, dtype=dtype.np)


def round_to(x: np.ndarray, dtype: DType) -> np.ndarray:
  """Round a computed value to what `dtype` holds (bfloat16 is computed in float32, rounded here)."""
  if dtype == dtypes.bfloat16: return bf16_to_f32(f32_to_bf16(np.asarray(x, np.float32)))
  return np.asarray(x).astype(dtype.np, copy=False)


def exec_alu(op: Ops, dtype: DType, srcs: list[np.ndarray], src_dtypes: list[DType]) -> np.ndarray:
  """Compute `op` on numpy operands; the result has `dtype`'s compute type. Vector dtypes compute
  lane by lane (their lanes are an axis of the operands)."""
  dtype, src_dtypes = dtype.scalar(), [d.scalar() for d in src_dtypes]
  with np.errstate(all="ignore"):
    if op is Ops.CAST:
      x = srcs[0]
      if dtype.is_int and src_dtypes[0].is_float:
        # float -> int truncates; out-of-range values are undefined in C, here they go through int64, but
        # uint64's upper half [2**63, 2**64) converts exactly (and from 2**64 on to 0), as numpy and torch
        f = np.where(np.isfinite(x), np.trunc(x), 0).astype(np.float64)
        x = np.clip(f, -2.0**63, 2.0**63 - 1).astype(np.int64)
        if dtype == dtypes.uint64:
          x = np.where(f >= 2.0**63, np.where(f < 2.0**64, f, 0).astype(np.uint64), x.astype(np.uint64))
      if dtype == dtypes.bool: return np.asarray(x != 0)
      return round_to(np.asarray(x).astype(dtype.np) if dtype != dtypes.bfloat16 else np.asarray(x, np.float32), dtype)
    if op is Ops.BITCAST:
      src_dt = src_dtypes[0]
      raw = f32_to_bf16(srcs[0]) if src_dt == dtypes.bfloat16 else np.asarray(srcs[0], src_dt.np)
      out = np.ascontiguousarray(raw).view(dtype.storage_np)
      return bf16_to_f32(out) if dtype == dtypes.bfloat16 else out
    ret = _NP_ALU[op](*srcs)
    return round_to(ret, dtype)


def fold_constant(op: Ops, dtype: DType, args: list[Any], src_dtypes: list[DType]) -> Any:
  """The Python scalar result of `op` on Python scalar constants."""
  arrs = [to_np_compute(a, d) for a, d in zip(args, src_dtypes)]
  out = exec_alu(op, dtype, arrs, src_dtypes)
  return out.item() if dtype != dtypes.bool else bool(out)


# what a reduction of nothing gives, and where an accumulator starts
REDUCE_IDENTITY = {Ops.ADD: lambda dt: 0, Ops.MUL: lambda dt: 1, Ops.MAX: lambda dt: dt.min, Ops.MIN: lambda dt: dt.max}


def reduce_identity(op: Ops, dtype: DType) -> UOp:
  """The value a reduction starts from (a VECTORIZE of it in every lane for a vector dtype)."""
  if dtype.count > 1: return UOp(Ops.VECTORIZE, dtype, (reduce_identity(op, dtype.scalar()),) * dtype.count)
  return UOp.const(dtype, REDUCE_IDENTITY[op](dtype))
