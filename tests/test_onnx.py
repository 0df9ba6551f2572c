"""plugrad.nn.onnx as a user meets it: whole networks exported from torch against onnxruntime, the runner's
inputs and errors, external data files, constant folding and TinyJit. The operators one by one are in
test_onnx_ops.py."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
from onnx import helper, numpy_helper  # noqa: E402

from plugrad import Tensor, TinyJit  # noqa: E402
from plugrad.nn.onnx import OnnxRunner  # noqa: E402

# the IR version the test models declare: onnxruntime refuses a model newer than it knows (1.30 reads IR 13 at most,
# onnx 1.23 writes 14 by default); these models use nothing past IR 10
ORT_IR_VERSION = 10


def export(module: torch.nn.Module, args: tuple, path: Path, opset: int = 17, **kw) -> onnx.ModelProto:
  """The module in eval mode through torch's TorchScript exporter (the dynamo one needs onnxscript)."""
  torch.manual_seed(0)
  module.eval()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.onnx.export(module, args, str(path), opset_version=opset, dynamo=False, **kw)
  return onnx.load(str(path))


def assert_matches_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray], dev: str,
                               rtol: float = 1e-4, atol: float = 1e-5) -> None:
  want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
  got = OnnxRunner(model, device=dev)(feeds)
  assert list(got) == [o.name for o in model.graph.output]
  for w, g in zip(want, got.values()):
    np.testing.assert_allclose(g.numpy(), w, rtol=rtol, atol=atol)


class SmallCNN(torch.nn.Module):
  def __init__(self) -> None:
    super().__init__()
    self.features = torch.nn.Sequential(
      torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
      torch.nn.Conv2d(8, 8, 3, padding=1, groups=4), torch.nn.Hardswish(), torch.nn.AdaptiveAvgPool2d(1))
    self.head = torch.nn.Linear(8, 5)

  def forward(self, x: torch.Tensor) -> torch.Tensor:
    return self.head(torch.flatten(self.features(x), 1)).softmax(-1)


class TinyTransformer(torch.nn.Module):
  def __init__(self) -> None:
    super().__init__()
    self.embed = torch.nn.Embedding(20, 16)
    self.block = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.1, batch_first=True,
                                                  activation="gelu")
    self.out = torch.nn.Linear(16, 20)

  def forward(self, tokens: torch.Tensor) -> torch.Tensor:
    return self.out(self.block(self.embed(tokens)))


class Recurrent(torch.nn.Module):
  def __init__(self) -> None:
    super().__init__()
    self.lstm = torch.nn.LSTM(6, 8, batch_first=True)
    self.gru = torch.nn.GRU(8, 5, bidirectional=True)

  def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y, _ = self.lstm(x)
    z, h = self.gru(y.transpose(0, 1))
    return z, h


class Decoder(torch.nn.Module):
  """The upsampling half of a segmentation net: transposed conv, resizes, group and instance norms."""
  def __init__(self) -> None:
    super().__init__()
    self.up = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)
    self.gn = torch.nn.GroupNorm(3, 6)
    self.inorm = torch.nn.InstanceNorm2d(6, affine=True)

  def forward(self, x: torch.Tensor) -> torch.Tensor:
    y = torch.nn.functional.interpolate(self.gn(self.up(x)), scale_factor=2, mode="bilinear", align_corners=False)
    y = torch.nn.functional.interpolate(y, size=(5, 7), mode="nearest")
    return torch.nn.functional.pad(torch.nn.functional.elu(self.inorm(y)), (1, 0, 0, 2), mode="reflect")


def test_small_cnn(tmp_path: Path, dev: str) -> None:
  net = SmallCNN()
  with torch.no_grad():  # running statistics that are not the identity, so BatchNormalization does something
    net.features[1].running_mean.uniform_(-1, 1)
    net.features[1].running_var.uniform_(0.5, 2)
  x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
  model = export(net, (torch.from_numpy(x),), tmp_path / "cnn.onnx", input_names=["x"])
  assert {"Conv", "MaxPool", "GlobalAveragePool", "Gemm", "Softmax"} <= {n.op_type for n in model.graph.node}
  assert_matches_onnxruntime(model, {"x": x}, dev)


def test_mlp_with_named_io_and_dynamic_batch(tmp_path: Path, dev: str) -> None:
  net = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.GELU(), torch.nn.Dropout(0.5), torch.nn.LayerNorm(32),
                            torch.nn.Linear(32, 16), torch.nn.SiLU(), torch.nn.Linear(16, 3))
  model = export(net, (torch.zeros(1, 10),), tmp_path / "mlp.onnx", input_names=["x"], output_names=["logits"],
                 dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
  runner = OnnxRunner(model, device=dev)
  for batch in (1, 5):  # one runner, two input shapes
    x = np.random.default_rng(batch).standard_normal((batch, 10)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(runner({"x": x})["logits"].numpy(), want, rtol=1e-4, atol=1e-5)


def test_tiny_transformer_block(tmp_path: Path, dev: str) -> None:
  tokens = np.random.default_rng(0).integers(0, 20, (2, 7)).astype(np.int64)
  model = export(TinyTransformer(), (torch.from_numpy(tokens),), tmp_path / "tf.onnx", input_names=["tokens"])
  ops = {n.op_type for n in model.graph.node}
  assert {"LayerNormalization", "Softmax", "MatMul", "Gather"} <= ops  # the exporter's attention, not one fused op
  assert_matches_onnxruntime(model, {"tokens": tokens}, dev)


def test_lstm_and_bidirectional_gru(tmp_path: Path, dev: str) -> None:
  x = np.random.default_rng(0).standard_normal((2, 5, 6)).astype(np.float32)
  model = export(Recurrent(), (torch.from_numpy(x),), tmp_path / "rnn.onnx", input_names=["x"])
  assert {"LSTM", "GRU"} <= {n.op_type for n in model.graph.node}
  assert_matches_onnxruntime(model, {"x": x}, dev)


def test_decoder_with_resize_and_norms(tmp_path: Path, dev: str) -> None:
  x = np.random.default_rng(0).standard_normal((1, 4, 3, 4)).astype(np.float32)
  model = export(Decoder(), (torch.from_numpy(x),), tmp_path / "dec.onnx", opset=18, input_names=["x"])
  assert {"ConvTranspose", "Resize", "InstanceNormalization", "Pad"} <= {n.op_type for n in model.graph.node}
  assert_matches_onnxruntime(model, {"x": x}, dev)


# ---- the runner --------------------------------------------------------------------------------------------

def affine_model(opset: int = 18) -> onnx.ModelProto:
  """y = x @ W + b, then a Reshape to the shape held by the graph input `shape`."""
  w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, "W")
  b = numpy_helper.from_array(np.array([1, -1, 0.5, 0], np.float32), "b")
  nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"], name="mm"), helper.make_node("Add", ["xw", "b"], ["y"]),
           helper.make_node("Reshape", ["y", "shape"], ["r"], name="reshape")]
  graph = helper.make_graph(nodes, "affine", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 3]),
                                              helper.make_tensor_value_info("shape", onnx.TensorProto.INT64, [2])],
                            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n", 4]),
                             helper.make_tensor_value_info("r", onnx.TensorProto.FLOAT, None)], [w, b])
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ORT_IR_VERSION)


def test_runner_takes_a_path_bytes_or_model_and_arrays_or_tensors(tmp_path: Path) -> None:
  model = affine_model()
  onnx.save(model, str(tmp_path / "m.onnx"))
  x = np.array([[1, 2, 3], [0, -1, 0.5]], np.float32)
  want = x @ (np.arange(12, dtype=np.float32).reshape(3, 4) / 10) + np.array([1, -1, 0.5, 0], np.float32)
  for source in (str(tmp_path / "m.onnx"), tmp_path / "m.onnx", model.SerializeToString(), model):
    out = OnnxRunner(source, device="PYTHON")({"x": x, "shape": np.array([4, 2])})
    assert set(out) == {"y", "r"} and all(isinstance(t, Tensor) for t in out.values())
    np.testing.assert_allclose(out["y"].numpy(), want, rtol=1e-6)
  runner = OnnxRunner(model, device="PYTHON")
  out = runner({"x": Tensor(x.astype(np.float64), device="PYTHON"), "shape": Tensor([1, 8], device="PYTHON")})
  assert out["y"].dtype.name == "float32"  # inputs are cast to the declared dtype
  np.testing.assert_allclose(out["r"].numpy(), want.reshape(1, 8), rtol=1e-6)


def test_shape_input_read_again_on_every_call() -> None:
  runner = OnnxRunner(affine_model(), device="PYTHON")
  x = np.ones((2, 3), np.float32)
  assert runner({"x": x, "shape": np.array([8, 1])})["r"].shape == (8, 1)
  assert runner({"x": x, "shape": np.array([2, -1])})["r"].shape == (2, 4)


def test_external_data_files(tmp_path: Path) -> None:
  model = affine_model()
  onnx.save(model, str(tmp_path / "ext.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
            location="ext.weights", size_threshold=0)
  assert (tmp_path / "ext.weights").stat().st_size == (12 + 4) * 4
  assert not onnx.load(str(tmp_path / "ext.onnx"), load_external_data=False).graph.initializer[0].raw_data
  runner = OnnxRunner(tmp_path / "ext.onnx", device="PYTHON")
  out = runner({"x": np.ones((1, 3), np.float32), "shape": np.array([2, 2])})
  np.testing.assert_allclose(out["r"].numpy(), [[2.2, 0.5], [2.3, 2.1]], rtol=1e-6)


def test_unsupported_operator_attribute_and_domain_fail_at_construction() -> None:
  graph = helper.make_graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Frobnicate", ["a"], ["y"],
                                                                                      name="mystery")],
                            "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=ORT_IR_VERSION)
  with pytest.raises(NotImplementedError, match=r"Frobnicate \(node 1 'mystery', opset 17\)"): OnnxRunner(model)
  model.graph.node[1].CopyFrom(helper.make_node("Elu", ["a"], ["y"], alpha=1.0, beta=2.0))
  with pytest.raises(NotImplementedError, match="attribute 'beta' of ONNX operator Elu"): OnnxRunner(model)
  model.graph.node[1].CopyFrom(helper.make_node("Gelu", ["a"], ["y"], domain="com.microsoft"))
  with pytest.raises(NotImplementedError, match="com.microsoft.Gelu"): OnnxRunner(model)


def test_bad_inputs_raise_clear_errors(tmp_path: Path) -> None:
  runner = OnnxRunner(affine_model(), device="PYTHON")
  with pytest.raises(ValueError, match=r"missing \['shape'\]"): runner({"x": np.ones((2, 3), np.float32)})
  with pytest.raises(ValueError, match=r"unknown \['z'\]"):
    runner({"x": np.ones((2, 3), np.float32), "shape": np.array([6]), "z": np.ones(1)})
  with pytest.raises(ValueError, match=r"input 'x' has shape \(2, 4\), the model expects \('n', 3\)"):
    runner({"x": np.ones((2, 4), np.float32), "shape": np.array([8])})
  with pytest.raises(FileNotFoundError, match="no ONNX model"): OnnxRunner(tmp_path / "absent.onnx")
  with pytest.raises(TypeError, match="not int"): OnnxRunner(3)  # type: ignore[arg-type]


def test_shape_subgraphs_are_folded_once_per_input_signature(tmp_path: Path) -> None:
  model = export(torch.nn.Flatten(), (torch.zeros(2, 3, 4),), tmp_path / "flat.onnx", input_names=["x"],
                 dynamic_axes={"x": {0: "n"}}, opset=13)
  runner = OnnxRunner(model, device="PYTHON")
  for n in (2, 5, 2):
    x = np.random.default_rng(n).standard_normal((n, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(next(iter(runner({"x": x}).values())).numpy(), x.reshape(n, 12))
  assert len(runner._folded) == 2  # one entry per input shape, reused when the shape comes back


def test_tinyjit_replays_the_model(tmp_path: Path, dev: str) -> None:
  net = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(16, 3))
  model = export(net, (torch.zeros(1, 2, 4, 4),), tmp_path / "j.onnx", input_names=["x"])
  runner = OnnxRunner(model, device=dev)
  step = TinyJit(lambda x: next(iter(runner({"x": x}).values())))
  sess = ort.InferenceSession(model.SerializeToString())
  for i in range(4):
    x = np.random.default_rng(i).standard_normal((1, 2, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(step(Tensor(x, device=dev)).numpy(), sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
  assert step.captured is not None


def test_cli_run_prints_outputs_kernels_and_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
  from plugrad.__main__ import main
  export(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()), (torch.zeros(2, 4),), tmp_path / "m.onnx",
         input_names=["x"], output_names=["y"])
  np.savez(tmp_path / "in.npz", x=np.ones((2, 4), np.float32))
  for extra in ([], ["--inputs", str(tmp_path / "in.npz")]):
    assert main(["run", str(tmp_path / "m.onnx"), "--device", "PYTHON", "--runs", "2", *extra]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "y: float32 (2, 3)"
    assert re.fullmatch(r"[1-9]\d* kernels per call, \d+\.\d+ ms per call \(median of 2, TinyJit replay\) on PYTHON",
                        out[1])
  np.savez(tmp_path / "bad.npz", z=np.ones(1))
  assert main(["run", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "bad.npz")]) == 2
  assert "unknown ['z']" in capsys.readouterr().err


def test_dtypes_the_device_lacks_fall_back_to_ones_it_has(monkeypatch: pytest.MonkeyPatch) -> None:
  from types import SimpleNamespace

  from plugrad import dtypes
  from plugrad.nn.onnx import ops
  real = ops.get_registry()
  caps = SimpleNamespace(dtypes=frozenset(real.render_device("PYTHON").caps.dtypes) - {dtypes.float64})
  fake = SimpleNamespace(render_device=lambda name: SimpleNamespace(caps=caps))  # a device without float64
  monkeypatch.setattr(ops, "get_registry", lambda: fake)
  w = numpy_helper.from_array(np.array([0.5, 2.0], np.float64), "w")
  nodes = [helper.make_node("Cast", ["x"], ["xd"], to=onnx.TensorProto.DOUBLE),
           helper.make_node("Mul", ["xd", "w"], ["y"])]
  graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                            [helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, [2])], [w])
  out = OnnxRunner(helper.make_model(graph), device="PYTHON")({"x": np.array([4, 5], np.float32)})["y"]
  assert out.dtype == dtypes.float32  # float64 became float32 for the weight and the Cast alike
  np.testing.assert_allclose(out.numpy(), [2, 10])


def test_shape_of_a_value_shaped_tensor_is_read_on_every_call(dev: str) -> None:
  # Shape and Size were folded once per input signature: of a NonZero's or a Range's result, or a Reshape to a
  # computed shape, a second call with other values returned the first call's shape
  TP, N = onnx.TensorProto, helper.make_node

  def model(nodes: list, inputs: list, out_type: int) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", out_type, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m
  x4, vec = helper.make_tensor_value_info("x", TP.FLOAT, [4]), np.array
  cases = [
    (model([N("NonZero", ["x"], ["nz"]), N("Shape", ["nz"], ["y"])], [x4], TP.INT64),
     [{"x": vec([1, 0, 0, 2], np.float32)}, {"x": vec([1, 1, 1, 0], np.float32)}]),
    (model([N("NonZero", ["x"], ["nz"]), N("Size", ["nz"], ["y"])], [x4], TP.INT64),
     [{"x": vec([1, 0, 0, 2], np.float32)}, {"x": vec([1, 1, 1, 0], np.float32)}]),
    (model([N("Range", ["s", "n", "d"], ["r"]), N("Shape", ["r"], ["y"])],
           [helper.make_tensor_value_info(k, TP.INT64, []) for k in "snd"], TP.INT64),
     [{"s": vec(0), "n": vec(3), "d": vec(1)}, {"s": vec(0), "n": vec(5), "d": vec(1)}]),
    (model([N("Reshape", ["x", "s"], ["r"]), N("Shape", ["r"], ["sh"]), N("ConstantOfShape", ["sh"], ["y"])],
           [helper.make_tensor_value_info("x", TP.FLOAT, [6]), helper.make_tensor_value_info("s", TP.INT64, [2])], TP.FLOAT),
     [{"x": np.arange(6, dtype=np.float32), "s": vec([2, 3])}, {"x": np.arange(6, dtype=np.float32), "s": vec([3, 2])}]),
  ]
  for m, feeds in cases:
    runner, session = OnnxRunner(m, device=dev), ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for f in feeds:
      got, want = runner(f)["y"].numpy(), session.run(None, f)[0]
      assert got.shape == want.shape and np.array_equal(got, want)
