"""Scheduling time against graph size (issue 17): it must grow linearly, so the time per node stays flat.

Graphs: a deep chain of where/pad/shrink steps, each reading the previous step through two different
views (the shape that once made scheduling and lowering exponential), and a wide elementwise sum of
many inputs. Prints, per size, the nodes, the kernels made, the time to schedule (kernelize and order,
not run) and the time per node. Run: `python bench/bench_schedule.py [--device PYTHON] [--nodes 10000]`.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from plugrad import Tensor
from plugrad.scheduler import count_kernels


def where_chain(steps: int, device: str) -> Tensor:
  x = Tensor(np.arange(8, dtype=np.float32), device=device)
  for i in range(steps): x = (x > i).where(x.pad(((1, 0),)).shrink(((0, 8),)), x * 0.5)
  return x


def wide_sum(inputs: int, device: str) -> Tensor:
  xs = [Tensor(np.full(8, i, dtype=np.float32), device=device) for i in range(inputs)]
  out = xs[0]
  for x in xs[1:]: out = out + x * 2
  return out


def measure(build, size: int, device: str) -> tuple[int, int, float]:
  out = build(size, device)
  nodes = len(out.uop.toposort)
  st = time.perf_counter()
  items = out.schedule()
  return nodes, count_kernels(items), time.perf_counter() - st


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--device", default="PYTHON")
  ap.add_argument("--nodes", type=int, default=10000, help="about how many nodes the largest graph has")
  args = ap.parse_args()
  for name, build, per_step in (("where/pad/shrink chain", where_chain, 8), ("wide elementwise sum", wide_sum, 4)):
    print(name)
    for frac in (8, 4, 2, 1):
      nodes, kernels, seconds = measure(build, args.nodes // per_step // frac, args.device)
      print(f"  {nodes:7d} nodes  {kernels:5d} kernels  {seconds * 1e3:9.1f} ms  {seconds / nodes * 1e6:6.1f} us/node")


if __name__ == "__main__":
  main()
