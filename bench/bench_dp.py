"""Data-parallel training step time on 1 and 2 processes (mpirun), and the scaling between them.

The step is examples/train_digits_dp.py's (the digits CNN without BatchNorm, Adam, gradients averaged with
`plugrad.nn.distributed.all_reduce_`, one MPI_Allreduce per dtype). The global batch is the same at every process
count, so perfect scaling halves the step time on 2 processes. Printed, not asserted: on a machine with fewer free
cores than processes, or a batch this small, per-step Python work and waiting in the all-reduce dominate.

Run: `python bench/bench_dp.py` (options: --steps N, --batch N, --procs 1,2). Needs mpirun and plugrad-mpi; each
process runs its CPU kernels on one thread (PLUGRAD_CPU_THREADS=1), so the processes are what scales.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(steps: int, batch: int) -> None:
  """Inside the MPI job: train and print rank 0's median step time."""
  import statistics
  import time

  import numpy as np

  sys.path.insert(0, str(ROOT / "examples"))
  from plugrad import Tensor, nn
  from plugrad.nn import distributed
  from plugrad.nn.state import get_parameters
  from train_digits_dp import DigitsNet, as_float64, load_digits

  group = distributed.world()
  x, y, _, _ = load_digits()
  Tensor.manual_seed(0)
  model = as_float64(DigitsNet(batchnorm=False))
  params = get_parameters(model)
  opt = nn.optim.Adam(params, lr=3e-3)
  rng = np.random.default_rng(0)
  times = []
  with Tensor.train():
    for _ in range(steps):
      idx = rng.integers(0, len(x), batch)
      mine = idx[group.rank * batch // group.size:(group.rank + 1) * batch // group.size]
      st = time.perf_counter()
      opt.zero_grad()
      loss = model(Tensor(x[mine])).sparse_categorical_crossentropy(Tensor(y[mine]))
      loss.backward()
      distributed.all_reduce_([loss, *[p.grad for p in params]], average=True)
      opt.step()
      times.append(time.perf_counter() - st)
  if group.rank == 0: print(f"STEP_MS {statistics.median(times[5:]) * 1e3:.3f}")


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--steps", type=int, default=40)
  ap.add_argument("--batch", type=int, default=256)
  ap.add_argument("--procs", default="1,2")
  ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.worker: return worker(args.steps, args.batch)
  if shutil.which("mpirun") is None: sys.exit("bench_dp needs mpirun: apt-get install openmpi-bin libopenmpi-dev")
  # a waiting rank yields its core instead of spinning on it: with more processes than free cores, a spinning rank
  # takes the core the rank it waits for needs (4x slower steps here without it)
  env = {**os.environ, "PLUGRAD_CPU_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
         "OMPI_MCA_mpi_yield_when_idle": "1"}
  print(f"data-parallel digits CNN step, global batch {args.batch}, median of {args.steps - 5} steps, "
        f"{os.cpu_count()} cores on this machine")
  base = None
  for n in [int(p) for p in args.procs.split(",")]:
    cmd = ["mpirun", "-np", str(n), "--oversubscribe", sys.executable, __file__, "--worker", "--steps", str(args.steps),
           "--batch", str(args.batch)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("STEP_MS")), None)
    if out.returncode or line is None:
      print(f"  {n} process(es): failed\n{(out.stdout + out.stderr)[-2000:]}")
      continue
    ms = float(line.split()[1])
    base = base or ms  # the first entry's time (1 process by default) is what the others are compared with
    print(f"  {n} process{'es' if n > 1 else ''}: {ms:8.2f} ms/step   speedup: {base / ms:5.2f}x")


if __name__ == "__main__":
  main()
