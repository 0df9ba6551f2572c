"""Data types (scalars and the short vectors of the loop program) and torch-style type promotion.

Tensors only ever have scalar dtypes. Vector dtypes (`dtypes.float32.vec(8)`: `count` lanes of
one scalar type) exist inside loop programs lowered for devices whose Capabilities set
`vector_ops`; see `plugrad.codegen.vectorize`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class DType:
  """A scalar type, or a vector of `count` lanes of one. `kind` is 'b' (bool), 'i' (signed),
  'u' (unsigned) or 'f' (float); `name`, `kind` and `priority` are the scalar's, `itemsize` is
  the whole value's (lanes * the scalar's).

  Interned: making a DType equal to an existing one returns that one, so equality and hashing are
  identity's (dtypes are compared and hashed constantly: every UOp key holds one)."""
  name: str
  itemsize: int
  kind: str
  priority: int  # position in the promotion order within a kind
  count: int = 1  # lanes: 1 for a scalar

  def __new__(cls, name: str, itemsize: int, kind: str, priority: int, count: int = 1) -> DType:
    key = (name, itemsize, kind, priority, count)
    if (made := _INTERNED.get(key)) is None: made = _INTERNED[key] = super().__new__(cls)
    return made

  def __reduce__(self) -> tuple: return (DType, (self.name, self.itemsize, self.kind, self.priority, self.count))
  def __repr__(self) -> str: return f"dtypes.{self.name}" + (f".vec({self.count})" if self.count > 1 else "")

  def vec(self, count: int) -> DType:
    """The vector of `count` lanes of this scalar type (the scalar itself for count 1)."""
    if self.count != 1: raise ValueError(f"{self!r} is already a vector")
    if count < 1: raise ValueError(f"a vector needs at least one lane, not {count}")
    return self if count == 1 else DType(self.name, self.itemsize * count, self.kind, self.priority, count)

  def scalar(self) -> DType:
    """The type of one lane (the type itself for a scalar)."""
    return self if self.count == 1 else _BY_NAME[self.name]
  @property
  def bitsize(self) -> int: return self.itemsize * 8
  @property
  def fmt(self) -> str | None:
    """The struct module's format character (tinygrad's DType.fmt); None for bfloat16, which struct has none of."""
    return _STRUCT_FORMATS.get(self.name)
  @property
  def is_float(self) -> bool: return self.kind == "f"
  @property
  def is_int(self) -> bool: return self.kind in "iu"
  @property
  def is_unsigned(self) -> bool: return self.kind == "u"
  @property
  def np(self) -> np.dtype:
    """The numpy dtype that holds this type's values (bfloat16 is held as float32 by numpy users)."""
    return np.dtype(_NP_NAMES.get(self.name, self.name))
  @property
  def storage_np(self) -> np.dtype:
    """The numpy dtype with this type's bit layout, used for raw buffer contents."""
    return np.dtype("uint16") if self.name == "bfloat16" else self.np

  # the limits are asked on every arange and constant made: computed once per dtype (np.iinfo costs microseconds)
  @property
  def min(self) -> int | float: return self._limits()[0]
  @property
  def max(self) -> int | float: return self._limits()[1]
  @property
  def exact_int_max(self) -> int:
    """The largest integer up to which this type holds every integer exactly (a float: 2 ** its significand bits)."""
    return self._limits()[2]

  def _limits(self) -> tuple[int | float, int | float, int]:
    """(min, max, exact_int_max) of one lane."""
    if (limits := _LIMITS.get(self)) is None:
      s = self.scalar()
      if s.kind == "b": limits = (False, True, 1)
      elif s.is_int: limits = (int(np.iinfo(s.np).min), int(np.iinfo(s.np).max), int(np.iinfo(s.np).max))
      else: limits = (-float("inf"), float("inf"), 1 << {2: 8 if s.name == "bfloat16" else 11, 4: 24, 8: 53}[s.itemsize])
      _LIMITS[self] = limits
    return limits


_INTERNED: dict[tuple, DType] = {}
_LIMITS: dict[DType, tuple[int | float, int | float, int]] = {}  # per dtype: (min, max, exact_int_max)
_NP_NAMES = {"bfloat16": "float32", "bool": "bool"}


class dtypes:
  """Namespace of every dtype plugrad knows, with helpers."""
  bool = DType("bool", 1, "b", 0)
  int8 = DType("int8", 1, "i", 1)
  int16 = DType("int16", 2, "i", 2)
  int32 = DType("int32", 4, "i", 3)
  int64 = DType("int64", 8, "i", 4)
  uint8 = DType("uint8", 1, "u", 1)
  uint16 = DType("uint16", 2, "u", 2)
  uint32 = DType("uint32", 4, "u", 3)
  uint64 = DType("uint64", 8, "u", 4)
  float16 = DType("float16", 2, "f", 1)
  bfloat16 = DType("bfloat16", 2, "f", 2)
  float32 = DType("float32", 4, "f", 3)
  float64 = DType("float64", 8, "f", 4)
  # aliases in torch/tinygrad style
  half, float, double = float16, float32, float64
  char, short, int, long = int8, int16, int32, int64
  uchar, ushort, uint, ulong = uint8, uint16, uint32, uint64
  default_float = float32
  default_int = int32

  @staticmethod
  def all() -> tuple[DType, ...]:
    return ALL_DTYPES

  # tinygrad's predicates and groups (dtypes.is_float(x.dtype), dtypes.floats)
  @staticmethod
  def is_float(x: DType) -> bool: return x.scalar().is_float
  @staticmethod
  def is_int(x: DType) -> bool: return x.scalar().is_int
  @staticmethod
  def is_unsigned(x: DType) -> bool: return x.scalar().is_unsigned
  @staticmethod
  def is_bool(x: DType) -> bool: return x.scalar() == dtypes.bool
  @staticmethod
  def finfo(x: DType) -> tuple[int, int]:
    """(exponent bits, mantissa bits) of a float dtype, as tinygrad's."""
    if not x.is_float: raise TypeError(f"finfo needs a float dtype, got {x.name}")
    return {2: (5, 10), 4: (8, 23), 8: (11, 52)}[x.itemsize] if x.name != "bfloat16" else (8, 7)

  @staticmethod
  def from_any(x: Any) -> DType:
    """Turn a DType, a name (tinygrad's: 'float32', 'float', 'half', 'uchar', 'long', ...; case-insensitive) or a
    numpy dtype into a DType; raise TypeError otherwise."""
    if isinstance(x, DType): return x
    if isinstance(x, str) and (d := _BY_ALIAS.get(x.lower())) is not None: return d
    try:
      npd = np.dtype(x)
    except TypeError:
      raise TypeError(f"unknown dtype {x!r}; expected one of {', '.join(_BY_NAME)}") from None
    if npd.name in _BY_NAME: return _BY_NAME[npd.name]
    raise TypeError(f"unknown dtype {x!r}; expected one of {', '.join(_BY_NAME)}")

  @staticmethod
  def from_py(x: Any) -> DType:
    """The dtype a Python scalar or nested list gets: bool, default_int or default_float."""
    if isinstance(x, (list, tuple)):
      return max((dtypes.from_py(v) for v in x), key=lambda d: _CATEGORY[d.kind], default=dtypes.default_float)
    if isinstance(x, (bool, np.bool_)): return dtypes.bool
    if isinstance(x, (int, np.integer)): return dtypes.default_int
    if isinstance(x, (float, np.floating)): return dtypes.default_float
    raise TypeError(f"cannot make a tensor element from {type(x).__name__}")


ALL_DTYPES: tuple[DType, ...] = tuple(v for k, v in vars(dtypes).items() if isinstance(v, DType) and k == v.name)
_STRUCT_FORMATS = {"bool": "?", "int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
                   "int64": "q", "uint64": "Q", "float16": "e", "float32": "f", "float64": "d"}
dtypes.floats = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)  # type: ignore[attr-defined]
dtypes.uints = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)  # type: ignore[attr-defined]
dtypes.sints = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)  # type: ignore[attr-defined]
dtypes.ints = dtypes.uints + dtypes.sints  # type: ignore[attr-defined]
_BY_NAME = {d.name: d for d in ALL_DTYPES}
# every name tinygrad's to_dtype accepts: the canonical names, the C-style aliases and the defaults
_BY_ALIAS = {k: v for k, v in vars(dtypes).items() if isinstance(v, DType)}
_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2}
_SIGNED_BY_SIZE = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}


def promote_types(a: DType, b: DType) -> DType:
  """The common dtype of two tensor dtypes, following torch: bool < integers < floats; mixing
  signed and unsigned of the same width goes to the next wider signed type (uint64 with a signed
  type has no such type and goes to float32, as in numpy's absence of int128)."""
  if a == b: return a
  ca, cb = _CATEGORY[a.kind], _CATEGORY[b.kind]
  if ca != cb: return a if ca > cb else b
  if a.kind == "f":
    if {a, b} == {dtypes.float16, dtypes.bfloat16}: return dtypes.float32
    return a if a.priority > b.priority else b
  if a.kind == b.kind: return a if a.itemsize > b.itemsize else b
  s, u = (a, b) if a.kind == "i" else (b, a)
  if s.itemsize > u.itemsize: return s
  return _SIGNED_BY_SIZE.get(u.itemsize * 2, dtypes.float32)


def result_type_with_scalar(t: DType, scalar: Any) -> DType:
  """The dtype of `tensor op python_scalar`: a scalar only changes the category (int tensor + 1.5 is
  default_float; bool tensor + 1 is default_int), never the width within a category."""
  sd = dtypes.from_py(scalar)
  return t if _CATEGORY[sd.kind] <= _CATEGORY[t.kind] else sd


def truncate(value: Any, dtype: DType) -> Any:
  """A Python scalar converted to what `dtype` can hold (wrapping integers, rounding floats)."""
  if dtype.kind == "b": return bool(value)
  if dtype.is_int:
    if isinstance(value, float) and (value != value or value in (float("inf"), -float("inf"))): return 0
    bits = dtype.itemsize * 8
    v = int(value) & ((1 << bits) - 1)
    return v - (1 << bits) if dtype.kind == "i" and v >= 1 << (bits - 1) else v
  if dtype == dtypes.float64: return float(value)
  if dtype == dtypes.bfloat16: return float(bf16_to_f32(f32_to_bf16(np.array([value], np.float32)))[0])
  with np.errstate(over="ignore"):
    return float(dtype.np.type(value))


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
  """float32 -> bfloat16 bit patterns (uint16), round to nearest even. A float32 whose low 16 bits are zero is a
  bfloat16 already and keeps its bits, NaN included (a bitcast to bfloat16 keeps a NaN's sign and payload); any other
  NaN becomes the quiet NaN 0x7FC0 (rounding its bits could carry into the exponent)."""
  x = np.array(x, dtype=np.float32)  # a contiguous copy that keeps 0-d shapes (ascontiguousarray would not)
  bits = x.view(np.uint32)
  rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
  return np.where(np.isnan(x) & ((bits & 0xFFFF) != 0), np.uint16(0x7FC0), rounded).astype(np.uint16)


def bf16_to_f32(x: np.ndarray) -> np.ndarray:
  """bfloat16 bit patterns (uint16) -> float32."""
  return (np.asarray(x, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
