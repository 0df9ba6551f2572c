"""Linear algebra of tinygrad 0.14's Tensor API: einsum, scaled_dot_product_attention, qr and svd, compared
with torch on PYTHON and CPU (svd, a few hundred small kernels, on CPU only)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from plugrad import Tensor, dtypes
from plugrad.testing import assert_close as same


def rand(*shape, seed=0):
  return np.random.default_rng(seed).uniform(-2, 2, size=shape).astype(np.float32)


# ------------------------------------------------------------------------------------------------ linear algebra

EINSUMS = [
  ("ij,jk->ik", [(3, 4), (4, 2)]), ("ij,jk", [(3, 4), (4, 2)]), ("ii->i", [(3, 3)]), ("ii", [(3, 3)]),
  ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("i,j->ij", [(3,), (4,)]), ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
  ("ij->ji", [(2, 3)]), ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]), ("i,i->", [(0,), (0,)]),
  ("iij->j", [(2, 2, 3)]),
]


@pytest.mark.parametrize("formula,shapes", EINSUMS, ids=[e[0] for e in EINSUMS])
def test_einsum(formula, shapes, dev):
  arrays = [rand(*s, seed=i) for i, s in enumerate(shapes)]
  want = torch.einsum(formula, *[torch.from_numpy(a) for a in arrays])
  same(Tensor.einsum(formula, *[Tensor(a, device=dev) for a in arrays]), want, atol=1e-4)
  same(Tensor.einsum(formula, [Tensor(a, device=dev) for a in arrays]), want, atol=1e-4)


def test_integer_einsum_and_conv2d_keep_their_dtype_as_matmul(dev):
  # they summed into int64 (sum's promotion) where matmul and torch's einsum keep int8 and wrap: 100 + 100 was 200
  a, b = np.array([[100, 100]], np.int8), np.ones((2, 1), np.int8)
  want = torch.einsum("ij,jk->ik", torch.from_numpy(a), torch.from_numpy(b))
  got = Tensor.einsum("ij,jk->ik", Tensor(a, device=dev), Tensor(b, device=dev))
  assert got.dtype == dtypes.int8 and got.tolist() == want.tolist() == (Tensor(a, device=dev) @ Tensor(b, device=dev)).tolist()
  x, w = np.arange(75, dtype=np.int32).reshape(1, 3, 5, 5), np.ones((2, 3, 3, 3), np.int32)
  conv = Tensor(x, device=dev).conv2d(Tensor(w, device=dev), padding=1)
  want_conv = F.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(), padding=1)  # torch has no int conv
  assert conv.dtype == dtypes.int32 and np.array_equal(conv.numpy(), want_conv.numpy())


def test_einsum_errors(dev):
  with pytest.raises(ValueError, match="operands"): Tensor.einsum("ij,jk->ik", Tensor.ones(2, 2, device=dev))
  with pytest.raises(ValueError, match="sizes"):
    Tensor.einsum("ij,jk->ik", Tensor.ones(2, 2, device=dev), Tensor.ones(3, 2, device=dev))


@pytest.mark.parametrize("causal,mask,gqa", [(False, None, False), (True, None, False), (False, "bool", False),
                                             (False, "float", True)])
def test_scaled_dot_product_attention(causal, mask, gqa, dev):
  q, k, v = rand(1, 4, 3, 8, seed=0), rand(1, 2 if gqa else 4, 5, 8, seed=1), rand(1, 2 if gqa else 4, 5, 6, seed=2)
  m = None if mask is None else (rand(3, 5, seed=3) > 0) if mask == "bool" else rand(3, 5, seed=3)
  tm = None if m is None else torch.from_numpy(m)
  want = F.scaled_dot_product_attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), tm,
                                        is_causal=causal, enable_gqa=gqa)
  pm = None if m is None else Tensor(m, device=dev)
  got = Tensor(q, device=dev).scaled_dot_product_attention(Tensor(k, device=dev), Tensor(v, device=dev), pm,
                                                           is_causal=causal, enable_gqa=gqa)
  same(got, want, atol=1e-5)


def test_scaled_dot_product_attention_half(dev):
  q, k, v = rand(1, 2, 3, 8, seed=0), rand(1, 2, 4, 8, seed=1), rand(1, 2, 4, 8, seed=2)
  want = F.scaled_dot_product_attention(*[torch.from_numpy(a) for a in (q, k, v)])
  qh, kh, vh = [Tensor(a, device=dev).half() for a in (q, k, v)]
  got = qh.scaled_dot_product_attention(kh, vh)
  assert got.dtype == dtypes.float16
  same(got.float(), want, atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("shape", [(4, 3), (3, 3), (2, 4), (2, 3, 2), (1, 1)])
def test_qr(shape, dev):
  x = rand(*shape)
  q, r = Tensor(x, device=dev).qr()
  m = shape[-2]
  assert q.shape == shape[:-2] + (m, m) and r.shape == shape
  same(q @ r, x, atol=1e-5)
  same(q.transpose(-2, -1) @ q, np.broadcast_to(np.eye(m, dtype=np.float32), shape[:-2] + (m, m)), atol=1e-5)
  same(r, np.triu(r.numpy()))
  # the same R as LAPACK up to the sign of each row
  tr = torch.linalg.qr(torch.from_numpy(x), mode="complete")[1].numpy()
  np.testing.assert_allclose(np.abs(r.numpy()), np.abs(tr), atol=1e-5)


@pytest.mark.parametrize("shape,full", [((4, 3), True), ((3, 5), True), ((2, 3, 3), False), ((1, 2), True)])
def test_svd(shape, full):
  x = rand(*shape)
  u, s, vh = Tensor(x, device="CPU").svd(full)
  tu, ts, tvh = torch.linalg.svd(torch.from_numpy(x), full_matrices=full)
  assert u.shape == tuple(tu.shape) and s.shape == tuple(ts.shape) and vh.shape == tuple(tvh.shape)
  same(s, ts, atol=1e-5)
  k = s.shape[-1]
  same((u[..., :, :k] * s.unsqueeze(-2)) @ vh[..., :k, :], x, atol=1e-5)
  eye = np.broadcast_to(np.eye(u.shape[-1], dtype=np.float32), u.shape[:-2] + (u.shape[-1],) * 2)
  same(u.transpose(-2, -1) @ u, eye, atol=1e-5)


@pytest.mark.parametrize("xs,ys,dtype", [((5, 7), (7, 3), "float32"), ((2, 5, 7), (7, 3), "float32"),
                                         ((4, 1, 5, 7), (3, 7, 2), "float32"), ((6, 4), (4, 9), "int32")])
def test_matmul_makes_the_nodes_of_its_tensor_formula(xs, ys, dtype, dev):
  """`@` builds its graph node by node (an eager step's linear layers, without a tensor per step): the nodes are
  those of x[..., n, 1, k] * y.T[..., 1, m, k] summed over k, written with tensor ops."""
  rng = np.random.default_rng(0)
  x = Tensor(rng.integers(-5, 5, xs).astype(dtype), device=dev)
  y = Tensor(rng.integers(-5, 5, ys).astype(dtype), device=dev)
  n, k, m = xs[-2], xs[-1], ys[-1]
  full = tuple(np.broadcast_shapes(xs[:-2], ys[:-2])) + (n, m, k)
  xe, ye = x.reshape(xs[:-2] + (n, 1, k)).expand(full), y.transpose(-1, -2).reshape(ys[:-2] + (1, m, k)).expand(full)
  assert (x @ y).uop is (xe * ye).sum(-1, dtype=dtype).uop
  np.testing.assert_array_equal((x @ y).numpy(), x.numpy() @ y.numpy())


def test_a_linear_layer_with_a_short_sum_copies_its_weight_row_major():
  # x @ W.T with W a row-major buffer: read as it is, each output sums along W's rows in vector lanes and then adds
  # the lanes together; with a sum of at most TRANSPOSED_MAX_K terms, at least 2**16 outputs (512x192, not 256x128)
  # and at least k/2 rows, W.T is copied row-major first (one kernel more) where the device loops over its outputs
  # with vector ops. A long sum, or too few rows to pay for the copy (a language model's head while it generates),
  # reads W as it is
  from plugrad.registry import get_registry
  from plugrad.scheduler import count_kernels
  rng = np.random.default_rng(0)
  caps = get_registry().device(Tensor(0).device).caps
  copies = caps.launch_dims == 0 and caps.vector_ops
  for xs, ws, short in (((512, 64), (256, 64), True), ((2, 256, 64), (256, 64), True), ((64, 784), (256, 784), False),
                        ((4, 64), (50257, 64), False), ((512, 64), (192, 64), True), ((256, 64), (128, 64), False)):
    x, w = (Tensor(rng.standard_normal(s).astype(np.float32)).realize() for s in (xs, ws))
    out = x @ w.T
    assert count_kernels(out.schedule()) == (2 if short and copies else 1)
    same(out, x.numpy() @ w.numpy().T, rtol=1e-4, atol=1e-4)
  # batched, only the last two axes swapped: attention's scores, q @ k.transpose(-1, -2)
  q, k = (Tensor(rng.standard_normal((4, 2, 128, 32)).astype(np.float32)).realize() for _ in range(2))
  scores = q @ k.transpose(-1, -2)
  assert count_kernels(scores.schedule()) == (2 if copies else 1)
  same(scores, q.numpy() @ k.numpy().swapaxes(-1, -2), rtol=1e-4, atol=1e-4)
  # ... one query row per head (a decoding step over 256 cached keys) reads each head's keys as they are: a copy pays
  # from k/2 rows
  q1, k1 = Tensor.empty(64, 8, 1, 64), Tensor.empty(64, 8, 256, 64)
  assert count_kernels((q1 @ k1.transpose(-1, -2)).schedule()) == 1
  q4, k4 = (Tensor.empty(4, 4, 128, 32) for _ in range(2))
  assert count_kernels((q4 @ k4.permute(1, 0, 3, 2)).schedule()) == 1  # batch axes swapped too: read as it is


def test_a_linear_layer_with_a_long_sum_copies_its_weight_into_panels(monkeypatch):
  # x @ W.T with a sum longer than TRANSPOSED_MAX_K, enough rows and a large W: W.T is copied into panels one vector
  # wide (Tensor._panel_width), as a row-major right operand is, where the device loops over its outputs with vector
  # ops; the thresholds lowered so a small case takes that path
  import plugrad.tensor
  from plugrad.registry import get_registry
  from plugrad.scheduler import count_kernels
  monkeypatch.setattr(plugrad.tensor, "PANEL_MIN_ELEMENTS", 1)
  monkeypatch.setattr(plugrad.tensor, "PANEL_MIN_ROWS", 4)
  caps = get_registry().device(Tensor(0).device).caps
  panels = caps.launch_dims == 0 and caps.vector_ops
  width = caps.max_vector_bytes // 4
  rng = np.random.default_rng(0)
  for rows, k, copied in ((8, 300, panels), (8, 100, False), (2, 300, False)):  # a short sum; too few rows
    x, w = (Tensor(rng.standard_normal(s).astype(np.float32)).realize() for s in ((rows, k), (2 * width, k)))
    out = x @ w.T
    assert count_kernels(out.schedule()) == (2 if copied else 1), (rows, k)
    same(out, x.numpy() @ w.numpy().T, rtol=1e-4, atol=1e-4)
