"""Gradients (plugrad.gradient, Tensor.backward/gradient) against torch's autograd.

Every derivative rule is reached through the Tensor ops built on it, on random inputs with
broadcasting and size-1/odd dimensions, on the reference device and on the CPU device.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from plugrad import Context, Tensor, dtypes
from plugrad.testing import available_devices
from plugrad.uops import Ops

# named `dev`, not `device`: the plugrad pytest plugin would run a `device` test on every device


def check_grad(device, ours, theirs, *shapes, low=-2.0, high=2.0, ints=False, seed=0, rtol=1e-4, atol=1e-5):
  """Compare ours(*tensors) and theirs(*torch_tensors), then the gradients of sum(out * w) for a
  random w (so every output element gets its own upstream gradient) with respect to every input."""
  rng = np.random.default_rng(seed)
  # `ints`: small whole numbers, so that max/min/== see ties
  xs = [(rng.integers(-2, 3, s) if ints else rng.uniform(low, high, s)).astype(np.float32) for s in shapes]
  ts = [Tensor(x, device=device, requires_grad=True) for x in xs]
  tts = [torch.tensor(x, requires_grad=True) for x in xs]
  out, tout = ours(*ts), theirs(*tts)
  assert out.shape == tuple(tout.shape)
  w = rng.uniform(0.5, 1.5, tuple(tout.shape)).astype(np.float32)
  # backward before anything is realized: realizing `out` would make it a buffer, cut from its inputs
  (out * Tensor(w, device=device)).sum().backward()
  (tout * torch.tensor(w)).sum().backward()
  Tensor.realize(out, *[t.grad for t in ts])
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=rtol, atol=atol)
  for i, (t, tt) in enumerate(zip(ts, tts)):
    assert t.grad.shape == t.shape and t.grad.device == t.device
    ref = np.zeros(t.shape, np.float32) if tt.grad is None else tt.grad.numpy()  # torch: None when nothing flows
    np.testing.assert_allclose(t.grad.numpy(), ref, rtol=rtol, atol=atol, err_msg=f"gradient of input {i}")


UNARY = {
  "neg": (lambda x: -x, lambda x: -x, {}),
  "reciprocal": (Tensor.reciprocal, torch.reciprocal, {"low": 0.5}),
  "sqrt": (Tensor.sqrt, torch.sqrt, {"low": 0.5}),
  "rsqrt": (Tensor.rsqrt, torch.rsqrt, {"low": 0.5}),
  "exp": (Tensor.exp, torch.exp, {}),
  "exp2": (Tensor.exp2, torch.exp2, {}),
  "log2": (Tensor.log2, torch.log2, {"low": 0.5}),
  "contiguous": (lambda x: x.contiguous() * x, lambda x: x.contiguous() * x, {}),
  "log": (Tensor.log, torch.log, {"low": 0.5}),
  "sin": (Tensor.sin, torch.sin, {}),
  "cos": (Tensor.cos, torch.cos, {}),
  "tanh": (Tensor.tanh, torch.tanh, {}),
  "sigmoid": (Tensor.sigmoid, torch.sigmoid, {}),
  "relu": (Tensor.relu, torch.relu, {"ints": True}),  # whole numbers: relu'(0) is 0, as torch's
  "leaky_relu": (lambda x: x.leaky_relu(0.1), lambda x: F.leaky_relu(x, 0.1), {}),
  "gelu": (Tensor.gelu, lambda x: F.gelu(x, approximate="tanh"), {}),
  "silu": (Tensor.silu, F.silu, {}),
  "softplus": (Tensor.softplus, F.softplus, {}),
  "abs": (Tensor.abs, torch.abs, {"ints": True}),  # whole numbers: abs'(0) is 0, as torch's
  "square": (Tensor.square, torch.square, {}),
  "floor": (Tensor.floor, torch.floor, {}),  # piecewise constant: zero gradient
  "pow_int": (lambda x: x ** 3, lambda x: x ** 3, {}),
  "pow_neg_int": (lambda x: x ** -2, lambda x: x ** -2, {"low": 0.5}),
  "pow_float": (lambda x: x ** 2.5, lambda x: x ** 2.5, {"low": 0.5}),
  "rpow": (lambda x: 2 ** x, lambda x: 2 ** x, {}),
  "cast_half": (lambda x: x.cast(dtypes.float16).cast(dtypes.float32) * 3, lambda x: x.half().float() * 3,
                {"ints": True}),
  "cast_int": (lambda x: x.cast(dtypes.int32).cast(dtypes.float32) + x, lambda x: x.int().float() + x, {}),
  "clip": (lambda x: x.clip(-0.5, 0.5), lambda x: x.clip(-0.5, 0.5), {}),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary(dev, name):
  ours, theirs, kw = UNARY[name]
  check_grad(dev, ours, theirs, (3, 1, 4), **kw)


BINARY = {
  "add": (lambda a, b: a + b, {}),
  "sub": (lambda a, b: a - b, {}),
  "mul": (lambda a, b: a * b, {}),
  "div": (lambda a, b: a / b, {"low": 0.5}),
  "maximum_ties": (lambda a, b: a.maximum(b), {"ints": True}),
  "minimum_ties": (lambda a, b: a.minimum(b), {"ints": True}),
  "pow": (lambda a, b: a ** b, {"low": 0.5}),
  "mod": (lambda a, b: a % b, {"low": 0.5}),
}


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_broadcast(dev, name):
  f, kw = BINARY[name]
  check_grad(dev, f, f, (3, 1, 5), (4, 1), **kw)


def test_pow_at_zero_and_one(dev):
  # the edges of pow's formula: torch's gradients, not NaN and not the 0 of a constant
  x = torch.tensor([0.0, 1.0, 3.0], requires_grad=True)
  e = torch.tensor([2.5, 2.5, 0.0], requires_grad=True)
  (x ** e).sum().backward()
  ox = Tensor([0.0, 1.0, 3.0], device=dev, requires_grad=True)
  oe = Tensor([2.5, 2.5, 0.0], device=dev, requires_grad=True)
  (ox ** oe).sum().backward()
  np.testing.assert_allclose(ox.grad.numpy(), x.grad.numpy(), rtol=1e-5)
  np.testing.assert_allclose(oe.grad.numpy(), e.grad.numpy(), rtol=1e-5)


def test_where(dev):
  check_grad(dev, lambda c, a, b: (c > 0).where(a, b), lambda c, a, b: torch.where(c > 0, a, b), (3, 4), (4,), (3, 1))


REDUCE = {
  "sum": (lambda x: x.sum(1), lambda x: x.sum(1), {}),
  "sum_all": (lambda x: x.sum(), lambda x: x.sum(), {}),
  "mean": (lambda x: x.mean((0, 2), keepdim=True), lambda x: x.mean((0, 2), keepdim=True), {}),
  "max_ties": (lambda x: x.max(2), lambda x: x.amax(2), {"ints": True}),
  "min_ties": (lambda x: x.min((0, 1)), lambda x: x.amin((0, 1)), {"ints": True}),
  "prod_with_zeros": (lambda x: x.prod(2), lambda x: x.prod(2), {"ints": True}),
  "var": (lambda x: x.var(1), lambda x: x.var(1), {}),
  "std": (lambda x: x.std(2, correction=0), lambda x: x.std(2, correction=0), {}),
  "logsumexp": (lambda x: x.logsumexp(2), lambda x: x.logsumexp(2), {}),
  "softmax": (lambda x: x.softmax(1), lambda x: x.softmax(1), {}),
  "log_softmax": (lambda x: x.log_softmax(-1), lambda x: x.log_softmax(-1), {}),
}


@pytest.mark.parametrize("name", list(REDUCE))
def test_reduce(dev, name):
  ours, theirs, kw = REDUCE[name]
  check_grad(dev, ours, theirs, (3, 5, 4), **kw)


MOVEMENT = {
  "reshape": (lambda x: x.reshape(5, 12), lambda x: x.reshape(5, 12)),
  "reshape_twice": (lambda x: x.reshape(60).reshape(4, 15), lambda x: x.reshape(60).reshape(4, 15)),
  "permute": (lambda x: x.permute(2, 0, 1), lambda x: x.permute(2, 0, 1)),
  "expand": (lambda x: x[:, :1].expand(3, 6, 4), lambda x: x[:, :1].expand(3, 6, 4)),
  "pad": (lambda x: x.pad(((1, 0), None, (2, 3))), lambda x: F.pad(x, (2, 3, 0, 0, 1, 0))),
  "pad_crop": (lambda x: x.pad((-1, 2, 1, -2)), lambda x: F.pad(x, (-1, 2, 1, -2))),
  "shrink": (lambda x: x.shrink(((1, 3), None, (0, 2))), lambda x: x[1:3, :, 0:2]),
  "flip": (lambda x: x.flip((0, 2)), lambda x: x.flip((0, 2))),
  "getitem": (lambda x: x[1, ::2, ::-3], lambda x: x[1, ::2].flip(-1)[:, ::3]),
  "cat": (lambda x: x[:, :2].cat(x * 2, dim=1), lambda x: torch.cat([x[:, :2], x * 2], dim=1)),
  "stack": (lambda x: x.stack(x.flip(0), dim=-1), lambda x: torch.stack([x, x.flip(0)], dim=-1)),
  "repeat": (lambda x: x.repeat(2, 1, 3), lambda x: x.repeat(2, 1, 3)),
  "transpose": (lambda x: x.transpose(0, 2).T, lambda x: x.transpose(0, 2).permute(2, 1, 0)),
}


@pytest.mark.parametrize("name", list(MOVEMENT))
def test_movement(dev, name):
  ours, theirs = MOVEMENT[name]
  check_grad(dev, ours, theirs, (3, 5, 4))


IDX = np.array([[0, 2], [1, 1], [4, 3]])
COMPOSITE = {  # ops built from the others: their gradients come from the rules above
  "gather": (lambda x: x.gather(1, Tensor(IDX, device=x.device)), lambda x: x.gather(1, torch.tensor(IDX))),
  "tensor_index": (lambda x: x[Tensor([2, 0, 2], device=x.device)], lambda x: x[torch.tensor([2, 0, 2])]),
  "cumsum": (lambda x: x.cumsum(1), lambda x: x.cumsum(1)),
  "einsum": (lambda x: Tensor.einsum("ij,kj->ik", x, x), lambda x: torch.einsum("ij,kj->ik", x, x)),
  "sort": (lambda x: x.sort(1)[0], lambda x: x.sort(1)[0]),
}


@pytest.mark.parametrize("name", list(COMPOSITE))
def test_composite(dev, name):
  ours, theirs = COMPOSITE[name]
  check_grad(dev, ours, theirs, (3, 5))


def test_matmul_batch_broadcast(dev):
  check_grad(dev, lambda a, b: a @ b, lambda a, b: a @ b, (2, 1, 3, 4), (5, 4, 3))


def test_matmul_in_panels(dev, monkeypatch):
  # a large row-major right operand is copied into panels one vector wide first (on a device that loops over its
  # outputs with vector ops): the thresholds lowered so that a small case takes that path
  import plugrad.tensor
  from plugrad.registry import get_registry
  monkeypatch.setattr(plugrad.tensor, "PANEL_MIN_ELEMENTS", 1)
  monkeypatch.setattr(plugrad.tensor, "PANEL_MIN_ROWS", 1)
  caps = get_registry().device(dev).caps
  panels = caps.launch_dims == 0 and caps.vector_ops
  a, b = Tensor.empty(2, 5, 24, device=dev), Tensor.empty(24, 64, device=dev)
  assert len([it for it in (a @ b).schedule() if not it.is_copy]) == (2 if panels else 1)
  check_grad(dev, lambda a, b: a @ b, lambda a, b: a @ b, (2, 5, 24), (24, 64))


def test_matmul_vectors_and_linear(dev):
  check_grad(dev, lambda v, m, b: (v @ m).linear(m.T, b), lambda v, m, b: F.linear(v @ m, m, b), (3,), (3, 4), (3,))


CONV = {
  "conv2d": (lambda x, w: x.conv2d(w, stride=2, padding=1, dilation=(1, 2), groups=2),
             lambda x, w: F.conv2d(x, w, stride=2, padding=1, dilation=(1, 2), groups=2), (2, 4, 7, 9), (6, 2, 3, 2)),
  "conv1d": (lambda x, w: x.conv2d(w, stride=3, padding=2), lambda x, w: F.conv1d(x, w, stride=3, padding=2),
             (2, 3, 11), (4, 3, 3)),
  # stride 1: differentiated as a whole (the input's gradient a transposed convolution), asymmetric padding too
  "conv2d_stride1": (lambda x, w: x.conv2d(w, padding=(1, 2, 0, 1), dilation=(2, 1), groups=2),
                     lambda x, w: F.conv2d(F.pad(x, (1, 2, 0, 1)), w, dilation=(2, 1), groups=2),
                     (2, 4, 7, 9), (6, 2, 3, 2)),
  "conv2d_pointwise": (lambda x, w: x.conv2d(w, groups=2), lambda x, w: F.conv2d(x, w, groups=2), (2, 4, 5, 7), (6, 2, 1, 1)),
  # 8 channels or more per group each way: on a device that loops over its outputs with vector ops (CPU, PYTHON) the
  # weight's gradient sums channels-last (tensor._channels_last_weight_gradient); the cases above keep its own layout
  "conv2d_channels_last": (lambda x, w: x.conv2d(w, padding=(1, 2, 0, 1), dilation=(2, 1), groups=2),
                           lambda x, w: F.conv2d(F.pad(x, (1, 2, 0, 1)), w, dilation=(2, 1), groups=2),
                           (2, 16, 7, 9), (16, 8, 3, 2)),
  "conv3d_channels_last": (lambda x, w: x.conv2d(w, padding=(1, 0, 1)), lambda x, w: F.conv3d(x, w, padding=(1, 0, 1)),
                           (1, 8, 4, 3, 5), (9, 8, 2, 2, 3)),
  "conv1d_padding_beyond_kernel": (lambda x, w: x.conv2d(w, padding=2), lambda x, w: F.conv1d(x, w, padding=2),
                                   (2, 3, 5), (4, 3, 1)),
  "conv3d": (lambda x, w: x.conv2d(w, padding=(1, 0, 1)), lambda x, w: F.conv3d(x, w, padding=(1, 0, 1)),
             (1, 2, 4, 3, 5), (3, 2, 2, 2, 3)),
  "conv_transpose2d": (lambda x, w: x.conv_transpose2d(w, stride=2, padding=1, output_padding=1, groups=2),
                       lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1, groups=2),
                       (2, 4, 3, 5), (4, 3, 3, 2)),
  "max_pool2d": (lambda x: x.max_pool2d(2), lambda x: F.max_pool2d(x, 2), (2, 3, 6, 5)),
  "avg_pool2d": (lambda x: x.avg_pool2d(3, stride=2), lambda x: F.avg_pool2d(x, 3, stride=2), (2, 3, 7, 6)),
}


@pytest.mark.parametrize("name", list(CONV))
def test_conv_and_pool(dev, name):
  ours, theirs, *shapes = CONV[name]
  check_grad(dev, ours, theirs, *shapes)


WIDE = [-1e4, -300, -100, -90, -50, -20, -5, -1, -1e-8, 0, 1e-8, 1, 5, 20, 50, 90, 100, 300, 1e4]
EDGES = {  # where exp() of the branch a where does not take overflows, where |x| and sign(x) lose the slope at 0, bounds
  "sigmoid": (lambda t: t.sigmoid(), torch.sigmoid, WIDE), "tanh": (lambda t: t.tanh(), torch.tanh, WIDE),
  "silu": (lambda t: t.silu(), F.silu, WIDE), "gelu": (lambda t: t.gelu(), lambda x: F.gelu(x, approximate="tanh"), WIDE),
  "elu": (lambda t: t.elu(), F.elu, WIDE), "celu": (lambda t: t.celu(), F.celu, WIDE), "selu": (lambda t: t.selu(), F.selu, WIDE),
  "softplus": (lambda t: t.softplus(), F.softplus, WIDE), "mish": (lambda t: t.mish(), F.mish, WIDE),
  "leaky_relu": (lambda t: t.leaky_relu(), F.leaky_relu, WIDE), "erf": (lambda t: t.erf(), torch.erf, WIDE),
  "atan": (lambda t: t.atan(), torch.atan, WIDE), "cos": (lambda t: t.cos(), torch.cos, [-100, -1, 0, 1e-8, 1, 100]),
  "tan": (lambda t: t.tan(), torch.tan, [-1.5, -1, 0, 1, 1.5]),
  "clip": (lambda t: t.clip(-1, 1), lambda t: t.clamp(-1, 1), [-2, -1, 0, 1, 2]),
  "hardtanh": (lambda t: t.hardtanh(), F.hardtanh, [-2, -1, 0, 1, 2]), "relu6": (lambda t: t.relu6(), F.relu6, [-1, 0, 3, 6, 7]),
  "hardsigmoid": (lambda t: t.hardsigmoid(), F.hardsigmoid, [-4, -3, 0, 3, 4]),
  "std_of_equal_values": (lambda t: t.std(), lambda t: t.std(), [1, 1, 1, 1]),
  "logcumsumexp": (lambda t: t.logcumsumexp(0), lambda t: torch.logcumsumexp(t, 0), [-1e4, 0, 1e4, 100, -5]),
}


@pytest.mark.parametrize("name", list(EDGES))
def test_values_and_gradients_at_extremes_and_bounds_match_torch(dev, name):
  ours, theirs, values = EDGES[name]
  xn = np.array(values, np.float32)
  x, xt = Tensor(xn, device=dev, requires_grad=True), torch.tensor(xn, requires_grad=True)
  out, tout = ours(x), theirs(xt)
  out.sum().backward()
  tout.sum().backward()
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-3, atol=1e-6)  # no NaN where torch has none


def test_conv_input_gradient_is_one_transposed_convolution(dev):
  # the generic rules of the sliding windows would write each window's share (bs x cin x out x k) and sum them
  x = Tensor(np.ones((2, 8, 12, 12), np.float32), device=dev, requires_grad=True)
  w = Tensor(np.ones((8, 8, 3, 3), np.float32), device=dev, requires_grad=True)
  (x.conv2d(w) * Tensor(np.ones((2, 8, 10, 10), np.float32), device=dev).realize()).sum().backward()
  # (on a device that loops with vector ops, the transposed weight is first copied with its output channels
  # innermost: a kernel of the weight's size)
  items = [it for it in x.grad.schedule() if max(b.nbytes for b in it.bufs) > w.nbytes()]
  assert len(items) == 1 and max(b.nbytes for b in items[0].bufs) == x.nbytes()
  # the same convolution strided keeps the generic rules (a transposed one would multiply the zeros between outputs)
  x.grad = None
  (x.conv2d(w, stride=2) * 1.0).sum().backward()
  assert len(x.grad.schedule()) > 1


def test_conv_second_order_matches_torch(dev):
  """Gradients of gradients go through the transposed convolution's own rule and the weight rule's windows."""
  rng = np.random.default_rng(3)
  xn, wn = rng.standard_normal((2, 3, 6, 6)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
  x, w = Tensor(xn, device=dev, requires_grad=True), Tensor(wn, device=dev, requires_grad=True)
  gx, gw = x.conv2d(w, padding=1).tanh().sum().gradient(x, w)
  (gx.square().sum() + gw.square().sum()).backward()
  xt, wt = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
  gxt, gwt = torch.autograd.grad(F.conv2d(xt, wt, padding=1).tanh().sum(), (xt, wt), create_graph=True)
  (gxt.square().sum() + gwt.square().sum()).backward()
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-3, atol=1e-3)
  np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-3, atol=1e-3)


def test_conv_of_a_tensor_with_itself():
  xn = np.random.default_rng(4).standard_normal((3, 3, 3, 3)).astype(np.float32)
  x, xt = Tensor(xn, requires_grad=True), torch.tensor(xn, requires_grad=True)
  x.conv2d(x, padding=1).square().sum().backward()
  F.conv2d(xt, xt, padding=1).square().sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-3)


def test_small_cnn_matches_torch():
  """conv2d + relu + max_pool2d + linear + log_softmax + nll_loss: every parameter's gradient within 1e-4.
  On the reference device only: the rules above already run on both, and this one compiles ~35 kernels."""
  dev = "PYTHON"
  rng = np.random.default_rng(1)
  x, y = rng.standard_normal((4, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, 4)
  params = {"c1": (6, 1, 3, 3), "b1": (6,), "c2": (8, 6, 3, 3), "b2": (8,), "l": (10, 8), "lb": (10,)}
  values = {k: (rng.standard_normal(s) * 0.3).astype(np.float32) for k, s in params.items()}
  p = {k: Tensor(v, device=dev, requires_grad=True) for k, v in values.items()}
  tp = {k: torch.tensor(v, requires_grad=True) for k, v in values.items()}

  h = Tensor(x, device=dev).conv2d(p["c1"], p["b1"], padding=1).relu().max_pool2d(2)
  h = h.conv2d(p["c2"], p["b2"]).relu().max_pool2d(2).flatten(1)
  loss = h.linear(p["l"].T, p["lb"]).log_softmax(-1).nll_loss(Tensor(y, device=dev))
  th = F.max_pool2d(F.relu(F.conv2d(torch.tensor(x), tp["c1"], tp["b1"], padding=1)), 2)
  th = F.max_pool2d(F.relu(F.conv2d(th, tp["c2"], tp["b2"])), 2).flatten(1)
  tloss = F.nll_loss(F.log_softmax(F.linear(th, tp["l"], tp["lb"]), -1), torch.tensor(y))

  loss.backward()
  tloss.backward()
  Tensor.realize(loss, *[t.grad for t in p.values()])
  np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
  for k in params:
    ref = tp[k].grad.numpy()
    np.testing.assert_allclose(p[k].grad.numpy(), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max(), err_msg=k)


# ---------------------------------------------------------------- backward's contract

def test_backward_fills_every_float_tensor_in_scope():
  a = Tensor([1.0, 2.0, 3.0], device="PYTHON")                    # requires_grad None: filled (tinygrad's rule)
  b = Tensor([4.0, 5.0, 6.0], device="PYTHON", requires_grad=False)
  mid = a * b                                                        # an intermediate gets its gradient too
  labels = Tensor([1, 2, 3], device="PYTHON")                        # integers never get one
  (mid * labels).sum().backward()
  np.testing.assert_allclose(a.grad.numpy(), [4.0, 10.0, 18.0])
  np.testing.assert_allclose(mid.grad.numpy(), [1.0, 2.0, 3.0])
  assert b.grad is None and labels.grad is None


def test_backward_accumulates_into_grad():
  w = Tensor([1.0, -2.0], device="PYTHON", requires_grad=True)
  (w * w).sum().backward()
  (w * 3).sum().backward()
  np.testing.assert_allclose(w.grad.numpy(), [2.0 + 3.0, -4.0 + 3.0])


def test_backward_of_non_scalar_needs_gradient():
  x = Tensor.ones(2, 3, device="PYTHON", requires_grad=True)
  with pytest.raises(ValueError, match=r"\(2, 3\)"): (x * 2).backward()
  (x * 2).backward(Tensor.full((2, 3), 0.5, device="PYTHON"))
  np.testing.assert_allclose(x.grad.numpy(), np.ones((2, 3)))
  with pytest.raises(ValueError, match="shape"): (x * 2).backward(Tensor.ones(3, device="PYTHON"))
  x.grad = None
  (x * 3).sum(keepdim=True).backward()  # one element of any shape is a scalar loss, as in torch
  np.testing.assert_allclose(x.grad.numpy(), np.full((2, 3), 3.0))


def test_backward_after_realize_says_why_it_cannot():
  w = Tensor([1.0, 2.0], device="PYTHON", requires_grad=True)
  loss = (w * w).sum()
  loss.item()
  with pytest.raises(RuntimeError, match="already realized"): loss.backward()


@pytest.mark.parametrize("dev", ["PYTHON", "CPU"])
def test_backward_through_a_value_read_before_it_says_why_it_cannot(dev):
  # logging accuracy from the logits before backward made the logits (a live tensor) their buffer: the loss built on
  # them then had no path to the weights, whose gradients stayed None, and training silently changed nothing
  if dev not in available_devices(): pytest.skip(f"no {dev} device here (CPU: plugrad-cpu-llvm and llvmlite)")
  w = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, device=dev, requires_grad=True)
  b = Tensor([0.1, 0.2, 0.3], device=dev, requires_grad=True)
  x, y = Tensor(np.arange(20, dtype=np.float32).reshape(5, 4) / 7, device=dev), Tensor([0, 1, 2, 0, 1], device=dev)
  out = x @ w + b
  out.argmax(1).numpy()
  assert out.tolist() == (out + 0).tolist()  # out became its buffer (no kernel recomputes it)
  with pytest.raises(RuntimeError, match="realized .* require gradients"):
    out.sparse_categorical_crossentropy(y).backward()
  h = x @ w  # reading a value of the graph itself, as h.numpy() for a debug print
  h.numpy()
  with pytest.raises(RuntimeError, match="Call backward"): (h + b).sum().backward()
  # read after backward, a detached copy, a realized input computed from no such tensor, or a realized value made a
  # parameter of its own: no error, and the gradients are torch's
  out = x @ w + b
  out.sparse_categorical_crossentropy(y).backward()
  out.argmax(1).numpy()
  data = ((x - 1) * 2).realize()
  frozen = (x @ w).detach().realize()
  w.grad = None
  ((data @ w) * frozen).sum().backward()
  np.testing.assert_allclose(w.grad.numpy(), (data.numpy().T @ frozen.numpy()), rtol=1e-6)
  v = (w * 2).realize().requires_grad_(True)
  (v * v).sum().backward()
  np.testing.assert_allclose(v.grad.numpy(), 2 * v.numpy(), rtol=1e-6)


def test_equal_leaves_keep_their_own_gradients_and_buffers():
  # two Tensor.ones(3) are one graph node; requires_grad makes each a leaf with a buffer of its own
  a, b = Tensor.ones(3, device="PYTHON", requires_grad=True), Tensor.ones(3, device="PYTHON", requires_grad=True)
  (a * 2 + b * 5).sum().backward()
  np.testing.assert_allclose(a.grad.numpy(), [2.0] * 3)
  np.testing.assert_allclose(b.grad.numpy(), [5.0] * 3)
  m, v = Tensor.zeros(3, device="PYTHON").requires_grad_(False), Tensor.zeros(3, device="PYTHON").requires_grad_(False)
  Tensor.realize(m, v)
  m.assign(m + 1).realize()
  np.testing.assert_allclose(v.numpy(), [0.0] * 3)


def test_gradient_returns_lazy_tensors_and_leaves_grad_alone():
  x = Tensor([0.5, 1.5], device="PYTHON")
  y = Tensor([2.0, 4.0], device="PYTHON")
  dx, dy = (x * y).sum().gradient(x, y)
  assert x.grad is None and dx.uop.op is not Ops.BUFFER  # not run yet: a graph
  np.testing.assert_allclose(dx.numpy(), [2.0, 4.0])
  np.testing.assert_allclose(dy.numpy(), [0.5, 1.5])
  unused = Tensor([1.0], device="PYTHON")
  with pytest.raises(ValueError, match="not used"): (x * 2).sum().gradient(unused)
  (zero,) = (x * 2).sum().gradient(unused, materialize_grads=True)
  np.testing.assert_allclose(zero.numpy(), [0.0])
  with pytest.raises(TypeError, match="float"): Tensor([1, 2], device="PYTHON").sum().gradient(x)


def test_shared_node_sums_its_gradients():
  x = Tensor([1.0, 2.0], device="PYTHON", requires_grad=True)
  y = x.exp()
  (y * y + y).sum().backward()  # d/dx (e^2x + e^x)
  np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(2 * np.array([1.0, 2.0])) + np.exp([1.0, 2.0]), rtol=1e-5)


def test_gradient_flows_into_an_assigned_value():
  x = Tensor([1.0, -2.0, 3.0], device="PYTHON", requires_grad=True)
  a = Tensor.empty(3, device="PYTHON")
  a.assign(x * 2)                # a pending write into a's buffer: ASSIGN(buffer, x*2)
  (a * a).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [8.0, -16.0, 24.0])


def test_detach_stops_the_gradient():
  x = Tensor([1.0, 2.0, 3.0], device="PYTHON", requires_grad=True)
  d = x.detach()
  assert d.requires_grad is False
  (x * d).sum().backward()       # d is a constant: d/dx = d, not 2x
  np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0, 3.0])
  np.testing.assert_allclose((d + 1).numpy(), [2.0, 3.0, 4.0])  # the forward value is x's
  for i in range(2):  # realized as they are (the second time from the schedule cache): just the buffer
    np.testing.assert_allclose(Tensor([i, 1.0], device="PYTHON").detach().numpy(), [i, 1.0])


def test_contiguous_backward_changes_only_the_backward_graph():
  x = Tensor([1.0, 2.0, 3.0], device="PYTHON", requires_grad=True)
  y = (x * 2).contiguous_backward()
  np.testing.assert_allclose(y.numpy(), [2.0, 4.0, 6.0])
  (gx,) = (x * 2).contiguous_backward().sin().sum().gradient(x)
  assert any(n.op is Ops.CONTIGUOUS for n in gx.uop.toposort)
  np.testing.assert_allclose(gx.numpy(), 2 * np.cos([2.0, 4.0, 6.0]), rtol=1e-5)


def test_gradient_crosses_devices():
  x = Tensor([1.0, 2.0], device="PYTHON", requires_grad=True)
  (x.to("CPU") * 3).sum().backward()
  assert x.grad.device == "PYTHON"
  np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


def test_training_flag_is_one_switch():
  assert Tensor.training is False
  with Tensor.train():
    assert Tensor.training is True
    with Tensor.train(False): assert Tensor.training is False
    assert Tensor.training is True
  with Context(TRAINING=1): assert Tensor.training is True
  assert Tensor.training is False
  Tensor.training = True  # tinygrad scripts set it directly
  try:
    with Context(TRAINING=0): assert Tensor.training is False
  finally:
    Tensor.training = False
  with pytest.raises(KeyError, match="TRAINNG"): Context(TRAINNG=1)


def test_dropout_only_in_training():
  x = Tensor.ones(64, 64, device="PYTHON", requires_grad=True)
  np.testing.assert_array_equal(x.dropout(0.5).numpy(), np.ones((64, 64)))
  with Tensor.train():
    y = x.dropout(0.25)
    y.sum().backward()
  v, g = y.numpy(), x.grad.numpy()
  assert set(np.unique(v)) <= {0.0, np.float32(1 / 0.75)}
  assert 0.2 < (v == 0).mean() < 0.3
  np.testing.assert_array_equal(g, v)  # kept elements pass the scaled gradient, dropped ones none
  with pytest.raises(ValueError, match="1.5"): x.dropout(1.5)


def test_conv_weight_gradient_sums_channels_last_where_lanes_run_along_the_outputs(dev):
  # CONV's *_channels_last cases check both forms against torch: this pins which one each device takes
  from plugrad.dtype import dtypes
  from plugrad.registry import get_registry
  from plugrad.tensor import _channels_last_weight_gradient as channels_last
  caps = get_registry().device(dev).caps
  assert channels_last(dev, 8, 8, dtypes.float32) == (caps.launch_dims == 0 and caps.vector_ops)
  assert not channels_last(dev, 4, 8, dtypes.float32) and not channels_last(dev, 32, 1, dtypes.float32)  # too few lanes
  assert not channels_last(dev, 8, 8, dtypes.int32)


def test_a_target_reached_only_through_piecewise_constant_ops_has_zero_gradient():
  # floor, ceil, round, trunc and sign have derivative 0: .gradient raised "not used" (torch and tinygrad give zeros);
  # a detached or bool-valued path still raises
  x = Tensor([1.5, -2.3, 0.0], requires_grad=True)
  for f in (Tensor.floor, Tensor.ceil, Tensor.round, Tensor.trunc, Tensor.sign):
    assert (f(x) * 2).sum().gradient(x)[0].tolist() == [0.0, 0.0, 0.0]
  for dead in (x.detach() * 2, (x > 0).float()):
    with pytest.raises(ValueError, match="not used to compute"): dead.sum().gradient(x)
  y = Tensor([1.5, -2.3], requires_grad=True)
  (y.floor() * 2).sum().backward()
  assert y.grad.tolist() == [0.0, 0.0]
