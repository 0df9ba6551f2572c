"""nn.optim: every optimizer takes the same 20 steps as PyTorch's (or, where PyTorch has none, as
its paper's rule written in torch) on a small two-layer network; plus argument checks."""
import numpy as np
import pytest
import torch

from plugrad import Tensor, TinyJit, nn
from plugrad.nn import optim
from plugrad.nn.state import get_parameters
from plugrad.tensor import _views_a_buffer

STEPS = 20
rng = np.random.default_rng(0)
X = rng.standard_normal((8, 5)).astype(np.float32)
INIT = {k: (rng.standard_normal(shape) * scale).astype(np.float32)
        for k, shape, scale in [("w1", (6, 5), 0.5), ("b1", (6,), 0.1), ("w2", (3, 6), 0.5), ("b2", (3,), 0.1)]}


def loss_of(p, x):
  """The same loss in plugrad and torch: a tanh MLP's squared output, averaged."""
  h = (x @ p["w1"].T + p["b1"]).tanh()
  return ((h @ p["w2"].T + p["b2"]) ** 2).mean()


def train_plugrad(make_opt):
  params = {k: Tensor(v.copy(), requires_grad=True) for k, v in INIT.items()}
  opt = make_opt(params)
  x = Tensor(X)
  with Tensor.train():
    for _ in range(STEPS):
      opt.zero_grad()
      loss_of(params, x).backward()
      opt.step()
  return {k: v.numpy() for k, v in params.items()}


def train_torch(make_opt):
  params = {k: torch.tensor(v, requires_grad=True) for k, v in INIT.items()}
  opt = make_opt(params)
  x = torch.tensor(X)
  for _ in range(STEPS):
    opt.zero_grad()
    loss_of(params, x).backward()
    opt.step()
  return {k: v.detach().numpy() for k, v in params.items()}


class TorchLAMB(torch.optim.Optimizer):
  """LAMB as in its paper (and tinygrad): Adam's step plus weight decay, times |w| / |step|."""
  def __init__(self, params, lr, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.0):
    super().__init__(params, dict(lr=lr, b1=b1, b2=b2, eps=eps, wd=weight_decay))

  @torch.no_grad()
  def step(self):
    for g in self.param_groups:
      for p in g["params"]:
        s = self.state[p]
        if not s: s.update(t=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
        s["t"] += 1
        s["m"].mul_(g["b1"]).add_(p.grad, alpha=1 - g["b1"])
        s["v"].mul_(g["b2"]).add_(p.grad * p.grad, alpha=1 - g["b2"])
        m_hat, v_hat = s["m"] / (1 - g["b1"] ** s["t"]), s["v"] / (1 - g["b2"] ** s["t"])
        up = m_hat / (v_hat.sqrt() + g["eps"]) + g["wd"] * p
        r1, r2 = p.norm(), up.norm()
        ratio = (r1 / r2) if r1 > 0 and r2 > 0 else 1.0
        p.sub_(g["lr"] * ratio * up)


class TorchLARS(torch.optim.Optimizer):
  """LARS as in its paper (and tinygrad): g += wd*w; b = m*b + lr * tcoef*|w|/(|g|+wd*|w|) * g; w -= b."""
  def __init__(self, params, lr, momentum=0.9, weight_decay=1e-4, tcoef=0.001):
    super().__init__(params, dict(lr=lr, momentum=momentum, wd=weight_decay, tcoef=tcoef))

  @torch.no_grad()
  def step(self):
    for g in self.param_groups:
      for p in g["params"]:
        r1, r2 = p.norm(), p.grad.norm()
        ratio = g["tcoef"] * r1 / (r2 + g["wd"] * r1) if r1 > 0 and r2 > 0 else 1.0
        d = (p.grad + g["wd"] * p) * ratio * g["lr"]
        s = self.state[p]
        s["b"] = g["momentum"] * s.get("b", torch.zeros_like(p)) + d
        p.sub_(s["b"])


def _ns32(grad, coefficients, steps, eps):
  """PyTorch's Newton-Schulz iteration in float32 (torch runs it in bfloat16, plugrad in float32)."""
  a, b, c = coefficients
  x = grad.float()
  if grad.size(0) > grad.size(1): x = x.T
  x = x / x.norm().clamp(min=eps)
  for _ in range(steps):
    gram = x @ x.T
    x = a * x + (b * gram + c * gram @ gram) @ x
  return x.T if grad.size(0) > grad.size(1) else x


MATRICES, VECTORS = ("w1", "w2"), ("b1", "b2")
CASES = {
  "sgd": (lambda p: optim.SGD(list(p.values()), lr=0.1), lambda p: torch.optim.SGD(list(p.values()), lr=0.1)),
  "sgd_momentum": (lambda p: optim.SGD(list(p.values()), lr=0.05, momentum=0.9),
                   lambda p: torch.optim.SGD(list(p.values()), lr=0.05, momentum=0.9)),
  "sgd_nesterov_wd": (lambda p: optim.SGD(list(p.values()), lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01),
                      lambda p: torch.optim.SGD(list(p.values()), lr=0.05, momentum=0.8, nesterov=True,
                                                weight_decay=0.01)),
  "adam": (lambda p: optim.Adam(list(p.values()), lr=0.01), lambda p: torch.optim.Adam(list(p.values()), lr=0.01)),
  "adamw": (lambda p: optim.AdamW(list(p.values()), lr=0.01, b1=0.8, weight_decay=0.1),
            lambda p: torch.optim.AdamW(list(p.values()), lr=0.01, betas=(0.8, 0.999), weight_decay=0.1)),
  "lamb": (lambda p: optim.LAMB(list(p.values()), lr=0.01, weight_decay=0.01),
           lambda p: TorchLAMB(list(p.values()), lr=0.01, weight_decay=0.01)),
  "lars": (lambda p: optim.LARS(list(p.values()), lr=0.5), lambda p: TorchLARS(list(p.values()), lr=0.5)),
}


def _close(ours, ref, atol=2e-5):
  for k in ref: np.testing.assert_allclose(ours[k], ref[k], rtol=1e-4, atol=atol, err_msg=k)


@pytest.mark.parametrize("name", list(CASES))
def test_matches_torch_for_20_steps(name):
  ours, ref = CASES[name]
  _close(train_plugrad(ours), train_torch(ref))


def test_muon_with_adamw_matches_torch(monkeypatch):
  """Muon for the matrices, AdamW for the biases, stepped as one group."""
  monkeypatch.setattr(torch.optim._muon, "_zeropower_via_newtonschulz", _ns32)
  ours = train_plugrad(lambda p: optim.OptimizerGroup(optim.Muon([p[k] for k in MATRICES], lr=0.02, weight_decay=0.1),
                                                      optim.AdamW([p[k] for k in VECTORS], lr=0.01)))

  class Both:
    def __init__(self, p):
      self.opts = [torch.optim.Muon([p[k] for k in MATRICES], lr=0.02, weight_decay=0.1),
                   torch.optim.AdamW([p[k] for k in VECTORS], lr=0.01)]
    def zero_grad(self): [o.zero_grad() for o in self.opts]
    def step(self): [o.step() for o in self.opts]
  _close(ours, train_torch(Both), atol=1e-4)


@pytest.fixture
def fuse_optim(monkeypatch):
  """The registry's config with FUSE_OPTIM=1 for the test."""
  from plugrad.registry import get_registry
  registry = get_registry()
  monkeypatch.setattr(registry, "config", registry.config.replace(fuse_optim=True))


@pytest.mark.parametrize("name", ["sgd", "sgd_momentum", "sgd_nesterov_wd", "adam", "adamw"])
def test_fused_steps_match_torch(name, fuse_optim):
  # FUSE_OPTIM=1 (tinygrad's variable) makes fused the default: every parameter in one flat vector, one state each
  ours, ref = CASES[name]
  _close(train_plugrad(ours), train_torch(ref))


def test_fused_lamb_takes_the_whole_models_trust_ratio():
  ours = train_plugrad(lambda p: optim.LAMB(list(p.values()), lr=0.01, weight_decay=0.01, fused=True))
  keys, x = list(INIT), torch.tensor(X)
  flat = torch.tensor(np.concatenate([INIT[k].ravel() for k in keys]), requires_grad=True)  # torch: one parameter
  ends = np.cumsum([INIT[k].size for k in keys])
  def params(): return {k: flat[e - INIT[k].size:e].reshape(INIT[k].shape) for k, e in zip(keys, ends)}
  opt = TorchLAMB([flat], lr=0.01, weight_decay=0.01)
  for _ in range(STEPS):
    opt.zero_grad()
    loss_of(params(), x).backward()
    opt.step()
  _close(ours, {k: v.detach().numpy() for k, v in params().items()})


def test_fused_state_is_one_flat_tensor_and_every_parameter_needs_a_gradient():
  w, b, unused = Tensor.ones(3, 4, requires_grad=True), Tensor.ones(4, requires_grad=True), Tensor.ones(2, requires_grad=True)
  opt = optim.Adam([w, b, unused], fused=True)
  assert opt.fused and [m.shape for m in opt.m] == [(18,)] and [v.shape for v in opt.v] == [(18,)]
  with Tensor.train():
    ((Tensor.ones(2, 3) @ w + b) ** 2).sum().backward()
    with pytest.raises(RuntimeError, match=r"shape \(2,\) has no gradient.*fused=False"): opt.step()
  with pytest.raises(ValueError, match="Muon orthogonalises"): optim.Muon([w], fused=True)
  with pytest.raises(ValueError, match="one vector on one device"):
    optim.SGD([Tensor.ones(2, requires_grad=True, device="PYTHON"), Tensor.ones(2, requires_grad=True)], fused=True)


def test_fuse_optim_leaves_muon_and_sharded_parameters_unfused(fuse_optim):
  assert not optim.Muon([Tensor.ones(3, 4, requires_grad=True)]).fused
  assert optim.AdamW([Tensor.ones(3, 4, requires_grad=True)]).fused
  sharded = Tensor.ones(4, 2, requires_grad=True).shard(("CPU:0", "CPU:1"), axis=0).requires_grad_(True)
  assert not optim.AdamW([sharded]).fused


def test_step_is_one_realize(monkeypatch):
  params = {k: Tensor(v.copy(), requires_grad=True) for k, v in INIT.items()}
  opt = optim.Adam(list(params.values()), lr=0.01)
  calls = []
  real = Tensor.realize
  monkeypatch.setattr(Tensor, "realize", lambda self, *o: calls.append(1 + len(o)) or real(self, *o))
  with Tensor.train():
    loss_of(params, Tensor(X)).backward()
    opt.step()
  # all 4 parameters, 4+4 moments, 2 bias corrections and the 4 gradients in one realize (the loss is gone)
  assert len(calls) == 1
  assert calls[0] == 4 + 8 + 2 + 4


def test_lr_is_a_tensor_that_can_change():
  p = Tensor([1.0, 2.0], requires_grad=True)
  opt = optim.SGD([p], lr=0.5)
  with Tensor.train():
    for lr in (0.5, 0.0, 0.25):
      opt.lr.assign([lr])
      opt.zero_grad()
      (p * p).sum().backward()
      before = p.numpy()
      opt.step()
      np.testing.assert_allclose(p.numpy(), before - lr * 2 * before, rtol=1e-6)


def test_frozen_and_gradless_parameters():
  a, b = Tensor([1.0, 2.0]), Tensor([3.0], requires_grad=False)
  c = Tensor([5.0])  # in the optimizer but not in the loss: no gradient, so left alone as PyTorch does
  opt = optim.SGD([a, b, c], lr=0.1)
  assert opt.params == [a, c] and opt.buffers == [b] and a.requires_grad is True
  with Tensor.train():
    (a * b).sum().backward()
    opt.step()
  np.testing.assert_allclose(a.numpy(), [1 - 0.3, 2 - 0.3], rtol=1e-6)
  assert b.numpy().tolist() == [3.0] and c.numpy().tolist() == [5.0]


def test_bad_arguments():
  p = Tensor([1.0])
  with pytest.raises(ValueError, match="learning rate"): optim.SGD([p], lr=-0.1)
  with pytest.raises(ValueError, match="learning rate"): optim.Adam([p], lr=float("nan"))
  with pytest.raises(ValueError, match="no parameters"): optim.AdamW([])
  with pytest.raises(ValueError, match="no parameters"): optim.SGD([Tensor([1.0], requires_grad=False)])
  with pytest.raises(TypeError, match="list of tensors"): optim.SGD(p)
  with pytest.raises(ValueError, match="momentum"): optim.SGD([p], momentum=-1)
  with pytest.raises(ValueError, match="nesterov"): optim.SGD([p], nesterov=True)
  with pytest.raises(ValueError, match="b1 and b2"): optim.Adam([p], b1=1.0)
  with pytest.raises(ValueError, match=r"shape \(1,\)"): optim.Muon([p])


def test_step_needs_training_mode():
  p = Tensor([1.0], requires_grad=True)
  opt = optim.SGD([p])
  (p * 2).sum().backward()
  with pytest.raises(RuntimeError, match="training"): opt.step()


def test_training_loop_with_batchnorm_eager_and_under_tinyjit():
  """tinygrad's loop (backward, step, then read the loss) with BatchNorm's running statistics among the
  optimizer's buffers; under TinyJit the replayed steps update the same state in place, step for step."""
  def run(use_jit):
    Tensor.manual_seed(0)
    l1, bn, l2 = nn.Linear(4, 8), nn.BatchNorm(8), nn.Linear(8, 3)
    opt = optim.Adam(get_parameters([l1, bn, l2]), lr=0.01)

    def step(x, y):
      with Tensor.train():
        opt.zero_grad()
        loss = l2(bn(l1(x)).relu()).sparse_categorical_crossentropy(y).backward()
        opt.step()
      return loss
    f = TinyJit(step) if use_jit else step
    data = np.random.default_rng(1)
    losses = [f(Tensor(data.standard_normal((16, 4)).astype(np.float32)),
                Tensor(data.integers(0, 3, 16).astype(np.int32))).item() for _ in range(5)]
    return losses, l1.weight.numpy(), bn.running_var.numpy(), bn.num_batches_tracked.item()
  eager, jitted = run(False), run(True)
  assert eager[3] == jitted[3] == 5
  for ours, ref in zip(jitted[:3], eager[:3]): np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


def test_parameters_still_waiting_for_a_value_are_updated_in_place():
  """A parameter that is a pending constant (Tensor.zeros(..., requires_grad=True)) takes its updates
  in its own buffer, and the loss built before the step can still be read after it."""
  w = Tensor.zeros(4, requires_grad=True)
  opt = optim.SGD([w], lr=0.5)
  x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
  with Tensor.train():
    for _ in range(2):
      opt.zero_grad()
      loss = ((Tensor(x) * w).sum(1) - 1).square().mean()
      loss.backward()
      opt.step()
      assert loss.item() > 0
  tw = torch.zeros(4, requires_grad=True)
  topt = torch.optim.SGD([tw], lr=0.5)
  for _ in range(2):
    topt.zero_grad()
    ((torch.tensor(x) * tw).sum(1) - 1).square().mean().backward()
    topt.step()
  np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-6)


def _three_steps(lib, optimized: tuple[str, ...], requires_grad: bool | None = True):
  """Three SGD steps of `loss_of` in plugrad or torch, only the `optimized` parameters in the optimizer (the
  others a frozen layer), on a fixed input x. The frozen parameters and x have `requires_grad` (in torch: True).
  Returns the parameters, x, the last loss and the last step's network output, held across the step."""
  if lib == "torch":
    params, x = {k: torch.tensor(v, requires_grad=True) for k, v in INIT.items()}, torch.tensor(X, requires_grad=True)
    opt = torch.optim.SGD([params[k] for k in optimized], lr=0.1)
  else:
    params, x = {k: Tensor(v.copy(), requires_grad=requires_grad) for k, v in INIT.items()}, Tensor(X, requires_grad=requires_grad)
    opt = optim.SGD([params[k] for k in optimized], lr=0.1)
  with Tensor.train():
    for _ in range(3):
      opt.zero_grad()
      out = (x @ params["w1"].T + params["b1"]).tanh() @ params["w2"].T + params["b2"]
      loss = (out ** 2).mean()  # loss_of
      loss.backward()
      opt.step()
  return params, x, loss, out


def test_loss_and_gradients_read_after_the_step_are_those_before_it():
  """`opt.step(); loss.item()`: the step overwrites the parameters in place, and the loss, the output it was
  computed from and the gradients read afterwards are the values backward saw (PyTorch's), not the updated
  model's."""
  ours, _, loss, out = _three_steps("plugrad", tuple(INIT), requires_grad=None)
  ref, _, ref_loss, ref_out = _three_steps("torch", tuple(INIT))
  assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-5)
  np.testing.assert_allclose(out.numpy(), ref_out.detach().numpy(), rtol=1e-5, atol=1e-6)
  for k, p in ours.items():
    np.testing.assert_allclose(p.grad.numpy(), ref[k].grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(p.numpy(), ref[k].detach().numpy(), rtol=1e-5, atol=1e-6)


def test_gradients_accumulated_outside_the_optimizer_are_computed_at_each_step():
  """A frozen layer's weights and a fixed input with requires_grad=True get `.grad` added at every backward and
  are never zeroed: each step computes them, so they are PyTorch's accumulated gradients (each step's taken at
  that step's parameters), in a buffer."""
  ours, x, _, _ = _three_steps("plugrad", ("w2", "b2"))
  ref, tx, _, _ = _three_steps("torch", ("w2", "b2"))
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6)
  for k in ("w1", "b1"):
    np.testing.assert_allclose(ours[k].grad.numpy(), ref[k].grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(ours[k].numpy(), INIT[k])  # frozen: never updated


def test_a_step_clears_the_gradients_nobody_asked_for():
  """requires_grad None (tinygrad's default): a fixed input's or a frozen layer's gradient is a graph until it
  is read, and a step clears those still graphs (computing them would be a backward pass nobody asked for;
  kept, they would read the updated parameters and grow with every step). Read before the step, it is right."""
  params, x = {k: Tensor(v.copy()) for k, v in INIT.items()}, Tensor(X)
  opt = optim.SGD([params["w2"], params["b2"]], lr=0.1)
  tparams, tx = {k: torch.tensor(v, requires_grad=True) for k, v in INIT.items()}, torch.tensor(X, requires_grad=True)
  loss_of(tparams, tx).backward()
  with Tensor.train():
    for step in range(3):
      opt.zero_grad()
      loss_of(params, x).backward()
      if step == 0: np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6)
      opt.step()
      assert params["w2"].grad is not None and _views_a_buffer(params["w2"].grad.uop)  # computed with the step
      assert params["w1"].grad is None and params["b1"].grad is None
      assert (x.grad is None) == (step > 0)  # read before the first step: a buffer, which the step keeps


def test_a_sharded_gradient_read_before_the_step_is_kept():
  """The same rules on two devices: a sharded input's gradient read before the step stays (each shard a
  buffer), and the loss read after the step is the one from before the update."""
  devices = ("CPU:0", "CPU:1")
  x = Tensor(X).shard(devices, axis=0).realize()
  w = Tensor(INIT["w2"].T.copy(), requires_grad=True).shard(devices).realize()
  opt = optim.SGD([w], lr=0.1)
  with Tensor.train():
    loss = ((x @ w[:5]) ** 2).sum()
    loss.backward()
    x_grad = x.grad.numpy()
    opt.step()
  w0 = INIT["w2"].T[:5]
  assert loss.item() == pytest.approx(float(((X @ w0) ** 2).sum()), rel=1e-5)
  np.testing.assert_allclose(x_grad, 2 * (X @ w0) @ w0.T, rtol=1e-5, atol=1e-5)
  assert x.grad is not None
  np.testing.assert_allclose(x.grad.numpy(), x_grad)


def test_is_param_is_tinygrads_requires_grad():
  # tinygrad 0.14 marks what an optimizer leaves alone with is_param_(False) (a BatchNorm's running statistics)
  w, stat = Tensor([1.0, 2.0]), Tensor([0.0]).is_param_(False)
  assert w.is_param and not stat.is_param and stat.requires_grad is False
  opt = optim.SGD([w, stat], lr=0.5)
  assert opt.params == [w] and opt.buffers == [stat]
  w.is_param = False
  assert w.requires_grad is False
