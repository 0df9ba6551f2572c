"""The op codes of the IR, and the groups of them that passes ask about.

They live below `plugrad.uops` (which re-exports them) so that shape inference, which `UOp.shape` calls,
can test op codes without importing the node type it serves.
"""
from __future__ import annotations

import itertools
from typing import Any, Iterator, cast

_values = itertools.count(1)


def _op() -> Ops:
  """A member's place in the class body, in declaration order; the op itself replaces it once the class exists."""
  return cast("Ops", next(_values))


class _OpsType(type):
  """The class of Ops: `Ops["ADD"]`, `len(Ops)` and iteration in declaration order, as an Enum's class gives. Ops is
  no `enum.Enum`: on Python 3.11 EnumType defines `__getattr__`, and its mere presence sends every read of `Ops.ADD`
  through the slow attribute hook (52 ns instead of 13), which tensor ops, passes and pattern tables do tens of times
  each (the 2-layer LM's eager training step: 13.5-14.1 ms as an Enum, 12.7-13.0 ms as this class)."""
  _members: tuple[Ops, ...]
  _by_name: dict[str, Ops]

  def __iter__(cls) -> Iterator[Ops]: return iter(cls._members)
  def __len__(cls) -> int: return len(cls._members)

  def __getitem__(cls, name: str) -> Ops:
    try:
      return cls._by_name[name]
    except KeyError:
      raise KeyError(f"plugrad has no op named {name!r}") from None


class Ops(metaclass=_OpsType):
  """Every operation, grouped by role. The group helpers below are what passes test against. Each op is one object,
  compared and hashed by identity, named by `.name`, numbered by `.value`; it pickles by name."""
  __slots__ = ("name", "value")
  # buffer / memory
  BUFFER = _op()      # a device buffer (arg: Buffer); tensor graph leaf
  PARAM = _op()       # the n-th buffer argument of a kernel (arg: index)
  CONST = _op()       # a scalar constant (arg: value)
  ARANGE = _op()      # tensor graph: the values 0, 1, ..., arg - 1 of dtype, shape (arg,); like CONST, computed
                      # in the kernels that read it (lowering: the index of its axis), never a buffer
  LOAD = _op()        # src: (PARAM, index[, gate]) -> value, or 0 where gate is false
  STORE = _op()       # src: (PARAM, index, value[, gate])
  COPY = _op()        # tensor graph: move src to the device in arg
  CONTIGUOUS = _op()  # tensor graph: realize src into its own buffer
  DETACH = _op()      # tensor graph: src's value, through which no gradient flows (removed by kernelize)
  CONTIGUOUS_BACKWARD = _op()  # tensor graph: src's value; its gradient is made contiguous (removed by kernelize)
  # tensor graph: src[0]'s value, a composite of src[1:]; their gradients come from the rule arg[0] names
  # (gradient.custom_gradients), none flows into src[0] (removed by kernelize)
  CUSTOM_GRADIENT = _op()
  ASSIGN = _op()      # tensor graph: write src[1] into the buffer src[0]
  MULTI = _op()       # tensor graph: a sharded tensor, src one graph per device, arg (devices, axis): plugrad.multi
  KERNEL = _op()      # tensor graph after kernelize: the value of a scheduled kernel (arg: Kernel)
  SINK = _op()        # groups the outputs of a graph
  DEFINE_VAR = _op()  # a symbolic int (tinygrad's Variable): arg (name, min, max); a kernel's integer parameter
  BIND = _op()        # tensor graph: src (DEFINE_VAR, CONST) the variable bound to a value (unbound before scheduling)
  # movement (tensor graph only; lowering turns them into index math)
  RESHAPE = _op(); PERMUTE = _op(); EXPAND = _op(); PAD = _op(); SHRINK = _op(); FLIP = _op()  # noqa: E702
  # ALU unary
  NEG = _op(); RECIP = _op(); SQRT = _op(); EXP2 = _op(); LOG2 = _op(); SIN = _op(); TRUNC = _op()  # noqa: E702
  COS = _op()  # optional: a device renders it when its Capabilities list it, others get it from SIN (lowering)
  CAST = _op(); BITCAST = _op()  # noqa: E702
  # ALU binary
  ADD = _op(); SUB = _op(); MUL = _op(); FDIV = _op(); IDIV = _op(); MOD = _op()  # noqa: E702
  MAX = _op(); MIN = _op(); CMPLT = _op(); CMPNE = _op(); CMPEQ = _op()  # noqa: E702
  AND = _op(); OR = _op(); XOR = _op(); SHL = _op(); SHR = _op()  # noqa: E702
  # ALU ternary
  WHERE = _op()
  # reduce
  REDUCE_AXIS = _op()  # tensor graph: arg (op, axes), reduced axes kept with size 1
  REDUCE = _op()       # lowered: src (value, *RANGEs), arg op
  # control (loop program)
  RANGE = _op()        # a loop variable 0..src[0]-1 (arg: id)
  SPECIAL = _op()      # a launch index (arg: (name, dim, size)); src (size,) when the size depends on a DEFINE_VAR
  ENDRANGE = _op()     # closes the loop of src[0]
  DEFINE_ACC = _op()   # an accumulator initialised to src[0] (arg: id)
  ACCUMULATE = _op()   # acc = op(acc, value): src (acc, value), arg op
  DEFINE_LOCAL = _op() # work-group shared memory: dtype the element type, arg (id, size)
  BARRIER = _op()      # work-group barrier after the local STOREs in src; a LOAD from it reads that memory
  # vectors (loop program, only for devices whose Capabilities set vector_ops)
  VECTORIZE = _op()    # lanes -> vector: src the scalar lanes in order, dtype scalar.vec(len(src))
  GEP = _op()          # vector -> one lane: src (vector,), arg the lane index, dtype the scalar
  # a warp's matrix multiply-accumulate (loop program, devices whose Capabilities list tensor_cores): src (A, B, C)
  # fragments (vectors), arg `TensorCore.wmma_arg()`, dtype C's; every thread of the warp gets its fragment of A·B + C
  WMMA = _op()

  def __init__(self, name: str, value: int) -> None:
    if hasattr(Ops, "_members"): raise TypeError("the ops are fixed: Ops[name] finds one")
    object.__setattr__(self, "name", name)
    object.__setattr__(self, "value", value)

  def __setattr__(self, key: str, value: Any) -> None: raise AttributeError(f"{self!r} is immutable")

  def __repr__(self) -> str: return f"Ops.{self.name}"
  __str__ = __repr__
  def __reduce__(self) -> tuple[Any, ...]: return (getattr, (Ops, self.name))  # one object per op, after unpickling too
  def __copy__(self) -> Ops: return self
  def __deepcopy__(self, memo: dict) -> Ops: return self


Ops._members = tuple(Ops(name, v) for name, v in vars(Ops).items() if type(v) is int and name.isupper())
Ops._by_name = {op.name: op for op in Ops._members}
for _member in Ops._members: setattr(Ops, _member.name, _member)
del _member


class GroupOp:
  """Sets of Ops that passes ask about."""
  Buffer = frozenset({Ops.BUFFER, Ops.PARAM, Ops.CONST, Ops.LOAD, Ops.STORE, Ops.COPY, Ops.CONTIGUOUS, Ops.ASSIGN,
                      Ops.KERNEL, Ops.SINK})
  Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
  Unary = frozenset({Ops.NEG, Ops.RECIP, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS, Ops.TRUNC, Ops.CAST,
                     Ops.BITCAST})
  Binary = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.MIN, Ops.CMPLT, Ops.CMPNE,
                      Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR})
  Ternary = frozenset({Ops.WHERE})
  ALU = Unary | Binary | Ternary
  Elementwise = ALU
  Comparison = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
  Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.MIN, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR})
  Reduce = frozenset({Ops.REDUCE_AXIS, Ops.REDUCE})
  ReduceOps = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.MIN})
  Control = frozenset({Ops.RANGE, Ops.SPECIAL, Ops.ENDRANGE, Ops.DEFINE_ACC, Ops.ACCUMULATE, Ops.DEFINE_LOCAL, Ops.BARRIER})
  Vector = frozenset({Ops.VECTORIZE, Ops.GEP})
