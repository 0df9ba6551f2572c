"""plugrad.nn.onnx as an `onnx.backend` backend, so that onnx's own backend test suite
(`onnx.backend.test.BackendTest(PlugradBackend, __name__)`) can run against it."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from plugrad.nn.onnx import OnnxRunner


class PlugradBackendRep(BackendRep):
  """A prepared model: `run` takes the inputs in the graph's order (or a dict) and returns numpy outputs."""

  def __init__(self, runner: OnnxRunner):
    self.runner = runner

  def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
    if isinstance(inputs, dict): feeds = dict(inputs)
    else:
      seq: Sequence[Any] = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
      if len(seq) != len(self.runner.inputs):
        raise ValueError(f"the model takes {len(self.runner.inputs)} inputs ({list(self.runner.inputs)}), "
                         f"got {len(seq)}")
      feeds = dict(zip(self.runner.inputs, seq))
    return tuple(t.numpy() for t in self.runner(feeds).values())


class PlugradBackend(Backend):
  """onnx's backend interface over OnnxRunner. onnx names host execution "CPU"; it runs on `device`
  (None: plugrad's default device)."""
  device: str | None = None

  @classmethod
  def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> PlugradBackendRep:
    super().prepare(model, device, **kwargs)  # onnx's model checker
    return PlugradBackendRep(OnnxRunner(model, device=cls.device))

  @classmethod
  def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
    return cls.prepare(model, device, **kwargs).run(inputs)

  @classmethod
  def supports_device(cls, device: str) -> bool:
    return device == "CPU"
