"""plugrad demo: a small MLP and CNN forward pass on the default device, checked against numpy.

Run with DEBUG=2 to see one line per kernel; DEVICE=NAME picks another device.
"""
from __future__ import annotations

import sys
import time

import numpy as np

from plugrad import Tensor, get_registry
from plugrad.builtins.debug import DebugPlugin
from plugrad.config import DEBUG


def numpy_mlp(x, layers):
  for i, (w, b) in enumerate(layers):
    x = x @ w + b
    if i < len(layers) - 1: x = np.maximum(x, 0)
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def numpy_conv(x, w):
  n, c, h, ww = x.shape
  o, _, kh, kw = w.shape
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  out = np.zeros((n, o, h, ww), np.float32)
  for i in range(kh):
    for j in range(kw): out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + ww], w[:, :, i, j])
  return out


def main() -> None:
  rng = np.random.default_rng(0)
  reg = get_registry()
  device = reg.default_device()
  print(f"device: {device} (available: {', '.join(s.name for s in reg.all_status() if s.available)})")
  # show a line per kernel of the forward passes, as DEBUG=2 does
  if DEBUG < 2: reg.pm.register(DebugPlugin(reg.config.replace(debug=2), stream=sys.stdout), name="demo-debug")

  sizes = [64, 128, 128, 10]
  layers = [(rng.standard_normal((a, b)).astype(np.float32) / np.sqrt(a), rng.standard_normal(b).astype(np.float32) * 0.1)
            for a, b in zip(sizes, sizes[1:])]
  x = rng.standard_normal((32, 64)).astype(np.float32)
  print("\nMLP 64-128-128-10 on a batch of 32, softmax output:")
  t = Tensor(x)
  for i, (w, b) in enumerate(layers):
    t = t @ Tensor(w) + Tensor(b)
    if i < len(layers) - 1: t = t.relu()
  st = time.perf_counter()
  probs = t.softmax(-1).numpy()
  print(f"  realized in {(time.perf_counter() - st) * 1e3:.1f} ms; class of first 8 rows: {probs.argmax(-1)[:8].tolist()}")
  expected = numpy_mlp(x, layers)
  err = float(np.abs(probs - expected).max())
  print(f"  max |plugrad - numpy| = {err:.2e}")
  assert err < 1e-4, "MLP result differs from numpy"

  print("\nconv2d 3x3 (8->16 channels) + relu + global average pool on 2x8x16x16:")
  img = rng.standard_normal((2, 8, 16, 16)).astype(np.float32)
  wt = (rng.standard_normal((16, 8, 3, 3)) / 8).astype(np.float32)
  feat = Tensor(img).conv2d(Tensor(wt), padding=1).relu().mean((2, 3)).numpy()
  ref = np.maximum(numpy_conv(img, wt), 0).mean((2, 3))
  err = float(np.abs(feat - ref).max())
  print(f"  features {feat.shape}, max |plugrad - numpy| = {err:.2e}")
  assert err < 1e-4, "CNN result differs from numpy"
  print("\nok: results match numpy")


if __name__ == "__main__":
  main()
