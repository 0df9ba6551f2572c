"""The lazy Tensor: tinygrad's (and so torch's) API over a graph of UOps.

Nothing computes until `realize()` (or `numpy()`, `item()`, `tolist()`): each method only adds
nodes to the graph. Arguments are checked when the method is called, so a shape mismatch is a
ValueError at the line that caused it, never a failure inside a kernel.
"""
from __future__ import annotations

import math
import threading
import weakref
from typing import Any, Sequence

import numpy as np

from plugrad.config import TRAINING, Context
from plugrad.device import Buffer, check_supported, image_spec_for
from plugrad.dtype import DType, dtypes, promote_types, result_type_with_scalar, truncate, f32_to_bf16, bf16_to_f32
from plugrad.gradient import compute_gradient
from plugrad.registry import canonical_device, get_registry
from plugrad.scheduler import (ScheduleItem, buffer_of, contiguous_base, create_schedule, kernelize,
                               pending_kernel)
from plugrad.schedule_cache import ScheduleCache, ScheduleTemplate, structure_key
from plugrad.shape import prod
from plugrad.uops import Ops, UOp

ShapeArg = int | Sequence[int]
# reductions of at least this many elements to at most this many outputs run in two stages
SPLIT_REDUCE_MIN = 1 << 16
SPLIT_REDUCE_MAX_OUTPUT = 64


def _shape_args(shape: tuple) -> tuple[int, ...]:
  """Accept f(2, 3) and f((2, 3)) alike."""
  if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
  for s in shape:
    if not isinstance(s, (int, np.integer)) or isinstance(s, bool): raise TypeError(f"shape entries must be ints, got {shape!r}")
    if s < 0: raise ValueError(f"negative dimension in shape {shape!r}")
  return tuple(int(s) for s in shape)


def _norm_axis(axis: int, ndim: int) -> int:
  if not isinstance(axis, (int, np.integer)): raise TypeError(f"axis must be an int, got {axis!r}")
  lo, hi = -max(ndim, 1), max(ndim, 1) - 1
  if not lo <= axis <= hi: raise IndexError(f"axis {axis} is out of range for a tensor with {ndim} dimensions")
  return int(axis) % max(ndim, 1)


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
  """The shape several shapes broadcast to (numpy rules); ValueError when they do not."""
  nd = max(len(s) for s in shapes)
  padded = [(1,) * (nd - len(s)) + s for s in shapes]
  out = []
  for dims in zip(*padded):
    sizes = {d for d in dims if d != 1}
    if len(sizes) > 1: raise ValueError(f"shapes {' and '.join(map(str, shapes))} cannot be broadcast together")
    out.append(sizes.pop() if sizes else 1)
  return tuple(out)


def _sum_dtype(dt: DType) -> DType:
  """The dtype sums and products return, as torch: int64 for bool and every integer type, unsigned ones
  included (uint64's bits wrap into int64); a float type keeps its own (halves accumulate in float32)."""
  return dtypes.int64 if dt == dtypes.bool or dt.is_int else dt


def _check_py_int(value: Any) -> Any:
  """`value`, unless it is a Python int beyond 64 bits: that raises OverflowError, as in torch. Ints that fit in
  int64 or uint64 wrap to the tensor's dtype (int8 + 300 adds 44), as they do in torch and tinygrad."""
  if isinstance(value, int) and not isinstance(value, bool) and not -(1 << 63) <= value < 1 << 64:
    raise OverflowError(f"Python int {value} is too big to convert: tensor values must fit in 64 bits")
  return value


def _array_from_py(data: list | tuple, dt: DType) -> np.ndarray:
  """A (nested) list as a numpy array of `dt`'s type; ints out of the dtype's range wrap (numpy refuses them)."""
  try:
    return np.array(data, dtype=dt.np)
  except OverflowError:
    obj = np.array(data, dtype=object)
    flat = [_check_py_int(v) for v in obj.ravel()]
    if not dt.is_int: return np.array(flat, dtype=dt.np).reshape(obj.shape)
    # through uint64: a C cast to a narrower integer keeps the low bits, which is the wrap
    return np.array([int(v) % (1 << 64) for v in flat], dtype=np.uint64).astype(dt.np).reshape(obj.shape)


class _RNG:
  """The random state behind rand/randn/uniform: a numpy Philox generator, reseeded by manual_seed."""
  lock = threading.Lock()
  gen = np.random.Generator(np.random.Philox(0))


class _TensorMeta(type):
  # `Tensor.training` reads and sets the TRAINING context variable: the one record of training mode
  @property
  def training(cls) -> bool: return bool(TRAINING.value)
  @training.setter
  def training(cls, mode: bool) -> None: TRAINING.value = int(mode)


class Tensor(metaclass=_TensorMeta):
  """A lazily evaluated n-dimensional array on a device.

  :param data: a Python scalar, a (nested) list, a numpy array, or a UOp (internal).
  :param device: a device name such as "CPU" or "CUDA:1"; the default device when None.
  :param dtype: the element type; inferred from the data when None.
  :param requires_grad: True: `backward` fills `.grad`; False: never; None (default): filled when
    the tensor is reached by `backward` (tinygrad's rule).
  """
  __slots__ = ("uop", "device", "grad", "requires_grad", "__weakref__")
  _live: weakref.WeakSet[Tensor] = weakref.WeakSet()
  __hash__ = object.__hash__

  def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None,
               requires_grad: bool | None = None):
    self.grad: Tensor | None = None
    self.requires_grad: bool | None = requires_grad
    dt = dtypes.from_any(dtype) if dtype is not None else None
    self.device = canonical_device(device) if device else get_registry().default_device()
    if isinstance(data, UOp):
      self.uop = data if dt is None or data.dtype == dt else data.cast(dt)
    elif isinstance(data, Tensor):
      self.uop = data.uop if dt is None else data.uop.cast(dt)
      self.device = data.device if device is None else self.device
    elif isinstance(data, (bool, int, float, np.generic)) and not isinstance(data, np.ndarray):
      dt = dt or (dtypes.from_any(data.dtype) if isinstance(data, np.generic) else dtypes.from_py(data))
      self.uop = UOp.const(dt, data.item() if isinstance(data, np.generic) else _check_py_int(data))
    elif isinstance(data, (list, tuple, np.ndarray)):
      if isinstance(data, np.ndarray): arr = data
      else:
        dt = dt or dtypes.from_py(data)
        try:
          arr = _array_from_py(data, dt)
        except ValueError as e:
          raise ValueError(f"cannot make a tensor from a ragged or mixed list: {e}") from None
      if arr.dtype == object: raise TypeError("cannot make a tensor from an array of Python objects")
      dt = dt or dtypes.from_any(arr.dtype)
      self.uop = _upload(arr, dt, self.device)
    else:
      raise TypeError(f"cannot make a Tensor from {type(data).__name__}")
    Tensor._live.add(self)

  @staticmethod
  def _from(uop: UOp, device: str) -> Tensor:
    caps = get_registry().device(device).caps
    if uop.dtype.scalar() not in caps.dtypes: check_supported(device, caps, {uop.dtype.scalar()})  # fail at the call
    t = object.__new__(Tensor)
    t.uop, t.device, t.grad, t.requires_grad = uop, device, None, None
    Tensor._live.add(t)
    return t

  def _new(self, uop: UOp) -> Tensor: return Tensor._from(uop, self.device)

  # ------------------------------------------------------------------ properties

  @property
  def shape(self) -> tuple[int, ...]: return self.uop.shape
  @property
  def dtype(self) -> DType: return self.uop.dtype
  @property
  def ndim(self) -> int: return len(self.shape)
  def numel(self) -> int: return prod(self.shape)
  def size(self, dim: int | None = None) -> tuple[int, ...] | int:
    return self.shape if dim is None else self.shape[_norm_axis(dim, self.ndim)]
  def __len__(self) -> int:
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]
  def __repr__(self) -> str: return f"<Tensor {self.shape} {self.dtype.name} on {self.device}>"
  def __bool__(self) -> bool:
    raise TypeError("the truth value of a Tensor is ambiguous; use .item() (this would realize it) or .numpy()")

  # ------------------------------------------------------------------ creation

  @staticmethod
  def empty(*shape: ShapeArg, dtype: DType | str | None = None, device: str | None = None,
            requires_grad: bool | None = None) -> Tensor:
    """An uninitialised tensor (a fresh buffer)."""
    dt = dtypes.from_any(dtype) if dtype is not None else dtypes.default_float
    dev = canonical_device(device) if device else get_registry().default_device()
    shape = _shape_args(shape)
    buf = Buffer(dev, prod(shape), dt, get_registry().device(dev).allocator)
    return Tensor._from(_reshape(UOp(Ops.BUFFER, dt, (), buf), shape), dev).requires_grad_(requires_grad)

  @staticmethod
  def full(shape: ShapeArg, fill_value: Any, dtype: DType | str | None = None, device: str | None = None,
           requires_grad: bool | None = None) -> Tensor:
    """A tensor of `shape` filled with `fill_value` (lazy: a broadcast constant)."""
    shape = _shape_args((shape,) if isinstance(shape, int) else tuple(shape))
    c = Tensor(fill_value, device=device, dtype=dtype)
    return (c.reshape((1,) * len(shape)).expand(shape) if shape else c).requires_grad_(requires_grad)

  @staticmethod
  def zeros(*shape: ShapeArg, dtype: DType | str | None = None, device: str | None = None,
            requires_grad: bool | None = None) -> Tensor:
    return Tensor.full(_shape_args(shape), 0, dtype=dtype or dtypes.default_float, device=device, requires_grad=requires_grad)

  @staticmethod
  def ones(*shape: ShapeArg, dtype: DType | str | None = None, device: str | None = None,
           requires_grad: bool | None = None) -> Tensor:
    return Tensor.full(_shape_args(shape), 1, dtype=dtype or dtypes.default_float, device=device, requires_grad=requires_grad)

  def full_like(self, fill_value: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
    return Tensor.full(self.shape, fill_value, dtype=dtype or self.dtype, device=device or self.device)
  def zeros_like(self, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
    return self.full_like(0, dtype, device)
  def ones_like(self, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
    return self.full_like(1, dtype, device)
  def empty_like(self, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
    return Tensor.empty(self.shape, dtype=dtype or self.dtype, device=device or self.device)
  def rand_like(self, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
    return Tensor.rand(self.shape, dtype=dtype or self.dtype, device=device or self.device)

  @staticmethod
  def arange(start: int | float, stop: int | float | None = None, step: int | float = 1,
             dtype: DType | str | None = None, device: str | None = None) -> Tensor:
    """Values from start (inclusive) to stop (exclusive) by step, like numpy.arange."""
    if stop is None: start, stop = 0, start
    if step == 0: raise ValueError("arange step must not be zero")
    dt = dtypes.from_any(dtype) if dtype is not None else dtypes.from_py([start, stop, step])
    n = max(0, math.ceil((stop - start) / step))
    return Tensor(start + np.arange(n, dtype=np.float64 if dt.is_float else np.int64) * step, device=device, dtype=dt)

  @staticmethod
  def eye(n: int, m: int | None = None, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
    """The n x m identity matrix (lazy: ones on the diagonal made from a pad and a reshape)."""
    m = n if m is None else m
    if n < 0 or m < 0: raise ValueError(f"eye needs nonnegative sizes, got {n}, {m}")
    dt = dtypes.from_any(dtype) if dtype is not None else dtypes.default_float
    if n == 0 or m == 0: return Tensor.zeros(n, m, dtype=dt, device=device)
    # a row of [1, 0 * m] repeated, read with a stride of m+1 lands on the diagonal
    k = min(n, m)
    diag = Tensor.ones(k, 1, dtype=dt, device=device).pad(((0, 0), (0, m))).flatten()[:k * m].reshape(k, m)
    return diag.pad(((0, n - k), (0, 0))) if n > k else diag

  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    """Seed the generator behind rand, randn and uniform."""
    with _RNG.lock: _RNG.gen = np.random.Generator(np.random.Philox(seed))

  @staticmethod
  def rand(*shape: ShapeArg, dtype: DType | str | None = None, device: str | None = None,
           requires_grad: bool | None = None) -> Tensor:
    """Uniform random values in [0, 1)."""
    return Tensor.uniform(*shape, low=0.0, high=1.0, dtype=dtype, device=device, requires_grad=requires_grad)

  @staticmethod
  def uniform(*shape: ShapeArg, low: float = 0.0, high: float = 1.0, dtype: DType | str | None = None,
              device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """Uniform random values in [low, high)."""
    shape, dt = _shape_args(shape), dtypes.from_any(dtype) if dtype is not None else dtypes.default_float
    with _RNG.lock: data = _RNG.gen.random(shape, dtype=np.float32)
    return Tensor((data * (high - low) + low).astype(dt.np), device=device, dtype=dt, requires_grad=requires_grad)

  @staticmethod
  def randn(*shape: ShapeArg, dtype: DType | str | None = None, device: str | None = None,
            requires_grad: bool | None = None) -> Tensor:
    """Standard normal random values."""
    return Tensor.normal(*shape, dtype=dtype, device=device, requires_grad=requires_grad)

  @staticmethod
  def normal(*shape: ShapeArg, mean: float = 0.0, std: float = 1.0, dtype: DType | str | None = None,
             device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """Normal random values with `mean` and `std`."""
    shape, dt = _shape_args(shape), dtypes.from_any(dtype) if dtype is not None else dtypes.default_float
    with _RNG.lock: data = _RNG.gen.standard_normal(shape, dtype=np.float32)
    return Tensor((data * std + mean).astype(dt.np), device=device, dtype=dt, requires_grad=requires_grad)

  @staticmethod
  def randint(*shape: ShapeArg, low: int = 0, high: int = 10, dtype: DType | str | None = None,
              device: str | None = None) -> Tensor:
    """Random integers in [low, high)."""
    shape, dt = _shape_args(shape), dtypes.from_any(dtype) if dtype is not None else dtypes.default_int
    with _RNG.lock: data = _RNG.gen.integers(low, high, shape)
    return Tensor(data.astype(dt.np), device=device, dtype=dt)

  # ------------------------------------------------------------------ realizing

  def schedule(self, *others: Tensor) -> list[ScheduleItem]:
    """The kernels (and copies) that realizing these tensors would run, in order; runs nothing."""
    return _schedule([self, *others])

  def kernelize(self, *others: Tensor) -> Tensor:
    """Decide the kernels for these tensors without running them: each tensor's graph becomes
    ASSIGN(BUFFER, KERNEL); later graphs read its buffer instead of fusing it."""
    _kernelize([self, *others])
    return self

  def realize(self, *others: Tensor) -> Tensor:
    """Run everything these tensors need; afterwards they are plain buffers."""
    from plugrad.engine import run_schedule
    tensors = [self, *others]
    run_schedule(_schedule(tensors), get_registry())
    _finish_realize()
    return self

  def numpy(self) -> np.ndarray:
    """The values as a numpy array (bfloat16 comes back as float32)."""
    self.realize()
    u = self.uop
    while u.op in (Ops.RESHAPE, Ops.EXPAND): u = u.src[0]
    if u.op is Ops.CONST: return np.full(self.shape, u.arg, dtype=self.dtype.np)
    base = contiguous_base(self.uop)
    if base is None: raise RuntimeError(f"internal error: {self!r} is not a buffer after realize")
    raw = buffer_of(base).numpy()
    arr = bf16_to_f32(raw) if self.dtype == dtypes.bfloat16 else raw
    return arr.reshape(self.shape)

  def item(self) -> Any:
    """The single value of a one-element tensor as a Python scalar."""
    if self.numel() != 1: raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
    return self.numpy().reshape(()).item()

  def tolist(self) -> Any:
    """The values as (nested) Python lists."""
    return self.numpy().tolist()

  def data(self) -> memoryview:
    """The values as a memoryview of a numpy array."""
    return memoryview(np.ascontiguousarray(self.numpy()))

  def to(self, device: str) -> Tensor:
    """This tensor on `device` (a copy is scheduled when the device differs)."""
    device = canonical_device(device)
    if device == self.device: return self
    get_registry().device(device)  # fail now, with the reason, if the device cannot run here
    return Tensor._from(UOp(Ops.COPY, self.dtype, (self.uop,), device), device)

  def contiguous(self) -> Tensor:
    """A tensor that will be realized into a buffer of its own (a fusion boundary)."""
    return self._new(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))

  def assign(self, x: Tensor | Any) -> Tensor:
    """Write `x` (broadcast and cast to this tensor's shape and dtype) into this tensor's buffer."""
    x = x if isinstance(x, Tensor) else Tensor(x, device=self.device, dtype=self.dtype)
    if x.device != self.device: raise ValueError(f"assign from device {x.device} into a tensor on {self.device}")
    if broadcast_shape(x.shape, self.shape) != self.shape:
      raise ValueError(f"cannot assign a tensor of shape {x.shape} to one of shape {self.shape}")
    value = x.cast(self.dtype)._broadcast_to(self.shape).uop
    if contiguous_base(self.uop) is not None and self.uop.op is not Ops.CONST:
      self.uop = UOp(Ops.ASSIGN, self.dtype, (self.uop, value))
    else:
      self.uop = value  # nothing aliases an unrealized tensor: the new value simply replaces it
    return self

  # ------------------------------------------------------------------ gradients

  @staticmethod
  def train(mode: bool = True) -> Context:
    """Training mode for a block (`with Tensor.train(): ...`, or as a decorator): dropout is active and
    BatchNorm uses batch statistics. The same switch as `Context(TRAINING=1)` and `Tensor.training`."""
    return Context(TRAINING=int(mode))

  def requires_grad_(self, requires_grad: bool = True) -> Tensor:
    """Set `requires_grad` in place (PyTorch's habit) and return this tensor."""
    self.requires_grad = requires_grad
    return self

  def detach(self) -> Tensor:
    """The same values, cut off from the graph: no gradient flows through the result."""
    return Tensor(UOp(Ops.DETACH, self.dtype, (self.uop,)), device=self.device, requires_grad=False)

  def contiguous_backward(self) -> Tensor:
    """The same values; the gradient that flows back through here is realized into its own buffer."""
    return self._new(UOp(Ops.CONTIGUOUS_BACKWARD, self.dtype, (self.uop,)))

  def _check_root_gradient(self, gradient: Tensor | None) -> Tensor:
    if not self.dtype.is_float: raise TypeError(f"only float tensors have gradients, this one is {self.dtype.name}")
    if gradient is None:
      if self.shape != ():
        raise ValueError(f"backward of a tensor of shape {self.shape} needs `gradient` (dL/dself, of that shape); "
                         "without it, call backward on a scalar such as a loss or .sum()")
      return Tensor(1.0, device=self.device, dtype=self.dtype, requires_grad=False)
    if not isinstance(gradient, Tensor): raise TypeError(f"gradient must be a Tensor, got {type(gradient).__name__}")
    if gradient.shape != self.shape:
      raise ValueError(f"gradient has shape {gradient.shape} but the tensor it is for has shape {self.shape}")
    if gradient.device != self.device: raise ValueError(f"gradient is on {gradient.device}, the tensor on {self.device}")
    return gradient

  def gradient(self, *targets: Tensor, gradient: Tensor | None = None, materialize_grads: bool = False) -> list[Tensor]:
    """The gradients of this tensor with respect to `targets`, as new lazy tensors (nothing runs, no
    `.grad` changes).

    :param gradient: dL/d(self); may be left out only for a scalar (then it is 1).
    :param materialize_grads: zeros for a target this tensor does not depend on (else ValueError).
    """
    root_grad = self._check_root_gradient(gradient)
    for t in targets:
      if not isinstance(t, Tensor): raise TypeError(f"gradient targets must be Tensors, got {type(t).__name__}")
      if not t.dtype.is_float: raise TypeError(f"only float tensors have gradients, a target is {t.dtype.name}")
    grads = compute_gradient(self.uop, root_grad.uop, [t.uop for t in targets])
    out = []
    for i, t in enumerate(targets):
      if (g := grads.get(t.uop)) is not None: out.append(Tensor._from(g, t.device))
      elif materialize_grads: out.append(t.zeros_like())
      else: raise ValueError(f"target {i} (shape {t.shape}) is not used to compute this tensor, or only through "
                             "integer values or detach(); pass materialize_grads=True for zeros")
    return out

  def backward(self, gradient: Tensor | None = None) -> Tensor:
    """Add the gradient of this tensor to `.grad` of every float tensor it was computed from whose
    `requires_grad` is not False (tinygrad's rule: None counts as wanted). Lazy: the gradients run
    when realized, usually by an optimizer's step.

    :param gradient: dL/d(self); may be left out only for a scalar (then it is 1).
    """
    root_grad = self._check_root_gradient(gradient)
    in_graph = set(self.uop.toposort)
    wanted = [t for t in list(Tensor._live) if t.uop in in_graph and t.requires_grad is not False and t.dtype.is_float]
    grads = compute_gradient(self.uop, root_grad.uop, [t.uop for t in wanted])
    for t in wanted:
      g = Tensor._from(grads[t.uop], t.device) if t.uop in grads else t.zeros_like()
      if t.grad is None: t.grad = g
      else: t.grad.assign(t.grad + g)
    return self

  # ------------------------------------------------------------------ movement

  def reshape(self, *shape: ShapeArg) -> Tensor:
    """The same data with another shape; one entry may be -1 (inferred)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    if any(not isinstance(s, (int, np.integer)) or s < -1 for s in shape): raise ValueError(f"invalid shape {shape!r}")
    if list(shape).count(-1) > 1: raise ValueError(f"only one dimension can be -1 in {shape!r}")
    if -1 in shape:
      known = prod(s for s in shape if s != -1)
      if known == 0 or self.numel() % known: raise ValueError(f"cannot reshape {self.shape} to {shape}")
      shape = tuple(self.numel() // known if s == -1 else s for s in shape)
    shape = tuple(int(s) for s in shape)
    if prod(shape) != self.numel():
      raise ValueError(f"cannot reshape a tensor of shape {self.shape} ({self.numel()} elements) to {shape}")
    # no folding into a reshape below: that node may be another tensor, which gradients must find in
    # the graph (the scheduler folds chains of reshapes when it builds kernels)
    return self if shape == self.shape else self._new(UOp(Ops.RESHAPE, self.dtype, (self.uop,), shape))

  def view(self, *shape: ShapeArg) -> Tensor: return self.reshape(*shape)

  def permute(self, *order: int | Sequence[int]) -> Tensor:
    """Reorder the axes: output axis i is input axis order[i]."""
    if len(order) == 1 and isinstance(order[0], (tuple, list)): order = tuple(order[0])
    norm = tuple(_norm_axis(o, self.ndim) for o in order)
    if sorted(norm) != list(range(self.ndim)): raise ValueError(f"{order} is not a permutation of {self.ndim} axes")
    if norm == tuple(range(self.ndim)): return self
    return self._new(UOp(Ops.PERMUTE, self.dtype, (self.uop,), norm))

  def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
    """Swap two axes."""
    order = list(range(self.ndim))
    a, b = _norm_axis(dim0, self.ndim), _norm_axis(dim1, self.ndim)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)

  @property
  def T(self) -> Tensor: return self.permute(tuple(range(self.ndim))[::-1])

  def expand(self, *shape: ShapeArg) -> Tensor:
    """Broadcast size-1 axes to `shape` (-1 keeps an axis); new leading axes may be added."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    if len(shape) < self.ndim: raise ValueError(f"cannot expand {self.shape} to fewer dimensions {shape}")
    old = (1,) * (len(shape) - self.ndim) + self.shape
    new = tuple(o if s == -1 else s for s, o in zip(shape, old))
    for o, n in zip(old, new):
      if o != n and o != 1: raise ValueError(f"cannot expand {self.shape} to {shape}: only size-1 axes can grow")
    return self._broadcast_to(new)

  def _broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
    if self.shape == shape: return self
    x = self.reshape((1,) * (len(shape) - self.ndim) + self.shape) if self.ndim < len(shape) else self
    if x.shape == shape: return x
    if any(o != n and o != 1 for o, n in zip(x.shape, shape)): raise ValueError(f"cannot broadcast {self.shape} to {shape}")
    return x._new(UOp(Ops.EXPAND, x.dtype, (x.uop,), shape))

  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge axes start_dim..end_dim into one."""
    if self.ndim == 0: return self.reshape(1)
    s, e = _norm_axis(start_dim, self.ndim), _norm_axis(end_dim, self.ndim)
    if s > e: raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

  def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
    d = _norm_axis(dim, self.ndim)
    return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])

  def unsqueeze(self, dim: int) -> Tensor:
    """Insert a size-1 axis at `dim`."""
    d = _norm_axis(dim, self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

  def squeeze(self, dim: int | None = None) -> Tensor:
    """Drop size-1 axes (only `dim` when given; a `dim` that is not size 1 is left alone)."""
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    d = _norm_axis(dim, self.ndim)
    return self if self.ndim == 0 or self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1:])

  def pad(self, padding: Sequence, value: float = 0.0) -> Tensor:
    """Pad with `value`. `padding` is ((before, after), ...) per axis (None for none), or torch's flat
    (left, right, top, bottom, ...) starting from the last axis. Negative amounts crop."""
    padding = tuple(padding)
    if all(isinstance(p, (int, np.integer)) for p in padding):
      if len(padding) % 2 or len(padding) // 2 > self.ndim: raise ValueError(f"invalid flat padding {padding} for {self.shape}")
      pairs = [(0, 0)] * self.ndim
      for i in range(len(padding) // 2): pairs[self.ndim - 1 - i] = (int(padding[2 * i]), int(padding[2 * i + 1]))
    else:
      if len(padding) != self.ndim: raise ValueError(f"padding {padding} needs one entry per axis of {self.shape}")
      pairs = [(0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding]
    if any(b < 0 or a < 0 for b, a in pairs):  # negative padding crops first
      x = self.shrink(tuple((max(-b, 0), s - max(-a, 0)) for (b, a), s in zip(pairs, self.shape)))
      return x.pad(tuple((max(b, 0), max(a, 0)) for b, a in pairs), value)
    if all(b == 0 and a == 0 for b, a in pairs): return self
    arg = (tuple(pairs), truncate(_check_py_int(value), self.dtype))
    return self._new(UOp(Ops.PAD, self.dtype, (self.uop,), arg))

  def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Tensor:
    """Keep [start, end) of each axis (None keeps the whole axis)."""
    if len(arg) != self.ndim: raise ValueError(f"shrink {arg} needs one entry per axis of {self.shape}")
    bounds = tuple((0, s) if a is None else (int(a[0]), int(a[1])) for a, s in zip(arg, self.shape))
    for (b, e), s in zip(bounds, self.shape):
      if not 0 <= b <= e <= s: raise ValueError(f"shrink {arg} is out of bounds for shape {self.shape}")
    if all(b == 0 and e == s for (b, e), s in zip(bounds, self.shape)): return self
    return self._new(UOp(Ops.SHRINK, self.dtype, (self.uop,), bounds))

  def flip(self, axis: int | Sequence[int]) -> Tensor:
    """Reverse the order of elements along `axis` (an int or several)."""
    axes = tuple(sorted({_norm_axis(a, self.ndim) for a in ((axis,) if isinstance(axis, (int, np.integer)) else axis)}))
    axes = tuple(a for a in axes if self.shape[a] > 1)
    return self._new(UOp(Ops.FLIP, self.dtype, (self.uop,), axes)) if axes else self

  def __getitem__(self, index: Any) -> Tensor:
    """Basic indexing: ints, slices (any step), None and Ellipsis."""
    index = index if isinstance(index, tuple) else (index,)
    for i in index:
      if isinstance(i, (Tensor, list, np.ndarray)):
        raise TypeError("indexing with tensors or lists is not supported; use ints, slices, None and ...")
      if not (i is None or i is Ellipsis or isinstance(i, (int, np.integer, slice))) or isinstance(i, bool):
        raise TypeError(f"invalid index {i!r}")
    if sum(1 for i in index if i is Ellipsis) > 1: raise IndexError("an index can only have one ellipsis")
    real = sum(1 for i in index if i is not None and i is not Ellipsis)
    if real > self.ndim: raise IndexError(f"too many indices ({real}) for a tensor with {self.ndim} dimensions")
    if Ellipsis in index:
      at = index.index(Ellipsis)
      index = index[:at] + (slice(None),) * (self.ndim - real) + index[at + 1:]
    else: index = index + (slice(None),) * (self.ndim - real)
    x, axis, out_shape = self, 0, []
    shrinks, flips, steps = [], [], []
    for i in index:
      if i is None:
        out_shape.append(1)
        continue
      size = self.shape[axis]
      if isinstance(i, slice):
        start, stop, step = i.indices(size)
        n = len(range(start, stop, step))
        if step < 0:  # walk the flipped axis forward
          flips.append(axis)
          start, step = size - 1 - start, -step
        shrinks.append((start, min(size, start + (n - 1) * step + 1)) if n else (0, 0))
        steps.append(step)
        out_shape.append(n)
      else:
        if not -size <= i < size: raise IndexError(f"index {i} is out of bounds for axis {axis} with size {size}")
        i = int(i) % size
        shrinks.append((i, i + 1))
        steps.append(1)
      axis += 1
    if flips: x = x.flip(flips)
    x = x.shrink(tuple(shrinks))
    if any(s > 1 for s in steps):
      # a stride is a pad to a multiple of the step, a reshape to (n, step) and keeping column 0
      pads = tuple((0, (-sz) % st) for sz, st in zip(x.shape, steps))
      x = x.pad(pads)
      split = sum(((sz // st, st) for sz, st in zip(x.shape, steps)), ())
      x = x.reshape(split).shrink(tuple((0, s) if k % 2 == 0 else (0, 1) for k, s in enumerate(split)))
    return x.reshape(tuple(out_shape))

  def cat(self, *others: Tensor, dim: int = 0) -> Tensor:
    """Join tensors along `dim` (call as a.cat(b, c) or Tensor.cat(a, b, c))."""
    ts = [self, *others]
    d = _norm_axis(dim, self.ndim)
    for t in ts:
      if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != d):
        raise ValueError(f"cat: shapes {[t.shape for t in ts]} differ outside dimension {dim}")
      if t.device != self.device: raise ValueError(f"cat: tensors on devices {self.device} and {t.device}")
    dt = ts[0].dtype
    for t in ts[1:]: dt = promote_types(dt, t.dtype)
    total, offset, out = sum(t.shape[d] for t in ts), 0, None
    for t in ts:
      pads = [(0, 0)] * self.ndim
      pads[d] = (offset, total - offset - t.shape[d])
      offset += t.shape[d]
      p = t.cast(dt).pad(tuple(pads))
      out = p if out is None else out + p
    return out

  def stack(self, *others: Tensor, dim: int = 0) -> Tensor:
    """Join tensors of one shape along a new axis `dim`."""
    ts = [self, *others]
    if any(t.shape != self.shape for t in ts): raise ValueError(f"stack needs equal shapes, got {[t.shape for t in ts]}")
    d = _norm_axis(dim, self.ndim + 1)
    return Tensor.cat(*[t.unsqueeze(d) for t in ts], dim=d)

  def repeat(self, *repeats: int) -> Tensor:
    """Tile the tensor `repeats[i]` times along each axis."""
    if len(repeats) == 1 and isinstance(repeats[0], (tuple, list)): repeats = tuple(repeats[0])
    if len(repeats) < self.ndim: raise ValueError(f"repeat needs at least {self.ndim} counts, got {repeats}")
    x = self.reshape((1,) * (len(repeats) - self.ndim) + self.shape)
    inter = sum(((1, s) for s in x.shape), ())
    expanded = sum(((r, s) for r, s in zip(repeats, x.shape)), ())
    return x.reshape(inter).expand(expanded).reshape(tuple(r * s for r, s in zip(repeats, x.shape)))

  # ------------------------------------------------------------------ elementwise

  def _const_like(self, value: Any, dtype: DType | None = None) -> Tensor:
    return Tensor._from(UOp.const(dtype or self.dtype, value), self.device)._broadcast_to(self.shape)

  def _binary_operands(self, other: Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
    if isinstance(other, Tensor):
      if other.device != self.device:
        raise ValueError(f"operands are on different devices ({self.device} and {other.device}); move one with .to()")
      dt = promote_types(self.dtype, other.dtype)
      y = other
    elif isinstance(other, (bool, int, float, np.generic)):
      dt = result_type_with_scalar(self.dtype, other)
      y = Tensor._from(UOp.const(dt, other.item() if isinstance(other, np.generic) else _check_py_int(other)), self.device)
    else:
      raise TypeError(f"unsupported operand type {type(other).__name__} for a Tensor operation")
    x, y = self.cast(dt), y.cast(dt)
    out = broadcast_shape(x.shape, y.shape)
    x, y = x._broadcast_to(out), y._broadcast_to(out)
    return (y, x) if reverse else (x, y)

  def _alu(self, op: Ops, *srcs: Tensor, dtype: DType | None = None) -> Tensor:
    return self._new(UOp(op, dtype or self.dtype, (self.uop, *(s.uop for s in srcs))))

  def _bin(self, op: Ops, other: Any, reverse: bool = False) -> Tensor:
    x, y = self._binary_operands(other, reverse)
    return x._alu(op, y, dtype=dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else None)

  def cast(self, dtype: DType | str) -> Tensor:
    """Convert values to `dtype`."""
    dt = dtypes.from_any(dtype)
    return self if dt == self.dtype else self._new(UOp(Ops.CAST, dt, (self.uop,)))

  def bitcast(self, dtype: DType | str) -> Tensor:
    """Reinterpret the bits as `dtype` (same item size)."""
    dt = dtypes.from_any(dtype)
    if dt.itemsize != self.dtype.itemsize:
      raise ValueError(f"bitcast from {self.dtype.name} to {dt.name} needs equal item sizes")
    return self if dt == self.dtype else self._new(UOp(Ops.BITCAST, dt, (self.uop,)))

  def float(self) -> Tensor: return self.cast(dtypes.float32)
  def half(self) -> Tensor: return self.cast(dtypes.float16)
  def int(self) -> Tensor: return self.cast(dtypes.int32)
  def bool(self) -> Tensor: return self.cast(dtypes.bool)
  def double(self) -> Tensor: return self.cast(dtypes.float64)

  def _float(self) -> Tensor: return self if self.dtype.is_float else self.cast(dtypes.default_float)
  def _wide(self) -> Tensor: return self.cast(dtypes.float32) if self.dtype in (dtypes.float16, dtypes.bfloat16) else self

  def add(self, x: Any, reverse: bool = False) -> Tensor: return self._bin(Ops.ADD, x, reverse)
  def sub(self, x: Any, reverse: bool = False) -> Tensor:
    a, b = self._binary_operands(x, reverse)
    if a.dtype == dtypes.bool: raise TypeError("subtraction of bool tensors is not supported; use ^ or logical_not")
    return a._alu(Ops.SUB, b)
  def mul(self, x: Any, reverse: bool = False) -> Tensor: return self._bin(Ops.MUL, x, reverse)

  def div(self, x: Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
    """True division (integers give float32); rounding_mode 'trunc' or 'floor' rounds the quotient."""
    a, b = self._binary_operands(x, reverse)
    if rounding_mode == "floor": return a._floordiv(b)
    if rounding_mode == "trunc":
      return a._alu(Ops.IDIV, b) if a.dtype.is_int else a._alu(Ops.FDIV, b).trunc()
    if rounding_mode is not None: raise ValueError(f"rounding_mode must be None, 'trunc' or 'floor', not {rounding_mode!r}")
    a, b = a._float(), b._float()
    return a._alu(Ops.FDIV, b)

  def _floordiv(self, b: Tensor) -> Tensor:
    if self.dtype.is_float: return self._float_floordiv(b)
    if self.dtype == dtypes.bool: raise TypeError("floor division of bool tensors is not supported")
    q = self._alu(Ops.IDIV, b)
    if self.dtype.is_unsigned: return q
    # truncation rounds toward zero; floor differs when the signs differ and there is a remainder
    fix = (self._alu(Ops.MOD, b)._bin(Ops.CMPNE, 0)) & ((self < 0) ^ (b < 0))
    return q - fix.cast(q.dtype)

  def _float_floordiv(self, b: Tensor) -> Tensor:
    """torch's div_floor_floating: the quotient from the exact fmod remainder, so an exact multiple is not
    rounded up (5. // 0.2 is 24, since 0.2 is a little more than 1/5), x // 0 is the IEEE a / b, inf // x NaN."""
    if self.dtype.itemsize < 4: return self.float()._float_floordiv(b.float()).cast(self.dtype)  # torch: in float
    mod = self._alu(Ops.MOD, b)
    div = (self - mod)._alu(Ops.FDIV, b)
    div = ((mod != 0) & ((b < 0) ^ (mod < 0))).where(div - 1, div)
    fl = div.floor()
    fl = ((div - fl) > 0.5).where(fl + 1, fl)
    q = self._alu(Ops.FDIV, b)
    # a zero quotient keeps the sign of a / b (finite here, so q * 0 is that signed zero)
    return (b == 0).where(q, (div != 0).where(fl, q * 0.0))

  def floordiv(self, x: Any, reverse: bool = False) -> Tensor:
    """Floor division (Python's //); on floats exactly torch.floor_divide's values."""
    a, b = self._binary_operands(x, reverse)
    return a._floordiv(b)

  def mod(self, x: Any, reverse: bool = False) -> Tensor:
    """Remainder with the sign of the divisor (Python's and numpy's %)."""
    a, b = self._binary_operands(x, reverse)
    if a.dtype.is_float:
      if a.dtype.itemsize < 4: return a.float().mod(b.float()).cast(a.dtype)  # torch computes halves in float
      # torch's remainder: the exact fmod, moved into the divisor's sign (x % 0 is NaN, 1 % inf is 1, -1 % inf is inf)
      r = a._alu(Ops.MOD, b)
      return ((r != 0) & ((b < 0) ^ (r < 0))).where(r + b, r)
    if a.dtype == dtypes.bool: raise TypeError("modulo of bool tensors is not supported")
    r = a._alu(Ops.MOD, b)
    if a.dtype.is_unsigned: return r
    fix = (r._bin(Ops.CMPNE, 0)) & ((r < 0) ^ (b < 0))
    return fix.where(r + b, r)

  def pow(self, x: Any, reverse: bool = False) -> Tensor:
    """Elementwise power; integer exponents of float bases multiply exactly, negative bases work."""
    if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool) and float(x).is_integer() and abs(x) <= 16:
      n = int(abs(x))
      base = self if self.dtype.is_float or x >= 0 else self._float()
      acc, p = None, base
      while n:  # square and multiply
        if n & 1: acc = p if acc is None else acc * p
        p, n = p * p, n >> 1
      acc = acc if acc is not None else base.ones_like()
      return acc if x >= 0 else acc.reciprocal()
    a, b = self._binary_operands(x, reverse)
    if a.dtype.is_int or a.dtype == dtypes.bool:
      return a._float().pow(b._float()).round_half_away().cast(a.dtype)
    # |a|**b via exp2/log2, then the sign for negative bases with odd integer exponents, NaN for other negative bases
    mag = (b * a.abs().log2()).exp2()
    b_int = b.trunc() == b
    odd = b_int & ((b.abs() * 0.5).trunc() * 2 != b.abs())
    neg = a < 0
    out = neg.where(b_int.where(odd.where(-mag, mag), float("nan")), mag)
    return ((a == 0) & (b == 0)).where(1.0, out)

  def round_half_away(self) -> Tensor:
    return (self < 0).where(-((-self) + 0.5).trunc(), (self + 0.5).trunc())

  def __add__(self, x): return self.add(x)
  def __radd__(self, x): return self.add(x, True)
  def __sub__(self, x): return self.sub(x)
  def __rsub__(self, x): return self.sub(x, True)
  def __mul__(self, x): return self.mul(x)
  def __rmul__(self, x): return self.mul(x, True)
  def __truediv__(self, x): return self.div(x)
  def __rtruediv__(self, x): return self.div(x, True)
  def __floordiv__(self, x): return self.floordiv(x)
  def __rfloordiv__(self, x): return self.floordiv(x, True)
  def __mod__(self, x): return self.mod(x)
  def __rmod__(self, x): return self.mod(x, True)
  def __pow__(self, x): return self.pow(x)
  def __rpow__(self, x): return self.pow(x, True)
  def __matmul__(self, x): return self.matmul(x)
  def __rmatmul__(self, x): return Tensor(x, device=self.device).matmul(self) if not isinstance(x, Tensor) else x.matmul(self)
  def __neg__(self): return self.neg()
  def __abs__(self): return self.abs()
  def __and__(self, x): return self._logic(Ops.AND, x)
  def __rand__(self, x): return self._logic(Ops.AND, x, True)
  def __or__(self, x): return self._logic(Ops.OR, x)
  def __ror__(self, x): return self._logic(Ops.OR, x, True)
  def __xor__(self, x): return self._logic(Ops.XOR, x)
  def __rxor__(self, x): return self._logic(Ops.XOR, x, True)
  def __lshift__(self, x): return self._logic(Ops.SHL, x)
  def __rshift__(self, x): return self._logic(Ops.SHR, x)
  def __invert__(self) -> Tensor:
    if self.dtype.is_float: raise TypeError("~ is only defined for bool and integer tensors")
    return self.logical_not() if self.dtype == dtypes.bool else self ^ -1 if not self.dtype.is_unsigned else self ^ self.dtype.max
  def __lt__(self, x): return self._bin(Ops.CMPLT, x)
  def __gt__(self, x): return self._bin(Ops.CMPLT, x, True)
  def __le__(self, x): return self._bin(Ops.CMPLT, x, True).logical_not()
  def __ge__(self, x): return self._bin(Ops.CMPLT, x).logical_not()
  def __eq__(self, x): return self._bin(Ops.CMPEQ, x)  # type: ignore[override]
  def __ne__(self, x): return self._bin(Ops.CMPNE, x)  # type: ignore[override]

  def _logic(self, op: Ops, x: Any, reverse: bool = False) -> Tensor:
    a, b = self._binary_operands(x, reverse)
    if a.dtype.is_float: raise TypeError(f"{op.name.lower()} is only defined for bool and integer tensors, not {a.dtype.name}")
    return a._alu(op, b)

  def logical_not(self) -> Tensor:
    """True where the value is zero/False."""
    return self.cast(dtypes.bool)._bin(Ops.CMPNE, True)
  def logical_and(self, x: Any) -> Tensor: return self.cast(dtypes.bool) & (x.cast(dtypes.bool) if isinstance(x, Tensor) else bool(x))
  def logical_or(self, x: Any) -> Tensor: return self.cast(dtypes.bool) | (x.cast(dtypes.bool) if isinstance(x, Tensor) else bool(x))

  def neg(self) -> Tensor:
    if self.dtype == dtypes.bool: raise TypeError("negation of a bool tensor is not supported; use logical_not")
    return self._alu(Ops.NEG)
  def abs(self) -> Tensor: return self if self.dtype.is_unsigned or self.dtype == dtypes.bool else (self < 0).where(-self, self)
  def sign(self) -> Tensor: return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
  def reciprocal(self) -> Tensor: return self._float()._alu(Ops.RECIP)
  def sqrt(self) -> Tensor: return self._float()._alu(Ops.SQRT)
  def rsqrt(self) -> Tensor: return self.sqrt().reciprocal()
  def exp2(self) -> Tensor: return self._float()._alu(Ops.EXP2)
  def log2(self) -> Tensor: return self._float()._alu(Ops.LOG2)
  def exp(self) -> Tensor: return (self._float() * (1 / math.log(2))).exp2()
  def log(self) -> Tensor: return self.log2() * math.log(2)
  def sin(self) -> Tensor: return self._float()._alu(Ops.SIN)
  def cos(self) -> Tensor: return (math.pi / 2 - self._float()).sin()
  def tan(self) -> Tensor: return self.sin() / self.cos()
  def trunc(self) -> Tensor: return self if not self.dtype.is_float else self._alu(Ops.TRUNC)
  def floor(self) -> Tensor:
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self < t).where(t - 1, t)
  def ceil(self) -> Tensor:
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self > t).where(t + 1, t)
  def square(self) -> Tensor: return self * self
  def sigmoid(self) -> Tensor: return (1 + (-self._float()).exp()).reciprocal()
  def tanh(self) -> Tensor: return 2.0 * (2.0 * self._float()).sigmoid() - 1.0
  # a where, not maximum(x, 0): the gradient at 0 is then 0, as torch's, instead of a tie's half
  def relu(self) -> Tensor: return (self > 0).where(self, 0)
  def leaky_relu(self, neg_slope: float = 0.01) -> Tensor: return (self < 0).where(self * neg_slope, self)
  def silu(self) -> Tensor: return self * self.sigmoid()
  swish = silu
  def gelu(self) -> Tensor:
    """GELU, tanh approximation (as tinygrad)."""
    x = self._float()
    return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
  def softplus(self, beta: float = 1.0) -> Tensor: return (1 + (self * beta).exp()).log() * (1 / beta)

  def maximum(self, x: Any) -> Tensor: return self._bin(Ops.MAX, x)
  def minimum(self, x: Any) -> Tensor: return self._bin(Ops.MIN, x)
  def clip(self, min_: Any = None, max_: Any = None) -> Tensor:
    """Limit values to [min_, max_] (either may be None)."""
    if min_ is None and max_ is None: raise ValueError("clip needs at least one of min_ and max_")
    x = self if min_ is None else self.maximum(min_)
    return x if max_ is None else x.minimum(max_)
  clamp = clip

  def where(self, x: Any, y: Any) -> Tensor:
    """Elementwise `x if self else y` (self is used as a condition)."""
    cond = self.cast(dtypes.bool)
    if isinstance(x, Tensor): xs, ys = x._binary_operands(y)
    elif isinstance(y, Tensor): ys, xs = y._binary_operands(x)
    else:
      dt = promote_types(dtypes.from_py(x), dtypes.from_py(y))
      xs, ys = Tensor(x, device=self.device, dtype=dt), Tensor(y, device=self.device, dtype=dt)
    if xs.device != self.device: raise ValueError(f"where: condition on {self.device}, values on {xs.device}")
    out = broadcast_shape(cond.shape, xs.shape)
    return cond._broadcast_to(out)._new(UOp(Ops.WHERE, xs.dtype, (cond._broadcast_to(out).uop, xs._broadcast_to(out).uop,
                                                                ys._broadcast_to(out).uop)))

  # ------------------------------------------------------------------ reductions

  def _axes(self, axis: int | Sequence[int] | None) -> tuple[int, ...]:
    if axis is None: return tuple(range(self.ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    norm = tuple(_norm_axis(a, self.ndim) for a in axes)
    if len(set(norm)) != len(norm): raise ValueError(f"repeated axis in {axis}")
    return tuple(sorted(norm)) if self.ndim else ()

  def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
    axes = self._axes(axis)
    if (split := self._split_reduce(op, axes)) is not None: ret = split
    else: ret = self._new(UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), (op, axes))) if axes else self
    return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

  def _split_reduce(self, op: Ops, axes: tuple[int, ...]) -> Tensor | None:
    """A large reduction to a few values, as two: `chunks` partial results (realized, so devices
    run the chunks in parallel), then their reduction. None when the reduction is not worth it."""
    size = prod(self.shape[a] for a in axes)
    if size < SPLIT_REDUCE_MIN or self.numel() // max(size, 1) > SPLIT_REDUCE_MAX_OUTPUT: return None
    chunks = next((k for k in range(256, 15, -1) if size % k == 0 and size // k >= 1024), None)
    if chunks is None: return None
    keep = [i for i in range(self.ndim) if i not in axes]
    kept = tuple(self.shape[i] for i in keep)
    x = self.permute(keep + list(axes)).reshape(kept + (chunks, size // chunks))
    partial = x._new(UOp(Ops.REDUCE_AXIS, x.dtype, (x.uop,), (op, (x.ndim - 1,)))).contiguous()
    total = partial._new(UOp(Ops.REDUCE_AXIS, x.dtype, (partial.uop,), (op, (x.ndim - 2,))))
    # back to the keepdim layout: the kept axes in place, 1 where axes were reduced
    return total.reshape(tuple(1 if i in axes else s for i, s in enumerate(self.shape)))

  def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
    """Sum over `axis` (all axes when None). Bools and integers sum as int64 (torch's rule), halves accumulate
    in float32 and return their own dtype; `dtype` casts the input first and sums in that type."""
    return self._accumulate(Ops.ADD, axis, keepdim, dtype)

  def prod(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
    """Product over `axis`, with sum's dtype rules."""
    return self._accumulate(Ops.MUL, axis, keepdim, dtype)

  def _accumulate(self, op: Ops, axis, keepdim: bool, dtype: DType | str | None) -> Tensor:
    # torch: the input is cast to `dtype` (default: int64 for ints, itself for floats); half floats, whether
    # the input's or the asked-for type, accumulate in float32 and round once at the end
    out_dt = dtypes.from_any(dtype) if dtype is not None else _sum_dtype(self.dtype)
    acc = dtypes.float32 if out_dt in (dtypes.float16, dtypes.bfloat16) else out_dt
    return self.cast(out_dt).cast(acc)._reduce(op, axis, keepdim).cast(out_dt)

  def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """Largest value over `axis`."""
    self._check_nonempty(axis, "max")
    return self._reduce(Ops.MAX, axis, keepdim)

  def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """Smallest value over `axis`."""
    self._check_nonempty(axis, "min")
    return self._reduce(Ops.MIN, axis, keepdim)

  def _check_nonempty(self, axis, name: str) -> None:
    if any(self.shape[a] == 0 for a in self._axes(axis)): raise ValueError(f"{name} of an empty axis has no identity")

  def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """Mean over `axis` (integers give float32)."""
    x = self._float()
    n = prod(self.shape[a] for a in self._axes(axis))
    s = x._wide().sum(axis, keepdim)  # halves: the sum may pass 65504 when the mean does not
    return (s * (1 / n) if n else s * float("nan")).cast(x.dtype)

  def var(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    """Variance over `axis` with `correction` (1: the unbiased estimate, like torch)."""
    x = self._float()._wide()  # halves in float32 (torch's opmath): squares overflow half long before the variance
    n = prod(self.shape[a] for a in self._axes(axis))
    sq = (x - x.mean(axis, keepdim=True)).square().sum(axis, keepdim)
    return (sq * (1 / (n - correction)) if n - correction > 0 else sq * float("nan")).cast(self._float().dtype)

  def std(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    """Standard deviation over `axis`."""
    return self.var(axis, keepdim, correction).sqrt()

  def _arg_best(self, axis: int | None, keepdim: bool, best: Tensor) -> Tensor:
    if axis is None:
      return self.flatten()._arg_best(0, False, best.flatten()).reshape((1,) * self.ndim if keepdim else ())
    ax = _norm_axis(axis, self.ndim)
    n = self.shape[ax]
    if n == 0: raise ValueError("argmax/argmin of an empty axis")
    # the first position holding the best value: positions count down from n, the largest wins
    countdown = Tensor.arange(n, 0, -1, dtype=dtypes.int32, device=self.device).reshape(
      (n,) + (1,) * (self.ndim - ax - 1))
    hit = (self == best)
    if self.dtype.is_float: hit = hit | ((self != self) & (best != best))  # a NaN is the max (and min), like numpy
    return (n - (hit.cast(dtypes.int32) * countdown).max(ax, keepdim)).cast(dtypes.int32)

  def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the first largest value along `axis` (of the flattened tensor when None)."""
    best = self.max(axis, keepdim=True) if axis is not None else self.max()
    return self._arg_best(axis, keepdim, best)

  def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the first smallest value along `axis`."""
    best = self.min(axis, keepdim=True) if axis is not None else self.min()
    return self._arg_best(axis, keepdim, best)

  def softmax(self, axis: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along `axis`, computed stably."""
    x = self._float()
    e = (x - x.max(axis, keepdim=True)).exp()
    return e / e.sum(axis, keepdim=True)

  def log_softmax(self, axis: int = -1) -> Tensor:
    """log(softmax(x)) along `axis`, computed stably."""
    x = self._float()
    m = x - x.max(axis, keepdim=True)
    return m - m.exp().sum(axis, keepdim=True).log()

  def logsumexp(self, axis: int = -1, keepdim: bool = False) -> Tensor:
    x = self._float()
    m = x.max(axis, keepdim=True)
    out = (x - m).exp().sum(axis, keepdim=True).log() + m
    return out if keepdim else out.squeeze(axis)

  # ------------------------------------------------------------------ linear algebra and convolution

  def dot(self, w: Tensor) -> Tensor:
    """Matrix product with numpy's rules for 1-D operands and broadcast batch dimensions."""
    if not isinstance(w, Tensor): raise TypeError(f"matmul needs a Tensor, got {type(w).__name__}")
    if self.ndim == 0 or w.ndim == 0: raise ValueError("matmul does not take 0-d tensors; use *")
    x, y = self, w
    if x.device != y.device: raise ValueError(f"matmul operands on {x.device} and {y.device}")
    if x.shape[-1] != y.shape[-2 if y.ndim > 1 else -1]:
      raise ValueError(f"matmul shape mismatch: {self.shape} @ {w.shape} (inner sizes {x.shape[-1]} and "
                       f"{y.shape[-2 if y.ndim > 1 else -1]} differ)")
    dt = promote_types(x.dtype, y.dtype)
    x, y = x.cast(dt), y.cast(dt)
    x1 = x.ndim == 1
    y1 = y.ndim == 1
    if x1: x = x.reshape(1, -1)
    if y1: y = y.reshape(-1, 1)
    batch = broadcast_shape(x.shape[:-2], y.shape[:-2])
    n, k, m = x.shape[-2], x.shape[-1], y.shape[-1]
    xe = x.reshape(x.shape[:-2] + (n, 1, k))
    ye = y.transpose(-1, -2).reshape(y.shape[:-2] + (1, m, k))
    # a matmul keeps its dtype (torch): integers accumulate in their own width, halves in float32
    prods = xe._broadcast_to(batch + (n, m, k)) * ye._broadcast_to(batch + (n, m, k))
    out = prods.sum(-1, dtype=None if dt in (dtypes.float16, dtypes.bfloat16) else dt)
    if x1: out = out.squeeze(-2)
    if y1: out = out.squeeze(-1)
    return out

  matmul = dot

  def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """self @ weight (+ bias); weight has shape (in, out) as in tinygrad."""
    out = self @ weight
    return out if bias is None else out + bias

  def _pool_last(self, k: int, stride: int, dilation: int) -> Tensor:
    """Sliding windows over the last axis: (..., i) -> (..., o, k), made only of movement ops."""
    i = self.shape[-1]
    o = (i - dilation * (k - 1) - 1) // stride + 1
    if o <= 0: raise ValueError(f"a window of {k} (dilation {dilation}) does not fit an axis of size {i}")
    pre = self.shape[:-1]
    x = self
    i2 = max(i, stride * o - dilation)
    if i2 > i: x = x.pad(((0, 0),) * len(pre) + ((0, i2 - i),))
    # repeat the axis e times; row a of the (k, i2+d) view then starts at offset a*d
    e = -(-k * (i2 + dilation) // i2)
    x = x.reshape(pre + (1, i2)).expand(pre + (e, i2)).reshape(pre + (e * i2,))
    x = x.shrink(tuple((0, s) for s in pre) + ((0, k * (i2 + dilation)),)).reshape(pre + (k, i2 + dilation))
    x = x.shrink(tuple((0, s) for s in pre) + ((0, k), (0, stride * o))).reshape(pre + (k, o, stride))
    x = x.shrink(tuple((0, s) for s in pre) + ((0, k), (0, o), (0, 1))).reshape(pre + (k, o))
    return x.transpose(-1, -2)

  def _pool(self, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> Tensor:
    """Sliding windows over the last len(kernel) axes: (..., i1..in) -> (..., o1..on, k1..kn), movement ops only."""
    n = len(kernel)
    pre = self.ndim - n
    x = self
    # pool the spatial axes first to last; each moves to the end and leaves (o, k) there
    for k, st, dl in zip(kernel, stride, dilation):
      x = x.permute(tuple(range(pre)) + tuple(range(pre + 1, x.ndim)) + (pre,))._pool_last(k, st, dl)
    # now (..., o1, k1, ..., on, kn)
    return x.permute(tuple(range(pre)) + tuple(pre + 2 * i for i in range(n)) + tuple(pre + 2 * i + 1 for i in range(n)))

  def _pool2d(self, kernel: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int]) -> Tensor:
    """(..., H, W) -> (..., oh, ow, kh, kw) windows."""
    return self._pool(kernel, stride, dilation)

  @staticmethod
  def _conv_pads(padding: int | Sequence[int], n: int, name: str) -> tuple[tuple[int, int], ...]:
    """(before, after) per spatial axis from an int, one int per axis, or torch's flat order (last axis first)."""
    if isinstance(padding, (int, np.integer)): return ((int(padding), int(padding)),) * n
    padding = tuple(int(p) for p in padding)
    if len(padding) == n: return tuple((p, p) for p in padding)
    if len(padding) == 2 * n: return tuple((padding[2 * i], padding[2 * i + 1]) for i in reversed(range(n)))
    raise ValueError(f"{name} padding must be an int, {n} ints or {2 * n} ints, got {padding}")

  @staticmethod
  def _tuple_arg(v: int | Sequence[int], n: int, what: str) -> tuple[int, ...]:
    out = (int(v),) * n if isinstance(v, (int, np.integer)) else tuple(int(x) for x in v)
    if len(out) != n: raise ValueError(f"{what} needs 1 or {n} values, got {v}")
    if any(x < 1 for x in out): raise ValueError(f"{what} must be positive, got {v}")
    return out

  def conv2d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
             dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0) -> Tensor:
    """Convolution (cross-correlation, as torch) over any number of spatial axes despite the name
    (tinygrad's): input (N, Cin, *spatial), weight (Cout, Cin/groups, *kernel); 1-D, 2-D and 3-D all work.

    :param padding: an int, one int per spatial axis, or torch's flat (left, right, top, bottom, ...) order.
    """
    n = weight.ndim - 2
    if n < 1 or self.ndim != n + 2:
      raise ValueError(f"conv2d needs input (N, Cin, *spatial) and weight (Cout, Cin/groups, *kernel) with as many "
                       f"spatial axes, got {self.shape} and {weight.shape}")
    bs, cin = self.shape[:2]
    cout, cin_g = weight.shape[:2]
    ks = weight.shape[2:]
    if groups < 1 or cin % groups or cout % groups or cin // groups != cin_g:
      raise ValueError(f"conv2d: input channels {cin} and weight {weight.shape} do not match groups={groups}")
    st, dl = self._tuple_arg(stride, n, "conv2d stride"), self._tuple_arg(dilation, n, "conv2d dilation")
    x = self.pad(((0, 0), (0, 0)) + self._conv_pads(padding, n, "conv2d"))._pool(ks, st, dl)  # (bs, cin, *out, *k)
    out = x.shape[2:2 + n]
    rc = cout // groups
    x = x.reshape((bs, groups, cin_g, 1) + out + ks).expand((bs, groups, cin_g, rc) + out + ks)
    # (bs, g, rc, *out, cin_g, *k): the reduced axes last
    x = x.permute((0, 1, 3) + tuple(range(4, 4 + n)) + (2,) + tuple(range(4 + n, 4 + 2 * n)))
    w = weight.reshape((1, groups, rc) + (1,) * n + (cin_g,) + ks)
    ret = (x * w).sum(tuple(range(-1 - n, 0))).reshape((bs, cout) + out)
    return ret if bias is None else ret + bias.reshape((1, cout) + (1,) * n)

  def conv_transpose2d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1,
                       stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1,
                       padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0) -> Tensor:
    """Transposed convolution (conv2d's gradient with respect to its input, as torch's) over any
    number of spatial axes: input (N, Cin, *spatial), weight (Cin, Cout/groups, *kernel)."""
    n = weight.ndim - 2
    if n < 1 or self.ndim != n + 2:
      raise ValueError(f"conv_transpose2d needs input (N, Cin, *spatial) and weight (Cin, Cout/groups, *kernel), "
                       f"got {self.shape} and {weight.shape}")
    if groups < 1 or weight.shape[0] % groups or self.shape[1] != weight.shape[0]:
      raise ValueError(f"conv_transpose2d: input channels {self.shape[1]} and weight {weight.shape} "
                       f"do not match groups={groups}")
    ks = weight.shape[2:]
    st = self._tuple_arg(stride, n, "conv_transpose2d stride")
    dl = self._tuple_arg(dilation, n, "conv_transpose2d dilation")
    op = (int(output_padding),) * n if isinstance(output_padding, (int, np.integer)) else tuple(output_padding)
    if len(op) != n or any(not 0 <= o < max(s, d) for o, s, d in zip(op, st, dl)):
      raise ValueError(f"conv_transpose2d output_padding {output_padding} must be below stride or dilation")
    # the equivalent convolution: a (Cout, Cin/groups, *kernel) weight flipped in space, over the input
    # with stride-1 zeros between its elements and the padding that makes the sizes come out right
    cin_g, cout_g = weight.shape[0] // groups, weight.shape[1]
    w = weight.reshape((groups, cin_g, cout_g) + ks).transpose(1, 2).flip(tuple(range(3, 3 + n)))
    w = w.reshape((groups * cout_g, cin_g) + ks)
    pads = self._conv_pads(padding, n, "conv_transpose2d")
    conv_pads = tuple(((k - 1) * d - b, (k - 1) * d - a + o) for k, d, (b, a), o in zip(ks, dl, pads, op))
    x = self
    if any(s > 1 for s in st):
      # (N, C, i) -> (N, C, i, 1) -> padded to (N, C, i, s) -> (N, C, i*s) -> without the zeros after the last element
      nc, sp = x.shape[:2], x.shape[2:]
      x = x.reshape(nc + sum(((i, 1) for i in sp), ()))
      x = x.pad(((0, 0), (0, 0)) + sum((((0, 0), (0, s - 1)) for s in st), ()))
      x = x.reshape(nc + tuple(i * s for i, s in zip(sp, st)))
      x = x.shrink(((0, nc[0]), (0, nc[1])) + tuple((0, i * s - (s - 1)) for i, s in zip(sp, st)))
    flat = sum((conv_pads[i] for i in reversed(range(n))), ())
    return x.conv2d(w, bias, groups=groups, dilation=dl, padding=flat)

  def max_pool2d(self, kernel_size: int | tuple[int, int] = 2, stride: int | tuple[int, int] | None = None) -> Tensor:
    """Max over windows of the last two axes."""
    k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
    s = k if stride is None else (stride, stride) if isinstance(stride, int) else tuple(stride)
    return self._pool2d(k, s, (1, 1)).max((-2, -1))

  def avg_pool2d(self, kernel_size: int | tuple[int, int] = 2, stride: int | tuple[int, int] | None = None) -> Tensor:
    """Mean over windows of the last two axes."""
    k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
    s = k if stride is None else (stride, stride) if isinstance(stride, int) else tuple(stride)
    return self._pool2d(k, s, (1, 1)).mean((-2, -1))


  # ------------------------------------------------------------------ training: initialisers, layers' math, losses

  @staticmethod
  def _fans(shape: tuple[int, ...]) -> tuple[int, int]:
    # (fan_in, fan_out) as tinygrad counts them: shape[1:] in, shape[0] out
    if not shape: raise ValueError("an initialiser needs at least one dimension")
    return prod(shape[1:]), shape[0]

  @staticmethod
  def glorot_uniform(*shape: ShapeArg, dtype: DType | str | None = None, device: str | None = None,
                     requires_grad: bool | None = None) -> Tensor:
    """Glorot (Xavier) uniform: U(-b, b) with b = sqrt(6 / (shape[0] + prod(shape[1:])))."""
    fan_in, fan_out = Tensor._fans(_shape_args(shape))
    b = math.sqrt(6 / (fan_in + fan_out))
    return Tensor.uniform(*shape, low=-b, high=b, dtype=dtype, device=device, requires_grad=requires_grad)

  @staticmethod
  def kaiming_uniform(*shape: ShapeArg, a: float = 0.01, dtype: DType | str | None = None, device: str | None = None,
                      requires_grad: bool | None = None) -> Tensor:
    """Kaiming (He) uniform for a leaky ReLU of slope `a`: U(-b, b), b = sqrt(6 / ((1 + a²) prod(shape[1:])))."""
    fan_in, _ = Tensor._fans(_shape_args(shape))
    b = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(fan_in)
    return Tensor.uniform(*shape, low=-b, high=b, dtype=dtype, device=device, requires_grad=requires_grad)

  @staticmethod
  def kaiming_normal(*shape: ShapeArg, a: float = 0.01, dtype: DType | str | None = None, device: str | None = None,
                     requires_grad: bool | None = None) -> Tensor:
    """Kaiming (He) normal for a leaky ReLU of slope `a`: N(0, 2 / ((1 + a²) prod(shape[1:])))."""
    fan_in, _ = Tensor._fans(_shape_args(shape))
    std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(fan_in)
    return Tensor.normal(*shape, mean=0.0, std=std, dtype=dtype, device=device, requires_grad=requires_grad)

  @staticmethod
  def scaled_uniform(*shape: ShapeArg, dtype: DType | str | None = None, device: str | None = None,
                     requires_grad: bool | None = None) -> Tensor:
    """U(-1, 1) scaled by 1/sqrt(number of elements)."""
    b = prod(_shape_args(shape)) ** -0.5
    return Tensor.uniform(*shape, low=-b, high=b, dtype=dtype, device=device, requires_grad=requires_grad)

  def sequential(self, ll: Sequence[Any]) -> Tensor:
    """Apply each callable of `ll` in turn: ll[-1](...ll[0](self))."""
    x = self
    for f in ll: x = f(x)
    return x

  def dropout(self, p: float = 0.5) -> Tensor:
    """Zero each element with probability `p` and scale the rest by 1/(1-p), in training mode only
    (`Tensor.train()`); the identity otherwise."""
    if not 0 <= p <= 1: raise ValueError(f"dropout probability {p} is not in [0, 1]")
    if not Tensor.training or p == 0: return self
    if p == 1: return self.zeros_like()
    keep = Tensor.rand(self.shape, device=self.device, requires_grad=False) >= p
    return keep.where(self, 0) * (1.0 / (1.0 - p))

  def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) over `axis` (biased variance, as torch's LayerNorm); no scale or shift."""
    y = self - self.mean(axis, keepdim=True)
    return y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()

  def batchnorm(self, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor,
                axis: int | Sequence[int] = 1) -> Tensor:
    """(x - mean) * invstd * weight + bias, the statistics given per element of `axis` (channels by default)
    and broadcast over the others."""
    axes = self._axes(axis)
    shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
    x = self - mean.reshape(shape)
    if weight is not None: x = x * weight.reshape(shape)
    ret = x * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
    return ret if bias is None else ret + bias.reshape(shape)

  def _one_hot_along_dim(self, num_classes: int, dim: int = -1) -> Tensor:
    # bool: True where the value equals the position along `dim` (which has size 1 here)
    offset = self.ndim - _norm_axis(dim, self.ndim) - 1
    return self == Tensor.arange(num_classes, device=self.device, dtype=self.dtype).reshape((num_classes,) + (1,) * offset)

  def one_hot(self, num_classes: int = -1) -> Tensor:
    """A new last axis of `num_classes` holding 1 at each value's position and 0 elsewhere (int32).
    With -1, the number of classes is the largest value + 1 (this realizes the tensor)."""
    if not self.dtype.is_int: raise TypeError(f"one_hot needs an integer tensor, this one is {self.dtype.name}")
    if num_classes == -1: num_classes = int(self.max().item()) + 1 if self.numel() else 0
    if num_classes < 0: raise ValueError(f"num_classes must be -1 or nonnegative, got {num_classes}")
    return self.unsqueeze(-1)._one_hot_along_dim(num_classes).where(1, 0).cast(dtypes.int32)

  def logsigmoid(self) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x), computed without overflow."""
    x = self._float()
    return -((-x).relu() + (1 + (-x.abs()).exp()).log())

  @staticmethod
  def _check_reduction(reduction: str) -> None:
    if reduction not in ("none", "sum", "mean"): raise ValueError(f"reduction must be 'none', 'sum' or 'mean', not {reduction!r}")

  def _do_reduction(self, reduction: str = "mean") -> Tensor:
    Tensor._check_reduction(reduction)
    return self if reduction == "none" else self.sum() if reduction == "sum" else self.mean()

  def _check_labels(self, Y: Tensor, class_axis: int, name: str) -> None:
    if not isinstance(Y, Tensor): raise TypeError(f"{name} needs a Tensor of targets, got {type(Y).__name__}")
    if not Y.dtype.is_int: raise TypeError(f"{name} needs integer class indices, got {Y.dtype.name}")
    want = self.shape[:class_axis] + self.shape[class_axis + 1:]
    if Y.shape != want:
      raise ValueError(f"{name}: targets of shape {Y.shape} do not match input {self.shape} (want {want})")

  def sparse_categorical_crossentropy(self, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0,
                                      reduction: str = "mean") -> Tensor:
    """Cross entropy of logits (..., classes) against integer classes Y (...).

    :param ignore_index: targets equal to it add nothing and are left out of the mean (-1: none, tinygrad's default).
    :param label_smoothing: mix the one-hot target with the uniform distribution by this much.
    :param reduction: 'mean', 'sum' or 'none'.
    """
    if not 0.0 <= label_smoothing <= 1.0: raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    Tensor._check_reduction(reduction)
    self._check_labels(Y, self.ndim - 1, "sparse_categorical_crossentropy")
    log_probs = self.log_softmax(-1)
    mask = (Y != ignore_index) if ignore_index != -1 else Y.ones_like(dtype=dtypes.bool)
    hit = Y.unsqueeze(-1)._one_hot_along_dim(self.shape[-1]) & mask.unsqueeze(-1)
    picked = hit.where(log_probs, 0).sum(-1)
    smoothing = label_smoothing * mask.where(log_probs.mean(-1), 0)
    unreduced = -((1 - label_smoothing) * picked + smoothing)
    # the mean counts only the targets not ignored
    return unreduced.sum() / mask.sum() if reduction == "mean" else unreduced._do_reduction(reduction)

  def cross_entropy(self, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy of logits (N, C, ...) (or (C,)) against class indices (N, ...) or probabilities of
    the logits' shape, as torch.nn.functional.cross_entropy."""
    if not 0.0 <= label_smoothing <= 1.0: raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    Tensor._check_reduction(reduction)
    cdim = 0 if self.ndim == 1 else 1
    if Y.shape != self.shape:
      self._check_labels(Y, cdim, "cross_entropy")
      Y = Y.unsqueeze(cdim)._one_hot_along_dim(self.shape[cdim], dim=cdim)
    Y = (1 - label_smoothing) * Y + label_smoothing / self.shape[cdim]
    return (-(self.log_softmax(cdim) * Y).sum(cdim))._do_reduction(reduction)

  def nll_loss(self, Y: Tensor, weight: Tensor | None = None, ignore_index: int | None = None,
               reduction: str = "mean") -> Tensor:
    """Negative log likelihood of log-probabilities (N, C, ...) at classes Y (N, ...), as torch's
    nll_loss: optional per-class `weight`; the mean divides by the summed weights of the targets kept."""
    Tensor._check_reduction(reduction)
    cdim = 0 if self.ndim == 1 else 1
    self._check_labels(Y, cdim, "nll_loss")
    hit = Y.unsqueeze(cdim)._one_hot_along_dim(self.shape[cdim], dim=cdim)
    if weight is None: w = Y.ones_like(dtype=self.dtype)
    else:
      if weight.shape != (self.shape[cdim],): raise ValueError(f"nll_loss weight needs shape {(self.shape[cdim],)}, got {weight.shape}")
      w = hit.where(weight.reshape((-1,) + (1,) * (self.ndim - cdim - 1)), 0).sum(cdim)
    if ignore_index is not None: w = (Y != ignore_index).where(w, 0)
    nll = -hit.where(self, 0).sum(cdim) * w
    return nll.sum() / w.sum() if reduction == "mean" else nll._do_reduction(reduction)

  def binary_crossentropy(self, Y: Tensor, reduction: str = "mean") -> Tensor:
    """-(Y log p + (1-Y) log(1-p)) of probabilities p = self; each log is clamped at -100, as torch's."""
    Tensor._check_reduction(reduction)
    return (-(Y * self.log().maximum(-100) + (1 - Y) * (1 - self).log().maximum(-100)))._do_reduction(reduction)

  def binary_crossentropy_logits(self, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """binary_crossentropy of sigmoid(self), computed stably from the logits (torch's
    binary_cross_entropy_with_logits); `pos_weight` scales the positive term."""
    Tensor._check_reduction(reduction)
    pos = Y * self.logsigmoid()
    if pos_weight is not None: pos = pos * pos_weight
    return (-(pos + (1 - Y) * (-self).logsigmoid()))._do_reduction(reduction)


# ---------------------------------------------------------------- helpers

def _reshape(u: UOp, shape: tuple[int, ...]) -> UOp:
  if u.shape == shape: return u
  if u.op is Ops.RESHAPE: u = u.src[0]  # reshape of a reshape is one reshape
  return u if u.shape == shape else UOp(Ops.RESHAPE, u.dtype, (u,), shape)


def _upload(arr: np.ndarray, dt: DType, device: str) -> UOp:
  """A realized BUFFER node holding `arr` converted to `dt` on `device`."""
  if dt == dtypes.bfloat16: raw = f32_to_bf16(np.asarray(arr, dtype=np.float32))
  else:
    with np.errstate(all="ignore"): raw = np.asarray(arr).astype(dt.np, copy=False)
  dev = get_registry().device(device)
  check_supported(device, dev.caps, {dt})
  buf = Buffer(device, raw.size, dt, dev.allocator, image_spec_for(tuple(arr.shape), dt, dev.caps))
  buf.copyin(raw)
  return _reshape(UOp(Ops.BUFFER, dt, (), buf), tuple(arr.shape))


def _kernelize(tensors: list[Tensor], limit_device: str | None = None) -> None:
  """Kernelize the tensors' graphs (per device) and point every live tensor at its new node.
  `limit_device` takes the buffer limit from another device (to render for it elsewhere)."""
  registry = get_registry()
  by_device: dict[str, list[Tensor]] = {}
  for t in tensors: by_device.setdefault(t.device, []).append(t)
  for device, ts in by_device.items():
    becomes = kernelize([t.uop for t in ts], device,
                        new_buffer=lambda dev, size, dt: Buffer(dev, size, dt, registry.device(dev).allocator),
                        buffer_limit=lambda dev: registry.render_device(limit_device or dev).buffer_limit)
    if becomes:
      for t in list(Tensor._live):
        if (n := becomes.get(t.uop)) is not None: t.uop = n


def _live_buffers() -> set[Buffer]:
  out = set()
  for t in list(Tensor._live):
    if (base := contiguous_base(t.uop)) is not None: out.add(buffer_of(base))
  return out


_schedule_caches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # registry -> ScheduleCache


def _schedule(tensors: list[Tensor], limit_device: str | None = None) -> list[ScheduleItem]:
  """Kernelize the tensors and list their pending kernels; a graph whose structure was scheduled
  before reuses that schedule on its new buffers."""
  registry = get_registry()
  if registry.config.check_spec:
    from plugrad.spec import tensor_spec
    from plugrad.uops import check_spec
    for t in tensors: check_spec(t.uop, tensor_spec, "tensor graph")
  cache = _schedule_caches.setdefault(registry, ScheduleCache())
  roots = [t.uop for t in tensors]
  found = structure_key(roots, (tuple(t.device for t in tensors), limit_device))
  if found is not None and (template := cache.get(found[0])) is not None:
    items, new_roots = template.instantiate(found[1], lambda dev, size, dt, opts: Buffer(dev, size, dt, registry.device(dev).allocator,
                                                                                         opts), _live_buffers())
    becomes = {old: new for old, new in zip(roots, new_roots) if new is not None}
    for t in list(Tensor._live):
      if (n := becomes.get(t.uop)) is not None: t.uop = n
    return items
  _kernelize(tensors, limit_device)
  items = create_schedule([t.uop for t in tensors], _live_buffers())
  if found is not None and (template := ScheduleTemplate.record(found[1], [t.uop for t in tensors], items)) is not None:
    cache.put(found[0], template)
  return items


def _finish_realize() -> None:
  """Tensors whose kernels ran now point at their buffers."""
  for t in list(Tensor._live):
    base = contiguous_base(t.uop)
    if base is not None and base.op is Ops.ASSIGN and pending_kernel(base) is None:
      t.uop = _reshape(base.src[0], t.shape)


__all__ = ["Tensor", "broadcast_shape"]
