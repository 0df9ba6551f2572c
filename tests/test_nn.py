"""plugrad.nn layers against torch.nn: each layer's state dict loads into the PyTorch layer of the same
name (so the attribute names line up), and both then compute the same outputs and gradients."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from plugrad import Context, Tensor, dtypes, nn
from plugrad.nn.state import get_state_dict

rng = np.random.default_rng(0)
# torch warns that its own padding="same" with an even kernel copies the input; that is torch's business
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same'")


def randn(*shape):
  return rng.standard_normal(shape).astype(np.float32)


def copy_to_torch(layer, tlayer):
  """Load our layer's state dict into the torch layer (strict: every key present on both sides)."""
  tsd = tlayer.state_dict()
  sd = {k: torch.tensor(v.numpy()).reshape(tsd[k].shape) for k, v in get_state_dict(layer).items()}
  tlayer.load_state_dict(sd, strict=True)
  return tlayer


def check(layer, tlayer, *inputs, rtol=1e-5, atol=1e-5):
  copy_to_torch(layer, tlayer)
  ours = layer(*[Tensor(x) for x in inputs])
  ref = tlayer(*[torch.tensor(x) for x in inputs])
  np.testing.assert_allclose(ours.numpy(), ref.detach().numpy(), rtol=rtol, atol=atol)


LAYERS = {
  "linear": (lambda: nn.Linear(5, 3), lambda: torch.nn.Linear(5, 3), [(2, 4, 5)]),
  "linear_nobias": (lambda: nn.Linear(5, 3, bias=False), lambda: torch.nn.Linear(5, 3, bias=False), [(4, 5)]),
  "conv2d": (lambda: nn.Conv2d(3, 4, 3, stride=2, padding=1), lambda: torch.nn.Conv2d(3, 4, 3, stride=2, padding=1),
             [(2, 3, 7, 6)]),
  "conv2d_groups_dilation": (lambda: nn.Conv2d(4, 6, (3, 2), dilation=(1, 2), groups=2, bias=False),
                             lambda: torch.nn.Conv2d(4, 6, (3, 2), dilation=(1, 2), groups=2, bias=False),
                             [(1, 4, 6, 7)]),
  "conv2d_same": (lambda: nn.Conv2d(2, 3, 4, padding="same"), lambda: torch.nn.Conv2d(2, 3, 4, padding="same"),
                  [(1, 2, 5, 6)]),
  "conv2d_same_dilated": (lambda: nn.Conv2d(2, 3, (3, 4), padding="same", dilation=(2, 1)),
                          lambda: torch.nn.Conv2d(2, 3, (3, 4), padding="same", dilation=(2, 1)), [(1, 2, 7, 8)]),
  "conv2d_valid": (lambda: nn.Conv2d(2, 3, 3, stride=2, padding="valid"),
                   lambda: torch.nn.Conv2d(2, 3, 3, stride=2, padding="valid"), [(1, 2, 7, 8)]),
  "conv1d": (lambda: nn.Conv1d(2, 4, 3, stride=2, padding=1), lambda: torch.nn.Conv1d(2, 4, 3, stride=2, padding=1),
             [(2, 2, 9)]),
  "conv_transpose2d": (lambda: nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1),
                       lambda: torch.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1),
                       [(2, 4, 3, 5)]),
  "conv_transpose1d": (lambda: nn.ConvTranspose1d(2, 4, 3, stride=3, groups=2),
                       lambda: torch.nn.ConvTranspose1d(2, 4, 3, stride=3, groups=2), [(1, 2, 4)]),
  "layernorm": (lambda: nn.LayerNorm((4, 5)), lambda: torch.nn.LayerNorm((4, 5)), [(3, 4, 5)]),
  "layernorm_noaffine": (lambda: nn.LayerNorm(5, elementwise_affine=False, eps=1e-3),
                         lambda: torch.nn.LayerNorm(5, elementwise_affine=False, eps=1e-3), [(3, 5)]),
  "groupnorm": (lambda: nn.GroupNorm(2, 6), lambda: torch.nn.GroupNorm(2, 6), [(2, 6, 3, 3)]),
  "instancenorm": (lambda: nn.InstanceNorm(3), lambda: torch.nn.InstanceNorm2d(3, affine=True), [(2, 3, 4, 5)]),
  "rmsnorm": (lambda: nn.RMSNorm(8), lambda: torch.nn.RMSNorm(8, eps=1e-6), [(3, 8)]),
  "lstmcell": (lambda: nn.LSTMCell(3, 5), lambda: torch.nn.LSTMCell(3, 5), [(4, 3)]),
}


@pytest.mark.parametrize("name", list(LAYERS))
def test_forward_matches_torch(name):
  make, make_torch, shapes = LAYERS[name]
  layer = make()
  # the default initialisation is random: give every tensor other values so the check means something
  for t in get_state_dict(layer).values(): t.assign(Tensor(randn(*t.shape))).realize()
  tlayer = make_torch()
  if name == "lstmcell":  # returns (h, c); check both, starting from a given state too
    copy_to_torch(layer, tlayer)
    x, h, c = randn(4, 3), randn(4, 5), randn(4, 5)
    for hc, thc in ((None, None), ((Tensor(h), Tensor(c)), (torch.tensor(h), torch.tensor(c)))):
      for ours, ref in zip(layer(Tensor(x), hc), tlayer(torch.tensor(x), thc)):
        np.testing.assert_allclose(ours.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    return
  check(layer, tlayer, *[randn(*s) for s in shapes])


# strided transposed convolutions run as one stride-1 convolution per output phase: every kind of phase (a stride past
# the kernel, output padding, groups, 1-D and 3-D) against torch, with both gradients
CONV_T = [((2, 8, 7, 9), (8, 4, 5, 5), dict(stride=3, padding=2)),
          ((2, 8, 7, 9), (8, 4, 5, 5), dict(stride=(3, 2), padding=(2, 0), output_padding=(1, 1))),
          ((2, 6, 5, 5), (6, 2, 2, 2), dict(stride=3, groups=3)),
          ((2, 4, 6), (4, 3, 3), dict(stride=2, padding=1, output_padding=1)),
          ((1, 2, 3, 3, 3), (2, 2, 2, 3, 2), dict(stride=2, padding=(0, 1, 0))),
          ((2, 4, 5, 5), (4, 3, 3, 3), dict(stride=2, padding=1, dilation=2))]  # dilated: the spread-out input


@pytest.mark.parametrize("xs,ws,kw", CONV_T, ids=[str(c[2]) for c in CONV_T])
def test_strided_conv_transpose_matches_torch(xs, ws, kw):
  rng = np.random.default_rng(0)
  xn, wn = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
  bn = rng.standard_normal(ws[1] * kw.get("groups", 1)).astype(np.float32)
  x, w, b = (Tensor(a).requires_grad_(True) for a in (xn, wn, bn))
  xt, wt, bt = (torch.from_numpy(a).requires_grad_(True) for a in (xn, wn, bn))
  out = x.conv_transpose2d(w, b, **kw)
  ref = {3: F.conv_transpose1d, 4: F.conv_transpose2d, 5: F.conv_transpose3d}[len(xs)](xt, wt, bt, **kw)
  (out * out).sum().backward()
  (ref * ref).sum().backward()
  for got, want in ((out, ref), (x.grad, xt.grad), (w.grad, wt.grad), (b.grad, bt.grad)):
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-3)


def test_layernorm2d_normalises_channels():
  layer = nn.LayerNorm2d(3)
  layer.weight.assign(Tensor(randn(3))).realize()
  x = randn(2, 3, 4, 5)
  tl = copy_to_torch(layer, torch.nn.LayerNorm(3))
  ref = tl(torch.tensor(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
  np.testing.assert_allclose(layer(Tensor(x)).numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_embedding_matches_torch():
  emb = nn.Embedding(10, 4)
  idx = np.array([[1, 2, 9], [0, 2, 2]], dtype=np.int32)
  temb = copy_to_torch(emb, torch.nn.Embedding(10, 4))
  np.testing.assert_array_equal(emb(Tensor(idx)).numpy(), temb(torch.tensor(idx, dtype=torch.long)).detach().numpy())
  assert get_state_dict(emb).keys() == {"weight"}  # the lookup's arange is not a weight


@pytest.mark.parametrize("segments", [True, "int64 keys", False])
@pytest.mark.parametrize("idx_dtype", ["int32", "int64"])
def test_embedding_gradient_matches_torch(segments, idx_dtype, dev, monkeypatch):
  # both ways to the weight's gradient: the running sums of the tokens ranked by index (_embedding_gradient; its
  # ranking keys in int32, or in int64 as for a table and batch too large for int32) and the generic rules' one-hot
  # sum; repeated indices (runs and scattered), every row but a few untouched, and indices outside the table (no row
  # picked in the forward, so no gradient, where torch would raise)
  monkeypatch.setattr(nn, "EMBEDDING_SEGMENT_MIN_WORK", 0 if segments else 1 << 62)
  if segments == "int64 keys": monkeypatch.setattr(nn, "EMBEDDING_KEY32_MAX", 0)
  vocab, width = 37, 40  # 8 x tokens^2 <= vocab x tokens x width: the segment sums may be taken
  idx = rng.integers(0, vocab, (3, 41))
  idx[0, :9], idx[1, ::4], idx[2, 3], idx[2, 7] = 5, vocab - 1, -1, vocab + 3
  emb = nn.Embedding(vocab, width)
  emb.weight.to_(dev)
  w0 = emb.weight.numpy()
  g = randn(3, 41, width)
  out = emb(Tensor(idx.astype(idx_dtype), device=dev))
  assert (out.uop.op.name == "CUSTOM_GRADIENT") == bool(segments)
  out.backward(Tensor(g, device=dev))
  valid = (idx >= 0) & (idx < vocab)
  tw = torch.tensor(w0, requires_grad=True)
  torch.nn.functional.embedding(torch.tensor(np.where(valid, idx, 0)), tw).backward(torch.tensor(g * valid[..., None]))
  np.testing.assert_allclose(emb.weight.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(out.numpy()[~valid], 0)


def test_a_large_tables_gradient_takes_segment_sums_and_a_small_ones_the_one_hot_sum():
  # the generic one-hot sum costs vocab x tokens x width: 64 x 512 x 64 is less than the segment sums' few extra
  # kernels, 10000 x 4096 x 256 (74 ms one-hot, 5 ms in segments) is not
  small, large = nn.Embedding(64, 64), nn.Embedding(10000, 256)
  assert small(Tensor.zeros(16, 32, dtype=dtypes.int32)).uop.op.name != "CUSTOM_GRADIENT"
  assert large(Tensor.zeros(16, 256, dtype=dtypes.int32)).uop.op.name == "CUSTOM_GRADIENT"


def test_a_tied_embeddings_gradient_sums_both_uses(monkeypatch):
  # a language model's head reusing the token table: the lookup's gradient and the matmul's add up
  monkeypatch.setattr(nn, "EMBEDDING_SEGMENT_MIN_WORK", 0)
  emb = nn.Embedding(50, 8)
  idx = rng.integers(0, 50, (4, 16))
  x = emb(Tensor(idx.astype(np.int32)))
  (x @ emb.weight.T).sum().backward()
  tw = torch.tensor(emb.weight.numpy(), requires_grad=True)
  tx = torch.nn.functional.embedding(torch.tensor(idx), tw)
  (tx @ tw.T).sum().backward()
  np.testing.assert_allclose(emb.weight.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,tcls", [((6, 3), torch.nn.BatchNorm1d), ((4, 3, 5), torch.nn.BatchNorm1d),
                                        ((2, 3, 4, 4), torch.nn.BatchNorm2d), ((2, 3, 2, 3, 2), torch.nn.BatchNorm3d)])
def test_batchnorm_train_and_eval_match_torch(shape, tcls):
  bn = nn.BatchNorm(3, momentum=0.2)
  bn.weight.assign(Tensor(randn(3))).realize()
  tbn = copy_to_torch(bn, tcls(3, momentum=0.2))
  assert set(get_state_dict(bn)) == {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}
  for _ in range(2):  # training: batch statistics, and the running ones move
    x = randn(*shape) * 3 + 1
    with Tensor.train(): ours = bn(Tensor(x)).numpy()
    np.testing.assert_allclose(ours, tbn.train()(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5)
  for k in ("running_mean", "running_var"):
    np.testing.assert_allclose(getattr(bn, k).numpy(), getattr(tbn, k).numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
  assert bn.num_batches_tracked.item() == 2 and bn.num_batches_tracked.shape == ()  # 0-d, as torch's and tinygrad's
  x = randn(*shape)  # evaluation: the running statistics
  np.testing.assert_allclose(bn(Tensor(x)).numpy(), tbn.eval()(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_batchnorm_training_mode_through_context_and_without_running_stats():
  bn = nn.BatchNorm2d(2, track_running_stats=False, affine=False)
  assert get_state_dict(bn) == {}  # as PyTorch's: no running statistics, no counter
  x = randn(3, 2, 2, 2) * 5 + 2
  out = bn(Tensor(x)).numpy()  # no running statistics: the batch's even in evaluation mode
  np.testing.assert_allclose(out.mean((0, 2, 3)), 0, atol=1e-5)
  bn2 = nn.BatchNorm2d(2)
  with Context(TRAINING=1): bn2(Tensor(x)).realize()
  np.testing.assert_allclose(bn2.running_mean.numpy(), 0.1 * x.mean((0, 2, 3)), rtol=1e-5)


def test_cnn_gradients_match_torch():
  """Conv, BatchNorm (training), pooling and Linear: the gradient of every weight equals torch's."""
  conv, bn, fc = nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Linear(4 * 3 * 3, 5)
  tconv = copy_to_torch(conv, torch.nn.Conv2d(2, 4, 3, padding=1))
  tbn, tfc = copy_to_torch(bn, torch.nn.BatchNorm2d(4)), copy_to_torch(fc, torch.nn.Linear(36, 5))
  x, y = randn(3, 2, 6, 6), np.array([0, 3, 4], dtype=np.int32)
  with Tensor.train():
    loss = fc(bn(conv(Tensor(x))).relu().max_pool2d(2).flatten(1)).sparse_categorical_crossentropy(Tensor(y))
    loss.backward()
  tloss = torch.nn.functional.cross_entropy(
    tfc(torch.nn.functional.max_pool2d(tbn(tconv(torch.tensor(x))).relu(), 2).flatten(1)), torch.tensor(y).long())
  tloss.backward()
  np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
  for ours, theirs in ((conv, tconv), (bn, tbn), (fc, tfc)):
    for k in ("weight", "bias"):
      g, tg = getattr(ours, k).grad.numpy(), getattr(theirs, k).grad.numpy()
      # the conv bias feeds a BatchNorm, which removes it: its gradient is 0 plus rounding noise (~1e-8)
      np.testing.assert_allclose(g, tg, rtol=1e-4, atol=max(1e-4 * np.abs(tg).max(), 1e-6), err_msg=k)


@pytest.mark.parametrize("make", [lambda: nn.BatchNorm2d(4), lambda: nn.LayerNorm(4), lambda: nn.GroupNorm(2, 4),
                                  lambda: nn.InstanceNorm(4), lambda: nn.RMSNorm(4), lambda: nn.LSTMCell(1, 1)],
                         ids=["batchnorm", "layernorm", "groupnorm", "instancenorm", "rmsnorm", "lstmcell"])
def test_layers_built_alike_own_their_weights(make):
  """Weights that start as a constant (ones, zeros) are still one buffer per layer: updating one
  layer leaves the other alone."""
  first, second = get_state_dict(make()), get_state_dict(make())
  Tensor.realize(*first.values(), *second.values())
  for k, t in first.items():
    before = second[k].numpy()
    t.assign(t + 5).realize()
    np.testing.assert_array_equal(second[k].numpy(), before, err_msg=k)


def test_default_initialisation():
  Tensor.manual_seed(1)
  lin = nn.Linear(100, 50)
  bound = 1 / math.sqrt(100)
  w = lin.weight.numpy()
  assert lin.weight.shape == (50, 100) and np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
  conv = nn.Conv2d(8, 16, 3, groups=2)
  assert conv.weight.shape == (16, 4, 3, 3) and conv.bias.shape == (16,)
  assert np.abs(conv.weight.numpy()).max() <= 1 / math.sqrt(8 * 9)
  assert nn.ConvTranspose2d(8, 16, 3, groups=2).weight.shape == (8, 8, 3, 3)
  bn = nn.BatchNorm2d(4)
  assert bn.weight.numpy().tolist() == [1] * 4 and bn.running_var.numpy().tolist() == [1] * 4
  assert bn.running_mean.requires_grad is False and bn.num_batches_tracked.dtype in (dtypes.int64, dtypes.int32)
  emb = nn.Embedding(30, 20)
  assert np.abs(emb.weight.numpy()).max() <= math.sqrt(6 / 50)
  cell = nn.LSTMCell(3, 4)
  assert cell.bias_ih.numpy().tolist() == [0] * 16 and np.abs(cell.weight_hh.numpy()).max() <= 0.5
  assert nn.LayerNorm(3, elementwise_affine=False).weight is None and nn.GroupNorm(1, 2, affine=False).bias is None


def test_nn_exposes_optim_and_state():
  assert nn.optim.Adam is not None and nn.state.safe_save is not None
  assert nn.BatchNorm2d is nn.BatchNorm and nn.BatchNorm3d is nn.BatchNorm


def test_bad_input_raises_at_the_call():
  with pytest.raises(ValueError, match=r"Linear\(5, 3\).*\(2, 4\)"): nn.Linear(5, 3)(Tensor(randn(2, 4)))
  with pytest.raises(ValueError, match="divisible by groups=2"): nn.Conv2d(3, 4, 3, groups=2)
  with pytest.raises(ValueError, match="stride 1"): nn.Conv2d(3, 4, 3, stride=2, padding="same")
  with pytest.raises(ValueError, match="same or valid, not 'full'"): nn.Conv2d(3, 4, 3, padding="full")
  with pytest.raises(ValueError, match="stride 1"): Tensor(randn(1, 3, 5, 5)).conv2d(Tensor(randn(2, 3, 3, 3)), stride=2,
                                                                                     padding="same")
  with pytest.raises(ValueError, match="divisible by num_groups"): nn.GroupNorm(4, 6)
  with pytest.raises(ValueError, match=r"\(N, 6, \.\.\.\)"): nn.GroupNorm(2, 6)(Tensor(randn(2, 4, 3)))
  with pytest.raises(ValueError, match=r"ending in \(4,\)"): nn.LayerNorm(4)(Tensor(randn(2, 5)))
  with pytest.raises(ValueError, match=r"\(N, 3, \.\.\.\)"): nn.BatchNorm(3)(Tensor(randn(2, 4)))
  with pytest.raises(ValueError, match=r"more than one value per channel.*\(1, 3\)"), Tensor.train():
    nn.BatchNorm(3)(Tensor(randn(1, 3)))
  with pytest.raises(TypeError, match="integer indices"): nn.Embedding(4, 2)(Tensor([0.5]))
  with pytest.raises(ValueError, match=r"\(batch, 3\)"): nn.LSTMCell(3, 2)(Tensor(randn(2, 4)))
