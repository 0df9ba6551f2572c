"""Indexing (basic and advanced, reads and writes), shape functions, pad modes, pooling options and
interpolation of tinygrad 0.14's Tensor API, compared with torch on PYTHON and CPU."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from plugrad import Tensor, dtypes
from plugrad.testing import assert_close as same


def rand(*shape, seed=0):
  return np.random.default_rng(seed).uniform(-2, 2, size=shape).astype(np.float32)


# ------------------------------------------------------------------------------------------------ reading

X = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
READS = [  # each index is applied to X through numpy/torch and through plugrad
  (1,), (slice(5, 2),), (slice(None, None, -2),), (Ellipsis, slice(1, None, 3)), (None, 0, None, slice(1, 3)),
  (-1, slice(None), -2), (slice(0, 0), 1), (slice(None, None, 2), slice(3, 0, -2)),
  ([2, 0, 2],), ([[0, 1], [2, 2]],), (slice(None), [3, -1]), ([0, 2], slice(1, 3), [4, 0]), ([0, 2], [1, 3]),
  (Ellipsis, [1]), (1, [0, 2], [3, 1]), ([1, 0], None, [2, 3]), (0, slice(None), [0, 1]), ([], slice(None)),
  (np.array([1, 0]), 2), (slice(None), None, [[0], [3]], [1, 2]), (slice(None, 0),), (slice(4, None, 2), None),
]


@pytest.mark.parametrize("index", READS, ids=[repr(i) for i in READS])
def test_getitem(index, dev):
  same(Tensor(X, device=dev)[index], reference(X, index))


def reference(x, index):
  """x[index] as torch computes it; numpy where torch has no negative steps (the two agree on the rest here)."""
  if any(isinstance(i, slice) and (i.step or 1) < 0 for i in index): return x[index]
  return torch.from_numpy(x)[tuple(torch.tensor(i, dtype=torch.long) if isinstance(i, (list, np.ndarray)) else i
                                   for i in index)]


def test_getitem_tensor_and_mask(dev):
  t = Tensor(X, device=dev)
  idx = Tensor([[2, -1], [0, 1]], device=dev)
  same(t[idx], X[np.array([[2, -1], [0, 1]])])
  same(t[:, idx.cast(dtypes.int64)], X[:, np.array([[2, -1], [0, 1]])])
  mask = X[:, :, 0] > 20
  same(t[Tensor(mask, device=dev)], X[mask])
  same(t[mask, 1:3], X[mask, 1:3])
  same(t[[0, 1]], X[[0, 1]])  # a list is one index, as in torch


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
def test_small_integer_index_dtypes_reach_the_whole_axis(dtype, dev):
  # positions were compared in the index's own dtype, where an axis of 300 is 44 in int8: x[100] read 0, a negative
  # index wrapped to the wrong end, and a gather or scatter at 5 also hit 261
  n = 70000 if dtype == "int16" else 300
  pos = np.array([5, 100, -1] if dtype != "uint8" else [5, 100, 250])
  idx = Tensor(pos.astype(dtype), device=dev)
  x = np.arange(n, dtype=np.float32)
  same(Tensor(x, device=dev)[idx], x[pos])
  ahead = np.array([5, 5000, 30000] if dtype == "int16" else [5, 100, 120])  # past the wrapped axis size too
  at = Tensor(ahead.astype(dtype), device=dev)  # gather and scatter take positions from 0, as torch's
  same(Tensor(x, device=dev).gather(0, at), x[ahead])
  want = x.copy()
  want[pos] = -7
  y = Tensor(x, device=dev).contiguous().realize()
  y[idx] = -7.0
  same(y, want)
  sums = np.zeros(n, np.float32)
  sums[ahead] = 1
  same(Tensor.zeros(n, device=dev).scatter_reduce(0, at, Tensor.ones(3, device=dev), "sum"), sums)


@pytest.mark.parametrize("mask", [True, False])
def test_a_0d_bool_index_selects_everything_or_nothing(mask, dev):
  # as torch and numpy: it adds an axis of size 1 or 0. As a mask of no axes it indexed none: x[Tensor(False)] read
  # everything, and y[Tensor(False)] = 0 wrote everything
  t, tx = Tensor(X, device=dev), torch.from_numpy(X)
  for wrap, twrap in [(lambda m: m, lambda m: m), (lambda m: Tensor(m, device=dev), torch.tensor)]:
    for index in [lambda m: m, lambda m: (m, 1), lambda m: (slice(None), m), lambda m: (Ellipsis, m, 0)]:
      same(t[index(wrap(mask))], tx[index(twrap(mask))])
    y, ty = Tensor(X, device=dev).contiguous().realize(), tx.clone()
    y[wrap(mask), 1] = -1.0
    ty[twrap(mask), 1] = -1.0
    same(y, ty)
  with pytest.raises(IndexError, match="0-d bool"): t[Tensor(mask, device=dev), Tensor([0, 1], device=dev)]


@pytest.mark.parametrize("index", [
  lambda I: (I(1), slice(None), I([0, 1])), lambda I: (slice(None), I(1), slice(None), I([0, 1])),
  lambda I: (I([0, 1]), slice(None), I(1)), lambda I: (I(0), I(1), slice(None), I([1, 2])),
  lambda I: (Ellipsis, I(1), I([0, 3])), lambda I: (I(1), slice(None), I(2)),
])
def test_a_0d_index_tensor_places_dims_as_an_int_does(index, dev):
  # as torch: a 0-d index tensor counts as an int, so the other index's dims stay where it stood (numpy would put
  # them first when a slice lies between)
  a = np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5)
  want = torch.from_numpy(a)[index(torch.tensor)]
  same(Tensor(a, device=dev)[index(lambda v: Tensor(v, device=dev))], want)
  t, tt = Tensor(a, device=dev).contiguous().realize(), torch.from_numpy(a.copy())
  t[index(lambda v: Tensor(v, device=dev))] = -1.0
  tt[index(torch.tensor)] = -1.0
  same(t, tt)


def test_setitem_through_an_out_of_range_tensor_index_writes_nowhere(dev):
  # as a read gives 0 there, a write goes nowhere (tinygrad's rule): it wrote into element 0
  t = Tensor.zeros(4, device=dev).contiguous().realize()
  t[Tensor([1, 9, -7], device=dev)] = Tensor([1.0, 5.0, 6.0], device=dev)
  assert t.tolist() == [0.0, 1.0, 0.0, 0.0]
  m = Tensor.zeros(3, 2, device=dev).contiguous().realize()
  m[Tensor([7], device=dev)] = Tensor([4.0, 5.0], device=dev)
  m[Tensor([0, 2], device=dev), Tensor([1, 5], device=dev)] = 3.0
  assert m.tolist() == [[0.0, 3.0], [0.0, 0.0], [0.0, 0.0]]


def test_cat_and_stack_keep_negative_zeros(dev):
  # the parts are padded and added: padded with 0.0, -0.0 + 0.0 made a -0.0 part +0.0 (-0.0 is the exact identity)
  a, b = np.array([-0.0, 2.0], np.float32), np.array([1.0, -0.0], np.float32)
  for got, want in [(Tensor.cat(Tensor(a, device=dev), Tensor(b, device=dev)), np.concatenate([a, b])),
                    (Tensor.stack(Tensor(a, device=dev), Tensor(b, device=dev)), np.stack([a, b]))]:
    assert np.array_equal(np.signbit(got.numpy()), np.signbit(want)) and np.array_equal(got.numpy(), want)


def test_movement_ops_of_a_0d_tensor_are_torchs(dev):
  # axis 0 (or -1) of a scalar is its only one, as in torch; these raised an IndexError from inside the library
  t, tt = Tensor(3.0, device=dev), torch.tensor(3.0)
  same(t.flip(0), tt.flip(0))
  same(t.transpose(0, -1), tt.transpose(0, -1))
  same(t.unfold(0, 1, 1), tt.unfold(0, 1, 1))
  same(t.gather(0, Tensor(0, device=dev)), tt.gather(0, torch.tensor(0)))
  with pytest.raises(ValueError, match="0-d"): Tensor.cat(t, t)


def test_a_gather_reads_the_row_it_picks(dev):
  # a tensor index is a one-hot sum that the lowering reads as one gated load per value: no loop over the table, the
  # picked value itself (-0.0 stays -0.0), and a NaN in a row not picked stays out, as in torch
  from plugrad.codegen.lowerer import lower
  from plugrad.registry import get_registry
  table = rand(50, 6)
  table[3], table[7] = -0.0, np.nan
  idx = np.array([[3, 0, 49], [-1, 3, 12]], np.int32)
  t, i = Tensor(table, device=dev), Tensor(idx, device=dev)
  for got in (t[i], t[i.cast(dtypes.int64)], Tensor(table.astype(np.int32), device=dev)[i]):
    item = [it for it in got.schedule() if not it.is_copy][-1]
    assert not any(u.op.name == "RANGE" for u in lower(item.ast, get_registry().device(dev).caps).uops)
    np.testing.assert_array_equal(got.numpy(), table.astype(got.dtype.np)[idx])
  assert np.signbit(t[i].numpy()[0, 0]).all() and not np.isnan(t[i].numpy()).any()
  rows = [[3, 1], [49, 0]]
  same(t.gather(0, Tensor(rows, device=dev)), torch.from_numpy(table).gather(0, torch.tensor(rows)))


def test_embedding_matches_torch_and_trains(dev):
  from plugrad import nn
  emb = nn.Embedding(20, 4)
  emb.weight = Tensor(rand(20, 4, seed=1), device=dev).requires_grad_(True)
  w = emb.weight.numpy()
  w_nan = w.copy()
  idx = np.array([[1, 5, 5], [19, 0, 1]], np.int32)
  temb = torch.nn.Embedding.from_pretrained(torch.from_numpy(w), freeze=False)
  out = emb(Tensor(idx, device=dev))
  tout = temb(torch.from_numpy(idx.astype(np.int64)))
  (out * out).sum().backward()
  (tout * tout).sum().backward()
  same(out, tout.detach())
  same(emb.weight.grad, temb.weight.grad)
  w_nan[7] = np.nan  # a row no index picks
  emb.weight = Tensor(w_nan, device=dev)
  np.testing.assert_array_equal(emb(Tensor(idx, device=dev)).numpy(), w[idx])


def test_getitem_errors(dev):
  t = Tensor(X, device=dev)
  with pytest.raises(IndexError, match="out of bounds"): t[3]
  with pytest.raises(IndexError, match="out of bounds"): t[[0, 3]]
  with pytest.raises(IndexError, match="too many"): t[0, 0, 0, 0]
  with pytest.raises(IndexError, match="one ellipsis"): t[..., 0, ...]
  with pytest.raises(ValueError, match="step"): t[::0]
  with pytest.raises(IndexError, match="integer or bool"): t[Tensor([0.5], device=dev)]
  with pytest.raises(TypeError, match="invalid index"): t["a"]
  with pytest.raises(IndexError, match="mask of shape"): t[Tensor([True, False], device=dev)]


# ------------------------------------------------------------------------------------------------ writing

WRITES = [  # (index, value shape)
  ((1,), (4, 5)), ((slice(None), 2), ()), ((slice(None, None, 2), slice(3, 0, -2), 1), (2, 2)),
  ((Ellipsis, slice(1, 3)), (4, 2)), (([0, 2],), (1, 5)), ((slice(None), [3, 0], [1, 1]), (3, 2)),
  (([0, 2, 0], 1), (3, 5)), ((slice(4, 1),), (0, 4, 5)), ((None, 0, slice(0, 2)), (2, 5)),
]


@pytest.mark.parametrize("index,vshape", WRITES, ids=[repr(w[0]) for w in WRITES])
def test_setitem(index, vshape, dev):
  value = rand(*vshape, seed=1) if vshape else np.float32(7.5)
  want = X.copy()
  if any(isinstance(i, slice) and (i.step or 1) < 0 for i in index): want[index] = value  # torch has no negative steps
  else: torch.from_numpy(want)[tuple(torch.tensor(i) if isinstance(i, list) else i for i in index)] = \
    torch.tensor(value)
  lazy, realized = Tensor(X, device=dev) * 1, Tensor(X.copy(), device=dev).realize()
  for t in (lazy, realized):
    t[index] = Tensor(value, device=dev) if vshape else float(value)
    same(t, want)


def test_setitem_writes_through_and_casts(dev):
  t = Tensor.zeros(2, 3, dtype="int32", device=dev).realize()
  alias = t
  t[1, 1:] = 2.7  # cast to the tensor's dtype, as torch
  t[Tensor([0, 0], device=dev), Tensor([2, 0], device=dev)] = Tensor([5, 6], device=dev)
  assert alias.tolist() == [[6, 0, 5], [0, 2, 2]] and t.dtype == dtypes.int32
  t[:] = [[1, 2, 3]]
  assert t.tolist() == [[1, 2, 3], [1, 2, 3]]
  with pytest.raises(ValueError, match="shape"): t[0] = Tensor.ones(2, device=dev)


# ------------------------------------------------------------------------------------------------ shape functions

def test_reshape_none_and_minus_one(dev):
  t = Tensor(X, device=dev)
  assert t.reshape(None, -1).shape == (3, 20) and t.reshape(3, None, 5).shape == (3, 4, 5)
  assert t.reshape(-1, 1, None).shape == (60, 1, 5)[:0] + (12, 1, 5)
  with pytest.raises(ValueError): t.reshape(-1, -1)
  with pytest.raises(ValueError): t.reshape(7, -1)
  # more sizes than axes: None still names the axis at its position (tinygrad's; it raised)
  assert t.reshape(12, 5).reshape(None, 5, 1).shape == (12, 5, 1)
  with pytest.raises(ValueError, match="None needs an axis"): t.reshape(60).reshape(2, None)


def test_stack_cat_of_a_sequence(dev):
  a, b = Tensor(X[0], device=dev), Tensor(X[1], device=dev)
  same(Tensor.stack([a, b], dim=1), np.stack([X[0], X[1]], 1))
  same(Tensor.cat([a, b, a], dim=-1), np.concatenate([X[0], X[1], X[0]], -1))
  same(Tensor.cat((a,)), X[0])


def test_split_chunk(dev):
  t, ref = Tensor(X, device=dev), torch.from_numpy(X)
  for got, want in zip(t.split(2, 1), ref.split(2, 1)): same(got, want)
  for got, want in zip(t.split([1, 3, 1], -1), ref.split([1, 3, 1], -1)): same(got, want)
  for got, want in zip(t.chunk(3, 2), ref.chunk(3, 2)): same(got, want)
  assert len(t.chunk(2, 0)) == 2 and len(t.chunk(6, 2)) == 5
  with pytest.raises(ValueError, match="add up"): t.split([1, 1], 0)


def test_roll_tril_triu_diag_diagonal(dev):
  t, ref = Tensor(X, device=dev), torch.from_numpy(X)
  same(t.roll(2, 1), ref.roll(2, 1))
  same(t.roll((-1, 7), (0, 2)), ref.roll((-1, 7), (0, 2)))
  same(t.roll(5), ref.roll(5))
  for k in (-1, 0, 2):
    same(t.tril(k), ref.tril(k))
    same(t.triu(k), ref.triu(k))
  same(Tensor([1.0, 2.0, 3.0], device=dev).diag(), torch.tensor([1.0, 2.0, 3.0]).diag())
  for offset, d1, d2 in [(0, 0, 1), (1, 1, 2), (-2, 2, 1), (9, 0, 2)]:
    same(t.diagonal(offset, d1, d2), ref.diagonal(offset, d1, d2))


def test_meshgrid_repeat_interleave_unfold(dev):
  a, b = Tensor([1, 2, 3], device=dev), Tensor([4, 5], device=dev)
  for indexing in ("ij", "xy"):
    for got, want in zip(a.meshgrid(b, indexing=indexing), torch.meshgrid(torch.tensor([1, 2, 3]), torch.tensor([4, 5]),
                                                                         indexing=indexing)):
      same(got, want)
  t, ref = Tensor(X, device=dev), torch.from_numpy(X)
  same(t.repeat_interleave(2, 1), ref.repeat_interleave(2, 1))
  same(t[0].repeat_interleave(2), ref[0].repeat_interleave(2))
  same(t.unfold(2, 2, 2), ref.unfold(2, 2, 2))
  same(t.unfold(1, 3, 1), ref.unfold(1, 3, 1))
  same(t.unfold(0, 0, 2), ref.unfold(0, 0, 2))


def test_rearrange(dev):
  t = Tensor(np.arange(24).reshape(2, 3, 4), device=dev)
  ref = np.arange(24).reshape(2, 3, 4)
  same(t.rearrange("b c (h w) -> b h (c w)", h=2), ref.reshape(2, 3, 2, 2).transpose(0, 2, 1, 3).reshape(2, 2, 6))
  same(t.rearrange("b ... -> ... b"), ref.transpose(1, 2, 0))
  same(t.rearrange("b c w -> b 1 (c w)"), ref.reshape(2, 1, 12))
  with pytest.raises(ValueError, match="same axes"): t.rearrange("a b c -> a b")


def test_pad_to_shrink_to_normalize(dev):
  t = Tensor(X[0], device=dev)
  same(t.pad_to(6, None), np.pad(X[0], ((0, 2), (0, 0))))
  same(t.pad_to((5, 7), value=1.5), np.pad(X[0], ((0, 1), (0, 2)), constant_values=1.5))
  same(t.shrink_to(2, None), X[0][:2])
  same(t.normalize(), F.normalize(torch.from_numpy(X[0])))
  same(t.normalize(1, 0), F.normalize(torch.from_numpy(X[0]), 1, 0))


# negative pads crop: reflect mirrors about the edges before the crop ((-1, 3) of 5 columns cropped first was a
# reflection by 3 of 4 columns; of a 2x3 block, (-1, 2) raised), circular wraps what the crop leaves, as torch
PAD_CASES = [(mode, pads) for mode in ("reflect", "replicate", "circular", "constant")
             for pads in [(1, 2), (2, 0, 1, 3), (0, 0, 3, 1), (-1, 3), (2, -1, -1, 1)]] + [("constant", (-1, 2, 1, -2))]


@pytest.mark.parametrize("mode,pads", PAD_CASES)
def test_pad_modes(mode, pads, dev):
  x = rand(2, 4, 5)
  kw = {"value": 0.5} if mode == "constant" else {}
  want = F.pad(torch.from_numpy(x), pads, mode=mode, **kw)
  same(Tensor(x, device=dev).pad(pads, mode=mode, value=0.5), want)


def test_reflect_by_more_than_what_a_crop_leaves(dev):
  x = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
  same(Tensor(x, device=dev).pad((-1, 2), mode="reflect"), F.pad(torch.from_numpy(x), (-1, 2), mode="reflect"))


def test_pad_mode_errors(dev):
  t = Tensor.ones(2, 3, device=dev)
  with pytest.raises(ValueError, match="smaller"): t.pad((3, 0), mode="reflect")
  with pytest.raises(ValueError, match="wraps"): t.pad((4, 0), mode="circular")
  with pytest.raises(ValueError, match="mode"): t.pad((1, 1), mode="wrap")
  with pytest.raises(TypeError, match="value="): t.pad((1, 1), 2.0)


# ------------------------------------------------------------------------------------------------ pooling

POOLS = [  # kernel, stride, dilation, padding, ceil_mode
  ((2, 2), None, 1, 0, False), (3, 2, 1, 1, False), ((3, 2), (2, 1), (1, 2), (1, 0), True), (2, 3, 1, 0, True),
  ((2, 3), 2, 1, (0, 1), True), (3, 1, 2, 1, False), ((4, 3), 2, (2, 1), 0, True),  # a window past the end with ceil
]


@pytest.mark.parametrize("k,s,d,p,ceil", POOLS, ids=[repr(p) for p in POOLS])
def test_max_pool2d(k, s, d, p, ceil, dev):
  x = rand(2, 2, 7, 6)
  want, want_idx = F.max_pool2d(torch.from_numpy(x), k, s, p, d, ceil_mode=ceil, return_indices=True)
  got, idx = Tensor(x, device=dev).max_pool2d(k, s, d, p, ceil, return_indices=True)
  same(got, want)
  same(idx, want_idx.int())


def test_max_pool2d_indices_with_nans_and_ties_are_torchs(dev):
  # a window holding a NaN has it as its max, at the last NaN's position (== never held for NaN: the index was past
  # the end); ties of numbers keep the first
  rng = np.random.default_rng(3)
  x = rng.standard_normal((2, 2, 7, 6)).astype(np.float32)
  x[rng.random(x.shape) < 0.2] = np.nan
  x[rng.random(x.shape) < 0.1] = 1.0
  for k, s, p in [(2, 2, 0), (3, 1, 1), (3, 2, 1)]:
    want, want_idx = F.max_pool2d(torch.from_numpy(x), k, s, p, return_indices=True)
    got, idx = Tensor(x, device=dev).max_pool2d(k, s, padding=p, return_indices=True)
    same(got, want)
    same(idx, want_idx.int())


@pytest.mark.parametrize("k,s,p,ceil,include", [((2, 2), None, 0, False, True), (3, 2, 1, False, False),
                                                (3, 2, 1, True, True), ((2, 3), 2, (1, 1), True, False),
                                                (2, 3, 0, True, True)])
def test_avg_pool2d(k, s, p, ceil, include, dev):
  x = rand(1, 3, 7, 6)
  want = F.avg_pool2d(torch.from_numpy(x), k, s, p, ceil_mode=ceil, count_include_pad=include)
  same(Tensor(x, device=dev).avg_pool2d(k, s, 1, p, ceil, include), want)


def test_pools_1d_3d_and_unpool(dev):
  x1, x3 = rand(2, 3, 9), rand(1, 2, 4, 5, 4)
  same(Tensor(x1, device=dev).max_pool2d((3,), 2, padding=1), F.max_pool1d(torch.from_numpy(x1), 3, 2, 1))
  same(Tensor(x3, device=dev).avg_pool2d((2, 2, 2)), F.avg_pool3d(torch.from_numpy(x3), 2))
  x = rand(1, 2, 6, 4)
  values, idx = Tensor(x, device=dev).max_pool2d(2, return_indices=True)
  tv, ti = F.max_pool2d(torch.from_numpy(x), 2, return_indices=True)
  same(values.max_unpool2d(idx, 2), F.max_unpool2d(tv, ti, 2))
  with pytest.raises(ValueError, match="does not fit"): Tensor.ones(1, 1, 2, 2, device=dev).max_pool2d(3)


@pytest.mark.parametrize("mode,align", [("linear", False), ("linear", True), ("nearest", False),
                                        ("nearest-exact", False)])
@pytest.mark.parametrize("size", [(5, 9), (2, 3), (4, 4)])
def test_interpolate(mode, align, size, dev):
  x = rand(1, 2, 4, 6)
  tmode = {"linear": "bilinear"}.get(mode, mode)
  kw = {"align_corners": align} if mode == "linear" else {}
  same(Tensor(x, device=dev).interpolate(size, mode, align), F.interpolate(torch.from_numpy(x), size, mode=tmode, **kw))
  with pytest.raises(ValueError, match="positive"): Tensor(x, device=dev).interpolate((0, 3))


# ------------------------------------------------------------------------------------------------ every dtype

DTYPES = [np.bool_, np.int8, np.uint8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64]


# every dtype on CPU; the reference device (slower per kernel) covers the narrow and unusual ones
DTYPE_CASES = [("CPU", d) for d in DTYPES] + [("PYTHON", d) for d in (np.bool_, np.int8, np.uint8, np.float16)]


@pytest.mark.parametrize("dev,dtype", DTYPE_CASES, ids=[f"{dv}-{np.dtype(d).name}" for dv, d in DTYPE_CASES])
def test_selection_ops_keep_every_dtype(dtype, dev):
  rng = np.random.default_rng(5)
  x = (rng.random((3, 4)) < 0.5) if dtype is np.bool_ else rng.integers(0, 9, (3, 4)).astype(dtype)
  t, ref = Tensor(x, device=dev), torch.from_numpy(x)
  idx = torch.tensor([[2, 0, 1, 2]])
  cases = [
    (t[[2, 0], 1:], ref[[2, 0], 1:]), (t[:, Tensor([3, 3], device=dev)], ref[:, [3, 3]]),
    (t.gather(0, Tensor(idx.numpy(), device=dev)), ref.gather(0, idx)),
    (t.scatter(0, Tensor(idx.numpy(), device=dev), t[:1]), ref.scatter(0, idx, ref[:1])),
    (t.roll(1, 1), ref.roll(1, 1)), (t.pad((1, 2), mode="reflect"), np.pad(x, ((0, 0), (1, 2)), "reflect")),
    (t.masked_select(t != 0), ref.masked_select(ref != 0)), (t.tril(), ref.tril()), (t.flip(1), ref.flip(1)),
    (t.repeat_interleave(2, 0), ref.repeat_interleave(2, 0)), (t.nonzero(), ref.nonzero().int()),
  ]
  for got, want in cases:
    assert got.dtype.np == np.asarray(want).dtype
    same(got, want)
  if dtype is not np.bool_:
    values, indices = t.sort(1, descending=True)
    tv, ti = torch.sort(ref.float(), dim=1, descending=True, stable=True)
    same(values.cast("float32"), tv)
    same(indices, ti.int())
    same(t.cummax(1)[0], ref.cummax(1)[0])
  u = Tensor(x.copy(), device=dev).realize()
  u[1, ::2] = Tensor(x[0, :2], device=dev)
  want = x.copy()
  want[1, ::2] = x[0, :2]
  same(u, want)


def test_bad_arguments_raise_what_plugrad_and_tinygrad_raise(dev):
  # plugrad documents ValueError/TypeError; tinygrad raises RuntimeError for these: both catch them
  t = Tensor(X, device=dev)
  cases = [
    (ValueError, lambda: t.diagonal(0, 1, 1), "different dimensions"),
    (ValueError, lambda: t.roll((1, 2), 0), "as many shifts"),
    (ValueError, lambda: t.unfold(0, 4, 1), "larger than dimension"),
    (ValueError, lambda: t.gelu(approximate="fast"), "approximate"),
    (ValueError, lambda: t.gather(0, Tensor([[0]], device=dev)), "dimensions"),
    (ValueError, lambda: t.scatter_reduce(0, t.int(), t, "max"), "reduce"),
    (ValueError, lambda: t[0].meshgrid(t[1], indexing="yx"), "indexing"),
    (TypeError, lambda: t.scatter(0, t.int(), t.int()), "dtype"),
    (TypeError, lambda: t.masked_select(t), "bool mask"),
    (TypeError, lambda: t.gather(0, t), "integer"),
  ]
  for documented, call, words in cases:
    for kind in (documented, RuntimeError):
      with pytest.raises(kind, match=words): call()


EMPTY = np.zeros((0, 4), np.float32)
EMPTY_CASES = {  # name: (plugrad, torch) on a (0, 4) input
  "sort": (lambda t: t.sort(0)[0], lambda t: t.sort(0)[0]),
  "topk": (lambda t: t.T.topk(0)[0], lambda t: t.T.topk(0)[0]),
  "cumsum": (lambda t: t.T.cumsum(1), lambda t: t.T.cumsum(1)),
  "cummax": (lambda t: t.T.cummax(1)[0], lambda t: t.T.cummax(1)[0]),
  "logcumsumexp": (lambda t: t.logcumsumexp(0), lambda t: t.logcumsumexp(0)),
  "roll": (lambda t: t.roll(1, 0), lambda t: t.roll(1, 0)),
  "nonzero": (lambda t: t.nonzero(), lambda t: t.nonzero().int()), "any": (lambda t: t.any(1), lambda t: t.any(1)),
  "masked_select": (lambda t: t.masked_select(t > 0), lambda t: t.masked_select(t > 0)),
  "reflect pad": (lambda t: t.pad((1, 1), mode="reflect"), lambda t: torch.zeros(0, 6)),  # torch refuses the empty axis
  "circular pad": (lambda t: t.pad((1, 1), mode="circular"), lambda t: F.pad(t[None], (1, 1), mode="circular")[0]),
  "gather": (lambda t: t.gather(0, t.int()), lambda t: t.gather(0, t.long())),
  "scatter": (lambda t: t.T.scatter(1, t.T.int(), t.T), lambda t: t.T.scatter(1, t.T.long(), t.T)),
  "scatter_reduce": (lambda t: t.T.scatter_reduce(1, t.T.int(), t.T, "amax"),
                     lambda t: t.T.scatter_reduce(1, t.T.long(), t.T, "amax")),
  "einsum": (lambda t: Tensor.einsum("ij,jk->ik", t.T, t), lambda t: torch.einsum("ij,jk->ik", t.T, t)),
  "max_pool2d": (lambda t: t.reshape(0, 1, 2, 2).max_pool2d(2), lambda t: F.max_pool2d(t.reshape(0, 1, 2, 2), 2)),
  "interpolate": (lambda t: t.reshape(0, 1, 2, 2).interpolate((3, 3)),
                  lambda t: F.interpolate(t.reshape(0, 1, 2, 2), (3, 3), mode="bilinear")),
}


@pytest.mark.parametrize("name", list(EMPTY_CASES))
def test_empty_inputs(name, dev):
  pl, tf = EMPTY_CASES[name]
  same(pl(Tensor(EMPTY, device=dev)), tf(torch.from_numpy(EMPTY)))
