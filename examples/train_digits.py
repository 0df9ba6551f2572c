"""Train a small CNN on scikit-learn's bundled digits (1797 8x8 images, no download), save it, load it back.

  pip install plugrad plugrad-cpu-llvm scikit-learn   # or: pip install -e ".[examples]"
  python examples/train_digits.py            # trains (under a minute on a laptop CPU), saves digits.safetensors
  python examples/train_digits.py            # the checkpoint exists now: loads it and evaluates
  python examples/train_digits.py --train    # trains again even though the checkpoint exists

Runs on the default device; DEVICE=NAME picks another. The model, the optimizer and the checkpoint
are plain tinygrad 0.14 code: `nn.Conv2d`, `nn.BatchNorm`, `nn.optim.Adam`, `nn.state.safe_save`.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from plugrad import Tensor, nn
from plugrad.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_save


class DigitsNet:
  """conv(1->16) bn relu, conv(16->32) bn relu, 2x2 max pool, linear(512->10).

  :param batchnorm: False leaves the BatchNorm layers out (data-parallel training: batch statistics of each
    process's part of a batch are not those of the whole batch)."""
  def __init__(self, batchnorm: bool = True):
    self.c1, self.bn1 = nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16) if batchnorm else None
    self.c2, self.bn2 = nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32) if batchnorm else None
    self.fc = nn.Linear(32 * 4 * 4, 10)

  def __call__(self, x: Tensor) -> Tensor:
    x = self.c1(x)
    x = (self.bn1(x) if self.bn1 is not None else x).relu()
    x = self.c2(x)
    x = (self.bn2(x) if self.bn2 is not None else x).relu().max_pool2d(2)
    return self.fc(x.flatten(1))


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """(x_train, y_train, x_test, y_test): images as float32 (N, 1, 8, 8) in [0, 1], labels int32."""
  try:
    from sklearn.datasets import load_digits as sk_load_digits
  except ImportError:
    sys.exit("this example needs scikit-learn for its bundled digits data: pip install scikit-learn")
  data = sk_load_digits()
  x = (data.images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
  y = data.target.astype(np.int32)
  order = np.random.default_rng(seed).permutation(len(x))
  n_test = int(len(x) * test_fraction)
  test, train = order[:n_test], order[n_test:]
  return x[train], y[train], x[test], y[test]


def accuracy(model: DigitsNet, x: np.ndarray, y: np.ndarray) -> float:
  """The fraction of `x` the model classifies as `y` (evaluation mode: BatchNorm's running statistics)."""
  return float((model(Tensor(x)).argmax(-1).numpy() == y).mean())


def progress(step: int, total: int, loss: float, acc: float, rate: float, width: int = 24) -> str:
  done = int(width * step / total)
  return (f"\r{step:4d}/{total} [{'#' * done}{'.' * (width - done)}] loss {loss:.4f}  batch acc {acc * 100:5.1f}%  "
          f"{rate:5.1f} steps/s")


def train(model: DigitsNet, x: np.ndarray, y: np.ndarray, steps: int, batch: int, lr: float, seed: int = 0) -> None:
  """`steps` Adam steps on random batches, with a progress bar on stderr."""
  opt = nn.optim.Adam(get_parameters(model), lr=lr)
  rng = np.random.default_rng(seed)
  mark, mark_step = time.perf_counter(), 0
  with Tensor.train():
    for step in range(1, steps + 1):
      idx = rng.integers(0, len(x), batch)
      xb, yb = Tensor(x[idx]), Tensor(y[idx])
      opt.zero_grad()
      logits = model(xb)
      loss = logits.sparse_categorical_crossentropy(yb)
      loss.backward()
      # the step realizes the loss and the logits with the update (one forward pass): read below, they are this
      # step's, from the weights before the update
      opt.step()
      if step % 10 == 0 or step == steps:
        acc = float((logits.argmax(-1).numpy() == y[idx]).mean())
        now = time.perf_counter()
        # the rate of the last 10 steps, so the compiling in the first ones does not weigh on the whole run
        rate, mark, mark_step = (step - mark_step) / (now - mark), now, step
        print(progress(step, steps, loss.item(), acc, rate), end="", file=sys.stderr, flush=True)
  print(file=sys.stderr)


def main(argv: list[str] | None = None) -> float:
  """Train (or load) and evaluate; returns the test accuracy."""
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--checkpoint", type=Path, default=Path("digits.safetensors"), help="where the weights are saved")
  ap.add_argument("--eval", action="store_true", help="only load the checkpoint and evaluate")
  ap.add_argument("--train", action="store_true", help="train even when the checkpoint exists")
  ap.add_argument("--steps", type=int, default=200)
  ap.add_argument("--batch", type=int, default=64)
  ap.add_argument("--lr", type=float, default=3e-3)
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args(argv)

  Tensor.manual_seed(args.seed)
  x_train, y_train, x_test, y_test = load_digits(seed=args.seed)
  model = DigitsNet()
  if args.eval or (args.checkpoint.exists() and not args.train):
    if not args.checkpoint.exists(): sys.exit(f"no checkpoint at {args.checkpoint}; run without --eval to train one")
    load_state_dict(model, safe_load(args.checkpoint))
    print(f"loaded {args.checkpoint}")
  else:
    print(f"training on {len(x_train)} digits ({Tensor(0).device})")
    train(model, x_train, y_train, args.steps, args.batch, args.lr, args.seed)
    safe_save(get_state_dict(model), args.checkpoint, metadata={"steps": str(args.steps)})
    print(f"saved {args.checkpoint}")
  acc = accuracy(model, x_test, y_test)
  print(f"test accuracy: {acc * 100:.2f}% on {len(x_test)} held-out digits")
  return acc


if __name__ == "__main__":
  main()
