"""The cost of the path from a realize to the launches (issue 16), against torch eager in the same run.

Prints: the time to realize a tiny graph (schedule cache warm; and right after a 64 MiB scan has pushed the
interpreter's code and data out of the caches, as a large kernel does), TinyJit's replay overhead per kernel
(kernel time subtracted: the replayed kernels run on 1-element buffers), and one training step of an
MLP 64-128-10 (Adam, batch 64) eager, replayed by TinyJit, and in torch eager. Run:
`python bench/bench_engine.py [--device CPU] [--repeat N]`.
"""
from __future__ import annotations

import argparse

import numpy as np

from plugrad import Tensor, TinyJit, nn
from plugrad.config import Context
from plugrad.nn import optim
from plugrad.nn.state import get_parameters

from _timing import median_time  # bench/ is the script's folder, so on sys.path

try:
  import torch
except ImportError:
  torch = None


_SCAN = np.ones(16 << 20, np.float32)  # 64 MiB, twice a 32 MiB last-level cache


def tiny_realize(device: str, repeat: int, cold: bool = False) -> float:
  """Seconds to realize a tiny graph; `cold`: each right after a 64 MiB scan (what a realize's Python costs after
  a large kernel)."""
  a, b = Tensor([1.0, 2.0, 3.0], device=device).realize(), Tensor([4.0, 5.0, 6.0], device=device).realize()
  return median_time(lambda: ((a * b) + 1).realize(), repeat, before=_SCAN.sum if cold else None)


def replay_overhead(device: str, repeat: int, kernels: int = 32) -> tuple[float, int]:
  """Seconds per replayed kernel of a jitted chain of `kernels` dependent 1-element kernels."""
  @TinyJit
  def chain(x):
    for _ in range(kernels): x = (x * 1.0001 + 1).contiguous()
    return x
  x = Tensor([1.0], device=device).realize()
  t = median_time(lambda: chain(x), repeat)
  return t / len(chain.captured.launches), len(chain.captured.launches)


class MLP:
  def __init__(self): self.l1, self.l2 = nn.Linear(64, 128), nn.Linear(128, 10)
  def __call__(self, x): return self.l2(self.l1(x).relu())


def train_step(device: str, jit: bool, repeat: int) -> float:
  Tensor.manual_seed(0)
  model = MLP()
  opt = optim.Adam(get_parameters(model), lr=1e-3)

  def step(x, y):
    opt.zero_grad()
    loss = model(x).sparse_categorical_crossentropy(y).backward()
    opt.step()
    return loss
  step = TinyJit(step) if jit else step
  rng = np.random.default_rng(0)
  x = Tensor(rng.standard_normal((64, 64)).astype(np.float32), device=device).realize()
  y = Tensor(rng.integers(0, 10, 64).astype(np.int32), device=device).realize()
  with Tensor.train(): return median_time(lambda: step(x, y).item(), repeat)


def torch_device(device: str) -> str:
  """Where torch runs for the comparison: the GPU when plugrad's device is CUDA, else the CPU."""
  return "cuda" if device.split(":")[0] == "CUDA" and torch.cuda.is_available() else "cpu"


def torch_train_step(repeat: int, dev: str) -> float:
  torch.manual_seed(0)
  model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(dev)
  opt = torch.optim.Adam(model.parameters(), lr=1e-3)
  x, y = torch.randn(64, 64, device=dev), torch.randint(0, 10, (64,), device=dev)

  def step():
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()
  return median_time(step, repeat)


def torch_tiny(repeat: int, dev: str, cold: bool = False) -> float:
  a, b = torch.tensor([1.0, 2.0, 3.0], device=dev), torch.tensor([4.0, 5.0, 6.0], device=dev)
  return median_time(lambda: (a * b) + 1, repeat, before=_SCAN.sum if cold else None)


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--device", default="CPU")
  ap.add_argument("--repeat", type=int, default=50)
  args = ap.parse_args()
  dev, r = args.device, args.repeat
  t_tiny = tiny_realize(dev, r * 10)
  tdev = torch_device(dev) if torch else "cpu"
  t_torch_tiny = torch_tiny(r * 10, tdev) if torch else None
  print(f"tiny graph (a*b+1, 3 elements) realize   {t_tiny * 1e6:8.1f} us"
        + (f"   torch eager (2 ops) {t_torch_tiny * 1e6:6.1f} us   ratio {t_tiny / t_torch_tiny:5.1f}x" if torch else ""))
  t_cold = tiny_realize(dev, r * 2, cold=True)
  t_torch_cold = torch_tiny(r * 2, tdev, cold=True) if torch else None
  cold_torch = f"   torch eager (2 ops) {t_torch_cold * 1e6:6.1f} us   ratio {t_cold / t_torch_cold:5.1f}x" if torch else ""
  print(f"  the same after a 64 MiB scan (cold)    {t_cold * 1e6:8.1f} us" + cold_torch)
  per_kernel, n = replay_overhead(dev, r)
  with Context(GRAPH=0): per_kernel_py, _ = replay_overhead(dev, r)
  print(f"TinyJit replay, per kernel ({n} kernels)   {per_kernel * 1e6:8.1f} us   "
        f"(from Python, without the device's graph role: {per_kernel_py * 1e6:.1f} us)")
  t_eager, t_jit = train_step(dev, False, r), train_step(dev, True, r)
  with Context(GRAPH=0): t_jit_py = train_step(dev, True, r)
  line = (f"MLP 64-128-10 Adam step, batch 64         eager {t_eager * 1e3:7.3f} ms   TinyJit {t_jit * 1e3:7.3f} ms "
          f"(from Python {t_jit_py * 1e3:.3f} ms)")
  if torch:
    t_torch = torch_train_step(r, tdev)
    line += f"   torch eager ({tdev}) {t_torch * 1e3:7.3f} ms   TinyJit vs torch {t_torch / t_jit:5.2f}x (>1: faster)"
  print(line)


if __name__ == "__main__":
  main()
