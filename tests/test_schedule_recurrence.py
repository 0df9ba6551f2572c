"""An elementwise recurrence (an LSTM unrolled over time) schedules in work linear in its steps."""
import numpy as np

from plugrad import Tensor
from plugrad.engine import lower_for
from plugrad.registry import get_registry
from plugrad.testing import assert_close


def _lstm(steps: int, device: str):
  rng = np.random.default_rng(0)
  xs = rng.standard_normal((steps, 1, 8)).astype(np.float32)
  wx, wh = (rng.standard_normal(s).astype(np.float32) * 0.3 for s in ((8, 64), (16, 64)))
  x, Wx, Wh = (Tensor(a, device=device).realize() for a in (xs, wx, wh))
  h, c = Tensor.zeros(1, 16, device=device).contiguous().realize(), Tensor.zeros(1, 16, device=device).contiguous().realize()
  nh, nc, outs = np.zeros((1, 16), np.float32), np.zeros((1, 16), np.float32), []
  sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
  for t in range(steps):
    i, f, g, o = (x[t] @ Wx + h @ Wh).chunk(4, 1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    h = o.sigmoid() * c.tanh()
    ni, nf, ng, no = np.split(xs[t] @ wx + nh @ wh, 4, axis=1)
    nc = sig(nf) * nc + sig(ni) * np.tanh(ng)
    nh = sig(no) * np.tanh(nc)
    outs.append(nh)
  return (h, c), np.stack(outs)[-1], nc


def _scheduled(*outs: Tensor) -> tuple[int, int]:
  """The kernels realizing `outs` (on PYTHON) and their operations."""
  items = Tensor.schedule(*outs)
  dev = get_registry().device("PYTHON")
  return len(items), sum(lower_for(dev, it.ast).flops for it in items if it.ast is not None)


def _work(steps: int) -> tuple[int, int]:
  (h, c), _, _ = _lstm(steps, "PYTHON")
  return _scheduled(h, c)


def test_recurrence_work_grows_linearly():
  # each step's cell state reads every earlier step's gates; fused into both the next step's matmul and the
  # state, it would be recomputed from the start in every kernel (the kernels' work grows with steps squared)
  (k8, w8), (k32, w32) = _work(8), _work(32)
  assert k32 <= 4 * k8 + 4
  assert w32 < 6 * w8, (w8, w32)  # linear: about 4.5x for 4x the steps (fused throughout: 14x)


def test_recurrence_state_gets_a_buffer_every_step():
  # fused into the next step's matmul, h's transcendentals (and the cell state under them) would be evaluated once
  # per output column of the matmul: each step's state gets buffers instead (a costly recompute), for a fifth of
  # the work of cutting every seventh step (401k operations in 23 kernels, tinygrad 0.14's count; 534k with only
  # the shared-reads cut)
  kernels, work = _work(16)
  assert kernels <= 3 * 16
  assert work < 100_000, work


def test_recurrence_results(dev):
  (h, c), want_h, want_c = _lstm(12, dev)
  assert_close(h, want_h, atol=1e-5)
  assert_close(c, want_c, atol=1e-5)


def _onnx_lstm_work(steps: int) -> int:
  from plugrad.nn.onnx.ops import lstm
  rng = np.random.default_rng(1)
  x, w, r = (Tensor(rng.standard_normal(s).astype(np.float32), device="PYTHON").realize()
             for s in ((steps, 1, 8), (1, 64, 8), (1, 64, 16)))
  return _scheduled(*lstm(x, w, r, hidden_size=16, n_outputs=3))[1]


def test_the_onnx_lstm_gives_its_state_a_buffer_every_step():
  # each step's matmul reads h through an expand: the cell state and h's transcendentals fused into it would be
  # recomputed for every output (bench_onnx's LSTM ran 11x slower)
  w4, w16 = _onnx_lstm_work(4), _onnx_lstm_work(16)
  assert w16 < 4.5 * w4, (w4, w16)
  assert w16 < 120_000, w16

