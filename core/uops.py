"""The UOp IR: one immutable, hash-consed node type, pattern matching and graph rewriting.

Every stage of plugrad speaks UOps: the lazy tensor graph, the kernel ASTs the scheduler makes,
and the loop program the lowering makes. Building a node that is structurally equal to a live
node returns that very node, so equality is identity and passes can memoise by node.
"""
from __future__ import annotations

import inspect
import itertools
import math
import weakref
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar, overload

from plugrad.dtype import DType, dtypes, truncate
from plugrad.ops import GroupOp, Ops
from plugrad.shape import infer_shape


_PLAIN = (int, str, bool, type(None))


def _key_arg(arg: Any) -> Any:
  # -0.0 == 0.0 and nan != nan would break hash-consing of float constants; key them by bits
  if isinstance(arg, tuple): return arg if _plain_tuple(arg) else tuple(_key_arg(a) for a in arg)
  if isinstance(arg, float): return ("float", arg.hex())
  return arg


def _plain_tuple(t: tuple) -> bool:
  """Whether a tuple (of tuples) holds only values that key themselves: shapes, a pad's or shrink's pairs, a
  reduction's (op, axes). Told without building a copy: a pad's node was made in 0.7 us, 0.3 us with this."""
  for a in t:
    if type(a) not in _SELF_KEYED and (type(a) is not tuple or not _plain_tuple(a)): return False
  return True


T = TypeVar("T")


class _cached(Generic[T]):
  """functools.cached_property without its lock (Python 3.11 takes one on every first access, and every node
  made asks its shape): the value computed on first access is stored in the instance, which then answers."""

  def __init__(self, fn: Callable[[Any], T]) -> None:
    self.fn, self.name, self.__doc__ = fn, fn.__name__, fn.__doc__

  @overload
  def __get__(self, obj: None, cls: type | None = None) -> _cached[T]: ...
  @overload
  def __get__(self, obj: object, cls: type | None = None) -> T: ...
  def __get__(self, obj: object, cls: type | None = None) -> T | _cached[T]:
    if obj is None: return self
    value = obj.__dict__[self.name] = self.fn(obj)
    return value


class KeyRef(weakref.ref):
  """A weak reference to a node that carries a key for its callback (the node's hash-consing key here, a buffer's
  uid in the scheduler): weakref.KeyedRef without its Python-level __new__ and __init__ (a quarter of the cost, on
  the path of every node made). Set `key` after making it."""
  __slots__ = ("key",)


#: key -> weak reference to the live node: a plain dict of KeyRef (what WeakValueDictionary keeps inside, without its
#: Python-level __setitem__ and get on the path of every node made)
_NODES: dict[tuple, KeyRef] = {}


def _forget(ref: KeyRef, nodes: dict[tuple, KeyRef] = _NODES) -> None:
  # a dead node's entry, unless a new node of the same key has taken its place already. The dict is bound here: a
  # node that dies while the interpreter exits, after this module's globals were cleared, still finds it
  if nodes.get(ref.key) is ref: del nodes[ref.key]


_PLAIN_TYPES = frozenset(_PLAIN)
#: the types of values that are their own hash-consing key: the plain ones, and ops (one object each, hashed by identity)
_SELF_KEYED = frozenset(_PLAIN + (Ops,))


class _UOpMeta(type):
  binds_made = False  # whether a BIND (a bound Variable) exists yet: until one does, no graph has Variables to unbind

  # every node made passes here (a few thousand per eager training step): a plain argument skips _key_arg, and a new
  # node's fields are written through their slots' setters, without __init__ and the immutability guard
  # (0.7 us a node, 1.1 us through type.__call__ and __init__)
  def __call__(cls, op: Ops, dtype: DType | None = None, src: tuple = (), arg: Any = None):
    key = (op, dtype, src, arg if type(arg) in _PLAIN_TYPES else _key_arg(arg))
    if (ref := _NODES.get(key)) is not None and (ret := ref()) is not None: return ret
    ret = object.__new__(cls)
    _set_op(ret, op)
    _set_dtype(ret, dtype)
    _set_src(ret, src)
    _set_arg(ret, arg)
    _set_key_arg(ret, key[3])
    ref = _NODES[key] = KeyRef(ret, _forget)
    ref.key = key
    if op is Ops.BIND: _UOpMeta.binds_made = True
    return ret


class UOp(metaclass=_UOpMeta):
  """One node: an op, the dtype of its value (None for nodes without a value such as STORE), its
  sources and an op-specific argument. Immutable and hash-consed: never build one with the same
  fields twice expecting a distinct object. `key_arg` is the argument as the hash-consing key holds it (floats
  by their bits), kept for passes that key nodes by structure."""
  __slots__ = ("op", "dtype", "src", "arg", "key_arg", "__weakref__", "__dict__")
  # the fields, written once by _UOpMeta.__call__ (which makes every node)
  op: Ops
  dtype: DType | None
  src: tuple[UOp, ...]
  arg: Any
  key_arg: Any

  def __reduce__(self): return (UOp, (self.op, self.dtype, self.src, self.arg))
  def __setattr__(self, name: str, value: Any) -> None:
    if name in UOp.__slots__ and hasattr(self, name): raise AttributeError("UOp is immutable")
    object.__setattr__(self, name, value)

  def replace(self, **kwargs: Any) -> UOp:
    """The node with some fields changed; the node itself when nothing changes."""
    new = (kwargs.get("op", self.op), kwargs.get("dtype", self.dtype), kwargs.get("src", self.src), kwargs.get("arg", self.arg))
    if new[0] is self.op and new[1] == self.dtype and new[2] == self.src and new[3] is self.arg: return self
    return UOp(*new)

  # ---- construction helpers
  @staticmethod
  def const(dtype: DType, value: Any) -> UOp:
    return UOp(Ops.CONST, dtype, (), truncate(value, dtype))

  def alu(self, op: Ops, *src: UOp | int | float | bool) -> UOp:
    srcs = (self,) + tuple(s if isinstance(s, UOp) else UOp.const(self.dtype, s) for s in src)
    out_dtype = dtypes.bool if op in GroupOp.Comparison else (srcs[1].dtype if op is Ops.WHERE else self.dtype)
    return UOp(op, out_dtype, srcs)

  def cast(self, dtype: DType) -> UOp: return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))
  def where(self, a: UOp | int | float, b: UOp | int | float) -> UOp:
    if not isinstance(a, UOp): a = UOp.const(b.dtype if isinstance(b, UOp) else dtypes.from_py(a), a)
    if not isinstance(b, UOp): b = UOp.const(a.dtype, b)
    return UOp(Ops.WHERE, a.dtype, (self, a, b))
  # on a symbolic int (a shape entry) x+0, x-0, x*1 and x//1 are x, so shape arithmetic stays readable
  def __add__(self, x): return self if _is_int(x, 0) and self.symbolic else self.alu(Ops.ADD, x)
  def __radd__(self, x): return self.__add__(x)
  def __sub__(self, x): return self if _is_int(x, 0) and self.symbolic else self.alu(Ops.SUB, x)
  def __rsub__(self, x): return UOp.const(self.dtype, x).alu(Ops.SUB, self)
  def __mul__(self, x): return self if _is_int(x, 1) and self.symbolic else self.alu(Ops.MUL, x)
  def __rmul__(self, x): return self.__mul__(x)
  def __floordiv__(self, x): return self if _is_int(x, 1) and self.symbolic else self.alu(Ops.IDIV, x)
  def __rfloordiv__(self, x): return UOp.const(self.dtype, x).alu(Ops.IDIV, self)
  def __mod__(self, x): return self.alu(Ops.MOD, x)
  def __neg__(self): return self.alu(Ops.NEG)
  def lt(self, x) -> UOp: return self.alu(Ops.CMPLT, x)
  def ge(self, x) -> UOp: return self.alu(Ops.CMPLT, x).alu(Ops.CMPEQ, False)
  def ne(self, x) -> UOp: return self.alu(Ops.CMPNE, x)
  def logical_and(self, x) -> UOp: return self.alu(Ops.AND, x)
  def maximum(self, x) -> UOp: return self.alu(Ops.MAX, x)
  def minimum(self, x) -> UOp: return self.alu(Ops.MIN, x)
  # identity equality and hashing: structurally equal nodes are the same object
  __eq__ = object.__eq__
  __hash__ = object.__hash__

  # ---- symbolic ints: a shape entry that depends on a Variable (DEFINE_VAR, or BIND in a tensor graph)
  @_cached
  def symbolic(self) -> bool:
    """Whether this integer node depends on a variable (its value is only known at launch)."""
    return any(n.op in (Ops.DEFINE_VAR, Ops.BIND) for n in self.toposort)  # iterative: graphs may be deep

  def bind(self, value: int) -> UOp:
    """This Variable bound to `value` (a BIND node), usable as a dimension; ValueError outside [min, max]."""
    if self.op is not Ops.DEFINE_VAR: raise TypeError(f"only a Variable can be bound, not {self.op}")
    name, lo, hi = self.arg
    if isinstance(value, bool) or not isinstance(value, int): raise TypeError(f"bind {name} to an int, not {value!r}")
    if not lo <= value <= hi: raise ValueError(f"cannot bind {name} to {value}: it ranges over [{lo}, {hi}]")
    return UOp(Ops.BIND, self.dtype, (self, UOp.const(self.dtype, value)))

  def unbind(self) -> tuple[UOp, int]:
    """(the Variable, its value) of a BIND node."""
    if self.op is not Ops.BIND: raise TypeError(f"only a bound Variable can be unbound, not {self.op}")
    return self.src[0], self.src[1].arg

  def ssimplify(self) -> UOp | int:
    """A symbolic int whose Variables cancel (n + (8 - n)) as that int; otherwise itself."""
    terms: dict[UOp, int] = {}
    const = _linear(self, 1, terms)
    return const if all(k == 0 for k in terms.values()) else self

  @property
  def expr(self) -> str:
    """The name of a Variable (bound or not)."""
    return (self.src[0] if self.op is Ops.BIND else self).arg[0]

  @property
  def val(self) -> int:
    """The value a BIND node binds."""
    return self.unbind()[1]

  # comparisons of symbolic ints decide by the bounds of the difference over every value the variables
  # may take (so a shape check made once holds for all of them); undecidable ones raise
  def __lt__(self, x: UOp | int) -> bool: return _sint_cmp(self, x, lambda lo, hi: hi < 0, lambda lo, hi: lo >= 0)
  def __le__(self, x: UOp | int) -> bool: return _sint_cmp(self, x, lambda lo, hi: hi <= 0, lambda lo, hi: lo > 0)
  def __gt__(self, x: UOp | int) -> bool: return _sint_cmp(self, x, lambda lo, hi: lo > 0, lambda lo, hi: hi <= 0)
  def __ge__(self, x: UOp | int) -> bool: return _sint_cmp(self, x, lambda lo, hi: lo >= 0, lambda lo, hi: hi < 0)

  # ---- graph queries
  @_cached
  def toposort(self) -> tuple[UOp, ...]:
    """Every node reachable from this one, sources before users (iterative: graphs may be deep)."""
    return toposort([self])

  @_cached
  def shape(self) -> tuple[int, ...]:
    """The shape of a tensor-graph node."""
    return infer_shape(self)

  @_cached
  def vmin(self) -> int | float: return _bounds(self)[0]
  @_cached
  def vmax(self) -> int | float: return _bounds(self)[1]

  def __repr__(self) -> str:
    if self.op is Ops.DEFINE_VAR: return f"Variable({self.arg[0]!r}, {self.arg[1]}, {self.arg[2]})"
    if self.op is Ops.BIND: return f"Variable({self.expr!r}={self.val})"
    if self.symbolic and self.op in _INFIX: return f"({_sym_str(self.src[0])}{_INFIX[self.op]}{_sym_str(self.src[1])})"
    src = ", ".join(f"{s.op.name}#{id(s) % 10000}" for s in self.src)
    return f"UOp({self.op}, {self.dtype}, src=({src}), arg={self.arg!r})"

  def pretty(self) -> str:
    """A readable multi-line listing of the graph below this node; shared nodes are printed once
    and referred to by number."""
    nodes = self.toposort
    num = {n: i for i, n in enumerate(nodes)}
    lines = []
    for n in nodes:
      arg = "" if n.arg is None else f" {n.arg!r}" if not isinstance(n.arg, UOp) else ""
      srcs = " ".join(f"%{num[s]}" for s in n.src)
      dt = f":{n.dtype.name}" if n.dtype is not None else ""
      lines.append(f"%{num[n]:<3} {n.op.name}{dt}{arg} {srcs}".rstrip())
    return "\n".join(lines)


# the slots' own setters, with which _UOpMeta.__call__ writes a new node's fields
_set_op, _set_dtype, _set_src, _set_arg, _set_key_arg = (UOp.__dict__[name].__set__
                                                         for name in ("op", "dtype", "src", "arg", "key_arg"))


# how a symbolic int prints (a shape entry such as (n*4))
_INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%"}


def _sym_str(u: UOp) -> str: return str(u.arg) if u.op is Ops.CONST else repr(u)


def _is_int(x: Any, value: int) -> bool: return type(x) is int and x == value


def broadcast(u: UOp, shape: tuple) -> UOp:
  """`u` broadcast to `shape` (numpy's rules; the caller checks they allow it): leading 1s, then an expand."""
  if u.shape == shape: return u
  if len(u.shape) < len(shape): u = UOp(Ops.RESHAPE, u.dtype, (u,), (1,) * (len(shape) - len(u.shape)) + u.shape)
  return u if u.shape == shape else UOp(Ops.EXPAND, u.dtype, (u,), shape)


def variables_bound() -> bool:
  """Whether any Variable was bound in this process yet (before one is, no graph holds a BIND)."""
  return _UOpMeta.binds_made


def Variable(name: str, min_val: int, max_val: int) -> UOp:  # noqa: N802 (tinygrad's name for it)
  """A symbolic int that ranges over [min_val, max_val]: `Variable("i", 1, 10).bind(3)` is a dimension whose
  kernels are compiled once for every value in the range and take the bound value at launch."""
  if not isinstance(name, str) or not name.isidentifier():
    raise ValueError(f"a Variable's name is an identifier, not {name!r}")
  if not (isinstance(min_val, int) and isinstance(max_val, int)) or not 0 <= min_val <= max_val:
    raise ValueError(f"Variable {name}: need 0 <= min <= max, got [{min_val}, {max_val}]")
  return UOp(Ops.DEFINE_VAR, dtypes.int32, (), (name, min_val, max_val))


def _linear(u: UOp | int, sign: int, terms: dict[UOp, int]) -> int:
  """Add sign*u to `terms` as sum(coeff * node); return the constant part."""
  if isinstance(u, int): return sign * u
  if u.op is Ops.CONST: return sign * u.arg
  if u.op is Ops.ADD: return _linear(u.src[0], sign, terms) + _linear(u.src[1], sign, terms)
  if u.op is Ops.SUB: return _linear(u.src[0], sign, terms) + _linear(u.src[1], -sign, terms)
  if u.op is Ops.MUL and u.src[1].op is Ops.CONST: return _linear(u.src[0], sign * u.src[1].arg, terms)
  if u.op is Ops.BIND: u = u.src[0]  # bounds hold for every value: compare the variables
  terms[u] = terms.get(u, 0) + sign
  return 0


Decide = Callable[[int, int], bool]


def _sint_cmp(a: UOp | int, b: UOp | int, true_if: Decide, false_if: Decide) -> bool:
  """A comparison of a and b decided by the bounds (lo, hi) of a - b over every value of the variables;
  TypeError when the answer depends on those values."""
  terms: dict[UOp, int] = {}
  lo = hi = _linear(a, 1, terms) + _linear(b, -1, terms)
  for t, k in terms.items():
    if k == 0: continue
    x, y = k * t.vmin, k * t.vmax
    lo, hi = lo + min(x, y), hi + max(x, y)
  if true_if(lo, hi): return True
  if false_if(lo, hi): return False
  raise TypeError(f"cannot compare {a!r} and {b!r}: the answer depends on the values of their variables")


def toposort(roots: Iterable[UOp], descend: Callable[[UOp], bool] | None = None) -> tuple[UOp, ...]:
  """All nodes reachable from `roots`, every node after its sources (iterative: graphs may be
  deep). With `descend`, the sources of a node are visited only when descend(node) is true."""
  seen: set[UOp] = set()
  order: list[UOp] = []
  empty: tuple[UOp, ...] = ()
  for root in roots:
    if root in seen: continue
    seen.add(root)
    # each entry: a node and an iterator over the sources still to visit; a node is done when it runs out
    stack = [(root, iter(root.src if descend is None or descend(root) else empty))]
    while stack:
      node, srcs = stack[-1]
      for s in srcs:
        if s not in seen:
          seen.add(s)
          stack.append((s, iter(s.src if descend is None or descend(s) else empty)))
          break
      else:
        stack.pop()
        order.append(node)
  return tuple(order)


def substitute(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
  """`root` with every node in `mapping` replaced (sources first, so replacements compose)."""
  new: dict[UOp, UOp] = {}
  for n in root.toposort:
    new[n] = mapping[n] if n in mapping else n.replace(src=tuple(new[s] for s in n.src))
  return new[root]


# ---------------------------------------------------------------- value bounds

#: the ops `interval_alu` bounds
INTERVAL_OPS = frozenset({Ops.NEG, Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.MIN, Ops.WHERE})


def interval_alu(op: Ops, s: list[tuple[Any, Any]]) -> tuple[Any, Any]:
  """[min, max] of an INTERVAL_OPS op's value from its sources' [min, max], in exact arithmetic: the caller decides
  what an overflow (integers) or a NaN from inf - inf or 0 * inf (floats) means."""
  if op is Ops.NEG: return -s[0][1], -s[0][0]
  if op is Ops.ADD: return s[0][0] + s[1][0], s[0][1] + s[1][1]
  if op is Ops.SUB: return s[0][0] - s[1][1], s[0][1] - s[1][0]
  if op is Ops.MUL:
    prods = [a * b for a in s[0] for b in s[1]]
    return min(prods), max(prods)
  if op is Ops.MAX: return max(s[0][0], s[1][0]), max(s[0][1], s[1][1])
  if op is Ops.MIN: return min(s[0][0], s[1][0]), min(s[0][1], s[1][1])
  assert op is Ops.WHERE, op
  return min(s[1][0], s[2][0]), max(s[1][1], s[2][1])


def _bounds(u: UOp) -> tuple[Any, Any]:
  """Inclusive [min, max] of an integer or bool node's value; the dtype's range when unknown."""
  dt = u.dtype
  if dt is None or dt.is_float: return -math.inf, math.inf
  lo, hi = dt.min, dt.max
  if u.op is Ops.CONST: return u.arg, u.arg
  if u.op is Ops.RANGE: return 0, max(u.src[0].vmax - 1, 0)
  if u.op is Ops.SPECIAL: return 0, u.arg[2] - 1
  if u.op is Ops.DEFINE_VAR: return u.arg[1], u.arg[2]
  if u.op is Ops.BIND: return u.src[0].arg[1], u.src[0].arg[2]
  if u.op is Ops.CAST and u.src[0].dtype is not None and not u.src[0].dtype.is_float:
    s = u.src[0]
    if dt.min <= s.vmin and s.vmax <= dt.max: return s.vmin, s.vmax
    return lo, hi
  if len(u.src) == 0: return lo, hi
  s = [(x.vmin, x.vmax) for x in u.src]
  if u.op is Ops.WHERE: return interval_alu(u.op, s)
  if any(isinstance(v, float) for b in s for v in b): return lo, hi
  if u.op in INTERVAL_OPS: c = interval_alu(u.op, s)
  elif u.op is Ops.IDIV and s[1][0] == s[1][1] and s[1][0] > 0 and s[0][0] >= 0:
    c = (s[0][0] // s[1][0], s[0][1] // s[1][0])
  elif u.op is Ops.MOD and s[1][0] == s[1][1] and s[1][0] > 0 and s[0][0] >= 0:
    c = (0, min(s[0][1], s[1][0] - 1)) if s[0][1] >= s[1][0] else s[0]
  elif u.op is Ops.CMPLT:
    c = (s[0][1] < s[1][0], s[0][0] < s[1][1])
  elif u.op is Ops.CMPNE:
    decided = s[0][0] == s[0][1] == s[1][0] == s[1][1]
    disjoint = s[0][1] < s[1][0] or s[1][1] < s[0][0]
    c = (False, False) if decided else (True, True) if disjoint else (False, True)
  elif u.op is Ops.CMPEQ:
    decided = s[0][0] == s[0][1] == s[1][0] == s[1][1]
    disjoint = s[0][1] < s[1][0] or s[1][1] < s[0][0]
    c = (True, True) if decided else (False, False) if disjoint else (False, True)
  elif u.op is Ops.AND and dt == dtypes.bool: c = (bool(s[0][0] and s[1][0]), bool(s[0][1] and s[1][1]))
  elif u.op is Ops.OR and dt == dtypes.bool: c = (bool(s[0][0] or s[1][0]), bool(s[0][1] or s[1][1]))
  else: return lo, hi
  if dt == dtypes.bool: return bool(c[0]), bool(c[1])
  # an overflowing bound means the value may wrap: fall back to the dtype's range
  return c if lo <= c[0] and c[1] <= hi else (lo, hi)


# ---------------------------------------------------------------- patterns

class UPat:
  """A pattern over UOps. `op`, `dtype` and `arg` match when None or equal (op and dtype may be
  tuples/sets of choices); `src` is a tuple matched in order, or a list matched in any order
  (for commutative ops); `name` binds the matched node for the rewrite function."""
  __slots__ = ("ops", "dtypes", "src", "arg", "name", "any_order", "custom")

  def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
               src: tuple[UPat, ...] | list[UPat] | UPat | None = None, arg: Any = None, name: str | None = None,
               custom: Callable[[UOp], bool] | None = None):
    self.ops = None if op is None else frozenset((op,) if isinstance(op, Ops) else op)
    self.dtypes = None if dtype is None else frozenset((dtype,) if isinstance(dtype, DType) else dtype)
    self.any_order = isinstance(src, list)
    self.src = (src,) if isinstance(src, UPat) else None if src is None else tuple(src)
    self.arg, self.name, self.custom = arg, name, custom

  @staticmethod
  def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat: return UPat(name=name, dtype=dtype)
  @staticmethod
  def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
    return UPat(Ops.CONST, dtype=dtype, name=name)
  @staticmethod
  def alu(op: Ops | Iterable[Ops], *src: UPat, name: str | None = None, dtype=None) -> UPat:
    ops = frozenset((op,) if isinstance(op, Ops) else op)
    return UPat(ops, dtype, list(src) if ops <= GroupOp.Commutative and len(src) == 2 else tuple(src), name=name)

  def match(self, u: UOp, bound: dict[str, UOp]) -> Iterator[dict[str, UOp]]:
    """Yield every binding (extending `bound`) under which `u` matches this pattern."""
    if self.ops is not None and u.op not in self.ops: return
    if self.dtypes is not None and u.dtype not in self.dtypes: return
    if self.arg is not None and u.arg != self.arg: return
    if self.custom is not None and not self.custom(u): return
    if self.name is not None:
      if self.name in bound and bound[self.name] is not u: return
      bound = {**bound, self.name: u}
    if self.src is None:
      yield bound
      return
    if len(self.src) != len(u.src): return
    orders = itertools.permutations(self.src) if self.any_order else (self.src,)
    for order in orders:
      yield from _match_all(order, u.src, bound)


def _match_all(pats: tuple[UPat, ...], srcs: tuple[UOp, ...], bound: dict[str, UOp]) -> Iterator[dict[str, UOp]]:
  if not pats:
    yield bound
    return
  for b in pats[0].match(srcs[0], bound):
    yield from _match_all(pats[1:], srcs[1:], b)


Rewrite = Callable[..., "UOp | None"]


class PatternMatcher:
  """An ordered table of (pattern, rewrite) rules, indexed by op. A rewrite function takes the
  pattern's named bindings as keyword arguments (and `ctx` if it has that parameter) and returns
  a replacement node or None for no change. Tables combine with `+`."""

  def __init__(self, rules: list[tuple[UPat, Rewrite]]):
    self.rules = list(rules)
    self._by_op: dict[Ops, list[tuple[UPat, Rewrite, bool]]] = {}
    for pat, fn in self.rules:
      wants_ctx = "ctx" in inspect.signature(fn).parameters
      for op in (pat.ops if pat.ops is not None else Ops):
        self._by_op.setdefault(op, []).append((pat, fn, wants_ctx))

  def __add__(self, other: PatternMatcher) -> PatternMatcher: return PatternMatcher(self.rules + other.rules)

  def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
    """The first rewrite of `u` that some rule produces, or None."""
    for pat, fn, wants_ctx in self._by_op.get(u.op, ()):
      for bound in pat.match(u, {}):
        ret = fn(ctx=ctx, **bound) if wants_ctx else fn(**bound)
        if ret is not None and ret is not u: return ret
    return None


def graph_rewrite(root: UOp, pm: PatternMatcher, ctx: Any = None) -> UOp:
  """Rewrite a graph bottom-up until no rule applies anywhere. Every node is rewritten after its
  sources; a rewrite's result is itself rewritten (sources first) until it is stable."""
  done: dict[UOp, UOp] = {}
  # stack entries: (node, state, alias). state 0: visit sources; 1: rebuild and rewrite;
  # 2: `alias` was rewritten into `node`, record node's result for alias as well.
  stack: list[tuple[UOp, int, UOp | None]] = [(root, 0, None)]
  while stack:
    node, state, alias = stack.pop()
    if state == 2:
      done[alias] = done[node]
      continue
    if node in done: continue
    if state == 0:
      stack.append((node, 1, None))
      stack.extend((s, 0, None) for s in reversed(node.src) if s not in done)
      continue
    new_src = tuple(done[s] for s in node.src)
    new = node if new_src == node.src else node.replace(src=new_src)
    if (out := pm.rewrite(new, ctx)) is None:
      done[node] = new
      if new is not node: done.setdefault(new, new)
    elif out in done:
      done[node] = done[out]
    else:
      stack.append((out, 2, node))
      stack.append((out, 0, None))
  return done[root]


class SpecError(AssertionError):
  """A graph broke the IR spec of the stage it is in."""


def check_spec(root: UOp, spec: PatternMatcher, stage: str) -> None:
  """Raise SpecError naming the first node that no rule of `spec` accepts (rules return True)."""
  for u in root.toposort:
    ok = any(fn(**b) for pat, fn, _ in spec._by_op.get(u.op, ()) for b in pat.match(u, {}))
    if not ok: raise SpecError(f"{stage}: node breaks the IR spec:\n  {u!r}\nin graph:\n{root.pretty()}")
