"""The ONNX operators, each built from Tensor methods: one function per operator, registered in `OPS`.

An operator function takes the node's inputs positionally, in the order the ONNX spec lists them (a
missing optional input is None, a variadic one is `*xs`), and its attributes as keyword-only parameters
named as in the spec, with the spec's defaults. Inputs listed in `static` arrive as Python values
(ints, floats, lists) instead of Tensors: they decide shapes (Reshape's shape, Slice's starts), and the
runner reads them on the host, folded at the first call wherever they depend only on constants and
input shapes. Two keyword-only names are not attributes: `opset` (the model's opset for the default
domain) and `n_outputs` (how many outputs the node names), for the operators whose meaning depends on them.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from plugrad.dtype import DType, dtypes
from plugrad.registry import get_registry
from plugrad.shape import prod
from plugrad.tensor import Tensor

SPECIAL_KWARGS = frozenset({"opset", "n_outputs", "device"})


@dataclass(frozen=True)
class OnnxOp:
  """One registered operator: its function, the input positions read as Python values, and the attribute
  names it understands (any other attribute on a node is refused before the model runs)."""
  name: str
  fn: Callable[..., Any]
  static: tuple[int, ...]
  attrs: frozenset[str]
  specials: frozenset[str]


OPS: dict[str, OnnxOp] = {}


def op(*names: str, static: Sequence[int] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
  """Register `fn` as the ONNX operators `names`."""
  def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
    params = inspect.signature(fn).parameters.values()
    kw = {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    for name in names: OPS[name] = OnnxOp(name, fn, tuple(static), frozenset(kw - SPECIAL_KWARGS),
                                          frozenset(kw & SPECIAL_KWARGS))
    return fn
  return deco


def onnx_dtype(elem_type: int) -> DType:
  """The plugrad dtype of an ONNX TensorProto element type (raises for strings and the 4/8-bit floats)."""
  if elem_type not in _ONNX_DTYPES: raise NotImplementedError(f"ONNX element type {elem_type} has no plugrad dtype")
  return _ONNX_DTYPES[elem_type]


# a dtype the device lacks becomes the nearest one it has (as tinygrad's runner does): float64 -> float32, ...
_FALLBACK = {dtypes.float64: dtypes.float32, dtypes.bfloat16: dtypes.float32, dtypes.float16: dtypes.float32,
             dtypes.int64: dtypes.int32, dtypes.uint64: dtypes.uint32}


def device_dtype(dt: DType, device: str) -> DType:
  """`dt`, or the dtype that stands in for it on `device` when the device lacks it."""
  supported = get_registry().render_device(device.split(":")[0]).caps.dtypes
  while dt not in supported and dt in _FALLBACK: dt = _FALLBACK[dt]
  return dt


# TensorProto.DataType numbers (onnx.proto): FLOAT=1 UINT8=2 INT8=3 UINT16=4 INT16=5 INT32=6 INT64=7 BOOL=9
# FLOAT16=10 DOUBLE=11 UINT32=12 UINT64=13 BFLOAT16=16
_ONNX_DTYPES = {1: dtypes.float32, 2: dtypes.uint8, 3: dtypes.int8, 4: dtypes.uint16, 5: dtypes.int16, 6: dtypes.int32,
                7: dtypes.int64, 9: dtypes.bool, 10: dtypes.float16, 11: dtypes.float64, 12: dtypes.uint32,
                13: dtypes.uint64, 16: dtypes.bfloat16}


def _axis(axis: int, ndim: int) -> int:
  if not -max(ndim, 1) <= axis < max(ndim, 1): raise ValueError(f"axis {axis} is out of range for rank {ndim}")
  return axis % max(ndim, 1)


def _i64(values: Sequence[int] | int, device: str) -> Tensor:
  return Tensor(np.array(values, dtype=np.int64), device=device)


# ---- elementwise: unary ------------------------------------------------------------------------------------

def _unary(name: str, fn: Callable[[Tensor], Tensor]) -> None:
  def unary(x: Tensor) -> Tensor: return fn(x)
  op(name)(unary)


for _name, _fn in {
    "Abs": Tensor.abs, "Neg": Tensor.neg, "Exp": Tensor.exp, "Log": Tensor.log, "Sqrt": Tensor.sqrt,
    "Reciprocal": Tensor.reciprocal, "Floor": Tensor.floor, "Ceil": Tensor.ceil, "Round": Tensor.round,
    "Sign": lambda x: x.isnan().where(x, x.sign()),  # NaN stays NaN, as in onnxruntime (Tensor.sign gives 0)
    "Sin": Tensor.sin, "Cos": Tensor.cos, "Tan": Tensor.tan, "Asin": Tensor.asin,
    "Acos": Tensor.acos, "Atan": Tensor.atan, "Sinh": Tensor.sinh, "Cosh": Tensor.cosh, "Asinh": Tensor.asinh,
    "Acosh": Tensor.acosh, "Atanh": Tensor.atanh, "Erf": Tensor.erf, "Not": Tensor.logical_not,
    "IsNaN": Tensor.isnan, "Relu": Tensor.relu, "Sigmoid": Tensor.sigmoid, "Tanh": Tensor.tanh,
    "Softsign": Tensor.softsign, "Mish": Tensor.mish, "HardSwish": Tensor.hardswish, "BitwiseNot": Tensor.bitwise_not,
    "Softplus": lambda x: x.softplus(), "Identity": lambda x: x}.items():
  _unary(_name, _fn)


@op("IsInf")
def is_inf(x: Tensor, *, detect_negative: int = 1, detect_positive: int = 1) -> Tensor:
  masks = ([x == -math.inf] if detect_negative else []) + ([x == math.inf] if detect_positive else [])
  if not masks: return Tensor.zeros(x.shape, dtype=dtypes.bool, device=x.device)
  return masks[0] if len(masks) == 1 else masks[0].logical_or(masks[1])


@op("Elu")
def elu(x: Tensor, *, alpha: float = 1.0) -> Tensor: return x.elu(alpha)


@op("Celu")
def celu(x: Tensor, *, alpha: float = 1.0) -> Tensor: return x.celu(alpha)


@op("Selu")
def selu(x: Tensor, *, alpha: float = 1.67326319217681884765625, gamma: float = 1.05070102214813232421875) -> Tensor:
  return gamma * (x.relu() - (alpha * (1 - x.exp())).relu())  # gamma * (x if x > 0 else alpha * (e^x - 1))


@op("LeakyRelu")
def leaky_relu(x: Tensor, *, alpha: float = 0.01) -> Tensor: return x.leaky_relu(alpha)


@op("Swish")
def swish(x: Tensor, *, alpha: float = 1.0) -> Tensor: return x * (alpha * x).sigmoid()


@op("ThresholdedRelu")
def thresholded_relu(x: Tensor, *, alpha: float = 1.0) -> Tensor: return (x > alpha).where(x, 0)


@op("HardSigmoid")
def hard_sigmoid(x: Tensor, *, alpha: float = 0.2, beta: float = 0.5) -> Tensor: return (alpha * x + beta).clip(0, 1)


@op("Gelu")
def gelu(x: Tensor, *, approximate: str = "none") -> Tensor: return x.gelu(approximate)


@op("PRelu")
def prelu(x: Tensor, slope: Tensor) -> Tensor:
  if slope.ndim == 1 and x.ndim > 2 and slope.shape[0] not in (1, x.shape[-1]):  # opset < 7: one slope per channel
    slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
  return (x < 0).where(x * slope, x)  # slope broadcasts to x


@op("Shrink")
def shrink(x: Tensor, *, bias: float = 0.0, lambd: float = 0.5) -> Tensor:
  return (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0)).cast(x.dtype)


@op("Clip")
def clip(x: Tensor, lo: Tensor | None = None, hi: Tensor | None = None, *, min: float | None = None,  # noqa: A002
         max: float | None = None) -> Tensor:  # noqa: A002  (the attributes of opset < 11)
  lo = lo if lo is not None else min
  hi = hi if hi is not None else max
  if lo is not None: x = x.maximum(lo)
  if hi is not None: x = x.minimum(hi)
  return x


# ---- elementwise: binary and variadic (numpy broadcasting, inputs of one type) -----------------------------

def _legacy(b: Tensor, a: Tensor, axis: int | None) -> Tensor:
  """Opset < 7 broadcasting: b's axes line up with a's from `axis` on (numpy's trailing alignment without it)."""
  if axis is None: return b
  axis = _axis(axis, a.ndim)
  return b.reshape((1,) * axis + b.shape + (1,) * (a.ndim - axis - b.ndim))


@op("Add")
def add(a: Tensor, b: Tensor, *, broadcast: int = 0, axis: int | None = None,
        consumed_inputs: list[int] | None = None) -> Tensor: return a + _legacy(b, a, axis)


@op("Sub")
def sub(a: Tensor, b: Tensor, *, broadcast: int = 0, axis: int | None = None,
        consumed_inputs: list[int] | None = None) -> Tensor: return a - _legacy(b, a, axis)


@op("Mul")
def mul(a: Tensor, b: Tensor, *, broadcast: int = 0, axis: int | None = None,
        consumed_inputs: list[int] | None = None) -> Tensor: return a * _legacy(b, a, axis)


@op("Div")
def div(a: Tensor, b: Tensor, *, broadcast: int = 0, axis: int | None = None,
        consumed_inputs: list[int] | None = None) -> Tensor:
  b = _legacy(b, a, axis)
  if a.dtype.is_float: return a / b
  return (a - a.fmod(b)) // b  # integer division truncates toward zero (C's), and a - fmod(a, b) divides exactly


@op("Pow")
def power(x: Tensor, y: Tensor) -> Tensor: return x.pow(y).cast(x.dtype)  # the result has the base's type


@op("Mod")
def mod(a: Tensor, b: Tensor, *, fmod: int = 0) -> Tensor: return a.fmod(b) if fmod else a % b


@op("Max")
def maximum(*xs: Tensor) -> Tensor: return _fold(xs, Tensor.maximum)


@op("Min")
def minimum(*xs: Tensor) -> Tensor: return _fold(xs, Tensor.minimum)


@op("Sum")
def total(*xs: Tensor) -> Tensor: return _fold(xs, Tensor.add)


@op("Mean")
def mean(*xs: Tensor) -> Tensor: return _fold(xs, Tensor.add) / len(xs)


def _fold(xs: Sequence[Tensor], fn: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
  out = xs[0]
  for x in xs[1:]: out = fn(out, x)
  return out


for _name, _fn in {"Equal": Tensor.eq, "Less": Tensor.__lt__, "LessOrEqual": Tensor.__le__,
                   "Greater": Tensor.__gt__, "GreaterOrEqual": Tensor.__ge__, "And": Tensor.logical_and,
                   "Or": Tensor.logical_or, "Xor": Tensor.bitwise_xor, "BitwiseAnd": Tensor.bitwise_and,
                   "BitwiseOr": Tensor.bitwise_or, "BitwiseXor": Tensor.bitwise_xor}.items():
  def _binary(a: Tensor, b: Tensor, _fn: Callable[[Tensor, Tensor], Tensor] = _fn) -> Tensor: return _fn(a, b)
  op(_name)(_binary)


@op("BitShift")
def bit_shift(x: Tensor, y: Tensor, *, direction: str = "") -> Tensor:
  if direction not in ("LEFT", "RIGHT"):
    raise ValueError(f"BitShift direction must be LEFT or RIGHT, not {direction!r}")
  return x.lshift(y) if direction == "LEFT" else x.rshift(y)


@op("Where")
def where(cond: Tensor, x: Tensor, y: Tensor) -> Tensor: return cond.where(x, y)


@op("Cast")
def cast(x: Tensor, *, to: int = 0, saturate: int = 1) -> Tensor: return x.cast(device_dtype(onnx_dtype(to), x.device))


@op("BitCast")
def bitcast(x: Tensor, *, to: int = 0) -> Tensor: return x.bitcast(onnx_dtype(to))


@op("CastLike")
def cast_like(x: Tensor, like: Tensor, *, saturate: int = 1) -> Tensor: return x.cast(like.dtype)


# ---- shapes, indexing, constants ---------------------------------------------------------------------------

@op("Constant")
def constant(*, value: Any = None, value_float: float | None = None, value_floats: list | None = None,
             value_int: int | None = None, value_ints: list | None = None, device: str) -> Tensor:
  if value is not None:  # the runner hands tensor attributes over as numpy arrays
    return Tensor(value.astype(device_dtype(dtypes.from_any(value.dtype), device).np), device=device)
  if value_float is not None: return Tensor(np.array(value_float, np.float32), device=device)
  if value_floats is not None: return Tensor(np.array(value_floats, np.float32), device=device)
  if value_int is not None: return _i64(value_int, device)
  if value_ints is not None: return _i64(value_ints, device)
  raise ValueError("Constant needs one of value, value_float(s) or value_int(s)")


@op("ConstantOfShape", static=(0,))
def constant_of_shape(shape: list[int], *, value: Any = None, device: str) -> Tensor:
  fill = np.zeros(1, np.float32) if value is None else value
  dtype = device_dtype(dtypes.from_any(fill.dtype), device)
  return Tensor.full(tuple(shape), fill.reshape(-1)[0].item(), dtype=dtype, device=device)


@op("Shape")
def shape(x: Tensor, *, start: int = 0, end: int | None = None) -> Tensor: return _i64(x.shape[start:end], x.device)


@op("Size")
def size(x: Tensor) -> Tensor: return _i64(x.numel(), x.device)


@op("Range")
def arange(start: Tensor, limit: Tensor, delta: Tensor) -> Tensor:
  first, step = start.item(), delta.item()  # the length decides a shape: read on the host (folded when constant)
  n = max(math.ceil((limit.item() - first) / step), 0)
  wide = dtypes.float32 if start.dtype in (dtypes.float16, dtypes.bfloat16) else start.dtype
  return (Tensor.arange(n, dtype=wide, device=start.device) * step + first).cast(start.dtype)  # start + i * delta


@op("Reshape", static=(1,))
def reshape(x: Tensor, shape: list[int], *, allowzero: int = 0) -> Tensor:
  # 0 copies the input's dimension there (unless allowzero), -1 is inferred
  return x.reshape(tuple(x.shape[i] if s == 0 and not allowzero else s for i, s in enumerate(shape)))


@op("Flatten")
def flatten(x: Tensor, *, axis: int = 1) -> Tensor:
  axis = axis + x.ndim if axis < 0 else axis  # in [-rank, rank]
  return x.reshape(prod(x.shape[:axis]), prod(x.shape[axis:]))


@op("Transpose")
def transpose(x: Tensor, *, perm: list[int] | None = None) -> Tensor:
  return x.permute(perm if perm is not None else tuple(reversed(range(x.ndim))))


@op("Squeeze", static=(1,))
def squeeze(x: Tensor, axes_in: list[int] | None = None, *, axes: list[int] | None = None) -> Tensor:
  axes = axes_in if axes_in is not None else axes  # an input since opset 13, an attribute before
  if axes is None: return x.reshape(tuple(s for s in x.shape if s != 1))
  drop = {_axis(a, x.ndim) for a in axes}
  if any(x.shape[a] != 1 for a in drop): raise ValueError(f"Squeeze axes {axes} are not all 1 in {x.shape}")
  return x.reshape(tuple(s for i, s in enumerate(x.shape) if i not in drop))


@op("Unsqueeze", static=(1,))
def unsqueeze(x: Tensor, axes_in: list[int] | None = None, *, axes: list[int] | None = None) -> Tensor:
  axes = axes_in if axes_in is not None else axes
  if axes is None: raise ValueError("Unsqueeze needs axes")
  out_rank = x.ndim + len(axes)
  new = sorted(_axis(a, out_rank) for a in axes)
  shape = list(x.shape)
  for a in new: shape.insert(a, 1)
  return x.reshape(tuple(shape))


@op("Concat")
def concat(*xs: Tensor, axis: int = 0) -> Tensor:
  return xs[0].cat(*xs[1:], dim=_axis(axis, xs[0].ndim)) if len(xs) > 1 else xs[0]


@op("Split", static=(1,))
def split(x: Tensor, split_in: list[int] | None = None, *, axis: int = 0, split: list[int] | None = None,
          num_outputs: int | None = None, n_outputs: int = 1) -> tuple[Tensor, ...]:
  axis = _axis(axis, x.ndim)
  sizes = split_in if split_in is not None else split
  if sizes is None:
    n = num_outputs or n_outputs
    step = -(-x.shape[axis] // n) if num_outputs else x.shape[axis] // n  # num_outputs (18) lets the last be smaller
    sizes = [min(step, x.shape[axis] - i * step) for i in range(n)]
  return x.split(list(sizes), dim=axis)


@op("Slice", static=(1, 2, 3, 4))
def slice_(x: Tensor, starts_in: list[int] | None = None, ends_in: list[int] | None = None,
           axes_in: list[int] | None = None, steps: list[int] | None = None, *, starts: list[int] | None = None,
           ends: list[int] | None = None, axes: list[int] | None = None) -> Tensor:
  # inputs since opset 10, attributes before
  starts, ends = starts_in if starts_in is not None else starts, ends_in if ends_in is not None else ends
  axes = axes_in if axes_in is not None else axes
  if starts is None or ends is None: raise ValueError("Slice needs starts and ends")
  index = [slice(None)] * x.ndim
  for i, a in enumerate(axes if axes is not None else range(len(starts))):
    # Python's slice clamps out-of-range starts and ends exactly as the spec does (INT64_MAX means "to the end")
    index[_axis(a, x.ndim)] = slice(starts[i], ends[i], steps[i] if steps is not None else 1)
  return x[tuple(index)]


@op("Gather")
def gather(x: Tensor, indices: Tensor, *, axis: int = 0) -> Tensor:
  axis = _axis(axis, x.ndim)
  return x[(slice(None),) * axis + (indices,)]  # numpy's take: negative indices count from the end


@op("GatherElements")
def gather_elements(x: Tensor, indices: Tensor, *, axis: int = 0) -> Tensor:
  axis = _axis(axis, x.ndim)
  return x.gather(axis, (indices < 0).where(indices + x.shape[axis], indices))


@op("GatherND")
def gather_nd(x: Tensor, indices: Tensor, *, batch_dims: int = 0) -> Tensor:
  if batch_dims:  # the batch position becomes one more leading coordinate of every index tuple
    lead = x.shape[:batch_dims]
    xb = x.reshape((prod(lead),) + x.shape[batch_dims:])
    ib = indices.reshape((prod(lead),) + indices.shape[batch_dims:])
    pos = Tensor.arange(prod(lead), dtype=ib.dtype, device=x.device).reshape((-1,) + (1,) * (ib.ndim - 1))
    out = gather_nd(xb, pos.expand(ib.shape[:-1] + (1,)).cat(ib, dim=-1))
    return out.reshape(lead + out.shape[1:])
  k = indices.shape[-1]
  flat = _flat_index(indices, x.shape[:k])
  return x.reshape((prod(x.shape[:k]),) + x.shape[k:])[flat]


def _flat_index(indices: Tensor, dims: Sequence[int]) -> Tensor:
  """Row-major positions in `dims` of the index tuples along indices' last axis (negative ones wrapped)."""
  strides = [prod(dims[i + 1:]) for i in range(len(dims))]
  idx = (indices < 0).where(indices + _i64(list(dims), indices.device), indices)
  return (idx * _i64(strides, indices.device)).sum(-1)


_REDUCTIONS = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


def _scatter(x: Tensor, axis: int, indices: Tensor, updates: Tensor, reduction: str) -> Tensor:
  if reduction == "none": return x.scatter(axis, indices, updates)
  if reduction not in _REDUCTIONS: raise ValueError(f"unknown scatter reduction {reduction!r}")
  return x.scatter_reduce(axis, indices, updates, _REDUCTIONS[reduction])


@op("ScatterElements", "Scatter")
def scatter_elements(x: Tensor, indices: Tensor, updates: Tensor, *, axis: int = 0, reduction: str = "none") -> Tensor:
  axis = _axis(axis, x.ndim)
  return _scatter(x, axis, (indices < 0).where(indices + x.shape[axis], indices), updates, reduction)


@op("ScatterND")
def scatter_nd(x: Tensor, indices: Tensor, updates: Tensor, *, reduction: str = "none") -> Tensor:
  k = indices.shape[-1]
  rest = x.shape[k:]
  flat_x = x.reshape((prod(x.shape[:k]),) + rest)
  flat = _flat_index(indices, x.shape[:k]).reshape((-1,) + (1,) * len(rest)).expand((-1,) + rest)
  flat_updates = updates.reshape((-1,) + rest)
  return _scatter(flat_x, 0, flat, flat_updates, reduction).reshape(x.shape)


@op("ReverseSequence", static=(1,))
def reverse_sequence(x: Tensor, sequence_lens: list[int], *, batch_axis: int = 1, time_axis: int = 0) -> Tensor:
  # each batch entry's first len steps reversed, the rest kept: a gather along time with a host-built index
  t = np.arange(x.shape[time_axis]).reshape(-1, 1)
  lens = np.array(sequence_lens).reshape(1, -1)
  idx = np.where(t < lens, lens - 1 - t, t)  # (time, batch)
  if batch_axis < time_axis: idx = idx.T
  idx = np.broadcast_to(idx.reshape(idx.shape + (1,) * (x.ndim - 2)), x.shape)
  return x.gather(time_axis, Tensor(np.ascontiguousarray(idx), device=x.device))


@op("Expand", static=(1,))
def expand(x: Tensor, shape: list[int]) -> Tensor:
  out = tuple(np.broadcast_shapes(x.shape, tuple(shape)))  # both ways: a 1 in `shape` keeps x's dimension
  return x.reshape((1,) * (len(out) - x.ndim) + x.shape).expand(out)


@op("Tile", static=(1,))
def tile(x: Tensor, repeats: list[int]) -> Tensor: return x.repeat(*repeats)


@op("Pad", static=(1, 3))
def pad(x: Tensor, pads_in: list[int] | None = None, constant_value: Tensor | None = None,
        axes: list[int] | None = None, *, mode: str = "constant", pads: list[int] | None = None,
        value: float = 0.0) -> Tensor:
  pads = pads_in if pads_in is not None else pads
  if pads is None: raise ValueError("Pad needs pads")
  axes = [_axis(a, x.ndim) for a in axes] if axes is not None else list(range(x.ndim))
  pairs: list[tuple[int, int]] = [(0, 0)] * x.ndim
  for i, a in enumerate(axes): pairs[a] = (pads[i], pads[i + len(axes)])
  modes = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}
  if mode not in modes: raise ValueError(f"Pad mode must be one of {', '.join(modes)}, not {mode!r}")
  if mode != "constant" or constant_value is None: return x.pad(tuple(pairs), modes[mode], value)
  # a tensor fill value: pad with zeros, then put the value where the mask of padded cells is
  mask = Tensor.ones(x.shape, dtype=dtypes.bool, device=x.device).pad(tuple(pairs))
  return mask.where(x.pad(tuple(pairs)), constant_value.reshape(()))


@op("DepthToSpace")
def depth_to_space(x: Tensor, *, blocksize: int = 0, mode: str = "DCR") -> Tensor:
  b, c, h, w = x.shape
  bs = blocksize
  if mode == "DCR": x = x.reshape(b, bs, bs, c // bs ** 2, h, w).permute(0, 3, 4, 1, 5, 2)
  else: x = x.reshape(b, c // bs ** 2, bs, bs, h, w).permute(0, 1, 4, 2, 5, 3)
  return x.reshape(b, c // bs ** 2, h * bs, w * bs)


@op("SpaceToDepth")
def space_to_depth(x: Tensor, *, blocksize: int = 0, mode: str = "DCR") -> Tensor:
  b, c, h, w = x.shape
  bs = blocksize
  x = x.reshape(b, c, h // bs, bs, w // bs, bs).permute((0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4))
  return x.reshape(b, c * bs * bs, h // bs, w // bs)


@op("NonZero")
def nonzero(x: Tensor) -> Tensor: return x.nonzero().transpose().cast(dtypes.int64)  # (ndim, count): data-dependent


@op("Compress")
def compress(x: Tensor, condition: Tensor, *, axis: int | None = None) -> Tensor:
  keep = [i for i, c in enumerate(condition.numpy().tolist()) if c]  # the result's length depends on the data
  if axis is None: return x.flatten()[Tensor(np.array(keep, np.int64), device=x.device)] if keep else x.flatten()[:0]
  axis = _axis(axis, x.ndim)
  index = Tensor(np.array(keep, np.int64), device=x.device)
  return x[(slice(None),) * axis + (index,)] if keep else x[(slice(None),) * axis + (slice(0, 0),)]


@op("Trilu", static=(1,))
def trilu(x: Tensor, k: int | None = None, *, upper: int = 1) -> Tensor:
  return x.triu(k or 0) if upper else x.tril(k or 0)


@op("OneHot", static=(1,))
def one_hot(indices: Tensor, depth: int | float, values: Tensor, *, axis: int = -1) -> Tensor:
  depth = int(depth if not isinstance(depth, list) else depth[0])
  idx = (indices < 0).where(indices + depth, indices).cast(dtypes.int64)
  axis = _axis(axis, indices.ndim + 1)
  shape = [1] * (indices.ndim + 1)
  shape[axis] = depth
  hot = idx.unsqueeze(axis) == Tensor.arange(depth, dtype=dtypes.int64, device=indices.device).reshape(shape)
  return hot.where(values[1], values[0])


@op("EyeLike")
def eye_like(x: Tensor, *, dtype: int | None = None, k: int = 0) -> Tensor:
  n, m = x.shape
  rows = Tensor.arange(n, device=x.device).reshape(n, 1)
  cols = Tensor.arange(m, device=x.device).reshape(1, m)
  return (cols - rows == k).cast(device_dtype(onnx_dtype(dtype), x.device) if dtype is not None else x.dtype)


@op("Dropout", static=(1, 2))
def dropout(x: Tensor, ratio_in: float | None = None, training_mode: bool | None = None, *, seed: int | None = None,
            ratio: float | None = None, is_test: int = 1, n_outputs: int = 1) -> Tensor | tuple[Tensor, Tensor]:
  if training_mode or not is_test:
    raise NotImplementedError("Dropout in training mode is not supported (inference only)")
  return x if n_outputs == 1 else (x, Tensor.ones(x.shape, dtype=dtypes.bool, device=x.device))


# ---- reductions --------------------------------------------------------------------------------------------

def _reduce(name: str, pre: Callable[[Tensor], Tensor], red: Callable[[Tensor, tuple[int, ...]], Tensor],
            post: Callable[[Tensor], Tensor], real: bool = False) -> None:
  def reduce(x: Tensor, axes_in: list[int] | None = None, *, axes: list[int] | None = None, keepdims: int = 1,
             noop_with_empty_axes: int = 0) -> Tensor:
    axes = axes_in if axes_in is not None else axes  # an input since opset 18 (13 for ReduceSum)
    dtype = x.dtype
    # the spec keeps an integer input's dtype; onnxruntime computes in double and truncates back into it
    if real and not dtype.is_float: x = x.cast(device_dtype(dtypes.float64, x.device))
    if not axes:
      # a reduction over no axes still runs the elementwise steps (the spec's ReduceL2 is |x|, ReduceLogSum log(x))
      if noop_with_empty_axes: return post(pre(x)).cast(dtype)
      axes = list(range(x.ndim))
    ax = tuple(sorted(_axis(a, x.ndim) for a in axes))
    out = post(red(pre(x), ax)).cast(dtype)
    return out.reshape(tuple(1 if i in ax else s for i, s in enumerate(x.shape))) if keepdims else out
  op(name, static=(1,))(reduce)


def _mean(x: Tensor, ax: tuple[int, ...]) -> Tensor:
  # the spec leaves the mean of an empty set undefined: onnxruntime gives 0 where Tensor.mean (as numpy) gives NaN
  return x.mean(ax) if x.numel() else x.sum(ax)


def _extreme(largest: bool) -> Callable[[Tensor, tuple[int, ...]], Tensor]:
  def red(x: Tensor, ax: tuple[int, ...]) -> Tensor:
    if all(x.shape[a] for a in ax): return x.max(ax) if largest else x.min(ax)
    # over an empty axis the spec's identity (opset 20): -inf for a max (the dtype's least value without one), +inf
    # for a min, as onnxruntime; Tensor.max has none and raises
    value = (x.dtype.min if largest else x.dtype.max) if not x.dtype.is_float else -math.inf if largest else math.inf
    return Tensor.full(tuple(s for i, s in enumerate(x.shape) if i not in ax), value, dtype=x.dtype, device=x.device)
  return red


_same: Callable[[Tensor], Tensor] = lambda x: x  # noqa: E731
_reduce("ReduceSum", _same, lambda x, ax: x.sum(ax, dtype=x.dtype), _same)
_reduce("ReduceMean", _same, _mean, _same, real=True)
_reduce("ReduceMax", _same, _extreme(largest=True), _same)
_reduce("ReduceMin", _same, _extreme(largest=False), _same)
_reduce("ReduceProd", _same, lambda x, ax: x.prod(ax, dtype=x.dtype), _same)
_reduce("ReduceL1", Tensor.abs, lambda x, ax: x.sum(ax, dtype=x.dtype), _same)
_reduce("ReduceL2", Tensor.square, lambda x, ax: x.sum(ax), Tensor.sqrt, real=True)
_reduce("ReduceSumSquare", Tensor.square, lambda x, ax: x.sum(ax, dtype=x.dtype), _same)
_reduce("ReduceLogSum", _same, lambda x, ax: x.sum(ax), Tensor.log, real=True)
_reduce("ReduceLogSumExp", _same, lambda x, ax: x.logsumexp(ax), _same, real=True)


def _arg(x: Tensor, axis: int, keepdims: int, select_last_index: int, largest: bool) -> Tensor:
  axis = _axis(axis, x.ndim)
  src = x.flip(axis) if select_last_index else x  # the last of equal values is the first of the flipped axis
  idx = src.argmax(axis, keepdim=bool(keepdims)) if largest else src.argmin(axis, keepdim=bool(keepdims))
  idx = idx.cast(dtypes.int64)
  return x.shape[axis] - 1 - idx if select_last_index else idx


@op("ArgMax")
def argmax(x: Tensor, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Tensor:
  return _arg(x, axis, keepdims, select_last_index, True)


@op("ArgMin")
def argmin(x: Tensor, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Tensor:
  return _arg(x, axis, keepdims, select_last_index, False)


def _cumulative(x: Tensor, axis: int | list[int], exclusive: int, reverse: int, fn: Callable[[Tensor, int], Tensor],
                identity: int) -> Tensor:
  axis = _axis(axis if isinstance(axis, int) else axis[0], x.ndim)
  if reverse: x = x.flip(axis)
  out = fn(x, axis).cast(x.dtype)
  if exclusive:  # shift by one: the first is the identity, each later one leaves out its own element
    pairs = [(0, 0)] * x.ndim
    pairs[axis] = (1, -1)
    out = out.pad(tuple(pairs), value=identity)
  return out.flip(axis) if reverse else out


@op("CumSum", static=(1,))
def cumsum(x: Tensor, axis: int | list[int], *, exclusive: int = 0, reverse: int = 0) -> Tensor:
  return _cumulative(x, axis, exclusive, reverse, Tensor.cumsum, 0)


@op("CumProd", static=(1,))
def cumprod(x: Tensor, axis: int | list[int], *, exclusive: int = 0, reverse: int = 0) -> Tensor:
  return _cumulative(x, axis, exclusive, reverse, Tensor.cumprod, 1)


@op("TopK", static=(1,))
def topk(x: Tensor, k_input: int | list[int] | None = None, *, axis: int = -1, largest: int = 1,
         sorted: int = 1, k: int | None = None) -> tuple[Tensor, Tensor]:  # noqa: A002
  """k is an input from opset 10 on, an attribute before."""
  if k_input is None and k is None: raise ValueError("TopK needs k (an input from opset 10, an attribute before)")
  n = k if k_input is None else k_input if isinstance(k_input, int) else k_input[0]
  values, indices = x.topk(n, _axis(axis, x.ndim), bool(largest))
  return values, indices.cast(dtypes.int64)


@op("Softmax")
def softmax(x: Tensor, *, axis: int | None = None, opset: int = 13) -> Tensor:
  return _coerced(x, axis, opset, Tensor.softmax)


@op("LogSoftmax")
def log_softmax(x: Tensor, *, axis: int | None = None, opset: int = 13) -> Tensor:
  return _coerced(x, axis, opset, Tensor.log_softmax)


@op("Hardmax")
def hardmax(x: Tensor, *, axis: int | None = None, opset: int = 13) -> Tensor:
  def hard(t: Tensor, axis: int) -> Tensor:
    hot = t.argmax(axis).one_hot(t.shape[axis]).cast(t.dtype)  # the class axis comes last: move it to `axis`
    return hot.permute(tuple(range(axis)) + (t.ndim - 1,) + tuple(range(axis, t.ndim - 1)))
  return _coerced(x, axis, opset, hard)


def _coerced(x: Tensor, axis: int | None, opset: int, fn: Callable[[Tensor, int], Tensor]) -> Tensor:
  """Before opset 13 the softmax family flattened x to 2-D at `axis` (default 1) and worked on the second axis; from
  13 on it works on `axis` (default -1). None: the attribute was not given (an explicit -1 before 13 is the last axis,
  where it was taken for the default 1)."""
  if opset >= 13: return fn(x, _axis(-1 if axis is None else axis, x.ndim))
  axis = _axis(1 if axis is None else axis, x.ndim)
  return fn(x.reshape(prod(x.shape[:axis]), prod(x.shape[axis:])), 1).reshape(x.shape)


# ---- losses ------------------------------------------------------------------------------------------------

def _nll(logp: Tensor, target: Tensor, weight: Tensor | None, reduction: str, ignore_index: int | None) -> Tensor:
  """Negative log-likelihood of the class `target` along axis 1 of `logp`, weighted and reduced as the spec."""
  if reduction not in ("none", "sum", "mean"): raise ValueError(f"unknown loss reduction {reduction!r}")
  keep = target != ignore_index if ignore_index is not None else Tensor.ones(target.shape, dtype=dtypes.bool,
                                                                             device=target.device)
  safe = keep.where(target, 0)  # an ignored target may be out of range: read class 0 there and zero it
  picked = logp.gather(1, safe.unsqueeze(1)).squeeze(1)
  w = (weight[safe] if weight is not None else Tensor.ones(target.shape, dtype=logp.dtype, device=logp.device))
  w = keep.where(w, 0).cast(logp.dtype)
  loss = -picked * w
  if reduction == "none": return loss
  return loss.sum() if reduction == "sum" else loss.sum() / w.sum()


@op("NegativeLogLikelihoodLoss")
def nll_loss(x: Tensor, target: Tensor, weight: Tensor | None = None, *, ignore_index: int | None = None,
             reduction: str = "mean") -> Tensor:
  return _nll(x, target, weight, reduction, ignore_index)


@op("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy(scores: Tensor, labels: Tensor, weights: Tensor | None = None, *,
                          ignore_index: int | None = None, reduction: str = "mean",
                          n_outputs: int = 1) -> Tensor | tuple[Tensor, Tensor]:
  logp = scores.log_softmax(1)
  loss = _nll(logp, labels, weights, reduction, ignore_index)
  return loss if n_outputs == 1 else (loss, logp)


# ---- matrix products ---------------------------------------------------------------------------------------

@op("MatMul")
def matmul(a: Tensor, b: Tensor) -> Tensor: return a.matmul(b)


@op("Gemm")
def gemm(a: Tensor, b: Tensor, c: Tensor | None = None, *, alpha: float = 1.0, beta: float = 1.0, transA: int = 0,
         transB: int = 0, broadcast: int = 0) -> Tensor:  # broadcast: opset < 7, C broadcasts either way
  out = (a.transpose() if transA else a) @ (b.transpose() if transB else b)
  if alpha != 1.0: out = out * alpha
  if c is not None: out = out + (c * beta if beta != 1.0 else c)
  return out


def _window_bias(q: int, kv: int, offset: np.ndarray, causal: bool, left: int, right: int) -> np.ndarray:
  """0 where query i (at absolute position i + offset, per batch row of `offset`) may attend key j, -inf elsewhere:
  causal (j <= i + offset) and within the sliding window (left/right; -1 leaves a side open)."""
  diff = np.arange(q).reshape(1, q, 1) + offset.reshape(-1, 1, 1) - np.arange(kv).reshape(1, 1, kv)
  allowed = np.ones(diff.shape, bool)
  if causal: allowed &= diff >= 0
  if left >= 0: allowed &= diff <= left
  if right >= 0: allowed &= -diff <= right
  return np.where(allowed, 0.0, -np.inf).astype(np.float32)


@op("Attention", static=(6,))
def attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None, past_key: Tensor | None = None,
              past_value: Tensor | None = None, nonpad_kv_seqlen: list[int] | None = None, *,
              is_causal: int = 0, kv_num_heads: int | None = None, q_num_heads: int | None = None,
              qk_matmul_output_mode: int = 0, scale: float | None = None, softcap: float = 0.0,
              softmax_precision: int | None = None, left_window_size: int = -1, right_window_size: int = -1,
              n_outputs: int = 1) -> Tensor | tuple[Tensor, ...]:
  """Scaled dot-product attention (opsets 23+), following the reference: 3-D inputs are split into heads,
  grouped-query heads repeat, masks and the causal/window frontier add -inf, fully masked rows give zeros."""
  rank3 = q.ndim == 3
  if rank3:
    if q_num_heads is None or kv_num_heads is None: raise ValueError("Attention on 3-D inputs needs the head counts")
    def heads(t: Tensor, n: int) -> Tensor: return t.reshape(t.shape[0], t.shape[1], n, -1).permute(0, 2, 1, 3)
    q, k, v = heads(q, q_num_heads), heads(k, kv_num_heads), heads(v, kv_num_heads)
  root = math.sqrt(scale if scale is not None else 1 / math.sqrt(q.shape[3]))  # applied to Q and K alike
  present_k = past_key.cat(k, dim=2) if past_key is not None else k
  present_v = past_value.cat(v, dim=2) if past_value is not None else v
  n_q, n_kv = q.shape[2], present_k.shape[2]
  bias: Tensor | None = None
  if attn_mask is not None:
    if attn_mask.shape[-1] < n_kv:  # a mask shorter than the keys leaves the rest out
      attn_mask = attn_mask.pad(((0, 0),) * (attn_mask.ndim - 1) + ((0, n_kv - attn_mask.shape[-1]),),
                                value=False if attn_mask.dtype == dtypes.bool else -math.inf)
    bias = attn_mask.where(0.0, -math.inf).cast(q.dtype) if attn_mask.dtype == dtypes.bool else attn_mask
  windowed = left_window_size >= 0 or right_window_size >= 0
  if is_causal or windowed:
    if past_key is None and nonpad_kv_seqlen is not None:  # an external cache: each batch row has its own frontier
      offset = np.array(nonpad_kv_seqlen).reshape(-1) - n_q
    else: offset = np.array([past_key.shape[2] if past_key is not None else 0])
    frontier = _window_bias(n_q, n_kv, offset, bool(is_causal), left_window_size, right_window_size)
    frontier_t = Tensor(frontier if len(offset) == 1 else frontier[:, None], device=q.device).cast(q.dtype)
    bias = frontier_t.reshape(frontier_t.shape[-2:]) + (bias if bias is not None else 0) if len(offset) == 1 \
        else frontier_t + (bias if bias is not None else 0)
  if nonpad_kv_seqlen is not None:  # keys past each row's length are padding
    pad = np.where(np.arange(n_kv)[None] < np.array(nonpad_kv_seqlen)[:, None], 0.0, -np.inf).astype(np.float32)
    pad_t = Tensor(pad.reshape(len(nonpad_kv_seqlen), 1, 1, n_kv), device=q.device).cast(q.dtype)
    bias = pad_t if bias is None else bias + pad_t
  if present_k.shape[1] != q.shape[1]:  # grouped-query attention: each key/value head serves several query heads
    reps = q.shape[1] // present_k.shape[1]
    kk, vv = present_k.repeat_interleave(reps, dim=1), present_v.repeat_interleave(reps, dim=1)
  else: kk, vv = present_k, present_v
  qk = (q * root) @ (kk * root).transpose(-1, -2)
  if softcap > 0: qk = (qk / softcap).tanh() * softcap
  scores = qk + bias if bias is not None else qk
  qk_out = scores if qk_matmul_output_mode == 2 else qk
  if softmax_precision is not None: scores = scores.cast(device_dtype(onnx_dtype(softmax_precision), q.device))
  top = scores.max(-1, keepdim=True)
  e = (scores - (top == -math.inf).where(0, top)).exp()  # a row of -inf only must not make nan
  total = e.sum(-1, keepdim=True)
  probs = e / (total == 0).where(1, total)
  if bias is not None: probs = (bias.max(-1, keepdim=True) == -math.inf).where(0, probs)
  if qk_matmul_output_mode == 3: qk_out = probs
  out = probs.cast(q.dtype) @ vv
  if rank3: out = out.permute(0, 2, 1, 3).reshape(out.shape[0], out.shape[2], -1)
  return (out, present_k, present_v, qk_out.cast(q.dtype))[:n_outputs] if n_outputs > 1 else out


@op("Einsum")
def einsum(*xs: Tensor, equation: str = "") -> Tensor: return Tensor.einsum(equation.replace(" ", ""), *xs)


# ---- quantization (per tensor, per axis, or in blocks along an axis) ----------------------------------------

def _along(param: Tensor, x: Tensor, axis: int, block_size: int) -> Tensor:
  """A scale or zero point shaped to broadcast over x: a scalar as is, a vector along `axis`, blocks repeated."""
  if param.ndim == 0 or param.numel() == 1 and block_size == 0: return param.reshape(())
  axis = _axis(axis, x.ndim)
  if block_size: return param.repeat_interleave(block_size, dim=axis).shrink(
    tuple((0, s) for s in x.shape))  # the last block may be partial
  return param.reshape(tuple(-1 if i == axis else 1 for i in range(x.ndim)))


def _saturate(x: Tensor, dtype: DType) -> Tensor: return x.round().clip(dtype.min, dtype.max).cast(dtype)


@op("DequantizeLinear")
def dequantize_linear(x: Tensor, scale: Tensor, zero_point: Tensor | None = None, *, axis: int = 1,
                      block_size: int = 0, output_dtype: int = 0) -> Tensor:
  out = device_dtype(onnx_dtype(output_dtype), x.device) if output_dtype else scale.dtype
  xf = x.cast(dtypes.float32)
  if zero_point is not None: xf = xf - _along(zero_point, x, axis, block_size).cast(dtypes.float32)
  return (xf * _along(scale, x, axis, block_size).cast(dtypes.float32)).cast(out)


@op("QuantizeLinear")
def quantize_linear(x: Tensor, scale: Tensor, zero_point: Tensor | None = None, *, axis: int = 1,
                    block_size: int = 0, output_dtype: int = 0, saturate: int = 1, precision: int = 0) -> Tensor:
  out = zero_point.dtype if zero_point is not None else onnx_dtype(output_dtype) if output_dtype else dtypes.uint8
  y = (x.cast(dtypes.float32) / _along(scale, x, axis, block_size).cast(dtypes.float32)).round()  # half to even
  if zero_point is not None: y = y + _along(zero_point, x, axis, block_size).cast(dtypes.float32)
  return _saturate(y, out)


@op("DynamicQuantizeLinear")
def dynamic_quantize_linear(x: Tensor, *, n_outputs: int = 3) -> tuple[Tensor, ...]:
  lo, hi = x.min().minimum(0), x.max().maximum(0)  # the range always holds 0, so that 0 is exact
  scale = (hi - lo) / 255
  zero_point = _saturate(-lo / scale, dtypes.uint8)
  return (_saturate((x / scale).round() + zero_point.cast(x.dtype), dtypes.uint8), scale, zero_point)[:n_outputs]


def _centered(x: Tensor, zero_point: Tensor | None, shape: tuple[int, ...] | None = None) -> Tensor:
  xi = x.cast(dtypes.int32)
  if zero_point is None: return xi
  zp = zero_point.cast(dtypes.int32)
  return xi - (zp.reshape(shape) if shape is not None and zp.numel() > 1 else zp.reshape(()) if zp.numel() == 1 else zp)


@op("MatMulInteger")
def matmul_integer(a: Tensor, b: Tensor, a_zero_point: Tensor | None = None,
                   b_zero_point: Tensor | None = None) -> Tensor:
  return _centered(a, a_zero_point, (-1, 1)) @ _centered(b, b_zero_point)  # a's zero points are per row


@op("ConvInteger")
def conv_integer(x: Tensor, w: Tensor, x_zero_point: Tensor | None = None, w_zero_point: Tensor | None = None, *,
                 auto_pad: str = "NOTSET", dilations: list[int] | None = None, group: int = 1,
                 kernel_shape: list[int] | None = None, pads: list[int] | None = None,
                 strides: list[int] | None = None) -> Tensor:
  wz = _centered(w, w_zero_point, (-1,) + (1,) * (w.ndim - 1))  # w's zero points are per output channel
  y = conv(_centered(x, x_zero_point), wz, None, auto_pad=auto_pad, dilations=dilations, group=group, pads=pads,
           strides=strides)
  return y.cast(dtypes.int32)  # the sum is taken wider


def _requantize(acc: Tensor, scale: Tensor, y_scale: Tensor, y_zero_point: Tensor | None, dtype: DType) -> Tensor:
  y = (acc.cast(dtypes.float32) * (scale / y_scale.cast(dtypes.float32))).round()
  if y_zero_point is not None: y = y + y_zero_point.cast(dtypes.float32)
  return _saturate(y, dtype)


@op("QLinearMatMul")
def qlinear_matmul(a: Tensor, a_scale: Tensor, a_zero_point: Tensor, b: Tensor, b_scale: Tensor,
                   b_zero_point: Tensor, y_scale: Tensor, y_zero_point: Tensor) -> Tensor:
  acc = _centered(a, a_zero_point, (-1, 1)) @ _centered(b, b_zero_point)
  return _requantize(acc, a_scale.cast(dtypes.float32).reshape(-1, 1) * b_scale.cast(dtypes.float32), y_scale,
                     y_zero_point, y_zero_point.dtype)


@op("QLinearConv")
def qlinear_conv(x: Tensor, x_scale: Tensor, x_zero_point: Tensor, w: Tensor, w_scale: Tensor, w_zero_point: Tensor,
                 y_scale: Tensor, y_zero_point: Tensor, b: Tensor | None = None, *, auto_pad: str = "NOTSET",
                 dilations: list[int] | None = None, group: int = 1, kernel_shape: list[int] | None = None,
                 pads: list[int] | None = None, strides: list[int] | None = None) -> Tensor:
  n = w.ndim - 2
  acc = conv_integer(x, w, x_zero_point, w_zero_point, auto_pad=auto_pad, dilations=dilations, group=group,
                     pads=pads, strides=strides)
  if b is not None: acc = acc + b.cast(dtypes.int32).reshape((1, -1) + (1,) * n)
  scale = (x_scale.cast(dtypes.float32) * w_scale.cast(dtypes.float32)).reshape((1, -1) + (1,) * n)
  return _requantize(acc, scale, y_scale, y_zero_point, y_zero_point.dtype)


# ---- convolution and pooling -------------------------------------------------------------------------------

def _pads(x: Tensor, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int], auto_pad: str,
          pads: Sequence[int] | None) -> list[tuple[int, int]]:
  """(before, after) per spatial axis from ONNX's pads (all begins, then all ends) or auto_pad."""
  n = len(kernel)
  if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    out = []
    for i, k, s, d in zip(x.shape[2:], kernel, strides, dilations):
      total = max((-(-i // s) - 1) * s + (k - 1) * d + 1 - i, 0)
      small, big = total // 2, total - total // 2
      out.append((small, big) if auto_pad == "SAME_UPPER" else (big, small))
    return out
  if auto_pad == "VALID" or pads is None: return [(0, 0)] * n
  if auto_pad != "NOTSET": raise ValueError(f"unknown auto_pad {auto_pad!r}")
  return [(pads[i], pads[i + n]) for i in range(n)]


def _flat(pairs: Sequence[tuple[int, int]]) -> tuple[int, ...]:
  """torch's flat padding order (last axis first) that Tensor's conv and pools take."""
  return tuple(p for pair in reversed(pairs) for p in pair)


@op("Conv")
def conv(x: Tensor, w: Tensor, b: Tensor | None = None, *, auto_pad: str = "NOTSET", dilations: list[int] | None = None,
         group: int = 1, kernel_shape: list[int] | None = None, pads: list[int] | None = None,
         strides: list[int] | None = None) -> Tensor:
  n = w.ndim - 2
  st, dl = strides or [1] * n, dilations or [1] * n
  pairs = _pads(x, w.shape[2:], st, dl, auto_pad, pads)
  return x.conv2d(w, b, groups=group, stride=st, dilation=dl, padding=_flat(pairs))


@op("ConvTranspose")
def conv_transpose(x: Tensor, w: Tensor, b: Tensor | None = None, *, auto_pad: str = "NOTSET",
                   dilations: list[int] | None = None, group: int = 1, kernel_shape: list[int] | None = None,
                   output_padding: list[int] | None = None, output_shape: list[int] | None = None,
                   pads: list[int] | None = None, strides: list[int] | None = None) -> Tensor:
  n = w.ndim - 2
  st, dl, op_ = strides or [1] * n, dilations or [1] * n, output_padding or [0] * n
  ks = w.shape[2:]
  full = [(i - 1) * s + (k - 1) * d + 1 + o for i, s, k, d, o in zip(x.shape[2:], st, ks, dl, op_)]
  if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    target = list(output_shape)[-n:] if output_shape is not None else [i * s for i, s in zip(x.shape[2:], st)]
    pairs = []
    for f, t in zip(full, target):
      total = f - t
      small, big = total // 2, total - total // 2  # the odd cell goes at the end for SAME_UPPER only (the spec)
      pairs.append((small, big) if auto_pad == "SAME_UPPER" else (big, small))
  elif auto_pad == "VALID" or pads is None: pairs = [(0, 0)] * n
  else: pairs = [(pads[i], pads[i + n]) for i in range(n)]
  # the transposed conv without padding, output_padding's extra zeros at the end, then the pads cropped (or added)
  y = x.conv_transpose2d(w, None, groups=group, stride=st, dilation=dl)
  y = y.pad(((0, 0), (0, 0)) + tuple((-pb, o - pe) for (pb, pe), o in zip(pairs, op_)))
  return y if b is None else y + b.reshape((1, -1) + (1,) * n)


def _pool_setup(x: Tensor, kernel_shape: list[int], strides: list[int] | None, dilations: list[int] | None,
                auto_pad: str, pads: list[int] | None) -> tuple[list[int], list[int], tuple[int, ...]]:
  n = len(kernel_shape)
  st, dl = strides or [1] * n, dilations or [1] * n
  return st, dl, _flat(_pads(x, kernel_shape, st, dl, auto_pad, pads))


@op("MaxPool")
def max_pool(x: Tensor, *, auto_pad: str = "NOTSET", ceil_mode: int = 0, dilations: list[int] | None = None,
             kernel_shape: list[int] | None = None, pads: list[int] | None = None, storage_order: int = 0,
             strides: list[int] | None = None, n_outputs: int = 1) -> Tensor | tuple[Tensor, Tensor]:
  if kernel_shape is None: raise ValueError("MaxPool needs kernel_shape")
  st, dl, flat = _pool_setup(x, kernel_shape, strides, dilations, auto_pad, pads)
  if n_outputs == 1:
    return x.max_pool2d(tuple(kernel_shape), tuple(st), tuple(dl), flat, ceil_mode=bool(ceil_mode))
  out, idx = x.max_pool2d(tuple(kernel_shape), tuple(st), tuple(dl), flat, ceil_mode=bool(ceil_mode),
                          return_indices=True)
  n = len(kernel_shape)
  spatial = x.shape[2:]
  idx = idx.cast(dtypes.int64)
  if storage_order:  # column-major positions in the (H, W) plane
    if n != 2: raise NotImplementedError("MaxPool storage_order=1 is only defined for 2-D pooling")
    idx = (idx % spatial[1]) * spatial[0] + idx // spatial[1]
  # ONNX counts positions over the whole tensor, Tensor's within each (n, c) plane
  plane = Tensor.arange(x.shape[0] * x.shape[1], dtype=dtypes.int64, device=x.device) * prod(spatial)
  return out, idx + plane.reshape((x.shape[0], x.shape[1]) + (1,) * n)


@op("AveragePool")
def average_pool(x: Tensor, *, auto_pad: str = "NOTSET", ceil_mode: int = 0, count_include_pad: int = 0,
                 dilations: list[int] | None = None, kernel_shape: list[int] | None = None,
                 pads: list[int] | None = None, strides: list[int] | None = None) -> Tensor:
  if kernel_shape is None: raise ValueError("AveragePool needs kernel_shape")
  st, dl, flat = _pool_setup(x, kernel_shape, strides, dilations, auto_pad, pads)
  return x.avg_pool2d(tuple(kernel_shape), tuple(st), tuple(dl), flat, ceil_mode=bool(ceil_mode),
                      count_include_pad=bool(count_include_pad))


@op("LpPool")
def lp_pool(x: Tensor, *, auto_pad: str = "NOTSET", ceil_mode: int = 0, dilations: list[int] | None = None,
            kernel_shape: list[int] | None = None, p: int = 2, pads: list[int] | None = None,
            strides: list[int] | None = None) -> Tensor:
  if kernel_shape is None: raise ValueError("LpPool needs kernel_shape")
  if ceil_mode: raise NotImplementedError("LpPool with ceil_mode=1 is not supported")
  st, dl, flat = _pool_setup(x, kernel_shape, strides, dilations, auto_pad, pads)
  # the window sum of |x|^p is the padded-average times the window size (zeros in the padding add nothing)
  sums = x.abs().pow(p).avg_pool2d(tuple(kernel_shape), tuple(st), tuple(dl), flat, count_include_pad=True)
  return (sums * prod(kernel_shape)).pow(1 / p)


@op("MaxUnpool")
def max_unpool(x: Tensor, indices: Tensor, output_shape: Tensor | None = None, *, kernel_shape: list[int] | None = None,
               pads: list[int] | None = None, strides: list[int] | None = None) -> Tensor:
  if kernel_shape is None: raise ValueError("MaxUnpool needs kernel_shape")
  n = len(kernel_shape)
  st, pd = strides or [1] * n, pads or [0] * (2 * n)
  shape = x.shape[:2] + tuple((i - 1) * s + k - pd[j] - pd[j + n]
                              for j, (i, s, k) in enumerate(zip(x.shape[2:], st, kernel_shape)))
  # MaxPool's indices count over the whole tensor: scatter the values into a flat zero tensor
  flat = Tensor.zeros(prod(shape), dtype=x.dtype, device=x.device)
  y = flat.scatter(0, indices.flatten(), x.flatten()).reshape(shape)
  if output_shape is None: return y
  # a larger output_shape keeps the inferred block at the start and pads the rest with zeros (the reference)
  target = output_shape.numpy().tolist()  # decides a shape: read on the host
  return y.pad(tuple((0, t - s) for s, t in zip(shape, target)))


@op("GlobalAveragePool")
def global_average_pool(x: Tensor) -> Tensor: return x.mean(tuple(range(2, x.ndim)), keepdim=True)


@op("GlobalMaxPool")
def global_max_pool(x: Tensor) -> Tensor: return x.max(tuple(range(2, x.ndim)), keepdim=True)


@op("GlobalLpPool")
def global_lp_pool(x: Tensor, *, p: int = 2) -> Tensor:
  return x.abs().pow(p).sum(tuple(range(2, x.ndim)), keepdim=True).pow(1 / p)


# ---- normalization -----------------------------------------------------------------------------------------

def _channel(t: Tensor, ndim: int) -> Tensor: return t.reshape((1, -1) + (1,) * (ndim - 2))


@op("BatchNormalization")
def batch_norm(x: Tensor, scale: Tensor, b: Tensor, mean: Tensor, var: Tensor, *, epsilon: float = 1e-5,
               momentum: float = 0.9, training_mode: int = 0, spatial: int = 1, is_test: int = 1,
               consumed_inputs: list[int] | None = None, n_outputs: int = 1) -> Tensor | tuple[Tensor, ...]:
  if not is_test: training_mode = 1  # opset < 7 said is_test=0 for training
  if not training_mode:
    inv = (var + epsilon).rsqrt()
    return (x - _channel(mean, x.ndim)) * _channel(inv * scale, x.ndim) + _channel(b, x.ndim)
  axes = (0,) + tuple(range(2, x.ndim))  # training: the batch's statistics, and the running ones moved toward them
  bm, bv = x.mean(axes), x.var(axes, correction=0)
  y = (x - _channel(bm, x.ndim)) * _channel((bv + epsilon).rsqrt() * scale, x.ndim) + _channel(b, x.ndim)
  return (y, mean * momentum + bm * (1 - momentum), var * momentum + bv * (1 - momentum))[:n_outputs]


def _stash(x: Tensor, stash_type: int) -> Tensor:
  return x.cast(device_dtype(onnx_dtype(stash_type), x.device)) if x.dtype.is_float else x


@op("LayerNormalization")
def layer_norm(x: Tensor, scale: Tensor, b: Tensor | None = None, *, axis: int = -1, epsilon: float = 1e-5,
               stash_type: int = 1, n_outputs: int = 1) -> Tensor | tuple[Tensor, ...]:
  axes = tuple(range(_axis(axis, x.ndim), x.ndim))
  xs = _stash(x, stash_type)
  m = xs.mean(axes, keepdim=True)
  inv = ((xs - m).square().mean(axes, keepdim=True) + epsilon).rsqrt()
  y = ((xs - m) * inv).cast(x.dtype) * scale
  if b is not None: y = y + b
  return (y, m, inv)[:n_outputs] if n_outputs > 1 else y


@op("InstanceNormalization")
def instance_norm(x: Tensor, scale: Tensor, b: Tensor, *, epsilon: float = 1e-5) -> Tensor:
  return x.layernorm(tuple(range(2, x.ndim)), epsilon) * _channel(scale, x.ndim) + _channel(b, x.ndim)


@op("GroupNormalization")
def group_norm(x: Tensor, scale: Tensor, b: Tensor, *, epsilon: float = 1e-5, num_groups: int = 0,
               stash_type: int = 1) -> Tensor:
  n, c = x.shape[:2]
  y = _stash(x, stash_type).reshape(n, num_groups, -1).layernorm(-1, epsilon).reshape(x.shape).cast(x.dtype)
  if scale.shape[0] != c:  # opset 18 gave one scale and bias per group; 21 gives one per channel
    scale, b = scale.repeat_interleave(c // num_groups), b.repeat_interleave(c // num_groups)
  return y * _channel(scale, x.ndim) + _channel(b, x.ndim)


@op("RMSNormalization")
def rms_norm(x: Tensor, scale: Tensor, *, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1) -> Tensor:
  axes = tuple(range(_axis(axis, x.ndim), x.ndim))
  xs = _stash(x, stash_type)
  return (xs * (xs.square().mean(axes, keepdim=True) + epsilon).rsqrt()).cast(x.dtype) * scale


@op("LRN")
def lrn(x: Tensor, *, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0, size: int = 0) -> Tensor:
  # the sum of squares over `size` neighbouring channels (floor((size-1)/2) before, ceil after), as shifted slices
  c = x.shape[1]
  before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
  sq = x.square().pad(((0, 0), (before, after)) + ((0, 0),) * (x.ndim - 2))
  window = _fold([sq[:, k:k + c] for k in range(size)], Tensor.add)
  return x / (bias + (alpha / size) * window).pow(beta)


@op("LpNormalization")
def lp_norm(x: Tensor, *, axis: int = -1, p: int = 2) -> Tensor:
  norm = x.abs().sum(axis, keepdim=True) if p == 1 else x.square().sum(axis, keepdim=True).sqrt()
  return (norm == 0).where(0, x / norm)  # a zero vector stays zero (the reference's choice)


@op("MeanVarianceNormalization")
def mean_variance_norm(x: Tensor, *, axes: list[int] | None = None) -> Tensor:
  ax = tuple(axes) if axes is not None else (0, 2, 3)
  m = x.mean(ax, keepdim=True)
  return (x - m) / ((x - m).square().mean(ax, keepdim=True).sqrt() + 1e-9)


# ---- resize ------------------------------------------------------------------------------------------------

def _source_coords(mode: str, n_in: int, n_out: int, scale: float) -> np.ndarray:
  """Where each output position samples the input axis, in input coordinates (the spec's formulas)."""
  o = np.arange(n_out, dtype=np.float64)
  if mode == "half_pixel": return (o + 0.5) / scale - 0.5
  if mode == "pytorch_half_pixel": return (o + 0.5) / scale - 0.5 if n_out > 1 else np.zeros(n_out)
  if mode == "align_corners":  # the unrounded output length, as the reference (it differs from n_out with scales)
    return o * (n_in - 1) / (n_in * scale - 1) if n_in * scale > 1 else np.zeros(n_out)
  if mode == "asymmetric": return o / scale
  if mode == "half_pixel_symmetric":
    adjustment = n_out / (scale * n_in)
    return n_in * (1 - adjustment) / 2 + (o + 0.5) / scale - 0.5
  raise NotImplementedError(f"Resize coordinate_transformation_mode {mode!r} is not supported")


def _nearest(coords: np.ndarray, rounding: str) -> np.ndarray:
  if rounding == "round_prefer_floor": idx = np.where(coords % 1 == 0.5, np.floor(coords), np.round(coords))
  elif rounding == "round_prefer_ceil": idx = np.where(coords % 1 == 0.5, np.ceil(coords), np.round(coords))
  elif rounding == "floor": idx = np.floor(coords)
  elif rounding == "ceil": idx = np.ceil(coords)
  else: raise ValueError(f"unknown Resize nearest_mode {rounding!r}")
  return idx.astype(np.int64)


def _weights(mode: str, coords: np.ndarray, n_in: int, a: float, exclude_outside: int) -> np.ndarray:
  """The (n_out, n_in) matrix of linear or cubic interpolation weights; neighbours past the edge repeat it."""
  base = np.floor(coords)
  r = coords - base
  if mode == "linear": taps, coef = [0, 1], [1 - r, r]
  else:
    def far(t: np.ndarray) -> np.ndarray: return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a  # Keys: 1 < |t| < 2
    def near(t: np.ndarray) -> np.ndarray: return ((a + 2) * t - (a + 3)) * t * t + 1    # |t| <= 1
    taps, coef = [-1, 0, 1, 2], [far(r + 1), near(r), near(1 - r), far(2 - r)]
  m = np.zeros((len(coords), n_in))
  rows = np.arange(len(coords))
  for t, c in zip(taps, coef):
    idx = base.astype(np.int64) + t
    inside = (idx >= 0) & (idx < n_in)
    np.add.at(m, (rows, np.clip(idx, 0, n_in - 1)), np.where(inside | (not exclude_outside), c, 0))
  if exclude_outside: m /= m.sum(1, keepdims=True)
  return m


@op("Upsample", static=(1,))
def upsample(x: Tensor, scales_in: list[float] | None = None, *, mode: str = "nearest",
             scales: list[float] | None = None) -> Tensor:
  """Opsets 7 to 9: Resize with asymmetric coordinates and floor rounding (its later form)."""
  return resize(x, None, scales_in if scales_in is not None else scales, None, mode="linear" if mode != "nearest"
                else "nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")


@op("Resize", static=(1, 2, 3))
def resize(x: Tensor, roi: list[float] | None = None, scales: list[float] | None = None,
           sizes: list[int] | None = None, *, antialias: int = 0, axes: list[int] | None = None,
           coordinate_transformation_mode: str = "half_pixel", cubic_coeff_a: float = -0.75,
           exclude_outside: int = 0, extrapolation_value: float = 0.0, keep_aspect_ratio_policy: str = "stretch",
           mode: str = "nearest", nearest_mode: str = "round_prefer_floor", opset: int = 19) -> Tensor:
  if opset < 11: return upsample(x, roi, mode=mode)  # opset 10's (X, scales): Upsample's semantics
  if antialias: raise NotImplementedError("Resize with antialias=1 is not supported")
  if mode not in ("nearest", "linear", "cubic"): raise ValueError(f"unknown Resize mode {mode!r}")
  ax = [_axis(a, x.ndim) for a in axes] if axes is not None else list(range(x.ndim))
  if sizes:
    if keep_aspect_ratio_policy != "stretch":  # one scale for every axis, so that the result fits in or around sizes
      pick = min if keep_aspect_ratio_policy == "not_larger" else max
      s = pick(t / x.shape[a] for a, t in zip(ax, sizes))
      sizes = [int(math.floor(s * x.shape[a] + 0.5)) for a in ax]
      scale = [s] * len(ax)
    else: scale = [t / x.shape[a] for a, t in zip(ax, sizes)]
    out = list(sizes)
  elif scales: scale, out = list(scales), [int(math.floor(x.shape[a] * s)) for a, s in zip(ax, scales)]
  else: raise ValueError("Resize needs scales or sizes")
  for a, s, n_out in zip(ax, scale, out):
    n_in = x.shape[a]
    if n_in == n_out and s == 1.0: continue
    coords = _source_coords(coordinate_transformation_mode, n_in, n_out, s)
    moved = x.transpose(a, -1)
    if mode == "nearest":
      index = Tensor(np.clip(_nearest(coords, nearest_mode), 0, n_in - 1), device=x.device)
      moved = moved[(slice(None),) * (x.ndim - 1) + (index,)]
    else:
      w = Tensor(_weights(mode, coords, n_in, cubic_coeff_a, exclude_outside).T.astype(np.float32), device=x.device)
      y = moved.cast(dtypes.float32) @ w
      moved = y.cast(x.dtype) if x.dtype.is_float else y.round().cast(x.dtype)
    x = moved.transpose(a, -1)
  return x


# ---- recurrent layers (ONNX gate orders: LSTM i, o, f, c; GRU z, r, h) -------------------------------------

def _rnn_setup(x: Tensor, sequence_lens: list[int] | None, layout: int, direction: str,
               activations: list[str] | None, defaults: list[str], clip: float | None) -> tuple[Tensor, int]:
  if layout: x = x.transpose(0, 1)  # layout 1 is (batch, seq, ...); the loop runs over (seq, batch, ...)
  if sequence_lens is not None and any(s != x.shape[0] for s in sequence_lens):
    raise NotImplementedError("recurrent layers with sequences of different lengths are not supported")
  if direction not in ("forward", "reverse", "bidirectional"): raise ValueError(f"unknown direction {direction!r}")
  if activations is not None and [a.lower() for a in activations] != [d.lower() for d in defaults] * (
      2 if direction == "bidirectional" else 1):
    raise NotImplementedError(f"recurrent activations {activations} are not supported (only {defaults})")
  if clip is not None: raise NotImplementedError("recurrent cell clipping is not supported")
  return x, 2 if direction == "bidirectional" else 1


def _rnn_state(given: Tensor | None, layout: int, d: int, x: Tensor, hsz: int) -> Tensor:
  """Direction `d`'s initial hidden (or cell) state: the given one (read in (dirs, batch, hidden) order), else zeros."""
  if given is None: return Tensor.zeros(x.shape[1], hsz, dtype=x.dtype, device=x.device)
  return (given.transpose(0, 1) if layout else given)[d]


def _rnn_steps(length: int, direction: str, d: int) -> Iterable[int]:
  """The time steps direction `d` visits, in order (the second direction of a bidirectional layer runs backward)."""
  return reversed(range(length)) if direction == "reverse" or d == 1 else range(length)


def _rnn_outputs(ys: list[list[Tensor]], hs: list[Tensor], cs: list[Tensor] | None, layout: int,
                 n_outputs: int) -> tuple[Tensor, ...]:
  y = Tensor.stack(*[Tensor.stack(*steps) for steps in ys], dim=1)  # (seq, dirs, batch, hidden)
  h = Tensor.stack(*hs)  # (dirs, batch, hidden)
  c = Tensor.stack(*cs) if cs is not None else None
  if layout:
    y, h = y.permute(2, 0, 1, 3), h.transpose(0, 1)
    c = c.transpose(0, 1) if c is not None else None
  return ((y, h) if c is None else (y, h, c))[:n_outputs]


@op("LSTM", static=(4,))
def lstm(x: Tensor, w: Tensor, r: Tensor, b: Tensor | None = None, sequence_lens: list[int] | None = None,
         initial_h: Tensor | None = None, initial_c: Tensor | None = None, p: Tensor | None = None, *,
         activation_alpha: list[float] | None = None, activation_beta: list[float] | None = None,
         activations: list[str] | None = None, clip: float | None = None, direction: str = "forward",
         hidden_size: int = 0, input_forget: int = 0, layout: int = 0, n_outputs: int = 1) -> tuple[Tensor, ...]:
  x, dirs = _rnn_setup(x, sequence_lens, layout, direction, activations, ["Sigmoid", "Tanh", "Tanh"], clip)
  if input_forget: raise NotImplementedError("LSTM input_forget=1 is not supported")
  hsz = w.shape[1] // 4
  ys, hs, cs = [], [], []
  for d in range(dirs):
    bias = b[d, :4 * hsz] + b[d, 4 * hsz:] if b is not None else 0
    h, c = _rnn_state(initial_h, layout, d, x, hsz), _rnn_state(initial_c, layout, d, x, hsz)
    pi, po, pf = (p[d, :hsz], p[d, hsz:2 * hsz], p[d, 2 * hsz:]) if p is not None else (0, 0, 0)
    xw = x @ w[d].transpose() + bias  # every step's input projection in one matmul
    out: list[Tensor] = [None] * x.shape[0]  # type: ignore[list-item]
    for t in _rnn_steps(x.shape[0], direction, d):
      gates = xw[t] + h @ r[d].transpose()
      i, o, f, g = gates.split(hsz, dim=1)
      i, f = (i + pi * c).sigmoid(), (f + pf * c).sigmoid()
      # the state gets buffers every step: fused into the next step's matmul, the cell state's chain of steps and
      # h's transcendentals would be recomputed for every output (bench_onnx's LSTM: 0.53 -> 0.046 ms)
      c = (f * c + i * g.tanh()).contiguous()
      h = ((o + po * c).sigmoid() * c.tanh()).contiguous()
      out[t] = h
    ys.append(out)
    hs.append(h)
    cs.append(c)
  return _rnn_outputs(ys, hs, cs, layout, n_outputs)


@op("GRU", static=(4,))
def gru(x: Tensor, w: Tensor, r: Tensor, b: Tensor | None = None, sequence_lens: list[int] | None = None,
        initial_h: Tensor | None = None, *, activation_alpha: list[float] | None = None,
        activation_beta: list[float] | None = None, activations: list[str] | None = None, clip: float | None = None,
        direction: str = "forward", hidden_size: int = 0, layout: int = 0,
        linear_before_reset: int = 0, n_outputs: int = 1) -> tuple[Tensor, ...]:
  x, dirs = _rnn_setup(x, sequence_lens, layout, direction, activations, ["Sigmoid", "Tanh"], clip)
  hsz = w.shape[1] // 3
  ys, hs = [], []
  for d in range(dirs):
    wb = b[d, :3 * hsz] if b is not None else Tensor.zeros(3 * hsz, dtype=x.dtype, device=x.device)
    rb = b[d, 3 * hsz:] if b is not None else Tensor.zeros(3 * hsz, dtype=x.dtype, device=x.device)
    h = _rnn_state(initial_h, layout, d, x, hsz)
    xw = x @ w[d].transpose() + wb
    rz, rh = r[d, :2 * hsz], r[d, 2 * hsz:]
    out: list[Tensor] = [None] * x.shape[0]  # type: ignore[list-item]
    for t in _rnn_steps(x.shape[0], direction, d):
      xz, xr, xh = xw[t].split(hsz, dim=1)
      hz, hr = (h @ rz.transpose() + rb[:2 * hsz]).split(hsz, dim=1)
      z, rr = (xz + hz).sigmoid(), (xr + hr).sigmoid()
      if linear_before_reset: n = (xh + rr * (h @ rh.transpose() + rb[2 * hsz:])).tanh()
      else: n = (xh + (rr * h) @ rh.transpose() + rb[2 * hsz:]).tanh()
      h = (1 - z) * n + z * h
      out[t] = h
    ys.append(out)
    hs.append(h)
  return _rnn_outputs(ys, hs, None, layout, n_outputs)


@op("RNN", static=(4,))
def rnn(x: Tensor, w: Tensor, r: Tensor, b: Tensor | None = None, sequence_lens: list[int] | None = None,
        initial_h: Tensor | None = None, *, activation_alpha: list[float] | None = None,
        activation_beta: list[float] | None = None, activations: list[str] | None = None, clip: float | None = None,
        direction: str = "forward", hidden_size: int = 0, layout: int = 0, n_outputs: int = 1) -> tuple[Tensor, ...]:
  x, dirs = _rnn_setup(x, sequence_lens, layout, direction, activations, ["Tanh"], clip)
  hsz = w.shape[1]
  ys, hs = [], []
  for d in range(dirs):
    bias = b[d, :hsz] + b[d, hsz:] if b is not None else 0
    h = _rnn_state(initial_h, layout, d, x, hsz)
    xw = x @ w[d].transpose() + bias
    out: list[Tensor] = [None] * x.shape[0]  # type: ignore[list-item]
    for t in _rnn_steps(x.shape[0], direction, d):
      h = (xw[t] + h @ r[d].transpose()).tanh()
      out[t] = h
    ys.append(out)
    hs.append(h)
  return _rnn_outputs(ys, hs, None, layout, n_outputs)
