"""Derivatives as graph rewrites over the tensor graph.

`pm_gradient` is the chain rule, one rule per op: given a node `ret` and the gradient `ctx` of the
loss with respect to `ret`, a rule returns the gradient with respect to each of `ret`'s sources
(None where no gradient flows: integer operands, conditions, indices). `compute_gradient` walks
the graph once, from the root down in reverse topological order, applying the rule of each node
that lies between the root and a target and summing the contributions a node gets from its users.

The result is an ordinary lazy tensor graph: the scheduler fuses it like any other. Only float
values carry gradients; an integer or bool node (a comparison, a cast to int) cuts the path.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable

from plugrad.dtype import DType, dtypes
from plugrad.multi import Lowered, lower, to_axis
from plugrad.scheduler import device_of
from plugrad.shape import inverse_permutation
from plugrad.uops import Ops, PatternMatcher, UOp, UPat, broadcast, toposort

# ---------------------------------------------------------------- building blocks
# Tensor-graph nodes must agree in shape, so a scalar operand becomes a broadcast constant.


def _full(like: UOp, value: Any) -> UOp:
  """The constant `value` with the dtype and shape of `like` (a scalar constant, reshaped and expanded)."""
  return broadcast(UOp.const(like.dtype, value), like.shape)


def _alu(op: Ops, a: UOp, *rest: UOp | float) -> UOp:
  srcs = (a,) + tuple(r if isinstance(r, UOp) else _full(a, r) for r in rest)
  return UOp(op, dtypes.bool if op in (Ops.CMPLT, Ops.CMPEQ, Ops.CMPNE) else a.dtype, srcs)


def add(a: UOp, b: UOp | float) -> UOp: return _alu(Ops.ADD, a, b)
def mul(a: UOp, b: UOp | float) -> UOp: return _alu(Ops.MUL, a, b)
def div(a: UOp, b: UOp | float) -> UOp: return _alu(Ops.FDIV, a, b)
def neg(a: UOp) -> UOp: return UOp(Ops.NEG, a.dtype, (a,))
def eq(a: UOp, b: UOp | float) -> UOp: return _alu(Ops.CMPEQ, a, b)
def lt(a: UOp, b: UOp | float) -> UOp: return _alu(Ops.CMPLT, a, b)
def where(c: UOp, a: UOp | float, b: UOp | float) -> UOp:
  like = a if isinstance(a, UOp) else b
  if not isinstance(like, UOp): raise TypeError("where needs at least one node among its values")
  a, b = (x if isinstance(x, UOp) else _full(like, x) for x in (a, b))
  return UOp(Ops.WHERE, a.dtype, (c, a, b))
def cast(a: UOp, dt: DType) -> UOp: return a if a.dtype == dt else UOp(Ops.CAST, dt, (a,))


def reduce_sum(a: UOp, axes: tuple[int, ...]) -> UOp:
  """Sum over `axes`, keeping them with size 1; half floats accumulate in float32."""
  if not axes: return a
  acc = dtypes.float32 if a.dtype in (dtypes.float16, dtypes.bfloat16) else a.dtype
  return cast(UOp(Ops.REDUCE_AXIS, acc, (cast(a, acc),), (Ops.ADD, axes)), a.dtype)


def expand(a: UOp, shape: tuple[int, ...]) -> UOp:
  return a if a.shape == shape else UOp(Ops.EXPAND, a.dtype, (a,), shape)


def unbroadcast(ctx: UOp, shape: tuple[int, ...]) -> UOp:
  """The gradient of EXPAND: sum over the axes that were broadcast from size 1."""
  return reduce_sum(ctx, tuple(i for i, (s, o) in enumerate(zip(shape, ctx.shape)) if s == 1 and o != 1))


LN2 = math.log(2)

# ---------------------------------------------------------------- reductions


def _reduce_gradient(ctx: UOp, ret: UOp) -> tuple[UOp]:
  op, axes = ret.arg
  x = ret.src[0]
  if op is Ops.ADD: return (expand(ctx, x.shape),)
  if op in (Ops.MAX, Ops.MIN):
    # every element equal to the extreme gets an equal share (ties split evenly, like torch.amax)
    hit = cast(eq(x, expand(ret, x.shape)), x.dtype)
    share = div(hit, expand(reduce_sum(hit, axes), x.shape))
    return (mul(share, expand(ctx, x.shape)),)
  # MUL: d(prod)/dx_i is the product of the others. With no zero in the group that is prod/x_i;
  # with one zero, only the zero gets the product of the rest; with more, everything gets 0.
  is_zero = eq(x, 0.0)
  zeros = expand(reduce_sum(cast(is_zero, x.dtype), axes), x.shape)
  nonzero = where(is_zero, 1.0, x)
  prod_nonzero = expand(UOp(Ops.REDUCE_AXIS, x.dtype, (nonzero,), (Ops.MUL, axes)), x.shape)
  only_zero = where(eq(zeros, 1.0), where(is_zero, prod_nonzero, 0.0), 0.0)
  others = where(eq(zeros, 0.0), div(prod_nonzero, nonzero), only_zero)
  return (mul(others, expand(ctx, x.shape)),)


# ---------------------------------------------------------------- rules that take more than a line


def _max_gradient(ctx: UOp, ret: UOp) -> tuple[UOp, UOp]:
  """d max(a, b): to the larger operand; half to each on a tie (torch.maximum's rule)."""
  a, b = ret.src
  tie = where(eq(a, b), mul(ctx, 0.5), 0.0)
  return where(lt(b, a), ctx, tie), where(lt(a, b), ctx, tie)


def _min_gradient(ctx: UOp, ret: UOp) -> tuple[UOp, UOp]:
  a, b = ret.src
  tie = where(eq(a, b), mul(ctx, 0.5), 0.0)
  return where(lt(a, b), ctx, tie), where(lt(b, a), ctx, tie)


def _div_gradient(ctx: UOp, ret: UOp) -> tuple[UOp, UOp]:
  a, b = ret.src
  return div(ctx, b), neg(div(mul(ctx, a), mul(b, b)))


def _mod_gradient(ctx: UOp, ret: UOp) -> tuple[UOp, UOp]:
  # fmod(a, b) = a - trunc(a/b) b, and trunc is piecewise constant
  a, b = ret.src
  return ctx, neg(mul(ctx, UOp(Ops.TRUNC, a.dtype, (div(a, b),))))


def _pad_gradient(ctx: UOp, ret: UOp) -> tuple[UOp]:
  return (UOp(Ops.SHRINK, ctx.dtype, (ctx,), tuple((b, b + s) for (b, _), s in zip(ret.arg[0], ret.src[0].shape))),)


def _shrink_gradient(ctx: UOp, ret: UOp) -> tuple[UOp]:
  pads = tuple((b, s - e) for (b, e), s in zip(ret.arg, ret.src[0].shape))
  return (UOp(Ops.PAD, ctx.dtype, (ctx,), (pads, 0.0)),)


def _copy_gradient(ctx: UOp, ret: UOp) -> tuple[UOp]:
  # back to where the source lives; a source made only of constants has no device: it is computed
  # wherever its reader runs, so the gradient needs no copy
  home = device_of(ret.src[0], ret.arg)
  return (ctx if home == ret.arg else UOp(Ops.COPY, ctx.dtype, (ctx,), home),)


def _multi_gradient(ctx: UOp, ret: UOp) -> tuple[UOp | None, ...]:
  # a sharded tensor's shards are per-device graphs: each gets its slice of the (logical) gradient, made per device
  # as a realize would; from there the gradient flows on, through the shard's copy and shrink, to what was sharded.
  # Replicas are one logical value: the gradient goes to the first only (to each, it would count n times)
  devices, axis = ret.arg
  grads = to_axis(lower(ctx, devices), axis, Lowered(ret.src, axis).sizes(), devices)
  return grads if axis is not None else (grads[0],) + (None,) * (len(grads) - 1)


def _inside(x: UOp, low: float, high: float) -> UOp:
  return _alu(Ops.AND, lt(_full(x, low), x), lt(x, high))


#: The derivative rules of composite operations, by name. A frontend that builds a composite from other ops whose
#: own rules would make a poor gradient wraps its value in CUSTOM_GRADIENT(value, *inputs, arg=(name, *params)), and
#: the rule named here differentiates it: rule(ctx, node) -> one gradient per input (None: nothing flows). Poor:
#: slow (conv2d's sliding windows sum overlapping windows through a buffer of every window; its rule is registered
#: by plugrad.tensor, which builds convolutions), or NaN where the function is not (1/(1 + e^-x) below x = -88).
custom_gradients: dict[str, Callable[[UOp, UOp], tuple[UOp | None, ...]]] = {
  "sigmoid": lambda ctx, s: (mul(ctx, mul(s, add(neg(s), 1.0))),),                     # s(1 - s), from s itself
  "tanh": lambda ctx, t: (mul(ctx, add(neg(mul(t, t)), 1.0)),),                        # 1 - t², from t itself
  "atan": lambda ctx, ret: (div(ctx, add(mul(ret.src[1], ret.src[1]), 1.0)),),         # 1 / (1 + x²)
  "hardtanh": lambda ctx, ret: (where(_inside(ret.src[1], *ret.arg[1:]), ctx, 0.0),),   # 1 strictly inside (low, high)
  "relu": lambda ctx, ret: (where(_alu(Ops.CMPEQ, ret, 0.0), 0.0, ctx),),              # 0 where the output is ±0
  "constant": lambda ctx, ret: (None,),  # piecewise constant of a float (sign): derivative 0, the input still reached
}

# integer-valued, piecewise constant or not a value: nothing flows (IDIV of floats is trunc(a/b))
_NO_GRADIENT = (Ops.CMPLT, Ops.CMPEQ, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.IDIV,
                Ops.BITCAST, Ops.TRUNC, Ops.DETACH, Ops.KERNEL)

# ---------------------------------------------------------------- the chain rule, one op per line
# ctx is dL/d(ret); each rule returns dL/d(src) for every source of ret (None: nothing flows).

pm_gradient = PatternMatcher([
  # arithmetic
  (UPat(Ops.NEG), lambda ctx: (neg(ctx),)),                                               # d(-x) = -1
  (UPat(Ops.ADD), lambda ctx: (ctx, ctx)),                                                # d(a+b) = 1, 1
  (UPat(Ops.SUB), lambda ctx: (ctx, neg(ctx))),                                           # d(a-b) = 1, -1
  (UPat(Ops.MUL, name="ret"), lambda ctx, ret: (mul(ctx, ret.src[1]), mul(ctx, ret.src[0]))),  # d(ab) = b, a
  (UPat(Ops.FDIV, name="ret"), _div_gradient),                                            # d(a/b) = 1/b, -a/b²
  (UPat(Ops.MOD, name="ret"), _mod_gradient),                                             # d fmod = 1, -trunc(a/b)
  (UPat(Ops.RECIP, name="ret"), lambda ctx, ret: (neg(mul(ctx, mul(ret, ret))),)),        # d(1/x) = -1/x²
  (UPat(Ops.SQRT, name="ret"), lambda ctx, ret: (div(ctx, mul(ret, 2.0)),)),              # d√x = 1/(2√x)
  (UPat(Ops.EXP2, name="ret"), lambda ctx, ret: (mul(ctx, mul(ret, LN2)),)),             # d 2^x = 2^x ln2
  (UPat(Ops.LOG2, name="ret"), lambda ctx, ret: (div(ctx, mul(ret.src[0], LN2)),)),      # d log2 x = 1/(x ln2)
  (UPat(Ops.SIN, name="ret"), lambda ctx, ret: (mul(ctx, UOp(Ops.COS, ret.dtype, ret.src)),)),  # d sin x = cos x
  (UPat(Ops.COS, name="ret"), lambda ctx, ret: (neg(mul(ctx, UOp(Ops.SIN, ret.dtype, ret.src))),)),  # d cos x = -sin x
  (UPat(Ops.MAX, name="ret"), _max_gradient),                                             # to the larger, ties halved
  (UPat(Ops.MIN, name="ret"), _min_gradient),                                             # to the smaller, ties halved
  (UPat(Ops.WHERE, name="ret"), lambda ctx, ret: (None, where(ret.src[0], ctx, 0.0), where(ret.src[0], 0.0, ctx))),
  (UPat(Ops.CAST, name="ret"), lambda ctx, ret: (cast(ctx, ret.src[0].dtype),)),          # back to the source type
  (UPat(_NO_GRADIENT, name="ret"), lambda ret: (None,) * len(ret.src)),
  # reductions
  (UPat(Ops.REDUCE_AXIS, name="ret"), _reduce_gradient),                                  # sum: expand; max: the argmax
  # movement: the inverse movement of the gradient
  (UPat(Ops.RESHAPE, name="ret"), lambda ctx, ret: (UOp(Ops.RESHAPE, ctx.dtype, (ctx,), ret.src[0].shape),)),
  (UPat(Ops.PERMUTE, name="ret"), lambda ctx, ret: (UOp(Ops.PERMUTE, ctx.dtype, (ctx,), inverse_permutation(ret.arg)),)),
  (UPat(Ops.EXPAND, name="ret"), lambda ctx, ret: (unbroadcast(ctx, ret.src[0].shape),)),  # sum what was repeated
  (UPat(Ops.PAD, name="ret"), _pad_gradient),                                             # cut the padding off
  (UPat(Ops.SHRINK, name="ret"), _shrink_gradient),                                       # zeros where it was cut
  (UPat(Ops.FLIP, name="ret"), lambda ctx, ret: (UOp(Ops.FLIP, ctx.dtype, (ctx,), ret.arg),)),
  # buffers and devices
  (UPat(Ops.CONTIGUOUS), lambda ctx: (ctx,)),
  (UPat(Ops.CONTIGUOUS_BACKWARD), lambda ctx: (UOp(Ops.CONTIGUOUS, ctx.dtype, (ctx,)),)),
  # a composite: none to its value's own graph, its rule's to its inputs
  (UPat(Ops.CUSTOM_GRADIENT, name="ret"), lambda ctx, ret: (None,) + custom_gradients[ret.arg[0]](ctx, ret)),
  (UPat(Ops.COPY, name="ret"), _copy_gradient),                                           # back to the source device
  (UPat(Ops.ASSIGN), lambda ctx: (None, ctx)),                                            # to the value written
  (UPat(Ops.MULTI, name="ret"), _multi_gradient),                                        # each shard its slice
])


# ---------------------------------------------------------------- the walk


def compute_gradient(root: UOp, root_grad: UOp, targets: Iterable[UOp]) -> dict[UOp, UOp]:
  """The gradient of `root` with respect to each of `targets` that it depends on, as new graph nodes.

  :param root: the node being differentiated (any shape).
  :param root_grad: dL/d(root), a float node of root's shape (1 for a scalar loss).
  :param targets: the nodes to differentiate with respect to.
  :return: target -> its gradient, for the float targets that `root` reaches through float values
    and not through a DETACH; one reached only through piecewise-constant ops (floor, sign, round) gets zeros, as
    in torch; targets missing from the map get no gradient.
  """
  if root_grad.shape != root.shape:
    raise ValueError(f"the gradient has shape {root_grad.shape} but the tensor it is for has shape {root.shape}")
  wanted = set(targets)
  nodes = toposort([root])
  # only nodes that lie on a path from the root to a target need a gradient
  on_path: set[UOp] = set()
  for n in nodes:
    if n.dtype is not None and n.dtype.is_float and n.op is not Ops.DETACH and \
        (n in wanted or any(s in on_path for s in n.src)):
      on_path.add(n)
  if root not in on_path: return {}
  grads: dict[UOp, UOp] = {root: cast(root_grad, root.dtype)}
  for n in reversed(nodes):  # every user of a node comes before it: its gradient is complete here
    if n not in on_path or not n.src or (g := grads.get(n)) is None: continue
    src_grads = pm_gradient.rewrite(n, ctx=g)
    if src_grads is None: raise RuntimeError(f"no gradient rule for {n.op.name} in\n{n!r}")
    for s, sg in zip(n.src, src_grads):
      if sg is None or s not in on_path: continue
      if sg.shape != s.shape:
        raise RuntimeError(f"internal error: the gradient rule of {n.op.name} gave shape {sg.shape} for {s.shape}")
      grads[s] = add(grads[s], sg) if s in grads else sg
  # reached, but every path crosses an op whose derivative is 0 (floor, sign): zeros, not "not used" (torch's too)
  return {t: grads[t] if t in grads else broadcast(UOp.const(t.dtype, 0.0), t.shape) for t in wanted if t in on_path}


__all__ = ["compute_gradient", "pm_gradient"]
