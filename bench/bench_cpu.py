"""Benchmarks of the CPU device (plugrad-cpu-llvm) against numpy and torch (CPU, when importable).

Prints, per case: plugrad's median time, its speed relative to numpy (and torch), and the achieved
GB/s or GFLOP/s (for sibling reductions: of the input read once). Run: `python bench/bench_cpu.py`
(options: --quick, --no-4096, --siblings, --repeat N).
Ratios >1 mean plugrad is faster than the reference.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from plugrad import Context, Tensor, TinyJit

from _timing import median_time, median_times, median_times_in_rounds  # bench/ is the script's folder, so on sys.path

try:
  import torch
  torch.set_num_threads(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
except ImportError:
  torch = None


COPY_GBS: float | None = None  # the machine's copy bandwidth, measured once by bench_copy


def report(name: str, t_plugrad: float, t_numpy: float | None, t_torch: float | None, work: float, unit: str) -> None:
  """unit: 'GB/s' (work in bytes) or 'GFLOP/s' (work in flops)."""
  cols = [f"{name:<34}", f"plugrad {t_plugrad*1e3:9.3f} ms"]
  cols.append(f"vs numpy {t_numpy / t_plugrad:6.2f}x" if t_numpy else f"{'vs numpy':>8} {'-':>7}")
  cols.append(f"vs torch {t_torch / t_plugrad:6.2f}x" if t_torch else f"{'vs torch':>8} {'-':>7}")
  cols.append(f"{work / t_plugrad / 1e9:8.2f} {unit}")
  if unit == "GB/s" and COPY_GBS: cols.append(f"({work / t_plugrad / 1e9 / COPY_GBS:4.0%} of copy)")
  if t_numpy: cols.append(f"(numpy {work / t_numpy / 1e9:.2f} {unit})")
  print("  ".join(cols), flush=True)


def bench_copy(repeat: int) -> None:
  """The memory system's copy bandwidth (bytes read + written per second, numpy's copyto of 256 MiB)."""
  global COPY_GBS
  src = np.ones(64 << 20, np.float32)
  dst = np.empty_like(src)
  t = median_time(lambda: np.copyto(dst, src), repeat)
  COPY_GBS = 2 * src.nbytes / t / 1e9
  print(f"{'copy bandwidth (numpy, 256 MiB)':<34}  {COPY_GBS:8.2f} GB/s (read + write)", flush=True)


def realized(x: np.ndarray) -> Tensor:
  return Tensor(x, device="CPU").realize()


def bench_e2e(n: int, repeat: int) -> None:
  rng = np.random.default_rng(0)
  an, bn, cn = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(3))
  a, b, c = realized(an), realized(bn), realized(cn)
  got = ((a * b + c).relu() * 2).sum().item()
  ref = float(((an.astype(np.float64) * bn + cn).clip(0) * 2).sum())
  assert abs(got - ref) <= 1e-3 * abs(ref), (got, ref)
  tp = median_time(lambda: ((a * b + c).relu() * 2).sum().item(), repeat)
  tn = median_time(lambda: (np.maximum(an * bn + cn, 0) * 2).sum().item(), repeat)
  tt = None
  if torch is not None:
    at, bt, ct = map(torch.from_numpy, (an, bn, cn))
    tt = median_time(lambda: ((at * bt + ct).relu() * 2).sum().item(), repeat)
  report(f"((a*b+c).relu()*2).sum() {n}x{n}", tp, tn, tt, 3 * n * n * 4, "GB/s")


def bench_e2e_contended(n: int, repeat: int) -> None:
  """The chain while another process keeps one core busy: a launch's chunks go to whichever thread is free."""
  rng = np.random.default_rng(0)
  an, bn, cn = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(3))
  a, b, c = realized(an), realized(bn), realized(cn)
  ((a * b + c).relu() * 2).sum().item()
  busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
  try:
    time.sleep(0.2)
    tp = median_time(lambda: ((a * b + c).relu() * 2).sum().item(), repeat)
    tn = median_time(lambda: (np.maximum(an * bn + cn, 0) * 2).sum().item(), repeat)
  finally:
    busy.kill()
    busy.wait()
  report(f"chain {n}x{n}, one core busy", tp, tn, None, 3 * n * n * 4, "GB/s")


def bench_softmax(n: int, repeat: int) -> None:
  an = np.random.default_rng(3).standard_normal((n, n), dtype=np.float32)
  a = realized(an)
  e = np.exp(an - an.max(axis=1, keepdims=True))
  np.testing.assert_allclose(a.softmax(axis=1).numpy(), e / e.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-6)
  tp = median_time(lambda: a.softmax(axis=1).realize(), repeat)
  def np_softmax():
    x = np.exp(an - an.max(axis=1, keepdims=True))
    return x / x.sum(axis=1, keepdims=True)
  tn = median_time(np_softmax, repeat)
  tt = median_time(lambda: torch.softmax(torch.from_numpy(an), dim=1), repeat) if torch is not None else None
  report(f"a.softmax(axis=1) {n}x{n}", tp, tn, tt, 2 * n * n * 4, "GB/s")


def bench_transcendentals(n: int, repeat: int) -> None:
  """Elementwise exp2-, log2- and sin-based kernels: randn (Box-Muller: a log and a cos per value), and a log, an exp,
  a sin and a cos of realized values (whose bounds the renderer cannot know), against numpy's and torch's."""
  an = np.random.default_rng(4).uniform(0.1, 10.0, (n, n)).astype(np.float32)
  a = realized(an)
  np.testing.assert_allclose(a.log().numpy(), np.log(an), rtol=1e-6)
  np.testing.assert_allclose(a.exp().numpy(), np.exp(an), rtol=1e-6)
  np.testing.assert_allclose(a.sin().numpy(), np.sin(an), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(a.cos().numpy(), np.cos(an), rtol=1e-5, atol=1e-6)
  at = torch.from_numpy(an) if torch is not None else None
  rng = np.random.default_rng(5)
  for name, fp, fn, ft in [(f"Tensor.randn({n}, {n})", lambda: Tensor.randn(n, n).realize(),
                            lambda: rng.standard_normal((n, n), dtype=np.float32), lambda: torch.randn(n, n)),
                           (f"a.log() {n}x{n}", lambda: a.log().realize(), lambda: np.log(an), lambda: at.log()),
                           (f"a.exp() {n}x{n}", lambda: a.exp().realize(), lambda: np.exp(an), lambda: at.exp()),
                           (f"a.sin() {n}x{n}", lambda: a.sin().realize(), lambda: np.sin(an), lambda: at.sin()),
                           (f"a.cos() {n}x{n}", lambda: a.cos().realize(), lambda: np.cos(an), lambda: at.cos())]:
    tp, tn = median_time(fp, repeat), median_time(fn, repeat)
    tt = median_time(ft, repeat) if torch is not None else None
    report(name, tp, tn, tt, n * n * 4, "GB/s")


def bench_topk(rows: int, n: int, k: int, repeat: int) -> None:
  """topk along a vocabulary-sized axis (a sampler's top-k of a model's logits), against numpy's argpartition and
  sort of the k, and torch's topk; then a whole sort of 1024x1024 along its rows."""
  xn = np.random.default_rng(6).standard_normal((rows, n), dtype=np.float32)
  x = realized(xn)
  values, _ = x.topk(k)
  np.testing.assert_array_equal(values.numpy(), -np.sort(-np.partition(xn, n - k, axis=1)[:, n - k:], axis=1))

  def np_topk():
    part = np.argpartition(xn, n - k, axis=1)[:, n - k:]
    vals = np.take_along_axis(xn, part, 1)
    order = np.argsort(-vals, axis=1, kind="stable")
    return np.take_along_axis(vals, order, 1), np.take_along_axis(part, order, 1)
  tp, tn = median_time(lambda: Tensor.realize(*x.topk(k)), repeat), median_time(np_topk, repeat)
  tt = None
  if torch is not None:
    xt = torch.from_numpy(xn)
    tt = median_time(lambda: torch.topk(xt, k), repeat)
  report(f"topk({k}) of {rows}x{n}", tp, tn, tt, rows * n * 4, "GB/s")
  # a whole sort of 1024 rows of 1024 (a bitonic network past 256 along the axis)
  sn = np.random.default_rng(7).standard_normal((1024, 1024), dtype=np.float32)
  s = realized(sn)
  np.testing.assert_array_equal(s.sort(-1)[0].numpy(), np.sort(sn, axis=1))
  tp, tn = median_time(lambda: Tensor.realize(*s.sort(-1)), repeat), median_time(lambda: np.sort(sn, axis=1), repeat)
  tt = median_time(lambda: torch.sort(torch.from_numpy(sn), dim=1), repeat) if torch is not None else None
  report("x.sort(-1) 1024x1024", tp, tn, tt, sn.nbytes, "GB/s")


def bench_cumsum(repeat: int) -> None:
  """Running sums along rows (scans: windows of 32 padded before each chunk, then the chunk totals scanned): a
  sampler's cumsum over a vocabulary of probabilities, and a square one, against numpy's and torch's."""
  for shape in [(8, 50257), (1024, 1024)]:
    xn = np.random.default_rng(8).standard_normal(shape, dtype=np.float32)
    x = realized(xn)
    np.testing.assert_allclose(x.cumsum(1).numpy(), np.cumsum(xn, 1), rtol=1e-4, atol=2e-3)
    tp, tn = median_time(lambda: x.cumsum(1).realize(), repeat), median_time(lambda: np.cumsum(xn, 1), repeat)
    tt = median_time(lambda: torch.cumsum(torch.from_numpy(xn), 1), repeat) if torch is not None else None
    report(f"x.cumsum(1) {shape[0]}x{shape[1]}", tp, tn, tt, 2 * xn.nbytes, "GB/s")


def bench_cat(parts: int, total: int, repeat: int) -> None:
  """An update through a cat of many parts (a fused optimizer's flat gradient): m = 0.9 m + 0.1 cat(parts) under
  TinyJit, each part its own buffer, against numpy's and torch's concatenate-then-update."""
  rng = np.random.default_rng(6)
  gn = [rng.standard_normal(total // parts, dtype=np.float32) for _ in range(parts)]
  mn = rng.standard_normal(total // parts * parts, dtype=np.float32)
  gs, m = [realized(g) for g in gn], realized(mn.copy())
  step = TinyJit(lambda: m.assign(m * 0.9 + Tensor.cat(*gs) * 0.1).realize())
  step()
  np.testing.assert_allclose(m.numpy(), mn * np.float32(0.9) + np.concatenate(gn) * np.float32(0.1), rtol=1e-6)
  mnp = mn.copy()
  def numpy_step() -> None:
    mnp[:] = mnp * 0.9 + np.concatenate(gn) * 0.1
  tp, tn = median_time(step, repeat * 10), median_time(numpy_step, repeat * 10)
  tt = None
  if torch is not None:
    gt, mt = [torch.from_numpy(g) for g in gn], torch.from_numpy(mn.copy())
    tt = median_time(lambda: mt.mul_(0.9).add_(torch.cat(gt), alpha=0.1), repeat * 10)
  report(f"m = 0.9m + 0.1cat({parts} parts) {len(mn)} TinyJit", tp, tn, tt, 3 * len(mn) * 4, "GB/s")


def bench_cat_columns(rows: int, repeat: int) -> None:
  """Features side by side: (cat((rows, 512), (rows, 509), dim=1) * 2) under TinyJit, a cat along the rows' own axis
  (an inner launch loop), against numpy's and torch's."""
  rng = np.random.default_rng(7)
  an, bn = rng.standard_normal((rows, 512), dtype=np.float32), rng.standard_normal((rows, 509), dtype=np.float32)
  a, b = realized(an), realized(bn)
  step = TinyJit(lambda: (Tensor.cat(a, b, dim=1) * 2).realize())
  np.testing.assert_allclose(step().numpy(), np.concatenate([an, bn], axis=1) * 2)
  tp, tn = median_time(step, repeat * 5), median_time(lambda: np.concatenate([an, bn], axis=1) * 2, repeat * 5)
  tt = None
  if torch is not None:
    at, bt = torch.from_numpy(an), torch.from_numpy(bn)
    tt = median_time(lambda: torch.cat([at, bt], dim=1) * 2, repeat * 5)
  report(f"cat((x, y), dim=1) * 2 {rows}x1021 TinyJit", tp, tn, tt, 2 * an.nbytes + 2 * bn.nbytes, "GB/s")


def bench_layout(repeat: int) -> None:
  """Kernels that move data: an embedding lookup (a gather, written as a one-hot sum the lowering reads as one load per
  value), a transpose, and a batch norm's per-channel pass over an NCHW tensor with small images."""
  rng = np.random.default_rng(0)
  table, idx = rng.standard_normal((10000, 256), dtype=np.float32), rng.integers(0, 10000, (32, 128)).astype(np.int32)
  mat, img, ch = (rng.standard_normal(s, dtype=np.float32) for s in ((1024, 1024), (128, 32, 20, 20), (32,)))
  t, i, m, x, c = (realized(a) for a in (table, idx, mat, img, ch))
  cases = [(f"embedding {idx.shape[0]}x{idx.shape[1]} from {table.shape[0]}x{table.shape[1]}", lambda: t[i],
            lambda: table[idx], (lambda tt, ti: tt[ti]), (table, idx.astype(np.int64)), idx.size * 256 * 4 * 2),
           ("x.T.contiguous() 1024x1024", lambda: m.T.contiguous(), lambda: np.ascontiguousarray(mat.T),
            (lambda tm: tm.T.contiguous()), (mat,), mat.nbytes * 2),
           ("(x - c) * c per channel, 128x32x20x20", lambda: (x - c.reshape(1, 32, 1, 1)) * c.reshape(1, 32, 1, 1),
            lambda: (img - ch.reshape(1, 32, 1, 1)) * ch.reshape(1, 32, 1, 1),
            (lambda ti, tc: (ti - tc.view(1, 32, 1, 1)) * tc.view(1, 32, 1, 1)), (img, ch), img.nbytes * 2)]
  for name, fp, fn, ft, targs, nbytes in cases:
    np.testing.assert_allclose(fp().numpy(), fn(), rtol=1e-6)
    jitted = TinyJit(lambda fp=fp: fp().realize())
    tp, tn = median_time(jitted, repeat * 5), median_time(fn, repeat * 5)
    tt = None
    if torch is not None: tt = median_time(lambda ft=ft, a=[torch.from_numpy(v) for v in targs]: ft(*a), repeat * 5)
    report(f"{name} TinyJit", tp, tn, tt, nbytes, "GB/s")


def bench_embedding_backward(repeat: int) -> None:
  """An embedding's lookup and its weight gradient (a language model's token table): each token's gradient row summed
  into the row it picked, against torch's embedding backward (numpy: np.add.at)."""
  from plugrad import nn
  rng = np.random.default_rng(9)
  for vocab, width, tokens in [(10000, 256, 4096), (50257, 768, 1024)]:
    idx = rng.integers(0, vocab, (8, tokens // 8)).astype(np.int32)
    g = rng.standard_normal((8, tokens // 8, width), dtype=np.float32)
    emb, it, gt = nn.Embedding(vocab, width), realized(idx), realized(g)
    w = emb.weight.numpy()

    def step() -> None:
      emb.weight.grad = None
      emb(it).backward(gt)
      emb.weight.grad.realize()
    step()
    want = np.zeros_like(w)
    np.add.at(want, idx.reshape(-1), g.reshape(-1, width))
    np.testing.assert_allclose(emb.weight.grad.numpy(), want, rtol=1e-4, atol=1e-4)

    def np_step() -> None:
      out = np.zeros_like(w)
      np.add.at(out, idx.reshape(-1), g.reshape(-1, width))
    tt = None
    if torch is not None:
      tw, ti, tg = torch.tensor(w, requires_grad=True), torch.from_numpy(idx).long(), torch.from_numpy(g)

      def torch_step() -> None:
        tw.grad = None
        torch.nn.functional.embedding(ti, tw).backward(tg)
      tt = median_time(torch_step, repeat)
    tp, tn = median_time(step, repeat), median_time(np_step, repeat)
    report(f"embedding fwd+bwd {tokens} of {vocab}x{width}", tp, tn, tt, 2 * w.nbytes, "GB/s")


def bench_conv(repeat: int) -> None:
  """The issue's 3x3 convolution, and padded 5x5 and 7x7 ones (whose kernel taps the heuristic writes out)."""
  for xs, ws, pad in [((16, 32, 56, 56), (64, 32, 3, 3), 1), ((128, 32, 20, 20), (32, 32, 5, 5), 2),
                      ((32, 16, 56, 56), (64, 16, 7, 7), 3)]:
    rng = np.random.default_rng(4)
    xn, wn = rng.standard_normal(xs, dtype=np.float32), rng.standard_normal(ws, dtype=np.float32)
    x, w = realized(xn), realized(wn)
    got = x.conv2d(w, padding=pad).numpy()
    tt = None
    if torch is not None:
      xt, wt = torch.from_numpy(xn), torch.from_numpy(wn)
      np.testing.assert_allclose(got, torch.nn.functional.conv2d(xt, wt, padding=pad).numpy(), rtol=1e-3, atol=1e-3)
      tt = median_time(lambda: torch.nn.functional.conv2d(xt, wt, padding=pad), repeat)
    tp = median_time(lambda: x.conv2d(w, padding=pad).realize(), repeat)
    flops = 2 * got.size * ws[1] * ws[2] * ws[3]
    report(f"conv2d {'x'.join(map(str, xs))}, {ws[0]}x{ws[2]}x{ws[3]}, pad {pad}", tp, None, tt, flops, "GFLOP/s")


def bench_reduce(n: int, repeat: int) -> None:
  an = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
  a = realized(an)
  np.testing.assert_allclose(a.sum(axis=1).numpy(), an.sum(axis=1), rtol=1e-3, atol=1e-2)
  assert a.max().item() == an.max()
  # the same sum replayed by TinyJit: its launch without the realize's Python (graph, schedule lookup, rebinding),
  # which is what separates the kernel from torch's whole call when the input comes from DRAM
  jitted = TinyJit(lambda x: x.sum(axis=1).realize())
  for _ in range(3): got = jitted(a)
  np.testing.assert_allclose(got.numpy(), an.sum(axis=1), rtol=1e-3, atol=1e-2)
  at = torch.from_numpy(an) if torch is not None else None
  for name, fp, fn, ft in [("a.sum(axis=1)", lambda: a.sum(axis=1).realize(), lambda: an.sum(axis=1), lambda t: t.sum(dim=1)),
                           ("a.sum(axis=1) TinyJit", lambda: jitted(a), lambda: an.sum(axis=1), lambda t: t.sum(dim=1)),
                           ("a.max()", lambda: a.max().realize(), lambda: an.max(), lambda t: t.max())]:
    # a 1 ms call within a few percent of torch's: timed in rounds (see median_times_in_rounds)
    tp, tn, *tt = median_times_in_rounds([fp, fn] + ([lambda: ft(at)] if at is not None else []), repeat)
    report(f"{name} {n}x{n}", tp, tn, tt[0] if tt else None, n * n * 4, "GB/s")


def bench_sibling_reductions(n: int, repeat: int) -> None:
  """`Tensor.realize(x.sum(1), x.max(1), (x*x).sum(1))`: one multi-output kernel reading x once (horizontal fusion)
  against three kernels reading it three times (Context(HFUSE=0)), timed in alternation."""
  xn = np.random.default_rng(2).standard_normal((n, n), dtype=np.float32)
  x = realized(xn)

  def run() -> list[Tensor]:
    outs = [x.sum(1), x.max(1), (x * x).sum(1)]
    Tensor.realize(*outs)
    return outs

  def unfused() -> list[Tensor]:
    with Context(HFUSE=0): return run()
  for o, e in zip(run() + unfused(), [xn.sum(1), xn.max(1), (xn * xn).sum(1)] * 2):
    np.testing.assert_allclose(o.numpy(), e, rtol=1e-3, atol=1e-2)
  t_fused, t_unfused = median_times([run, unfused], repeat)
  t_numpy = median_time(lambda: (xn.sum(1), xn.max(1), np.einsum("ij,ij->i", xn, xn)), repeat)
  report(f"sum,max,sumsq(axis=1) {n}x{n} fused", t_fused, t_numpy, None, n * n * 4, "GB/s")
  report(f"sum,max,sumsq(axis=1) {n}x{n} unfused", t_unfused, t_numpy, None, n * n * 4, "GB/s")
  print(f"{'  horizontal fusion speedup':<34}  {t_unfused / t_fused:6.2f}x (fused vs unfused, same run)", flush=True)


def bench_matmul(n: int, repeat: int) -> None:
  rng = np.random.default_rng(2)
  an, bn = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
  a, b = realized(an), realized(bn)
  st = time.perf_counter()
  got = (a @ b).numpy()
  first = time.perf_counter() - st
  np.testing.assert_allclose(got, an @ bn, rtol=1e-3, atol=1e-2 * np.sqrt(n))
  tp = first if first > 5 else median_time(lambda: (a @ b).realize(), repeat, warmup=0)
  tn = median_time(lambda: an @ bn, repeat)
  tt = None
  if torch is not None:
    at, bt = torch.from_numpy(an), torch.from_numpy(bn)
    tt = median_time(lambda: at @ bt, repeat)
  report(f"matmul {n}x{n} float32", tp, tn, tt, 2 * n ** 3, "GFLOP/s")


def bench_linear(m: int, k: int, n: int, repeat: int) -> None:
  """x @ w.T, a linear layer's layout (nn.Linear keeps w as out x in): both operands read along the sum."""
  rng = np.random.default_rng(5)
  xn, wn = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((n, k), dtype=np.float32)
  x, w = realized(xn), realized(wn)
  np.testing.assert_allclose((x @ w.T).numpy(), xn @ wn.T, rtol=1e-3, atol=1e-2 * np.sqrt(k))
  tp = median_time(lambda: (x @ w.T).realize(), repeat)
  tn = median_time(lambda: xn @ wn.T, repeat)
  tt = None
  if torch is not None:
    xt, wt = torch.from_numpy(xn), torch.from_numpy(wn)
    tt = median_time(lambda: torch.nn.functional.linear(xt, wt), repeat)
  report(f"x @ w.T {m}x{k} by {n}x{k} (linear)", tp, tn, tt, 2 * m * k * n, "GFLOP/s")


def bench_launch(repeat: int) -> None:
  from plugrad.engine import compile_for
  from plugrad.registry import get_registry
  x = realized(np.ones(16, np.float32))
  # end to end: build, schedule and run one tiny kernel per iteration
  def step():
    nonlocal x
    x = (x + 1).realize()
  iters = 2000
  step()
  st = time.perf_counter()
  for _ in range(iters): step()
  per_realize = (time.perf_counter() - st) / iters
  # the launch alone: call the loaded kernel on its buffers
  y = Tensor.ones(16, device="CPU").contiguous().realize()
  item = [it for it in (y * 2).schedule() if not it.is_copy][0]
  ck = compile_for(get_registry().device("CPU"), item.ast)
  raws = [b.raw for b in item.bufs]
  runner, gs = ck.runner, ck.program.global_size
  runner(*raws, global_size=gs, local_size=None)
  st = time.perf_counter()
  for _ in range(iters * 10): runner(*raws, global_size=gs, local_size=None)
  per_launch = (time.perf_counter() - st) / (iters * 10)
  tn = median_time(lambda: np.ones(16, np.float32) + 1, 200)
  print(f"{'launch overhead (16-elem x+1)':<34}  kernel call {per_launch*1e6:7.2f} us   realize end to end "
        f"{per_realize*1e6:7.2f} us/kernel   (numpy x+1: {tn*1e6:.2f} us)", flush=True)


_MLP = """
import time, sys
import numpy as np
st = time.perf_counter()
from plugrad import Tensor
Tensor.manual_seed(0)
x = Tensor.rand(64, 784, device="CPU").realize()
w1, b1 = Tensor.rand(784, 256, device="CPU").realize(), Tensor.rand(256, device="CPU").realize()
w2, b2 = Tensor.rand(256, 10, device="CPU").realize(), Tensor.rand(10, device="CPU").realize()
t0 = time.perf_counter()
out = ((x @ w1 + b1).relu() @ w2 + b2).softmax(axis=-1).numpy()
t1 = time.perf_counter()
out = ((x @ w1 + b1).relu() @ w2 + b2).softmax(axis=-1).numpy()
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def bench_compile() -> None:
  with tempfile.TemporaryDirectory() as cache:
    env = {**os.environ, "PLUGRAD_CACHE_DIR": cache, "DEVICE": "CPU"}
    runs = []
    for _ in range(2):  # first with an empty disk cache, then with it filled
      out = subprocess.run([sys.executable, "-c", _MLP], env=env, capture_output=True, text=True, check=True).stdout
      runs.append(tuple(float(v) for v in out.split()))
  cold, run = runs[0]
  warm, _ = runs[1]
  print(f"{'MLP forward 64x784-256-10 softmax':<34}  first call, cold cache {cold*1e3:8.1f} ms   warm disk cache "
        f"{warm*1e3:8.1f} ms   already compiled {run*1e3:6.2f} ms", flush=True)


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--repeat", type=int, default=7)
  ap.add_argument("--quick", action="store_true", help="smaller sizes (a smoke test)")
  ap.add_argument("--no-4096", action="store_true", help="skip the 4096x4096 matmul")
  ap.add_argument("--siblings", action="store_true", help="only the horizontal fusion case (sibling reductions)")
  args = ap.parse_args()
  from plugrad_cpu_llvm.runtime import cpu_count
  print(f"plugrad CPU bench: {cpu_count()} cores, numpy {np.__version__}, torch {torch.__version__ if torch else 'not installed'}")
  n = 512 if args.quick else 4096
  if args.siblings: return bench_sibling_reductions(n, args.repeat)
  bench_copy(args.repeat)
  bench_e2e(n, args.repeat)
  bench_e2e_contended(n, args.repeat)
  bench_reduce(n, max(args.repeat, 25))  # a 1 ms call: more samples for a steadier median
  bench_sibling_reductions(n, args.repeat)
  bench_softmax(n, args.repeat)
  bench_transcendentals(1024, args.repeat)
  bench_topk(8, 50257, 50, args.repeat)
  bench_cumsum(args.repeat)
  bench_cat(32, 100_000, args.repeat)
  bench_cat_columns(n, args.repeat)
  bench_layout(args.repeat)
  bench_embedding_backward(args.repeat)
  bench_conv(args.repeat)
  bench_matmul(256 if args.quick else 1024, args.repeat)
  bench_linear(64, 784, 256, args.repeat)
  bench_linear(512, 64, 192, args.repeat)  # a transformer's qkv projection: a sum of 4 vectors, too few outputs to copy
  bench_linear(2048, 64, 1024, args.repeat)  # a short sum: the weight copied row-major first
  if not args.quick: bench_linear(1024, 1024, 1024, args.repeat)
  if not (args.quick or args.no_4096): bench_matmul(4096, 1)
  bench_launch(args.repeat)
  bench_compile()


if __name__ == "__main__":
  main()
