"""Run ONNX models on any plugrad device: `OnnxRunner(path_or_model)({input_name: Tensor | ndarray})`.

The model is parsed by the `onnx` package (`pip install plugrad[onnx]`), its weights (external data files
included) become Tensors on the runner's device, and each call builds the model's graph from Tensor
methods (`ops.py`), so it is fused, scheduled and compiled like any other plugrad program and returns
lazy output Tensors. Every operator and attribute is checked when the runner is made: an unsupported one
raises NotImplementedError naming the operator, the node and the opset before anything runs.

Values that decide shapes (Reshape's shape, Slice's bounds, the `Shape -> Gather -> Concat` chains that
exporters emit) are read on the host. Every node whose inputs are all constant (weights, `Constant`
nodes, and `Shape` of anything whose shape the input shapes decide) is folded: computed and realized
once per set of input shapes and reused by later calls, so a `TinyJit` around the runner captures only
the kernels that depend on the inputs.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from plugrad.dtype import DType, dtypes
from plugrad.engine.jit import TinyJit
from plugrad.nn.onnx.ops import OPS, OnnxOp, device_dtype, onnx_dtype
from plugrad.registry import get_registry
from plugrad.tensor import Tensor

#: Operators whose output shape depends on their inputs' values (read on the host inside the operator)
_VALUE_SHAPED = frozenset({"NonZero", "Range", "Compress", "MaxUnpool", "NonMaxSuppression", "Unique"})

try:
  import onnx
  from onnx import numpy_helper
except ImportError as e:  # an extra, not a dependency of plugrad
  raise ImportError("plugrad.nn.onnx needs the onnx package: pip install 'plugrad[onnx]'") from e

__all__ = ["OnnxRunner", "OPS", "supported_ops", "random_inputs", "time_model", "RunReport"]

# the defaults of the ai.onnx domain; another domain (com.microsoft, ...) means operators this module does not know
_DEFAULT_DOMAINS = ("", "ai.onnx")


def supported_ops() -> list[str]:
  """The names of the ONNX operators the runner implements, sorted."""
  return sorted(OPS)


@dataclass(frozen=True)
class _Node:
  """One graph node, checked and with its attributes already converted to Python values."""
  index: int
  name: str
  op: OnnxOp
  inputs: tuple[str, ...]
  outputs: tuple[str, ...]
  attrs: dict[str, Any]
  const: bool  # every input is known without the graph inputs' values: computed once per input signature


@dataclass(frozen=True)
class InputSpec:
  """A graph input: its name, dtype and shape (an int per fixed dimension, a str or None per free one)."""
  name: str
  dtype: DType
  shape: tuple[int | str | None, ...]


def _attr(a: onnx.AttributeProto) -> Any:
  value = onnx.helper.get_attribute_value(a)
  if isinstance(value, bytes): return value.decode()
  if isinstance(value, onnx.TensorProto): return numpy_helper.to_array(value)
  if isinstance(value, list) and value and isinstance(value[0], bytes): return [v.decode() for v in value]
  if isinstance(value, (onnx.GraphProto, onnx.SparseTensorProto)) or (isinstance(value, list) and value and
                                                                       not isinstance(value[0], (int, float))):
    raise NotImplementedError(f"attribute {a.name!r} holds a {type(value).__name__}, which is not supported")
  return value


def _load(model: str | os.PathLike | bytes | onnx.ModelProto) -> onnx.ModelProto:
  if isinstance(model, onnx.ModelProto): return model
  if isinstance(model, bytes): return onnx.load_from_string(model)
  if isinstance(model, (str, os.PathLike)):
    if not os.path.exists(model): raise FileNotFoundError(f"no ONNX model at {os.fspath(model)!r}")
    return onnx.load(os.fspath(model))  # external data files are read from the model's folder
  raise TypeError(f"OnnxRunner takes a path, the model's bytes or an onnx.ModelProto, not {type(model).__name__}")


class OnnxRunner:
  """An ONNX model, ready to run on a plugrad device (tinygrad 0.14's interface).

  >>> run = OnnxRunner("model.onnx")
  >>> out = run({"input": np.zeros((1, 3, 224, 224), np.float32)})  # {output name: lazy Tensor}

  :param model: a path to a .onnx file (with its external data files beside it), the file's bytes, or a
    loaded `onnx.ModelProto`.
  :param device: where the weights live and the model runs (default: the default device). A dtype the
    device lacks is replaced by a wider one it has (float64 -> float32, ...).
  """

  def __init__(self, model: str | os.PathLike | bytes | onnx.ModelProto, device: str | None = None):
    proto = _load(model)
    self.device: str = device or get_registry().default_device()
    self.opset: int = next((o.version for o in proto.opset_import if o.domain in _DEFAULT_DOMAINS), 1)
    graph = proto.graph
    weights = {init.name for init in graph.initializer}
    # every node is checked before any weight is loaded: an unsupported model fails at once
    known = set(weights)
    # the values whose shapes depend on the inputs' values, not only on their shapes (a NonZero's, a Reshape's to a
    # computed shape, and what is made of them): a Shape or Size of one is no constant of the input signature
    value_shaped: set[str] = set()
    self.nodes: list[_Node] = []
    for i, n in enumerate(graph.node):
      node = self._check(i, n, known, value_shaped)
      known |= set(node.outputs) if node.const else set()
      if not node.const and (n.op_type in _VALUE_SHAPED or any(name in value_shaped for name in n.input) or
                             any(name and name not in known for pos, name in enumerate(n.input) if pos in node.op.static)):
        value_shaped |= set(node.outputs)
      self.nodes.append(node)
    self._const_names = frozenset(known)
    self.inputs: dict[str, InputSpec] = {}
    for vi in graph.input:
      if vi.name in weights: continue  # an initializer listed as an input (opset < 9 style): a weight
      tt = vi.type.tensor_type
      dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
      self.inputs[vi.name] = InputSpec(vi.name, self._dtype(onnx_dtype(tt.elem_type)), dims)
    self.outputs: list[str] = [o.name for o in graph.output]
    self.initializers: dict[str, Tensor] = {init.name: self._tensor(numpy_helper.to_array(init))
                                            for init in graph.initializer}
    # per input signature: the folded constant nodes' outputs (realized) and the host copies of static inputs
    self._folded: dict[tuple, dict[str, Tensor]] = {}
    self._host: dict[tuple, dict[str, Any]] = {}

  def _dtype(self, dt: DType) -> DType: return device_dtype(dt, self.device)

  def _tensor(self, arr: np.ndarray) -> Tensor:
    dt = self._dtype(dtypes.from_any(arr.dtype))
    return Tensor(np.array(arr, dtype=dt.np, order="C"), device=self.device).realize()  # keeps 0-d arrays 0-d

  def _check(self, index: int, n: onnx.NodeProto, known: set[str], value_shaped: set[str]) -> _Node:
    where = f"node {index} {n.name!r}" if n.name else f"node {index}"
    if n.domain not in _DEFAULT_DOMAINS:
      raise NotImplementedError(f"ONNX operator {n.domain}.{n.op_type} ({where}, opset {self.opset}) is not "
                                f"supported: only the default ai.onnx domain is")
    if n.op_type not in OPS:
      raise NotImplementedError(f"ONNX operator {n.op_type} ({where}, opset {self.opset}) is not supported")
    op = OPS[n.op_type]
    attrs = {}
    for a in n.attribute:
      if a.name not in op.attrs:
        raise NotImplementedError(f"attribute {a.name!r} of ONNX operator {n.op_type} ({where}, opset {self.opset}) "
                                  f"is not supported; known: {', '.join(sorted(op.attrs))}")
      try:
        attrs[a.name] = _attr(a)
      except NotImplementedError as e:
        raise NotImplementedError(f"ONNX operator {n.op_type} ({where}, opset {self.opset}): {e}") from None
    if "opset" in op.specials: attrs["opset"] = self.opset
    if "n_outputs" in op.specials: attrs["n_outputs"] = len(n.output)
    if "device" in op.specials: attrs["device"] = self.device
    const = (n.op_type in ("Shape", "Size") and n.input[0] not in value_shaped) or \
      all(not name or name in known for name in n.input)
    return _Node(index, n.name, op, tuple(n.input), tuple(n.output), attrs, const)

  def _input(self, spec: InputSpec, value: Tensor | np.ndarray | Any) -> Tensor:
    t = value if isinstance(value, Tensor) else Tensor(np.asarray(value, dtype=spec.dtype.np), device=self.device)
    if len(t.shape) != len(spec.shape) or any(isinstance(d, int) and d != s for d, s in zip(spec.shape, t.shape)):
      raise ValueError(f"input {spec.name!r} has shape {tuple(t.shape)}, the model expects "
                       f"{tuple(d if isinstance(d, int) else d or '?' for d in spec.shape)}")
    if t.device != self.device: t = t.to(self.device)
    return t if t.dtype == spec.dtype else t.cast(spec.dtype)

  def __call__(self, inputs: Mapping[str, Tensor | np.ndarray], debug: bool = False) -> dict[str, Tensor]:
    """Run the model: `inputs` maps every graph input's name to a Tensor or an array (cast to the input's
    dtype and moved to the runner's device). Returns {output name: Tensor}, lazy like any Tensor result.
    With `debug`, each node's op and output shapes are printed as it is built."""
    missing, unknown = sorted(set(self.inputs) - set(inputs)), sorted(set(inputs) - set(self.inputs))
    if missing or unknown:
      raise ValueError(f"the model's inputs are {sorted(self.inputs)}: "
                       + (f"missing {missing}" if missing else "") + (" " if missing and unknown else "")
                       + (f"unknown {unknown}" if unknown else ""))
    values: dict[str, Tensor] = dict(self.initializers)
    for name, spec in self.inputs.items(): values[name] = self._input(spec, inputs[name])
    sig = tuple((name, tuple(values[name].shape), values[name].dtype) for name in self.inputs)
    folded, host = self._folded.setdefault(sig, {}), self._host.setdefault(sig, {})
    for node in self.nodes:
      if node.const and node.outputs[0] in folded:
        values.update((o, folded[o]) for o in node.outputs if o)
        continue
      outs = self._run(node, values, host)
      for name, t in zip(node.outputs, outs):
        if not name: continue
        if node.const: t = folded.setdefault(name, t.realize())
        values[name] = t
      if debug: print(f"{node.index:4d} {node.op.name:<20} {[tuple(values[o].shape) for o in node.outputs if o]}")
    return {name: values[name] for name in self.outputs}

  def _run(self, node: _Node, values: dict[str, Tensor], host: dict[str, Any]) -> tuple[Tensor, ...]:
    args: list[Any] = []
    for pos, name in enumerate(node.inputs):
      if not name: args.append(None)
      elif pos in node.op.static:
        if name not in self._const_names: args.append(values[name].numpy().tolist())  # depends on the inputs
        else:  # a shape-deciding constant: read once per input signature
          if name not in host: host[name] = values[name].numpy().tolist()
          args.append(host[name])
      else: args.append(values[name])
    try:
      out = node.op.fn(*args, **node.attrs)
    except NotImplementedError as e:
      raise NotImplementedError(f"ONNX operator {node.op.name} (node {node.index} {node.name!r}, opset {self.opset}): "
                                f"{e}") from None
    return out if isinstance(out, tuple) else (out,)


def random_inputs(runner: OnnxRunner, seed: int = 0) -> dict[str, np.ndarray]:
  """An array for each of the runner's inputs: its declared shape (1 for a free dimension), normal floats,
  small nonnegative integers, random booleans."""
  rng = np.random.default_rng(seed)
  out = {}
  for name, spec in runner.inputs.items():
    shape = tuple(d if isinstance(d, int) else 1 for d in spec.shape)
    if spec.dtype.is_float: out[name] = rng.standard_normal(shape).astype(spec.dtype.np)
    elif spec.dtype == dtypes.bool: out[name] = rng.random(shape) < 0.5
    else: out[name] = rng.integers(0, 4, shape).astype(spec.dtype.np)
  return out


@dataclass(frozen=True)
class RunReport:
  """What `time_model` measured: the outputs of the last call, the kernels one call launches, and the median
  seconds per call."""
  outputs: dict[str, Tensor]
  kernels: int
  seconds: float


def time_model(runner: OnnxRunner, inputs: Mapping[str, Tensor | np.ndarray], runs: int = 10) -> RunReport:
  """Run the model under TinyJit (a call to fold the constants, one to capture) and time `runs` replays."""
  if runs < 1: raise ValueError(f"runs must be at least 1, got {runs}")
  if unknown := sorted(set(inputs) - set(runner.inputs)):
    raise ValueError(f"the model's inputs are {sorted(runner.inputs)}: unknown {unknown}")
  tensors = {name: runner._input(runner.inputs[name], value).realize() for name, value in inputs.items()}
  step = TinyJit(lambda **kw: runner(kw))
  device = get_registry().device(runner.device)
  for _ in range(2): outputs = step(**tensors)
  times = []
  for _ in range(runs):
    start = time.perf_counter()
    outputs = step(**tensors)
    device.runtime.synchronize()
    times.append(time.perf_counter() - start)
  return RunReport(outputs, len(step.captured.launches) if step.captured is not None else 0, statistics.median(times))
