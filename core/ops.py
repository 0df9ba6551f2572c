"""The op codes of the IR, and the groups of them that passes ask about.

They live below `plugrad.uops` (which re-exports them) so that shape inference, which `UOp.shape` calls,
can test op codes without importing the node type it serves.
"""
from __future__ import annotations

from enum import Enum, auto


class Ops(Enum):
  """Every operation, grouped by role. The group helpers below are what passes test against."""
  # buffer / memory
  BUFFER = auto()      # a device buffer (arg: Buffer); tensor graph leaf
  PARAM = auto()       # the n-th buffer argument of a kernel (arg: index)
  CONST = auto()       # a scalar constant (arg: value)
  ARANGE = auto()      # tensor graph: the values 0, 1, ..., arg - 1 of dtype, shape (arg,); like CONST, computed
                       # in the kernels that read it (lowering: the index of its axis), never a buffer
  LOAD = auto()        # src: (PARAM, index[, gate]) -> value, or 0 where gate is false
  STORE = auto()       # src: (PARAM, index, value[, gate])
  COPY = auto()        # tensor graph: move src to the device in arg
  CONTIGUOUS = auto()  # tensor graph: realize src into its own buffer
  DETACH = auto()      # tensor graph: src's value, through which no gradient flows (removed by kernelize)
  CONTIGUOUS_BACKWARD = auto()  # tensor graph: src's value; its gradient is made contiguous (removed by kernelize)
  # tensor graph: src[0]'s value, a composite of src[1:]; their gradients come from the rule arg[0] names
  # (gradient.custom_gradients), none flows into src[0] (removed by kernelize)
  CUSTOM_GRADIENT = auto()
  ASSIGN = auto()      # tensor graph: write src[1] into the buffer src[0]
  MULTI = auto()       # tensor graph: a sharded tensor, src one graph per device, arg (devices, axis): plugrad.multi
  KERNEL = auto()      # tensor graph after kernelize: the value of a scheduled kernel (arg: Kernel)
  SINK = auto()        # groups the outputs of a graph
  DEFINE_VAR = auto()  # a symbolic int (tinygrad's Variable): arg (name, min, max); a kernel's integer parameter
  BIND = auto()        # tensor graph: src (DEFINE_VAR, CONST) the variable bound to a value (unbound before scheduling)
  # movement (tensor graph only; lowering turns them into index math)
  RESHAPE = auto(); PERMUTE = auto(); EXPAND = auto(); PAD = auto(); SHRINK = auto(); FLIP = auto()  # noqa: E702
  # ALU unary
  NEG = auto(); RECIP = auto(); SQRT = auto(); EXP2 = auto(); LOG2 = auto(); SIN = auto(); TRUNC = auto()  # noqa: E702
  COS = auto()  # optional: a device renders it when its Capabilities list it, others get it from SIN (lowering)
  CAST = auto(); BITCAST = auto()  # noqa: E702
  # ALU binary
  ADD = auto(); SUB = auto(); MUL = auto(); FDIV = auto(); IDIV = auto(); MOD = auto()  # noqa: E702
  MAX = auto(); MIN = auto(); CMPLT = auto(); CMPNE = auto(); CMPEQ = auto()  # noqa: E702
  AND = auto(); OR = auto(); XOR = auto(); SHL = auto(); SHR = auto()  # noqa: E702
  # ALU ternary
  WHERE = auto()
  # reduce
  REDUCE_AXIS = auto()  # tensor graph: arg (op, axes), reduced axes kept with size 1
  REDUCE = auto()       # lowered: src (value, *RANGEs), arg op
  # control (loop program)
  RANGE = auto()        # a loop variable 0..src[0]-1 (arg: id)
  SPECIAL = auto()      # a launch index (arg: (name, dim, size)); src (size,) when the size depends on a DEFINE_VAR
  ENDRANGE = auto()     # closes the loop of src[0]
  DEFINE_ACC = auto()   # an accumulator initialised to src[0] (arg: id)
  ACCUMULATE = auto()   # acc = op(acc, value): src (acc, value), arg op
  DEFINE_LOCAL = auto() # work-group shared memory: dtype the element type, arg (id, size)
  BARRIER = auto()      # work-group barrier after the local STOREs in src; a LOAD from it reads that memory
  # vectors (loop program, only for devices whose Capabilities set vector_ops)
  VECTORIZE = auto()    # lanes -> vector: src the scalar lanes in order, dtype scalar.vec(len(src))
  GEP = auto()          # vector -> one lane: src (vector,), arg the lane index, dtype the scalar

  def __repr__(self) -> str: return f"Ops.{self.name}"
  # members are singletons compared by identity: hash them in C (Enum's own __hash__ is Python code, and every
  # UOp key and pattern lookup hashes an Ops)
  __hash__ = object.__hash__


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
