"""TinyJit: the first call runs, the second captures, later calls replay the captured kernels on the
new inputs' buffers, giving what eager execution gives."""
import gc
import weakref

import numpy as np
import pytest

from plugrad import Tensor, TinyJit, nn
from plugrad.nn import optim
from plugrad.nn.state import get_parameters
from plugrad.scheduler import buffer_of
from plugrad.testing import available_devices


def test_replay_uses_the_new_inputs(dev):
  w = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, device=dev)
  calls = []

  @TinyJit
  def f(x, y):
    calls.append(1)
    return ((x @ w) * y).relu().sum(1)

  rng = np.random.default_rng(0)
  for i in range(5):
    x, y = rng.standard_normal((2, 4)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)
    out = f(Tensor(x, device=dev), y=Tensor(y, device=dev))
    np.testing.assert_allclose(out.numpy(), np.maximum((x @ w.numpy()) * y, 0).sum(1), rtol=1e-5, atol=1e-6)
  assert len(calls) == 2 and f.cnt == 5  # the Python function ran for the plain call and the capture only


def test_state_assigned_between_calls_and_not_realized_is_read_as_eager_code_reads_it(dev):
  # a pending assign made before the capture was captured with it (every replay wrote that old value again), and
  # one made after it was not seen by the replays (they read the buffer as it was)
  w = Tensor([1.0, 1.0], device=dev).realize()

  @TinyJit
  def scale(x: Tensor) -> Tensor: return x * w
  for k in range(1, 6):
    assert scale(Tensor([1.0, 2.0], device=dev)).tolist() == [k, 2 * k]
    w.assign(Tensor([k + 1.0, k + 1.0], device=dev))  # not realized


def test_training_steps_replayed_match_eager():
  def train(jit: bool) -> list[float]:
    Tensor.manual_seed(0)
    l1, l2 = nn.Linear(8, 16), nn.Linear(16, 3)
    opt = optim.Adam(get_parameters([l1, l2]), lr=1e-2)

    def step(x, y):
      opt.zero_grad()
      loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y).backward()
      opt.step()
      return loss
    step = TinyJit(step) if jit else step
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((16, 8)).astype(np.float32), rng.integers(0, 3, 16).astype(np.int32)
    losses = []
    with Tensor.train():
      for i in range(20):  # new input tensors every call, alternating halves of the data
        losses.append(step(Tensor(np.roll(x, 8 * (i % 2), 0)), Tensor(np.roll(y, 8 * (i % 2)))).item())
    return losses
  eager, jitted = train(False), train(True)
  np.testing.assert_allclose(jitted, eager, rtol=1e-5)
  assert eager[-1] < eager[0]  # it learns


def test_inputs_that_differ_from_the_capture_raise():
  f = TinyJit(lambda x: (x * 2).sum())
  for _ in range(3): f(Tensor.ones(4, 3))
  with pytest.raises(ValueError, match=r"argument 0 is float32 \(5, 3\).*captured with float32 \(4, 3\)"):
    f(Tensor.ones(5, 3))
  with pytest.raises(ValueError, match="int32"): f(Tensor.ones(4, 3, dtype="int32"))
  with pytest.raises(TypeError, match="arguments"): f(x=Tensor.ones(4, 3))
  f.reset()
  assert f(Tensor.ones(5, 3)).item() == 30 and f.cnt == 1


def test_an_argument_passed_again_is_checked_once_and_not_kept():
  f = TinyJit(lambda x: (x * 2).sum())
  x = Tensor.ones(4, 3)
  for _ in range(4): assert f(x).item() == 24  # the same tensor every call: its structure matched once
  x.assign(Tensor.full((4, 3), 2.0))
  assert f(x).item() == 48
  with pytest.raises(ValueError, match=r"\(3, 4\)"): f(x.T)  # another node: checked, though x matched before
  # the capture keeps its own argument's buffer (replays bind the new one in its place), never a later call's
  x = Tensor.full((4, 3), 3.0).realize()
  dead = weakref.ref(buffer_of(x.uop))
  assert f(x).item() == 72
  del x
  gc.collect()
  assert dead() is None


def test_returned_tensors_are_the_captured_ones_rewritten():
  f = TinyJit(lambda x: (x + 1, x * 2))
  for i in range(4):
    a, b = f(Tensor([float(i), 1.0]))
    assert a.tolist() == [i + 1.0, 2.0] and b.tolist() == [2.0 * i, 2.0]
  assert f(Tensor([9.0, 9.0]))[0] is a  # the same objects, their buffers written by the replay


def test_a_jitted_method_binds_its_instance():
  class Model:
    def __init__(self): self.scale = Tensor([3.0])
    @TinyJit
    def __call__(self, x): return x * self.scale
  m = Model()
  assert [m(Tensor([float(i)])).item() for i in range(4)] == [0.0, 3.0, 6.0, 9.0]


def test_a_capture_that_launches_nothing_is_an_error():
  f = TinyJit(lambda x: x)
  f(Tensor([1.0]))
  with pytest.raises(RuntimeError, match="launched no kernel"): f(Tensor([1.0]))


def test_random_numbers_inside_a_jitted_function_are_new_on_every_replay():
  Tensor.manual_seed(5)
  f = TinyJit(lambda x: x + Tensor.rand(8) + Tensor.randint(8, high=1000).float())
  outs = [f(Tensor.zeros(8)).numpy().copy() for _ in range(5)]
  assert len({o.tobytes() for o in outs}) == 5  # the counter's update is replayed too: no frozen draws
  Tensor.manual_seed(5)
  eager = [(Tensor.zeros(8) + Tensor.rand(8) + Tensor.randint(8, high=1000).float()).numpy() for _ in range(5)]
  np.testing.assert_array_equal(np.stack(outs), np.stack(eager))  # and the same numbers eager code draws


@pytest.mark.skipif("CPU" not in available_devices(), reason="plugrad-cpu-llvm is not installed")
def test_a_sharded_argument_is_refused_at_the_first_call():
  # the first call ran the function and the second refused: the error came a call late, after the work was done
  calls = []

  @TinyJit
  def step(x: Tensor) -> Tensor:
    calls.append(1)
    return (x * 2).sum(0).realize()

  for axis in (None, 0):
    x = Tensor(np.ones((4, 2), np.float32)).shard(("CPU:0", "CPU:1"), axis=axis)
    with pytest.raises(NotImplementedError, match="sharded"): step(x)
  assert not calls


def test_tensors_inside_list_tuple_and_dict_arguments_are_inputs():
  # a replay took the captured call's tensor for them: f([x]) returned x0 + 1 for every later x (tinygrad looks one
  # level in; any depth here)
  first = TinyJit(lambda xs: (xs[0] + 1).realize())
  assert [first([Tensor([float(i)])]).item() for i in range(4)] == [1.0, 2.0, 3.0, 4.0]
  by_key = TinyJit(lambda batch: (batch["x"] * 2).realize())
  assert [by_key({"x": Tensor([float(i)])}).item() for i in range(4)] == [0.0, 2.0, 4.0, 6.0]
  nested = TinyJit(lambda a, extra: (a + extra["y"][1]).realize())
  assert [nested(Tensor([1.0]), extra={"y": (0, Tensor([float(i)]))}).item() for i in range(4)] == [1.0, 2.0, 3.0, 4.0]
  with pytest.raises(TypeError, match=r"arguments \['0\[0\]', '0\[1\]'\]"): first([Tensor([1.0]), Tensor([2.0])])
