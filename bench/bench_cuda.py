"""Benchmarks of the CUDA device (plugrad-cuda) against torch on the same GPU.

Cases (as for the CPU device): the fused elementwise chain ((a*b+c).relu()*2).sum() on 4096x4096,
a.sum(1) and a.max() on 4096x4096, and 4096x4096 matmuls in float32, float16 and bfloat16. Prints per case the
median GPU time of plugrad and of torch (both synchronised), the ratio torch/plugrad (>1: plugrad is
faster), the achieved GB/s or GFLOP/s, and for the memory-bound cases the share of the copy bandwidth
torch's device-to-device copy reaches in the same run. Needs an NVIDIA GPU with its driver, plugrad-cuda
and torch with CUDA; elsewhere it exits with a message saying which is missing. Launch overheads (tiny
realize, TinyJit replay) are bench_engine.py's: `python bench/bench_engine.py --device CUDA`.

Run: `python bench/bench_cuda.py` (options: --n N, --repeat R).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from _timing import median_time  # bench/ is the script's folder, so on sys.path


def _why_not() -> str | None:
  try:
    import plugrad_cuda
  except ImportError:
    return "plugrad-cuda is not installed (pip install -e plugins/cuda)"
  if (reason := plugrad_cuda.probe()) is not None: return f"the CUDA device cannot run here: {reason}"
  try:
    import torch
  except ImportError:
    return "torch is not installed (the reference this benchmark compares against)"
  if not torch.cuda.is_available(): return "torch has no CUDA device"
  return None


def report(name: str, tp: float, tt: float, work: float, unit: str, copy_bw: float | None = None,
           tj: float | None = None) -> None:
  """tp: plugrad through realize(); tj: the same replayed by TinyJit (its kernels as one CUDA graph, no Python
  per kernel), the figure the ratio and the rates use when given."""
  k = tj if tj is not None else tp
  share = f"  {work / k / copy_bw:5.0%} of copy bandwidth" if copy_bw else ""
  jit = f" (realize {tp*1e3:.3f} ms)" if tj is not None else ""
  print(f"{name:<36}  plugrad {k*1e3:9.3f} ms{jit}  torch {tt*1e3:9.3f} ms  torch/plugrad {tt / k:6.2f}x  "
        f"plugrad {work / k / 1e9:8.1f} {unit}  (torch {work / tt / 1e9:.1f} {unit}){share}", flush=True)


def timed(expr, sync, repeat: int, warmup: int = 2) -> tuple[float, float]:
  """(realize, TinyJit replay): median seconds of `expr()` realized, then of its TinyJit capture replayed."""
  from plugrad import TinyJit
  jit = TinyJit(expr)
  return (median_time(lambda: expr().realize(), sync=sync, repeat=repeat, warmup=warmup),
          median_time(jit, sync=sync, repeat=repeat, warmup=max(warmup, 2)))


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--n", type=int, default=4096, help="matrix side (default 4096)")
  parser.add_argument("--repeat", type=int, default=10, help="timed runs per case (median reported)")
  args = parser.parse_args()
  if (reason := _why_not()) is not None:
    print(f"bench_cuda: not run: {reason}", file=sys.stderr)
    return 2

  import torch

  from plugrad import Tensor, get_registry
  runtime = get_registry().device("CUDA").runtime
  sync_p, sync_t = runtime.synchronize, torch.cuda.synchronize
  n, repeat = args.n, args.repeat
  rng = np.random.default_rng(0)
  an, bn, cn = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(3))
  a, b, c = (Tensor(x, device="CUDA").realize() for x in (an, bn, cn))
  at, bt, ct = (torch.from_numpy(x).cuda() for x in (an, bn, cn))
  print(f"device: {torch.cuda.get_device_name()}  n={n}  median of {repeat}", flush=True)
  dt = torch.empty_like(at)
  copy_bw = 2 * n * n * 4 / median_time(lambda: dt.copy_(at), sync=sync_t, repeat=repeat)
  print(f"torch device-to-device copy: {copy_bw / 1e9:.1f} GB/s (bytes read + written)", flush=True)

  # fused elementwise chain + full reduce
  got = ((a * b + c).relu() * 2).sum().item()
  ref = float(((an.astype(np.float64) * bn + cn).clip(0) * 2).sum())
  assert abs(got - ref) <= 1e-3 * abs(ref), (got, ref)
  tp, tj = timed(lambda: ((a * b + c).relu() * 2).sum(), sync_p, repeat)
  tt = median_time(lambda: ((at * bt + ct).relu() * 2).sum(), sync=sync_t, repeat=repeat)
  report(f"((a*b+c).relu()*2).sum() {n}x{n}", tp, tt, 3 * n * n * 4, "GB/s", copy_bw, tj)
  tp, tj = timed(lambda: a * 2, sync_p, repeat)
  tt = median_time(lambda: at * 2, sync=sync_t, repeat=repeat)
  report(f"a*2 {n}x{n} (copy-like)", tp, tt, 2 * n * n * 4, "GB/s", copy_bw, tj)

  # reductions
  np.testing.assert_allclose(a.sum(1).numpy(), an.sum(1), rtol=1e-3, atol=1e-2)
  np.testing.assert_allclose(a.sum(0).numpy(), an.sum(0), rtol=1e-3, atol=1e-2)
  assert a.max().item() == an.max()
  for name, fp, ft in [("a.sum(1)", lambda: a.sum(1), lambda: at.sum(1)), ("a.sum(0)", lambda: a.sum(0), lambda: at.sum(0)),
                       ("a.max()", lambda: a.max(), lambda: at.max())]:
    tp, tj = timed(fp, sync_p, repeat)
    report(f"{name} {n}x{n}", tp, median_time(ft, sync=sync_t, repeat=repeat), n * n * 4, "GB/s", copy_bw, tj)

  # matmul (TF32 off in torch: plugrad computes in full float32)
  torch.backends.cuda.matmul.allow_tf32 = False
  got = (a @ b).numpy()
  np.testing.assert_allclose(got, an @ bn, rtol=1e-3, atol=1e-2 * np.sqrt(n))
  tp = median_time(lambda: (a @ b).realize(), sync=sync_p, repeat=max(3, repeat // 3), warmup=1)
  tt = median_time(lambda: at @ bt, sync=sync_t, repeat=repeat)
  report(f"matmul {n}x{n} float32", tp, tt, 2 * n ** 3, "GFLOP/s")

  # float16 and bfloat16 matmuls (both on tensor cores where the GPU has them)
  for name, torch_dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
    ah, bh = a.cast(name).realize(), b.cast(name).realize()
    aht, bht = at.to(torch_dtype), bt.to(torch_dtype)
    got = (ah @ bh).cast("float32").numpy()
    np.testing.assert_allclose(got, (aht @ bht).float().cpu().numpy(), rtol=2e-2, atol=0.1 * np.sqrt(n))
    tp = median_time(lambda: (ah @ bh).realize(), sync=sync_p, repeat=max(3, repeat // 3), warmup=1)
    tt = median_time(lambda: aht @ bht, sync=sync_t, repeat=repeat)
    report(f"matmul {n}x{n} {name}", tp, tt, 2 * n ** 3, "GFLOP/s")
  return 0


if __name__ == "__main__":
  sys.exit(main())
