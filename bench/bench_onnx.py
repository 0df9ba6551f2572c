"""ONNX models on plugrad against onnxruntime, in the same run.

Exports a few networks from torch (a ResNet-style CNN, a transformer encoder, an LSTM), runs each with
plugrad.nn.onnx (TinyJit replay, the default device unless --device) and with onnxruntime's CPU provider,
and prints per model: the largest relative difference of the outputs, the median time per call of each,
and the speed ratio (>1: plugrad is faster). Run: `python bench/bench_onnx.py` (options: --quick,
--device X, --repeat N). Needs torch, onnx and onnxruntime (the test extra).
"""
from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort
import torch

from plugrad.nn.onnx import OnnxRunner, time_model

from _timing import median_time  # bench/ is the script's folder, so on sys.path


class Block(torch.nn.Module):
  def __init__(self, c: int, stride: int) -> None:
    super().__init__()
    self.conv1 = torch.nn.Conv2d(c // stride, c, 3, stride, 1, bias=False)
    self.bn1 = torch.nn.BatchNorm2d(c)
    self.conv2 = torch.nn.Conv2d(c, c, 3, 1, 1, bias=False)
    self.bn2 = torch.nn.BatchNorm2d(c)
    self.down = torch.nn.Conv2d(c // stride, c, 1, stride, bias=False) if stride > 1 else torch.nn.Identity()

  def forward(self, x: torch.Tensor) -> torch.Tensor:
    return (self.bn2(self.conv2(self.bn1(self.conv1(x)).relu())) + self.down(x)).relu()


def resnet(width: int) -> torch.nn.Module:
  return torch.nn.Sequential(torch.nn.Conv2d(3, width, 3, 1, 1), torch.nn.BatchNorm2d(width), torch.nn.ReLU(),
                             Block(width, 1), Block(2 * width, 2), Block(4 * width, 2),
                             torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4 * width, 10))


class Encoder(torch.nn.Module):
  def __init__(self, d: int, layers: int) -> None:
    super().__init__()
    self.layers = torch.nn.ModuleList(torch.nn.TransformerEncoderLayer(d, 4, 4 * d, batch_first=True)
                                      for _ in range(layers))

  def forward(self, x: torch.Tensor) -> torch.Tensor:
    for layer in self.layers: x = layer(x)
    return x


def cases(quick: bool) -> dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, ...]]]:
  s = 2 if quick else 1
  return {
    "resnet-ish CNN": (lambda: resnet(16 // s), (1, 3, 32 // s, 32 // s)),
    "transformer encoder": (lambda: Encoder(64 // s, 2), (1, 32 // s, 64 // s)),
    "LSTM": (lambda: torch.nn.LSTM(32, 64, batch_first=True), (1, 16 // s, 32)),
  }


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="smaller models")
  ap.add_argument("--device", help="plugrad device (default: the default device)")
  ap.add_argument("--repeat", type=int, default=20)
  args = ap.parse_args()
  torch.manual_seed(0)
  print(f"{'model':<22} {'rel err':>12} {'plugrad ms':>11} {'ort ms':>9} {'vs ort':>7} {'kernels':>8}")
  with tempfile.TemporaryDirectory() as tmp:
    for name, (make, shape) in cases(args.quick).items():
      path = Path(tmp) / "m.onnx"
      with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(make().eval(), (torch.randn(shape),), str(path), dynamo=False, input_names=["x"],
                          opset_version=17)
      x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
      opts = ort.SessionOptions()
      sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
      want = sess.run(None, {"x": x})
      runner = OnnxRunner(onnx.load(str(path)), device=args.device)
      rep = time_model(runner, {"x": x}, runs=args.repeat)
      diff = max(float(np.max(np.abs(g.numpy() - w)) / np.max(np.abs(w))) for g, w in zip(rep.outputs.values(), want))
      t_ort = median_time(lambda: sess.run(None, {"x": x}), args.repeat)
      print(f"{name:<22} {diff:>12.2e} {rep.seconds * 1e3:>11.3f} {t_ort * 1e3:>9.3f} {t_ort / rep.seconds:>6.2f}x "
            f"{rep.kernels:>8}")


if __name__ == "__main__":
  main()
