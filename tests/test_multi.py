"""Sharded tensors (plugrad.multi): every op class on PYTHON:0/PYTHON:1 and CPU:0/CPU:1 equals the same op on one
device; gradients through sharded training equal the unsharded ones; unsupported cases fail with clear errors."""
import numpy as np
import pytest

from plugrad import Tensor
from plugrad.device import Buffer
from plugrad.registry import get_registry

PAIRS = {"PYTHON": ("PYTHON:0", "PYTHON:1"), "CPU": ("CPU:0", "CPU:1")}


@pytest.fixture(params=list(PAIRS))
def devs(request) -> tuple[str, str]:
  return PAIRS[request.param]


def _x(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _check(fn, arrays: list[np.ndarray], devs: tuple[str, ...], axes: list[int | None], atol: float = 1e-5) -> None:
  """fn on sharded tensors (each array sharded on its axis) equals fn on one device, and keeps `.device` a tuple."""
  want = fn(*[Tensor(a, device=devs[0]) for a in arrays]).numpy()
  out = fn(*[Tensor(a, device=devs[0]).shard(devs, axis=ax) for a, ax in zip(arrays, axes)])
  assert out.device == tuple(get_registry().device(d).name for d in devs)
  np.testing.assert_allclose(out.numpy(), want, atol=atol, rtol=1e-5)


def test_shard_roundtrip_and_device(devs):
  a = _x(5, 3)
  for axis in (None, 0, 1):
    t = Tensor(a).shard(devs, axis=axis)
    assert isinstance(t.device, tuple) and len(t.device) == 2 and t.shape == (5, 3) and t.shard_axis == axis
    np.testing.assert_array_equal(t.numpy(), a)
  t = Tensor(a).shard(devs, axis=0)
  assert [s.shape for s in t.uop.src] == [(2, 3), (3, 3)]  # uneven: 5 rows as 2 + 3
  np.testing.assert_array_equal(t.to(devs[1]).numpy(), a)  # gathered onto one device
  np.testing.assert_array_equal(Tensor(a).to(devs).numpy(), a)  # replicated
  like = Tensor(a * 2).shard_like(t)
  assert like.device == t.device and like.shard_axis == 0
  u = Tensor(a)
  u.shard_(devs, axis=1)
  assert u.shard_axis == 1 and isinstance(u.device, tuple)


@pytest.mark.parametrize("axes", [(0, 0), (1, 1), (0, None), (None, 1), (0, 1)])
def test_elementwise(devs, axes):
  _check(lambda x, y: (x * y + x.exp()).relu() - y / 2, [_x(4, 6), _x(4, 6, seed=1)], devs, list(axes))
  _check(lambda x, y: (x < y).where(x, y.sqrt().abs()), [_x(4, 6), _x(4, 6, seed=1)], devs, list(axes))


def test_elementwise_with_constants_and_broadcast(devs):
  _check(lambda x, b: x * 3 + b, [_x(4, 6), _x(6)], devs, [0, None])
  _check(lambda x, b: x + b, [_x(4, 6), _x(4, 1)], devs, [1, 0])
  _check(lambda x: x + Tensor.ones(4, 6, device=x.device), [_x(4, 6)], devs, [0])


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_movement(devs, axis):
  a = _x(4, 6, 2)
  _check(lambda x: x.permute(2, 0, 1) * 1, [a], devs, [axis])
  _check(lambda x: x.reshape(4, 12) + 0, [a], devs, [axis]) if axis == 0 else None
  _check(lambda x: x.reshape(2, 2, 6, 2) + 0, [a], devs, [axis])
  _check(lambda x: x.unsqueeze(1).expand(4, 3, 6, 2) + 0, [a], devs, [axis])
  _check(lambda x: x.pad(((1, 1), (0, 2), (1, 0))) + 0, [a], devs, [axis])  # pads the sharded axis too
  _check(lambda x: x.shrink(((1, 3), (0, 5), (0, 2))) + 0, [a], devs, [axis])
  _check(lambda x: x.flip(0, 1) + 0, [a], devs, [axis])
  _check(lambda x: x[1:, ::2] + 0, [a], devs, [axis])
  _check(lambda x, y: x.cat(y, dim=1), [a, a * 2], devs, [axis, axis])


@pytest.mark.parametrize("axis", [0, 1, None])
def test_reductions(devs, axis):
  a = _x(6, 8)
  for fn in (lambda x: x.sum(), lambda x: x.sum(0), lambda x: x.sum(1, keepdim=True), lambda x: x.max(0),
             lambda x: x.min(1), lambda x: x.mean(), lambda x: x.softmax(-1), lambda x: x.softmax(0),
             lambda x: x.std(0), lambda x: x.argmax(1)):
    _check(fn, [a], devs, [axis])


@pytest.mark.parametrize("axes", [(0, None), (None, 1), (1, 0), (0, 0), (None, None)])
def test_matmul(devs, axes):
  _check(lambda x, w: x @ w, [_x(6, 8), _x(8, 4, seed=1)], devs, list(axes), atol=1e-4)


def test_conv_on_a_sharded_batch(devs):
  _check(lambda x, w: x.conv2d(w, padding=1).relu().max_pool2d(2), [_x(4, 2, 6, 6), _x(3, 2, 3, 3, seed=1)], devs,
         [0, None], atol=1e-4)


def _mlp_grads(devs: tuple[str, ...] | None, x: np.ndarray, y: np.ndarray, ws: list[np.ndarray]):
  params = [Tensor(w, device=devs[0] if devs else None) for w in ws]
  xb, yb = Tensor(x), Tensor(y)
  if devs:
    for p in params: p.shard_(devs)  # replicated weights
    xb, yb = xb.shard(devs, axis=0), yb.shard(devs, axis=0)  # the batch split across devices
  for p in params: p.requires_grad_(True)
  h = (xb @ params[0] + params[1]).relu()
  loss = (h @ params[2]).sparse_categorical_crossentropy(yb)
  loss.backward()
  return loss.numpy(), [p.grad.numpy() for p in params]


def test_sharded_mlp_gradients_equal_unsharded(devs):
  rng = np.random.default_rng(3)
  x, y = _x(8, 5), rng.integers(0, 3, 8).astype(np.int32)
  ws = [_x(5, 7, seed=4), _x(7, seed=5), _x(7, 3, seed=6)]
  loss0, g0 = _mlp_grads(None, x, y, ws)
  loss1, g1 = _mlp_grads(devs, x, y, ws)
  np.testing.assert_allclose(loss1, loss0, rtol=1e-5, atol=1e-6)
  for a, b in zip(g1, g0): np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_sharded_training_steps_equal_unsharded(devs):
  """Several SGD steps (data-parallel: batch sharded, weights replicated) follow the one-device run."""
  from plugrad import nn
  rng = np.random.default_rng(7)
  x, y = _x(8, 4, seed=8), rng.integers(0, 2, 8).astype(np.int32)
  curves = []
  for sharded in (False, True):
    w = Tensor(_x(4, 2, seed=9), device=devs[0])
    xb, yb = Tensor(x, device=devs[0]), Tensor(y, device=devs[0])
    if sharded: w.shard_(devs); xb, yb = xb.shard(devs, axis=0), yb.shard(devs, axis=0)  # noqa: E702
    opt = nn.optim.SGD([w], lr=0.5)
    losses = []
    with Tensor.train():
      for _ in range(3):
        opt.zero_grad()
        loss = (xb @ w).sparse_categorical_crossentropy(yb)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    curves.append((losses, w.numpy()))
  np.testing.assert_allclose(curves[1][0], curves[0][0], rtol=1e-5)
  np.testing.assert_allclose(curves[1][1], curves[0][1], rtol=1e-5, atol=1e-6)


def test_clear_errors(devs):
  t = Tensor(_x(4, 6, 2)).shard(devs, axis=1)
  with pytest.raises(NotImplementedError, match=r"RESHAPE .* axis 1"):
    t.reshape(24, 2).numpy()
  with pytest.raises(ValueError, match=r"different devices.*shard both"):
    (t + Tensor(_x(4, 6, 2), device=devs[0])).numpy()
  with pytest.raises(ValueError, match="cannot shard an axis of size 1"):
    Tensor(_x(1, 3)).shard(devs, axis=0)
  with pytest.raises(ValueError, match="different devices"):
    t + Tensor(_x(4, 6, 2)).shard(devs[::-1], axis=1)


def test_transfer_collective_fallback(devs):
  reg = get_registry()
  coll = reg.collective(devs)
  assert coll.size == 1 and coll.rank == 0

  def bufs(*arrays):
    from plugrad.dtype import dtypes
    return [Buffer(d, a.size, dtypes.float32, reg.device(d).allocator).copyin(a) for d, a in zip(devs, arrays)]
  a, b = np.arange(4, dtype=np.float32), np.arange(4, dtype=np.float32) * 10
  bs = bufs(a, b)
  coll.all_reduce(bs, "sum")
  for x in bs: np.testing.assert_array_equal(x.numpy(), a + b)
  bs = bufs(a, b)
  coll.all_reduce(bs, "max")
  np.testing.assert_array_equal(bs[0].numpy(), np.maximum(a, b))
  bs = bufs(a, b)
  coll.broadcast(bs, root=1)
  np.testing.assert_array_equal(bs[0].numpy(), b)
  src, dest = bufs(a, b), bufs(np.zeros(8, np.float32), np.zeros(8, np.float32))
  coll.all_gather(dest, src)
  for x in dest: np.testing.assert_array_equal(x.numpy(), np.concatenate([a, b]))
  src, dest = bufs(a, b), bufs(np.zeros(2, np.float32), np.zeros(2, np.float32))
  coll.reduce_scatter(dest, src, "sum")
  np.testing.assert_array_equal(np.concatenate([x.numpy() for x in dest]), a + b)
  with pytest.raises(ValueError, match="reduction 'mean'"):
    coll.all_reduce(bufs(a, b), "mean")


def test_process_group_alone_is_a_group_of_one():
  g = get_registry().process_group()
  assert g.size >= 1 and 0 <= g.rank < g.size


def test_realized_shards_are_held_while_their_tensor_lives(devs):
  """The memory planner must not write into a live sharded tensor's buffers (an elementwise kernel may reuse an
  input buffer that dies in it)."""
  a = _x(4, 6)
  t = (Tensor(a).shard(devs, axis=0) * 2).realize()
  assert all(s.op.name in ("BUFFER", "RESHAPE") for s in t.uop.src)
  u = ((t + 1).exp() * 3).realize()
  np.testing.assert_allclose(t.numpy(), a * 2)
  np.testing.assert_allclose(u.numpy(), np.exp(a * 2 + 1) * 3, rtol=1e-5)


def test_creation_on_several_devices(devs):
  assert Tensor.zeros(3, 2, device=devs).device == Tensor(np.ones(3), device=devs).device
  np.testing.assert_array_equal(Tensor.arange(6, device=devs).numpy(), np.arange(6))
  np.testing.assert_array_equal(Tensor(np.ones((2, 2)), device=devs).numpy(), np.ones((2, 2)))
  e = Tensor.empty(3, device=devs)
  assert e.shape == (3,) and isinstance(e.device, tuple)
  r = Tensor.rand(4, 3, device=devs)
  assert r.shard_axis is None and r.numpy().shape == (4, 3)


def test_tinyjit_refuses_sharded_arguments_clearly(devs):
  from plugrad import TinyJit

  @TinyJit
  def f(x): return (x * 2).realize()
  with pytest.raises(NotImplementedError, match="TinyJit does not capture sharded tensors"):
    for _ in range(3): f(Tensor(_x(4, 2)).shard(devs, axis=0))


def test_a_plugin_may_provide_the_collectives():
  from plugrad.builtins.python_device import PythonDevicePlugin
  from plugrad.config import Config
  from plugrad.device import Collective, DeviceError
  from plugrad.hookspecs import hookimpl
  from plugrad.multi import SingleProcess, TransferCollective
  from plugrad.registry import Registry

  class Ring(Collective):
    def _all_reduce(self, bufs, op): pass

  class Job(Collective):
    rank, size = 1, 4

  class Better:
    PLUGRAD_CONTRACT = 2

    @hookimpl
    def plugrad_collective(self, devices, config): return Ring() if devices == ("PYTHON", "PYTHON:1") else None

    @hookimpl
    def plugrad_process_group(self, config): return Job()

  reg = Registry(Config.from_env({}), builtins=[PythonDevicePlugin(), Better()], entry_points=lambda g: [])
  assert isinstance(reg.collective(("PYTHON", "PYTHON:1")), Ring)
  assert isinstance(reg.collective(("PYTHON:2", "PYTHON:3")), TransferCollective)  # the fallback
  assert reg.process_group().size == 4
  assert isinstance(Registry(Config.from_env({}), builtins=[PythonDevicePlugin()], entry_points=lambda g: [])
                    .process_group(), SingleProcess)

  class Junk:
    PLUGRAD_CONTRACT = 2

    @hookimpl
    def plugrad_collective(self, devices, config): return "fast"
  bad = Registry(Config.from_env({}), builtins=[PythonDevicePlugin(), Junk()], entry_points=lambda g: [])
  with pytest.raises(DeviceError, match="plugrad_collective returned str, expected Collective"):
    bad.collective(("PYTHON", "PYTHON:1"))
  with pytest.raises(NotImplementedError, match="Ring must implement _broadcast"):
    Ring().broadcast([Buffer("PYTHON", 1, Tensor([1.0]).dtype, get_registry().device("PYTHON").allocator)])


@pytest.mark.parametrize("axis", [0, 1, None])
def test_gradient_flows_through_shard_to_the_unsharded_tensor(devs, axis):
  a = _x(4, 6)
  x = Tensor(a, device=devs[1], requires_grad=True)
  loss = (x.shard(devs, axis=axis).exp() * 2).sum()
  loss.backward()
  assert x.grad.device == get_registry().device(devs[1]).name
  np.testing.assert_allclose(x.grad.numpy(), np.exp(a) * 2, rtol=1e-5)


@pytest.mark.parametrize("axis", [0, 1, None])
def test_assign_into_a_view_of_a_sharded_tensor_writes_its_shards(devs, axis):
  # the view took the new value and the shards kept the old ones, silently (a KV cache's cache[:, a:b].assign(...))
  a = _x(4, 6)
  want = a.copy()
  want[:, 2:4] = 1.0
  want[1] += 5.0
  x = Tensor(a, device=devs[0]).shard(devs, axis=axis).contiguous().realize()
  x[:, 2:4].assign(Tensor.ones(4, 2, device=devs[0]).to(devs)).realize()
  row = x[1]
  row += 5.0
  row.realize()
  np.testing.assert_allclose(x.numpy(), want)
  np.testing.assert_allclose(row.numpy(), want[1])


def test_a_gather_of_shards_keeps_negative_zeros(devs):
  # the shards are padded to place and added: padded with 0.0, a -0.0 came back +0.0 (1 / x gave +inf)
  a = np.array([-0.0, 1.0, -0.0, 2.0, -0.0, -3.0], np.float32)
  x = Tensor(a, device=devs[0]).shard(devs, axis=0)
  for got, want in [(x[1:], a[1:]), (x.flip(0), a[::-1])]:
    assert np.array_equal(np.signbit(got.numpy()), np.signbit(want)) and np.array_equal(got.numpy(), want)


def test_likes_of_a_sharded_tensor_are_sharded_alike(devs):
  # they came back replicated: a whole copy on each device; rand_like's values are Tensor.rand's for the seed
  x = Tensor(_x(6, 4)).shard(devs, axis=1)
  for like in (x.zeros_like(), x.ones_like(), x.full_like(2.5), x.empty_like(), x.rand_like(), x.randn_like()):
    assert like.device == x.device and like.shard_axis == 1 and like.shape == (6, 4)
    assert [s.shape for s in like.uop.src] == [(6, 2), (6, 2)]
  np.testing.assert_array_equal(x.full_like(2.5).numpy(), np.full((6, 4), 2.5, np.float32))
  Tensor.manual_seed(7)
  drawn = x.rand_like().numpy()
  Tensor.manual_seed(7)
  np.testing.assert_array_equal(drawn, Tensor.rand(6, 4, device=devs[0]).numpy())
  assert x.rand_like(device=devs[0]).device == get_registry().device(devs[0]).name  # another device given: as asked
  replicated = Tensor(_x(6, 4)).shard(devs)
  assert replicated.zeros_like().shard_axis is None and replicated.shard(devs, 0).shard_axis == 0


@pytest.mark.parametrize("axis", [0, 1])
def test_roll_and_repeat_along_the_sharded_axis(devs, axis):
  # they raised about an internal reshape that would split the shards
  a = np.arange(24, dtype=np.float32).reshape(6, 4)
  x = Tensor(a).shard(devs, axis=axis)
  for shifts, dims in [(1, 0), (-2, 1), ((1, 3), (0, 1))]:
    got = x.roll(shifts, dims)
    np.testing.assert_array_equal(got.numpy(), np.roll(a, shifts, dims))
    assert got.shard_axis == axis
  for reps in [(2, 1), (1, 2), (2, 3), (2, 1, 1)]:
    got = x.repeat(*reps)
    np.testing.assert_array_equal(got.numpy(), np.tile(a, reps))
    assert got.shard_axis == axis + len(reps) - 2
