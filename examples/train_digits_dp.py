"""Data-parallel training of the digits CNN across processes, checked against the same training in one process.

  pip install plugrad plugrad-cpu-llvm plugrad-mpi scikit-learn      # and Open MPI: apt-get install openmpi-bin
  mpirun -np 2 -x PLUGRAD_CPU_THREADS=1 python examples/train_digits_dp.py
  python examples/train_digits_dp.py                                  # alone: a group of one, the same steps

Every process draws the same global batches (same seed) and trains on its part of each (batch / N images); after
`backward` the gradients (and the loss, for the curve) are averaged over the processes with
`plugrad.nn.distributed.all_reduce_`, which plugrad-mpi runs as MPI_Allreduce, so every process takes the step that
one process takes on the whole batch. Rank 0 then trains the same model alone on the same global batches and
compares the two loss curves; the last line says `loss curves match` or `loss curves MISMATCH` with the largest
difference (tolerance 1e-5).

The model is train_digits.py's CNN without its BatchNorm layers (batch statistics of a part of a batch are not
those of the whole batch, so with BatchNorm the two runs would differ by design), with its weights in float64. In
float32 the runs agree as far as float32 can: the one process sums 64 images' losses where the data-parallel run
sums two halves of 32, which rounds differently by about 1e-7, and training amplifies such differences (past 1e-5
within about 40 Adam steps here, 3e-4 after 100: `--float32` shows it). In float64 the same rounding differences
are about 1e-16 and stay far below the tolerance, so the check sees the data-parallel algorithm, not rounding.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_digits.py beside this file

from plugrad import Tensor, nn  # noqa: E402
from plugrad.nn import distributed  # noqa: E402
from plugrad.nn.state import get_parameters, get_state_dict  # noqa: E402
from train_digits import DigitsNet, accuracy, load_digits  # noqa: E402

TOLERANCE = 1e-5


def as_float64(model: DigitsNet) -> DigitsNet:
  """The model with every tensor replaced by a float64 copy of its values."""
  for name, t in get_state_dict(model).items():
    *path, attr = name.split(".")
    owner = model
    for part in path: owner = getattr(owner, part)
    setattr(owner, attr, Tensor(t.numpy().astype(np.float64)))
  return model


def train(x: np.ndarray, y: np.ndarray, steps: int, batch: int, lr: float, seed: int, rank: int,
          size: int, float32: bool = False) -> tuple[list[float], float, DigitsNet]:
  """Adam steps on this process's part of each global batch; returns the loss curve (the global batch's mean
  loss at each step), the seconds per step after the first few, and the model."""
  Tensor.manual_seed(seed)
  model = DigitsNet(batchnorm=False)
  if not float32: model = as_float64(model)
  params = get_parameters(model)
  if size > 1: distributed.broadcast_(params)  # equal already (same seed); made certain, as any script should
  opt = nn.optim.Adam(params, lr=lr)
  rng = np.random.default_rng(seed)
  losses: list[float] = []
  warm, start = min(5, steps - 1), 0.0
  with Tensor.train():
    for step in range(steps):
      if step == warm: start = time.perf_counter()
      idx = rng.integers(0, len(x), batch)
      mine = idx[rank * batch // size:(rank + 1) * batch // size]
      opt.zero_grad()
      loss = model(Tensor(x[mine])).sparse_categorical_crossentropy(Tensor(y[mine]))
      loss.backward()
      grads = [p.grad for p in params if p.grad is not None]
      Tensor.realize(loss, *grads)  # the loss of this step's weights, computed with its gradients
      if size > 1: distributed.all_reduce_([loss, *grads], average=True)
      opt.step()
      losses.append(loss.item())
  return losses, (time.perf_counter() - start) / max(steps - warm, 1), model


def main(argv: list[str] | None = None) -> float:
  """Train data-parallel, compare with one process on rank 0; returns the largest loss difference."""
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--steps", type=int, default=100)
  ap.add_argument("--batch", type=int, default=64, help="the global batch, split over the processes")
  ap.add_argument("--lr", type=float, default=3e-3)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--float32", action="store_true", help="train in float32 (the curves then drift apart by rounding)")
  args = ap.parse_args(argv)

  group = distributed.world()
  rank, size = group.rank, group.size
  if args.batch % size: sys.exit(f"the global batch ({args.batch}) must split evenly over {size} processes")
  x_train, y_train, x_test, y_test = load_digits(seed=args.seed)
  dp, dp_step, model = train(x_train, y_train, args.steps, args.batch, args.lr, args.seed, rank, size, args.float32)
  if rank != 0: return 0.0
  print(f"data-parallel: {size} process{'es' if size > 1 else ''} x {args.batch // size} images, "
        f"{dp_step * 1e3:.1f} ms/step, test accuracy {accuracy(model, x_test, y_test) * 100:.2f}%")
  one, one_step, _ = train(x_train, y_train, args.steps, args.batch, args.lr, args.seed, 0, 1, args.float32)
  print(f"one process:   1 process x {args.batch} images, {one_step * 1e3:.1f} ms/step")
  for step in range(0, args.steps, max(args.steps // 10, 1)):
    print(f"  step {step + 1:4d}  loss {dp[step]:.6f} (data-parallel)  {one[step]:.6f} (one process)")
  diff = float(np.max(np.abs(np.array(dp) - np.array(one))))
  if diff <= TOLERANCE: print(f"loss curves match (largest difference {diff:.2e} over {args.steps} steps)")
  else: print(f"loss curves MISMATCH: largest difference {diff:.2e} > {TOLERANCE:g} over {args.steps} steps")
  return diff


if __name__ == "__main__":
  sys.exit(0 if main() <= TOLERANCE else 1)
