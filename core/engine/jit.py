"""TinyJit: run a function of tensors once as usual, capture the kernels its second call launches,
and replay them on later calls without running the Python function again.

A replay launches the captured kernels on the same buffers, except that each tensor argument's
buffer is replaced by the new argument's. So, as in tinygrad:
- the function must compute everything from its tensor arguments and from tensors that keep their
  buffers (model parameters, optimizer state, updated in place by `assign`: one not yet realized when a call
  comes is realized first, as eager code would read it); Python values it reads (ints, floats, `.item()`
  results) are frozen at capture;
- the returned tensors are the same objects on every call, their buffers written again by each replay;
- tensor arguments must keep their shape, dtype, device and view structure between calls (a change
  raises, naming the argument).

Symbolic shapes: a tensor argument whose shape holds a bound Variable (`Variable("n", 1, 64).bind(k)`) matches
the capture for every value of that Variable, and so does a bound Variable passed as an argument: the replay
launches the same kernels with the new values (kernels take Variables as parameters), and returned tensors
whose shape holds the Variable get the new value in their shape.
"""
from __future__ import annotations

import functools
import weakref
from typing import Any, Callable, Generic, Hashable, TypeVar

from plugrad.device import Buffer
from plugrad.engine.run import Capture, Launch, prepare_native, replay, traffic_of
from plugrad.engine.schedule_cache import structure_key
from plugrad.registry import get_registry
from plugrad.scheduler import assigned_buffer, buffer_of, is_pending_assign, version_base
from plugrad.symbolic import bind_graph, unbind_graph
from plugrad.uops import Ops, UOp

R = TypeVar("R")


def _is_tensor(x: Any) -> bool: return isinstance(getattr(x, "uop", None), UOp) and hasattr(x, "realize")


def _tensor_paths(key: int | str, value: Any) -> list[tuple[int | str, Any]]:
  """The tensors in `value` (itself, or inside tuples, lists and dicts at any depth), each with its path from `key`."""
  if _is_tensor(value): return [(key, value)]
  if isinstance(value, (tuple, list)): return [p for j, v in enumerate(value) for p in _tensor_paths(f"{key}[{j}]", v)]
  if isinstance(value, dict): return [p for k, v in value.items() for p in _tensor_paths(f"{key}[{k!r}]", v)]
  return []


def _tensor_args(args: tuple, kwargs: dict) -> list[tuple[int | str, Any]]:
  """The tensor arguments, keyed by position or keyword name; those inside a tuple, list or dict argument too, keyed
  by their path (`1[0]`, `batch['x']`): a replay took the captured call's tensor for them (tinygrad looks one level
  in)."""
  return [p for i, a in enumerate(args) for p in _tensor_paths(i, a)] + \
         [p for k, v in sorted(kwargs.items()) for p in _tensor_paths(k, v)]


def _tensors_in(value: Any) -> list[Any]:
  """The tensors a function returned (alone, or in a tuple, list or dict)."""
  return [t for _, t in _tensor_paths("", value)]


def _var_args(args: tuple, kwargs: dict) -> list[tuple[int | str, UOp]]:
  """The bound Variables passed as arguments, keyed by position or keyword name."""
  return [(i, a) for i, a in enumerate(args) if isinstance(a, UOp) and a.op is Ops.BIND] + \
         [(k, v) for k, v in sorted(kwargs.items()) if isinstance(v, UOp) and v.op is Ops.BIND]


def _var_vals(inputs: list[tuple[int | str, Any]], var_args: list[tuple[int | str, UOp]]) -> dict[UOp, int]:
  """The values this call binds its Variables to: in the tensor arguments' shapes and as arguments."""
  symbolic = [t.uop for _, t in inputs if any(isinstance(s, UOp) for s in t.shape)]
  if not symbolic: return dict(v.unbind() for _, v in var_args)
  return unbind_graph(symbolic + [v for _, v in var_args])[1]  # raises when one Variable has two values


def _describe(t: Any) -> str: return f"{t.dtype.name} {tuple(t.shape)} on {t.device}"


#: Tensors holding an assign not yet realized, by id, weakly (the frontend's assign notes each: `note_pending_write`).
#: A replay reads its buffers as they are, so it first realizes those that write one of them, as eager code would
#: read them (a parameter assigned between calls and not realized was read stale by every replay).
_pending_writes: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def note_pending_write(t: Any) -> None:
  """Note a tensor that now holds an assign not yet realized (see `_pending_writes`)."""
  _pending_writes[id(t)] = t


def _realize_writes_into(used: set[Buffer] | None) -> None:
  """Realize the pending assigns that write a buffer in `used` (None: every one), forgetting those realized
  meanwhile."""
  if not _pending_writes: return
  writes = []
  for key, t in list(_pending_writes.items()):
    if (base := version_base(t.uop)) is None or not is_pending_assign(base): del _pending_writes[key]
    elif used is None or assigned_buffer(base) in used: writes.append(t)
  if writes: writes[0].realize(*writes[1:])


class _Captured:
  """What a capture recorded: the launches, and for each tensor argument its structure and buffer."""

  def __init__(self, launches: list[Launch], inputs: list[tuple[int | str, Any]], ret: Any,
               var_args: list[tuple[int | str, UOp]]):
    self.launches, self.ret = launches, ret
    self.traffic = traffic_of(launches)
    self.native = prepare_native(launches, get_registry())  # None: replayed from Python
    self.keys = [k for k, _ in inputs]
    self.var_keys = [(k, v.src[0]) for k, v in var_args]  # (argument, its Variable)
    # returned tensors whose shape holds a Variable: a replay binds it to the call's value
    self.symbolic_outs = [t for t in _tensors_in(ret) if any(u.op is Ops.BIND for u in _shape_nodes(t.uop))]
    self.structures = [_structure(t) for _, t in inputs]
    # the node each argument had when its structure last matched: a call passing the same node again (the same
    # tensor, or one on the same buffer view) has that structure, without walking its graph again. Weak: a node
    # holds its buffer, which must not outlive the caller's last tensor of it
    self.matched: list[weakref.ref[UOp]] = [weakref.ref(t.uop) for _, t in inputs]
    self.descriptions = [_describe(t) for _, t in inputs]
    self.buffers = [_buffer(t) for _, t in inputs]
    self.used = {b for ln in launches for b in ln.bufs}  # what the kernels read and write

  def seen(self, i: int, t: Any) -> bool:
    """Whether tensor argument `i` is the very node whose structure matched last time (so realized, and matching)."""
    return i < len(self.matched) and t.uop is self.matched[i]()

  def check(self, inputs: list[tuple[int | str, Any]], var_args: list[tuple[int | str, UOp]]) -> None:
    keys = [k for k, _ in inputs]
    if keys != self.keys:
      raise TypeError(f"TinyJit: this call passes tensors as arguments {keys}, the captured call passed them as {self.keys}")
    vkeys = [(k, v.src[0]) for k, v in var_args]
    if vkeys != self.var_keys:
      raise TypeError(f"TinyJit: this call passes Variables as arguments {[(k, v.arg[0]) for k, v in vkeys]}, the "
                      f"captured call passed {[(k, v.arg[0]) for k, v in self.var_keys]}")
    for i, ((key, t), want, desc) in enumerate(zip(inputs, self.structures, self.descriptions)):
      if self.seen(i, t): continue
      if _structure(t) != want:
        raise ValueError(f"TinyJit: tensor argument {key!r} is {_describe(t)}, but the function was captured with {desc} "
                         f"(or another view of its buffer); call .reset() on the jitted function to capture again")
      self.matched[i] = weakref.ref(t.uop)

  def run(self, inputs: list[tuple[int | str, Any]], var_vals: dict[UOp, int]) -> Any:
    subs = {old: _buffer(t) for old, (_, t) in zip(self.buffers, inputs)}
    replay(self.launches, {o: n for o, n in subs.items() if o is not n}, get_registry(), self.traffic,
           var_vals or None, self.native)
    for t in self.symbolic_outs:
      unbound, old = unbind_graph([t.uop])
      t.uop = bind_graph(unbound, {**old, **var_vals})[0]
    return self.ret


def _refuse_sharded(t: Any) -> None:
  if isinstance(t.device, tuple):
    raise NotImplementedError(f"TinyJit does not capture sharded tensors yet (an argument is {_describe(t)}); call the "
                              f"function without TinyJit")


def _buffer(t: Any) -> Buffer:
  _refuse_sharded(t)
  return buffer_of(t._own_buffer())


def _structure(t: Any) -> Hashable:
  # with its Variables unbound: a symbolic shape matches the capture for every value of its Variables
  found = structure_key(unbind_graph([t.uop])[0], t.device)
  return None if found is None else found[0]


def _shape_nodes(u: UOp) -> list[UOp]:
  """The nodes of the symbolic ints in the shape of `u`."""
  return [n for s in u.shape if isinstance(s, UOp) for n in s.toposort]


class TinyJit(Generic[R]):
  """tinygrad's JIT, as a decorator: `@TinyJit def step(x, y): ...`.

  The first call runs the function as usual; the second runs it again and captures every kernel it
  launches; later calls realize the tensor arguments and replay the captured kernels with them,
  without running the Python function. Returned tensors are realized at the end of every call. See
  the module docstring for what a jitted function may do. `reset()` forgets the capture.
  """

  def __init__(self, fxn: Callable[..., R]):
    if not callable(fxn): raise TypeError(f"TinyJit wraps a function, got {type(fxn).__name__}")
    self.fxn = fxn
    self.cnt = 0
    self.captured: _Captured | None = None
    functools.update_wrapper(self, fxn)

  def reset(self) -> None:
    """Forget the capture: the next call runs the function as usual, the one after captures again."""
    self.cnt, self.captured = 0, None

  def __get__(self, obj: Any, objtype: Any = None) -> Any:  # a jitted method binds like a function
    return self if obj is None else functools.partial(self.__call__, obj)

  def __call__(self, *args: Any, **kwargs: Any) -> R:
    inputs, var_args = _tensor_args(args, kwargs), _var_args(args, kwargs)
    for _, t in inputs: _refuse_sharded(t)  # at the first call, not once the second has run the function again
    unseen = [t for i, (_, t) in enumerate(inputs) if self.captured is None or not self.captured.seen(i, t)]
    if unseen: unseen[0].realize(*unseen[1:])
    if self.captured is not None:
      self.captured.check(inputs, var_args)
      _realize_writes_into(self.captured.used)
      self.cnt += 1
      return self.captured.run(inputs, _var_vals(inputs, var_args))
    if self.cnt == 0:
      ret = self._run(args, kwargs)
    else:
      _realize_writes_into(None)  # made before this call: else the capture holds them, and every replay writes them again
      with Capture() as cap: ret = self._run(args, kwargs)
      if not cap.launches: raise RuntimeError("TinyJit: the captured call launched no kernel: nothing to replay")
      self.captured = _Captured(cap.launches, inputs, ret, var_args)
    self.cnt += 1
    return ret

  def _run(self, args: tuple, kwargs: dict) -> R:
    ret = self.fxn(*args, **kwargs)
    outs = _tensors_in(ret)
    if outs: outs[0].realize(*outs[1:])
    for t in outs:
      if t.uop.op is not Ops.MULTI: t._own_buffer()
    return ret
