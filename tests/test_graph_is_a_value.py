"""Nothing that changes at run time lives in a UOp: a graph names its buffers by value (uid, device, size),
and the live Buffers, the done flags of kernels and compiled programs are kept beside it."""
import dataclasses
import enum
import gc
import weakref

import numpy as np

from plugrad import Tensor, nn
from plugrad.device import Buffer
from plugrad.dtype import DType
from plugrad.nn import optim
from plugrad.nn.state import get_parameters
from plugrad.scheduler import Kernel, buffer_node, buffer_of
from plugrad.uops import Ops, UOp


def _plain(x, seen) -> bool:
  """Whether `x` is a value: numbers, strings, dtypes, op codes, UOps (walked themselves), and tuples or
  frozen dataclasses of values. A Buffer, a compiled program, a list or any mutable object is not."""
  if isinstance(x, UOp):
    seen.append(x)
    return True
  if x is None or isinstance(x, (bool, int, float, str, DType, Ops, enum.Enum)): return True
  if isinstance(x, (tuple, frozenset)): return all(_plain(v, seen) for v in x)
  if dataclasses.is_dataclass(x) and x.__dataclass_params__.frozen:
    return all(_plain(getattr(x, f.name), seen) for f in dataclasses.fields(x))
  return False


def _walk(roots: list[UOp]) -> list[UOp]:
  bad, seen, done = [], list(roots), set()
  while seen:
    u = seen.pop()
    if u in done: continue
    done.add(u)
    seen.extend(u.src)
    if not _plain(u.arg, seen): bad.append(u)
  return bad


def test_a_trained_model_and_its_schedules_hold_no_run_time_state():
  rng = np.random.default_rng(0)
  model = [nn.Linear(8, 16), nn.Linear(16, 3)]
  opt = optim.Adam(get_parameters(model), lr=1e-2)
  x = Tensor(rng.standard_normal((32, 8)).astype(np.float32))
  y = Tensor(rng.integers(0, 3, 32).astype(np.int32))
  with Tensor.train():
    for _ in range(3):
      opt.zero_grad()
      loss = model[1](model[0](x).relu()).sparse_categorical_crossentropy(y).backward()
      opt.step()
    pending = model[1](model[0](x).relu()).sparse_categorical_crossentropy(y)
    items = pending.schedule()  # kernels made, not run: KERNEL nodes in the graph
  roots = [t.uop for t in get_parameters(model) + get_parameters(opt) + [loss, pending]]
  roots += [it.ast for it in items if it.ast is not None]
  assert any(isinstance(u.arg, Kernel) for u in pending.uop.toposort)  # the walk reaches kernels not run yet
  bad = _walk(roots)
  assert not bad, f"UOps holding run-time state: {[(u.op, type(u.arg).__name__) for u in bad[:5]]}"


def test_a_buffer_lives_as_long_as_its_node():
  t = Tensor([1.0, 2.0, 3.0]).realize()
  node = t.uop
  buf = buffer_of(node)
  assert isinstance(buf, Buffer) and node.arg == (buf.uid, buf.device, 3) and buffer_node(buf) is node
  alive = weakref.ref(buf)
  del t, buf
  gc.collect()
  assert buffer_of(node).numpy().tolist() == [1.0, 2.0, 3.0]  # the node alone keeps its buffer alive
  del node
  gc.collect()
  assert alive() is None  # and the buffer goes with it
