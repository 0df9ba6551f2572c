"""Losses, one_hot, normalisation math, initialisers and sequential, against torch."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from plugrad import Tensor, Variable, dtypes

# named `dev`, not `device`: the plugrad pytest plugin would run a `device` test on every device


def check_loss(dev, ours, theirs, logits, target, rtol=1e-5, atol=1e-6):
  """The loss and its gradient with respect to the input (summed first when unreduced) match torch."""
  x = Tensor(logits, device=dev, requires_grad=True)
  tx = torch.tensor(logits, requires_grad=True)
  loss, tloss = ours(x, Tensor(target, device=dev)), theirs(tx, torch.tensor(target))
  assert loss.shape == tuple(tloss.shape)
  (loss.sum() if loss.ndim else loss).backward()
  (tloss.sum() if tloss.ndim else tloss).backward()
  Tensor.realize(loss, x.grad)
  np.testing.assert_allclose(loss.numpy(), tloss.detach().numpy(), rtol=rtol, atol=atol)
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=rtol, atol=atol)


rng = np.random.default_rng(0)
LOGITS = rng.standard_normal((6, 5)).astype(np.float32) * 2
LABELS = np.array([0, 4, 2, 2, 1, 3])
SEQ_LOGITS = rng.standard_normal((2, 5, 3)).astype(np.float32)   # (N, C, d) for torch's layout
SEQ_LABELS = np.array([[0, 4, 1], [2, 2, 3]])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_sparse_categorical_crossentropy(dev, reduction, smoothing):
  check_loss(dev, lambda x, y: x.sparse_categorical_crossentropy(y, label_smoothing=smoothing, reduction=reduction),
             lambda x, y: F.cross_entropy(x, y, label_smoothing=smoothing, reduction=reduction), LOGITS, LABELS)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_sparse_categorical_crossentropy_ignore_index(dev, reduction):
  # the ignored rows add nothing and the mean divides by the rows kept
  check_loss(dev, lambda x, y: x.sparse_categorical_crossentropy(y, ignore_index=2, label_smoothing=0.2,
                                                                 reduction=reduction),
             lambda x, y: F.cross_entropy(x, y, ignore_index=2, label_smoothing=0.2, reduction=reduction),
             LOGITS, LABELS)


@pytest.mark.parametrize("ignore_index", [-1, 2])
def test_cross_entropy_with_masked_classes(dev, ignore_index):
  """A class masked with a -inf logit (vocabulary or action masks): torch's loss and gradient are finite, and so
  are ours (a one-hot product or a 0-weighted smoothing term over the classes would make them NaN)."""
  logits = LOGITS.copy()
  logits[np.arange(6), (LABELS + 1) % 5] = -np.inf  # never a target's own class
  check_loss(dev, lambda x, y: x.sparse_categorical_crossentropy(y, ignore_index=ignore_index),
             lambda x, y: F.cross_entropy(x, y, ignore_index=ignore_index), logits, LABELS)
  check_loss(dev, lambda x, y: x.cross_entropy(y), lambda x, y: F.cross_entropy(x, y), logits, LABELS)


def test_sparse_categorical_crossentropy_of_a_variable_batch():
  """A batch whose size is a bound Variable: the mean divides by the size it is bound to."""
  n = Variable("n", 1, 6).bind(4)
  loss = Tensor(LOGITS)[:n].sparse_categorical_crossentropy(Tensor(LABELS.astype(np.int32))[:n])
  assert loss.item() == pytest.approx(F.cross_entropy(torch.tensor(LOGITS[:4]), torch.tensor(LABELS[:4])).item(), rel=1e-5)


def test_sparse_categorical_crossentropy_classes_last():
  # tinygrad's layout: classes on the last axis, any leading axes
  logits = np.moveaxis(SEQ_LOGITS, 1, -1).copy()
  check_loss("PYTHON", lambda x, y: x.sparse_categorical_crossentropy(y),
             lambda x, y: F.cross_entropy(x.movedim(-1, 1), y), logits, SEQ_LABELS)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_indices_with_spatial_axes(dev, reduction):
  check_loss(dev, lambda x, y: x.cross_entropy(y, reduction=reduction, label_smoothing=0.1),
             lambda x, y: F.cross_entropy(x, y, reduction=reduction, label_smoothing=0.1), SEQ_LOGITS, SEQ_LABELS)


def test_cross_entropy_probabilities_and_1d():
  probs = rng.dirichlet(np.ones(5), 6).astype(np.float32)
  check_loss("PYTHON", lambda x, y: x.cross_entropy(y), lambda x, y: F.cross_entropy(x, y), LOGITS, probs)
  check_loss("PYTHON", lambda x, y: x.cross_entropy(y), lambda x, y: F.cross_entropy(x, y), LOGITS[0], np.array(3))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_weight_and_ignore_index(dev, reduction):
  w = np.array([0.5, 1.0, 2.0, 1.5, 0.25], np.float32)
  check_loss(dev, lambda x, y: x.log_softmax(1).nll_loss(y, weight=Tensor(w, device=dev), ignore_index=4,
                                                         reduction=reduction),
             lambda x, y: F.nll_loss(x.log_softmax(1), y, weight=torch.tensor(w), ignore_index=4, reduction=reduction),
             SEQ_LOGITS, SEQ_LABELS)


def test_nll_loss_with_every_target_ignored_is_nan_with_zero_gradients(dev):
  # torch's: 0 / 0 for the mean, 0 for the gradient (the weights multiplied in made it 0 * inf, NaN, into the model)
  check_loss(dev, lambda x, y: x.log_softmax(1).nll_loss(y, ignore_index=2),
             lambda x, y: F.nll_loss(x.log_softmax(1), y, ignore_index=2), LOGITS[:2], np.array([2, 2]))


def test_nll_loss_plain():
  check_loss("PYTHON", lambda x, y: x.nll_loss(y), lambda x, y: F.nll_loss(x, y), LOGITS, LABELS)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_crossentropy(dev, reduction):
  p = np.array([[0.1, 0.5, 0.9], [0.3, 1e-4, 0.999]], np.float32)
  y = np.array([[0.0, 1.0, 1.0], [0.5, 0.0, 1.0]], np.float32)
  check_loss(dev, lambda x, t: x.binary_crossentropy(t, reduction=reduction),
             lambda x, t: F.binary_cross_entropy(x, t, reduction=reduction), p, y)


def test_binary_crossentropy_at_zero_and_one():
  # torch clamps each log at -100; the gradient there stays finite (the clamped log is a constant)
  p = Tensor([0.0, 1.0, 0.0, 1.0], device="PYTHON", requires_grad=True)
  y = [1.0, 0.0, 0.0, 1.0]
  loss = p.binary_crossentropy(Tensor(y, device="PYTHON"), reduction="none")
  loss.sum().backward()
  ref = F.binary_cross_entropy(torch.tensor([0.0, 1.0, 0.0, 1.0]), torch.tensor(y), reduction="none")
  np.testing.assert_allclose(loss.numpy(), ref.numpy())
  assert np.isfinite(p.grad.numpy()).all()


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_binary_crossentropy_logits(dev, reduction):
  logits = np.array([[-120.0, -3.0, 0.0], [0.5, 4.0, 150.0]], np.float32)  # large logits stay finite
  y = np.array([[0.0, 1.0, 1.0], [0.25, 0.0, 1.0]], np.float32)
  check_loss(dev, lambda x, t: x.binary_crossentropy_logits(t, reduction=reduction),
             lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction=reduction), logits, y)
  pw = np.array([2.0, 0.5, 1.0], np.float32)
  check_loss(dev, lambda x, t: x.binary_crossentropy_logits(t, reduction=reduction, pos_weight=Tensor(pw, device=dev)),
             lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction=reduction, pos_weight=torch.tensor(pw)),
             logits, y)


def test_loss_arguments_are_checked():
  x, y = Tensor(LOGITS, device="PYTHON"), Tensor(LABELS, device="PYTHON")
  with pytest.raises(ValueError, match="reduction"): x.sparse_categorical_crossentropy(y, reduction="avg")
  with pytest.raises(ValueError, match="label_smoothing"): x.cross_entropy(y, label_smoothing=1.5)
  with pytest.raises(ValueError, match=r"\(5,\)"): x.sparse_categorical_crossentropy(y[:5])
  with pytest.raises(TypeError, match="integer"): x.nll_loss(y.float())
  with pytest.raises(ValueError, match="weight"): x.nll_loss(y, weight=Tensor.ones(4, device="PYTHON"))


def test_one_hot():
  y = Tensor([[0, 2], [1, 3]], device="PYTHON")
  np.testing.assert_array_equal(y.one_hot(4).numpy(), F.one_hot(torch.tensor([[0, 2], [1, 3]]), 4).numpy())
  assert y.one_hot().shape == (2, 2, 4) and y.one_hot(5).dtype == dtypes.int32
  with pytest.raises(TypeError, match="integer"): Tensor([0.0, 1.0], device="PYTHON").one_hot(2)


def test_layernorm_and_batchnorm_math():
  x = rng.standard_normal((4, 3, 5)).astype(np.float32)
  np.testing.assert_allclose(Tensor(x, device="PYTHON").layernorm().numpy(),
                             F.layer_norm(torch.tensor(x), (5,)).numpy(), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(Tensor(x, device="PYTHON").layernorm((1, 2), eps=1e-3).numpy(),
                             F.layer_norm(torch.tensor(x), (3, 5), eps=1e-3).numpy(), rtol=1e-5, atol=1e-5)
  mean, var, w, b = (rng.uniform(0.5, 1.5, 3).astype(np.float32) for _ in range(4))
  t = [Tensor(v, device="PYTHON") for v in (w, b, mean)]
  out = Tensor(x, device="PYTHON").batchnorm(t[0], t[1], t[2], Tensor(1 / np.sqrt(var + 1e-5), device="PYTHON"))
  ref = F.batch_norm(torch.tensor(x), torch.tensor(mean), torch.tensor(var), torch.tensor(w), torch.tensor(b), eps=1e-5)
  np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


def test_initialisers():
  Tensor.manual_seed(3)
  shape = (64, 32, 3, 3)
  fan_in = 32 * 9
  cases = {
    "glorot_uniform": (Tensor.glorot_uniform(*shape, device="PYTHON"), math.sqrt(6 / (fan_in + 64))),
    "kaiming_uniform": (Tensor.kaiming_uniform(*shape, a=math.sqrt(5), device="PYTHON"), math.sqrt(6 / (6 * fan_in))),
    "scaled_uniform": (Tensor.scaled_uniform(*shape, device="PYTHON"), (64 * fan_in) ** -0.5),
  }
  for name, (t, bound) in cases.items():
    v = t.numpy()
    assert t.shape == shape and t.dtype == dtypes.float32, name
    assert np.abs(v).max() <= bound and np.abs(v).max() > 0.95 * bound, name
    np.testing.assert_allclose(v.std(), bound / math.sqrt(3), rtol=0.05, err_msg=name)  # U(-b, b) has std b/sqrt(3)
  v = Tensor.kaiming_normal(*shape, a=0.0, device="PYTHON", requires_grad=True)
  assert v.requires_grad is True
  np.testing.assert_allclose(v.numpy().std(), math.sqrt(2 / fan_in), rtol=0.05)
  with pytest.raises(ValueError, match="dimension"): Tensor.glorot_uniform()


def test_sequential_and_logsigmoid():
  x = Tensor([-200.0, -1.0, 0.0, 3.0], device="PYTHON", requires_grad=True)
  y = x.sequential([lambda t: t * 2, Tensor.logsigmoid])
  y.sum().backward()
  tx = torch.tensor([-200.0, -1.0, 0.0, 3.0], requires_grad=True)
  ty = F.logsigmoid(tx * 2)
  ty.sum().backward()
  np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-6)
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
