"""Simplification rules, mostly for the integer index arithmetic that movement ops produce.

Each rule is one line of math; `symbolic` is the table the lowering runs to a fixpoint.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from plugrad.alu import fold_constant
from plugrad.dtype import dtypes
from plugrad.uops import GroupOp, Ops, PatternMatcher, UOp, UPat, toposort, variables_bound

INTS = tuple(d for d in dtypes.all() if d.is_int)
SINTS = tuple(d for d in INTS if not d.is_unsigned)
x, y, c1, c2 = UPat.var("x"), UPat.var("y"), UPat.cvar("c1"), UPat.cvar("c2")
xi = UPat.var("x", dtype=INTS)


def _fold(alu: UOp) -> UOp | None:
  if alu.op not in GroupOp.ALU or any(s.op is not Ops.CONST for s in alu.src): return None
  return UOp.const(alu.dtype, fold_constant(alu.op, alu.dtype, [s.arg for s in alu.src], [s.dtype for s in alu.src]))


def _decided(u: UOp) -> UOp | None:
  # an integer/bool node whose bounds pin one value is that value
  if u.op in (Ops.CONST, Ops.PARAM, Ops.DEFINE_ACC, Ops.SPECIAL) or u.dtype is None or u.dtype.is_float: return None
  if u.op not in GroupOp.ALU and not (u.op is Ops.RANGE and u.src[0].op is Ops.CONST and u.src[0].arg == 1): return None
  return UOp.const(u.dtype, u.vmin) if u.vmin == u.vmax else None


# ---- sums of terms: x = sum(coeff * term) + const, the form div/mod folding reasons about

def split_terms(u: UOp) -> tuple[list[tuple[UOp, int]], int]:
  """Decompose an integer expression into ([(term, coeff)], const)."""
  if u.op is Ops.CONST: return [], u.arg
  if u.op is Ops.ADD:
    t0, k0 = split_terms(u.src[0])
    t1, k1 = split_terms(u.src[1])
    return t0 + t1, k0 + k1
  if u.op is Ops.MUL and u.src[1].op is Ops.CONST:
    terms, k = split_terms(u.src[0])
    return [(t, c * u.src[1].arg) for t, c in terms], k * u.src[1].arg
  return [(u, 1)], 0


def build_sum(terms: list[tuple[UOp, int]], const: int, like: UOp) -> UOp:
  """Rebuild sum(coeff * term) + const with the dtype of `like`."""
  out: UOp | None = None
  for t, c in terms:
    if c == 0: continue
    v = t if c == 1 else t * c
    out = v if out is None else out + v
  if out is None: return UOp.const(like.dtype, const)
  return out + const if const else out


def _rejoin_divmod(merged: dict[UOp, int]) -> bool:
  # (x // n)*(k*n) + (x % n)*k -> x*k: trunc division and its remainder always rebuild x (alu semantics);
  # ((x // n) % m)*(k*n) + (x % n)*k -> (x % (n*m))*k likewise (the index of axes merged into one, split again)
  for t, c in list(merged.items()):
    if t.op is not Ops.MOD or t.src[1].op is not Ops.CONST or t.src[1].arg <= 0: continue
    n = t.src[1].arg
    q = UOp(Ops.IDIV, t.dtype, t.src)
    if merged.get(q) == c * n and t in merged:
      del merged[q], merged[t]
      merged[t.src[0]] = merged.get(t.src[0], 0) + c
      return True
    qm = next((u for u, k in merged.items() if u.op is Ops.MOD and u.src[0] is q and u.src[1].op is Ops.CONST
               and u.src[1].arg > 0 and k == c * n and n * u.src[1].arg <= t.dtype.max), None)
    if qm is not None:
      del merged[qm], merged[t]
      wider = t.src[0] % (n * qm.src[1].arg)
      merged[wider] = merged.get(wider, 0) + c
      return True
  return False


def _combine_terms(x: UOp) -> UOp | None:
  # merge like terms: a*2 + b + a*3 + 4 + 1 -> a*5 + b + 5
  terms, const = split_terms(x)
  merged: dict[UOp, int] = {}
  for t, c in terms: merged[t] = merged.get(t, 0) + c
  rejoined = False
  while _rejoin_divmod(merged): rejoined = True
  if not rejoined and len(merged) == len(terms) and sum(1 for s in _add_leaves(x) if s.op is Ops.CONST) <= 1:
    return None
  ret = build_sum(list(merged.items()), const, x)
  return ret if ret is not x else None


def _add_leaves(u: UOp) -> list[UOp]:
  return _add_leaves(u.src[0]) + _add_leaves(u.src[1]) if u.op is Ops.ADD else [u]


def _exact_sum(terms: list[tuple[UOp, int]], const: int, like: UOp) -> bool:
  """Whether sum(k*t) + const, computed without wrapping, stays within like's dtype. Only then is the value
  the device computes (integer arithmetic wraps) that sum, so rules that divide or compare it may reason about
  its terms: (x + x) // 2 is x only while x + x does not wrap."""
  lo = hi = const
  for t, k in terms:
    a, b = k * t.vmin, k * t.vmax
    lo, hi = lo + min(a, b), hi + max(a, b)
  return like.dtype.min <= lo and hi <= like.dtype.max


def _fold_divmod(x: UOp, c: UOp, mod: bool) -> UOp | None:
  # x = sum(k*t) + k0 with every k = q*n + r: x // n -> sum(q*t) + (sum(r*t) + k0%n) // n, and x % n
  # -> (sum(r*t) + k0%n) % n; valid for trunc division when x >= 0 and the remainder part is >= 0
  n = c.arg
  if n <= 0 or x.vmin < 0: return None
  if x.vmax < n: return x if mod else UOp.const(x.dtype, 0)
  terms, const = split_terms(x)
  if any(t.vmin < 0 for t, _ in terms) or not _exact_sum(terms, const, x): return None
  if terms and 1 < (d := math.gcd(n, *(k for _, k in terms))) and const % d:
    # x = (a multiple of d) + r with 0 < r < d, d dividing n: x % n -> (x - r) % n + r, x // n -> (x - r) // n (the
    # remainder of a multiple of d is one too, so adding r never carries). A vector lane k of 16g + k in chunks of
    # 32 then reads chunk g // 2 at offset (g % 2) * 16 + k, the lanes consecutive, not a gather of 16
    base = build_sum(terms, const - const % d, x)
    if base.vmin >= 0: return base % n + const % d if mod else base // n
  g = math.gcd(n, const, *(k for _, k in terms))
  if 1 < g < n:
    # (g*a + g*b)//(g*m) -> (a + b)//m ; (g*a)%(g*m) -> (a%m)*g
    inner = build_sum([(t, k // g) for t, k in terms], const // g, x)
    return (inner % (n // g)) * g if mod else inner // (n // g)
  quot = [(t, k // n) for t, k in terms if k // n]
  rest = [(t, k % n) for t, k in terms if k % n]
  q_const, r_const = divmod(const, n)
  r = build_sum(rest, r_const, x)
  if r.vmin < 0: return None
  q = build_sum(quot, q_const, x)
  if r.vmax < n: return r if mod else q
  if not quot and q_const == 0 and len(rest) == len(terms) and all(k < n for _, k in terms): return None
  return r % n if mod else q + r // n


def _nested_div(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  # (x // a) // b -> x // (a*b) for x >= 0, when a*b is a constant of x's type
  ok = x.vmin >= 0 and c1.arg > 0 and c2.arg > 0 and c1.arg * c2.arg <= x.dtype.max
  return x // (c1.arg * c2.arg) if ok else None


def _nested_mod(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  # (x % (k*b)) % b -> x % b for x >= 0
  return x % c2.arg if x.vmin >= 0 and c2.arg > 0 and c1.arg % c2.arg == 0 else None


def _mod_then_div(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  # (x % (k*b)) // b -> (x // b) % k for x >= 0
  if x.vmin < 0 or c2.arg <= 0 or c1.arg % c2.arg: return None
  return (x // c2.arg) % (c1.arg // c2.arg)


def _lt_of_sum(x: UOp, c1: UOp) -> UOp | None:
  # (a*g + b*g + k) < c -> (a + b) < ceil((c - k)/g) when every coefficient shares g > 1
  if x.op is not Ops.ADD and not (x.op is Ops.MUL and x.src[1].op is Ops.CONST): return None
  terms, const = split_terms(x)
  if not terms or not _exact_sum(terms, const, x): return None
  g = math.gcd(*(k for _, k in terms))
  if g <= 1 and const == 0: return None
  if g <= 0: return None
  bound = -((const - c1.arg) // g)  # ceil((c - k) / g)
  return build_sum([(t, k // g) for t, k in terms], 0, x).lt(bound)


def _drop_folded_ranges(r: UOp) -> UOp | None:
  live = [s for s in r.src[1:] if s.op is Ops.RANGE]
  if len(live) == len(r.src) - 1: return None
  return UOp(Ops.REDUCE, r.dtype, (r.src[0], *live), r.arg) if live else r.src[0]


symbolic = PatternMatcher([
  # const op x -> x op const for commutative ops, so constants sit on the right
  (UPat(GroupOp.Commutative, name="u", src=(UPat(Ops.CONST), UPat(custom=lambda u: u.op is not Ops.CONST))),
   lambda u: u.replace(src=(u.src[1], u.src[0]))),
  # ALU on constants -> constant
  (UPat(GroupOp.ALU, name="alu"), _fold),
  # a node whose value range is one point -> that constant
  (UPat(name="u"), _decided),
  # a launch index whose symbolic size folded to a constant (rounded up to whole work-groups) -> a plain one
  (UPat(Ops.SPECIAL, src=(UPat(Ops.CONST),), name="u"), lambda u: UOp(Ops.SPECIAL, u.dtype, (), (*u.arg[:2], u.src[0].arg))),
  # x + 0 -> x (on floats only x + -0.0 is x: -0.0 + 0.0 is 0.0)
  (UPat.alu(Ops.ADD, x, UPat(Ops.CONST, arg=0, name="z")),
   lambda x, z: x if not z.dtype.is_float or math.copysign(1.0, z.arg) < 0 else None),
  # x * 1 -> x
  (UPat.alu(Ops.MUL, x, UPat(Ops.CONST, arg=1)), lambda x: x if x.dtype != dtypes.bool else None),
  # x * 0 -> 0 (integers only: NaN * 0 is NaN)
  (UPat.alu(Ops.MUL, xi, UPat(Ops.CONST, arg=0, name="z")), lambda x, z: z),
  # x - c -> x + (-c) on integers, so sums stay in one canonical form
  (UPat(Ops.SUB, SINTS, (x, c1)), lambda x, c1: x + (-c1.arg)),
  # x - y -> x + y*(-1) on integers
  (UPat(Ops.SUB, SINTS, (x, y)), lambda x, y: x + y * -1),
  # x // 1 -> x
  (UPat(Ops.IDIV, src=(x, UPat(Ops.CONST, arg=1))), lambda x: x),
  # x % 1 -> 0
  (UPat(Ops.MOD, src=(xi, UPat(Ops.CONST, arg=1))), lambda x: UOp.const(x.dtype, 0)),
  # (x + c1) + c2 -> x + (c1 + c2)
  (UPat.alu(Ops.ADD, UPat.alu(Ops.ADD, xi, c1), c2), lambda x, c1, c2: x + (c1.arg + c2.arg)),
  # (x + c1) + y -> (x + y) + c1: constants float to the outside of sums
  (UPat.alu(Ops.ADD, UPat.alu(Ops.ADD, xi, c1, name="inner"), UPat(name="y", custom=lambda u: u.op is not Ops.CONST)),
   lambda x, c1, y, inner: (x + y) + c1),
  # (x * c1) * c2 -> x * (c1 * c2)
  (UPat.alu(Ops.MUL, UPat.alu(Ops.MUL, xi, c1), c2), lambda x, c1, c2: x * (c1.arg * c2.arg)),
  # (x + y) * c -> x*c + y*c on integers (sums of products are the canonical index form)
  (UPat.alu(Ops.MUL, UPat(Ops.ADD, INTS, name="s"), c1), lambda s, c1: s.src[0] * c1.arg + s.src[1] * c1.arg),
  # a*k1 + a*k2 + ... -> a*(k1+k2+...), and constants gathered into one; (x // n)*n + x % n -> x
  (UPat(Ops.ADD, INTS, name="x"), _combine_terms),
  # (q*n + r) // n -> q + r // n for nonnegative values
  (UPat(Ops.IDIV, INTS, (x, UPat.cvar("c"))), lambda x, c: _fold_divmod(x, c, mod=False)),
  # (q*n + r) % n -> r % n for nonnegative values
  (UPat(Ops.MOD, INTS, (x, UPat.cvar("c"))), lambda x, c: _fold_divmod(x, c, mod=True)),
  # (x // a) // b -> x // (a*b)
  (UPat(Ops.IDIV, src=(UPat(Ops.IDIV, src=(xi, c1)), c2)), _nested_div),
  # (x % (k*b)) % b -> x % b
  (UPat(Ops.MOD, src=(UPat(Ops.MOD, src=(xi, c1)), c2)), _nested_mod),
  # (x % (k*b)) // b -> (x // b) % k
  (UPat(Ops.IDIV, src=(UPat(Ops.MOD, src=(xi, c1)), c2)), _mod_then_div),
  # (g*a + g*b + k) < c -> (a + b) < ceil((c-k)/g)
  (UPat(Ops.CMPLT, src=(xi, c1)), _lt_of_sum),
  # x < x -> False (NaN < NaN is False too); x != x -> False and x == x -> True unless x may be NaN
  (UPat(Ops.CMPLT, src=(x, x), name="u"), lambda u, x: UOp.const(dtypes.bool, False) if u.dtype.count == 1 else None),
  (UPat((Ops.CMPNE, Ops.CMPEQ), src=(x, x), name="u"),
   lambda u, x: UOp.const(dtypes.bool, u.op is Ops.CMPEQ) if not x.dtype.is_float and u.dtype.count == 1 else None),
  # max(x, x) -> x ; min(x, x) -> x (a NaN stays NaN)
  (UPat((Ops.MAX, Ops.MIN), src=(x, x)), lambda x: x),
  # -(-x) -> x
  (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(x,)),)), lambda x: x),
  # where(True, a, b) -> a ; where(False, a, b) -> b
  (UPat(Ops.WHERE, src=(UPat(Ops.CONST, name="c"), x, y)), lambda c, x, y: x if c.arg else y),
  # where(g, load(b, i, g), 0) -> load(b, i, g): a gated load already yields 0 where the gate is off (+0.0: not
  # for a -0.0, which a float pad keeps, as cat's)
  (UPat(Ops.WHERE, src=(UPat.var("g"), UPat(Ops.LOAD, name="ld"), UPat(Ops.CONST, arg=0, name="z"))),
   lambda g, ld, z: ld if len(ld.src) > 2 and ld.src[2] is g and math.copysign(1.0, z.arg) > 0 else None),
  # where(c, a, a) -> a
  (UPat(Ops.WHERE, src=(UPat.var(), x, x)), lambda x: x),
  # relu's where(0 < x, x, where(x < 0, 0, x * 0)) -> where(x < 0, 0, x): the same value for every x (at 0, -0.0 and
  # NaN, x * 0 is x), with one compare, a multiply and a select fewer (a bias and ReLU read in a convolution's loop)
  (UPat(Ops.WHERE, src=(UPat(Ops.CMPLT, src=(UPat(Ops.CONST, arg=0), x)), x, UPat(Ops.WHERE, name="neg", src=(
     UPat(Ops.CMPLT, src=(x, UPat(Ops.CONST, arg=0))), UPat(Ops.CONST),
     UPat.alu(Ops.MUL, x, UPat(Ops.CONST, arg=0, name="z")))))),
   lambda x, neg, z: neg.replace(src=(*neg.src[:2], x)) if math.copysign(1.0, z.arg) > 0 else None),
  # x & True -> x ; x & False -> False (bool)
  (UPat.alu(Ops.AND, UPat.var("x", dtypes.bool), UPat(Ops.CONST, name="c")), lambda x, c: x if c.arg else c),
  # x | False -> x ; x | True -> True (bool)
  (UPat.alu(Ops.OR, UPat.var("x", dtypes.bool), UPat(Ops.CONST, name="c")), lambda x, c: c if c.arg else x),
  # x & x -> x
  (UPat(Ops.AND, src=(x, x)), lambda x: x),
  # (x < c) == False -> c <= x, written as (c - 1) < x for integers
  (UPat(Ops.CMPEQ, src=(UPat(Ops.CMPLT, src=(xi, c1)), UPat(Ops.CONST, arg=False))),
   lambda x, c1: UOp.const(x.dtype, c1.arg - 1).lt(x) if c1.arg - 1 >= x.dtype.min else None),
  # a reduction over a one-iteration loop (its range folded to 0) drops that loop; with none left it is its body
  (UPat(Ops.REDUCE, name="r"), _drop_folded_ranges),
  # load(b, i, True) -> load(b, i) ; load(b, i, False) -> 0
  (UPat(Ops.LOAD, name="ld", src=(UPat.var("b"), UPat.var("i"), UPat(Ops.CONST, name="g"))),
   lambda ld, b, i, g: ld.replace(src=(b, i)) if g.arg else UOp.const(ld.dtype, 0)),
  # store(b, i, v, True) -> store(b, i, v)
  (UPat(Ops.STORE, name="st", src=(UPat.var("b"), UPat.var("i"), UPat.var("v"), UPat(Ops.CONST, arg=True))),
   lambda st, b, i, v: st.replace(src=(b, i, v))),
  # cast of a cast-free value to its own dtype -> the value
  (UPat(Ops.CAST, name="c", src=(x,)), lambda c, x: x if c.dtype == x.dtype else None),
])


# ---- variables: values of symbolic ints, and graphs with their variables bound or unbound

def sym_infer(u: UOp | int, var_vals: Mapping[UOp, int]) -> int:
  """The value of a symbolic int (a shape entry, a launch size) for `var_vals` (DEFINE_VAR -> value); a BIND
  node brings its own value."""
  if isinstance(u, int): return u
  vals: dict[UOp, int] = {}
  # the nodes that matter: a BIND's own Variable is not read (toposort without descending into BINDs)
  for n in toposort([u], descend=lambda n: n.op is not Ops.BIND):
    if n.op is Ops.CONST: vals[n] = n.arg
    elif n.op is Ops.BIND: vals[n] = n.src[1].arg
    elif n.op is Ops.DEFINE_VAR:
      if n not in var_vals: raise ValueError(f"no value for Variable {n.arg[0]!r}: bind it (v.bind(value))")
      vals[n] = var_vals[n]
    elif n.op in GroupOp.ALU:
      args = [vals[s] for s in n.src]
      # Python ints for the usual size arithmetic (launches evaluate it every time); numpy's exact rules otherwise
      fast = _INT_OPS[n.op](*args) if n.op in _INT_OPS and n.dtype.is_int and all(a >= 0 for a in args) else None
      ok = fast is not None and n.dtype.min <= fast <= n.dtype.max
      vals[n] = fast if ok else fold_constant(n.op, n.dtype, args, [s.dtype for s in n.src])
    else: raise ValueError(f"{n.op} is not part of a symbolic int")
  return int(vals[u])


# integer ops on nonnegative operands, where Python's and the devices' rules agree (x // 0 is 0 and x % 0 is x)
_INT_OPS: dict[Ops, Callable[..., int]] = {
  Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b,
  Ops.IDIV: lambda a, b: a // b if b else 0, Ops.MOD: lambda a, b: a % b if b else a,
  Ops.MAX: max, Ops.MIN: min, Ops.CAST: lambda a: a,
}


def _map_arg(arg: Any, fn: Callable[[UOp], UOp]) -> Any:
  if isinstance(arg, UOp): return fn(arg)
  if isinstance(arg, tuple): return tuple(_map_arg(a, fn) for a in arg)
  return arg


def _substitute_vars(roots: list[UOp], swap: Callable[[UOp], UOp | None]) -> list[UOp]:
  """`roots` with every node `swap` answers for replaced, in sources and in shape arguments (movement ops)."""
  new: dict[UOp, UOp] = {}

  def sub(n: UOp) -> UOp:
    if n in new: return new[n]
    for m in n.toposort:
      if m in new: continue
      if (s := swap(m)) is not None: new[m] = s
      else:
        arg = _map_arg(m.arg, sub) if m.op in GroupOp.Movement else m.arg
        new[m] = m.replace(src=tuple(new[x] for x in m.src), arg=arg)
    return new[n]
  symbolic_graph = [r for r in roots if any(m.op in (Ops.BIND, Ops.DEFINE_VAR) or
                                            (m.op in GroupOp.Movement and _has_var(m.arg)) for m in r.toposort)]
  if not symbolic_graph: return roots
  return [sub(r) for r in roots]


def _has_var(arg: Any) -> bool:
  if isinstance(arg, UOp): return arg.symbolic
  return isinstance(arg, tuple) and any(_has_var(a) for a in arg)


def unbind_graph(roots: list[UOp]) -> tuple[list[UOp], dict[UOp, int]]:
  """`roots` with every bound Variable replaced by the Variable itself, and the values they were bound to.
  Graphs that differ only in those values become the same graph: one schedule and one kernel serve them all.
  ValueError when one Variable is bound to two values."""
  if not variables_bound(): return roots, {}  # no Variable was ever bound: nothing to walk
  var_vals: dict[UOp, int] = {}

  def swap(n: UOp) -> UOp | None:
    if n.op is not Ops.BIND: return None
    var, val = n.unbind()
    if var_vals.setdefault(var, val) != val:
      raise ValueError(f"Variable {var.arg[0]!r} is bound to both {var_vals[var]} and {val} in one realize")
    return var
  return _substitute_vars(roots, swap), var_vals


def bind_graph(roots: list[UOp], var_vals: Mapping[UOp, int]) -> list[UOp]:
  """`roots` with each Variable of `var_vals` bound to its value again (the inverse of `unbind_graph`)."""
  if not var_vals: return roots
  return _substitute_vars(roots, lambda n: n.bind(var_vals[n]) if n.op is Ops.DEFINE_VAR and n in var_vals else None)
