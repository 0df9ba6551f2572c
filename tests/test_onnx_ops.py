"""Every ONNX operator plugrad.nn.onnx implements, as a one-node model, against onnxruntime on PYTHON and CPU.

Each case names the operator, its inputs (graph inputs as arrays; `init` inputs become initializers, as
the shape-deciding inputs of exported models are), its attributes and opset; the outputs must match
onnxruntime's in dtype, shape and value.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from plugrad.nn.onnx import OnnxRunner  # noqa: E402

# the IR version the test models declare: onnxruntime refuses a model newer than it knows (1.30 reads IR 13 at most,
# onnx 1.23 writes 14 by default); these models use nothing past IR 10
ORT_IR_VERSION = 10

rng = np.random.default_rng(0)


def f32(*shape: int) -> np.ndarray: return rng.standard_normal(shape).astype(np.float32)
def pos(*shape: int) -> np.ndarray: return rng.uniform(0.5, 2.0, shape).astype(np.float32)
def i64(*values: int) -> np.ndarray: return np.array(values, dtype=np.int64)
def ints(lo: int, hi: int, *shape: int, dtype: Any = np.int64) -> np.ndarray:
  return rng.integers(lo, hi, shape).astype(dtype)


@dataclass
class Case:
  """One single-node model: graph inputs `x` (name: array, in input order; None leaves an optional slot
  empty), initializer inputs `init`, attributes, the number of outputs and the opset."""
  op: str
  x: dict[str, np.ndarray | None]
  attrs: dict[str, Any] = field(default_factory=dict)
  init: dict[str, np.ndarray] = field(default_factory=dict)
  order: list[str] | None = None  # the node's input order when initializers sit between graph inputs
  n_out: int = 1
  opset: int = 18
  rtol: float = 1e-4
  reference: bool = False  # compare with onnx's reference evaluator where onnxruntime lacks the feature

  def model(self) -> onnx.ModelProto:
    names = self.order or list(self.x) + list(self.init)
    node = helper.make_node(self.op, [n if (n in self.init or self.x.get(n) is not None) else "" for n in names],
                            [f"y{i}" for i in range(self.n_out)], **self.attrs)
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
              for n, a in self.x.items() if a is not None]
    graph = helper.make_graph([node], self.op, inputs, [onnx.ValueInfoProto(name=f"y{i}") for i in range(self.n_out)],
                              [numpy_helper.from_array(a, n) for n, a in self.init.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)], ir_version=ORT_IR_VERSION)

  def feeds(self) -> dict[str, np.ndarray]: return {n: a for n, a in self.x.items() if a is not None}


def check(case: Case, dev: str) -> None:
  model = case.model()
  if case.reference: want = ReferenceEvaluator(model).run(None, case.feeds())
  else:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, case.feeds())
  got = OnnxRunner(model, device=dev)(case.feeds())
  assert list(got) == [f"y{i}" for i in range(case.n_out)]
  for w, g in zip(want, got.values()):
    out = g.numpy()
    assert out.dtype == w.dtype and out.shape == w.shape, (out.dtype, out.shape, w.dtype, w.shape)
    if w.dtype.kind == "f": np.testing.assert_allclose(out, w, rtol=case.rtol, atol=1e-5)
    else: np.testing.assert_array_equal(out, w)


X = f32(2, 3, 4)
IMG = f32(2, 4, 6, 6)
CASES: dict[str, Case] = {
  # elementwise unary
  **{op: Case(op, {"x": X}) for op in ["Abs", "Neg", "Exp", "Floor", "Ceil", "Sign", "Sin", "Cos", "Tan", "Atan",
                                        "Sinh", "Cosh", "Asinh", "Erf", "Relu", "Sigmoid", "Tanh", "Softsign", "Mish",
                                        "HardSwish", "Softplus", "Identity"]},
  **{op: Case(op, {"x": pos(2, 3, 4)}) for op in ["Log", "Sqrt", "Reciprocal", "Acosh"]},
  **{op: Case(op, {"x": rng.uniform(-0.9, 0.9, (2, 3)).astype(np.float32)}) for op in ["Asin", "Acos", "Atanh"]},
  "Round": Case("Round", {"x": np.array([0.5, 1.5, 2.5, -0.5, -1.5, 0.4, 2.6], np.float32)}),
  "Not": Case("Not", {"x": rng.random((3, 4)) > 0.5}),
  "Sign_nan": Case("Sign", {"x": np.array([np.nan, -2.0, 0.0, 3.0], np.float32)}),  # NaN, not 0
  "IsNaN": Case("IsNaN", {"x": np.array([1.0, np.nan, -np.inf], np.float32)}),
  "IsInf": Case("IsInf", {"x": np.array([1.0, np.nan, -np.inf, np.inf], np.float32)}),
  "IsInf_positive": Case("IsInf", {"x": np.array([1.0, -np.inf, np.inf], np.float32)}, {"detect_negative": 0}),
  "Elu": Case("Elu", {"x": X}, {"alpha": 0.7}),
  "Celu": Case("Celu", {"x": X}, {"alpha": 1.3}),
  "Selu": Case("Selu", {"x": X}, {"alpha": 1.5, "gamma": 0.9}),
  "LeakyRelu": Case("LeakyRelu", {"x": X}, {"alpha": 0.2}),
  "ThresholdedRelu": Case("ThresholdedRelu", {"x": X}, {"alpha": 0.3}),
  "Swish": Case("Swish", {"x": X}, {"alpha": 0.7}, opset=24),
  "HardSigmoid": Case("HardSigmoid", {"x": X}, {"alpha": 0.3, "beta": 0.4}),
  "Gelu": Case("Gelu", {"x": X}, opset=20),
  "Gelu_tanh": Case("Gelu", {"x": X}, {"approximate": "tanh"}, opset=20),
  "PRelu": Case("PRelu", {"x": IMG}, init={"slope": f32(4, 1, 1)}),
  "Shrink": Case("Shrink", {"x": X}, {"bias": 0.2, "lambd": 0.6}),
  "Clip": Case("Clip", {"x": X}, init={"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}),
  "Clip_min_only": Case("Clip", {"x": X}, init={"lo": np.array(-0.5, np.float32)}),
  "Clip_opset6": Case("Clip", {"x": X}, {"min": -0.3, "max": 0.2}, opset=6),
  # elementwise binary, with broadcasting
  **{op: Case(op, {"a": f32(2, 3, 4), "b": f32(3, 1)}) for op in ["Add", "Sub", "Mul", "Max", "Min", "Sum", "Mean"]},
  "Div": Case("Div", {"a": f32(2, 3, 4), "b": pos(4)}),
  "Div_int": Case("Div", {"a": i64(7, -7, 7, -7, 9), "b": i64(2, 2, -2, -2, 3)}),
  "Pow": Case("Pow", {"a": pos(2, 3), "b": f32(3)}),
  "Pow_int_exponent": Case("Pow", {"a": f32(2, 3), "b": np.array([2, 3, 1], np.int64)}),
  "Mod": Case("Mod", {"a": i64(7, -7, 7, -7), "b": i64(3, 3, -3, -3)}),
  "Mod_fmod": Case("Mod", {"a": f32(6) * 5, "b": pos(6)}, {"fmod": 1}),
  "Max_variadic": Case("Max", {"a": f32(3, 4), "b": f32(4), "c": f32(3, 1)}),
  **{op: Case(op, {"a": ints(0, 3, 3, 4), "b": ints(0, 3, 4)})
     for op in ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]},
  "Less_float": Case("Less", {"a": f32(3, 4), "b": f32(1, 4)}),
  **{op: Case(op, {"a": rng.random((3, 4)) > 0.5, "b": rng.random(4) > 0.5}) for op in ["And", "Or", "Xor"]},
  **{op: Case(op, {"a": ints(0, 100, 3, 4, dtype=np.int32), "b": ints(0, 100, 4, dtype=np.int32)})
     for op in ["BitwiseAnd", "BitwiseOr", "BitwiseXor"]},
  "BitwiseNot": Case("BitwiseNot", {"x": ints(-50, 50, 5, dtype=np.int32)}),
  "BitShift": Case("BitShift", {"a": ints(0, 100, 5, dtype=np.uint32), "b": ints(0, 4, 5, dtype=np.uint32)},
                   {"direction": "LEFT"}),
  "BitShift_right": Case("BitShift", {"a": ints(0, 100, 5, dtype=np.uint8), "b": ints(0, 4, 5, dtype=np.uint8)},
                         {"direction": "RIGHT"}),
  "Where": Case("Where", {"c": rng.random((3, 1)) > 0.5, "a": f32(3, 4), "b": f32(4)}),
  "Cast": Case("Cast", {"x": f32(3, 4) * 5}, {"to": onnx.TensorProto.INT32}),
  "Cast_bool": Case("Cast", {"x": np.array([0.0, 1.5, -2.0], np.float32)}, {"to": onnx.TensorProto.BOOL}),
  "Cast_half": Case("Cast", {"x": f32(3, 4)}, {"to": onnx.TensorProto.FLOAT16}, rtol=1e-3),
  "BitCast": Case("BitCast", {"x": f32(3, 4)}, {"to": onnx.TensorProto.INT32}, opset=26, reference=True),
  "CastLike": Case("CastLike", {"x": ints(-5, 5, 4)}, init={"like": np.zeros(1, np.float32)}),
  # shapes, indexing, constants
  "Constant": Case("Constant", {}, {"value": numpy_helper.from_array(f32(2, 3))}),
  "Constant_ints": Case("Constant", {}, {"value_ints": [3, 1, 4]}),
  "Constant_float": Case("Constant", {}, {"value_float": 2.5}),
  "ConstantOfShape": Case("ConstantOfShape", {}, {"value": numpy_helper.from_array(np.array([3], np.int32))},
                          init={"shape": i64(2, 3)}),
  "ConstantOfShape_default": Case("ConstantOfShape", {}, init={"shape": i64(4)}),
  "Shape": Case("Shape", {"x": X}),
  "Shape_slice": Case("Shape", {"x": X}, {"start": 1, "end": -1}),
  "Size": Case("Size", {"x": X}),
  "Range": Case("Range", {}, init={"s": np.array(1, np.int64), "l": np.array(10, np.int64),
                                   "d": np.array(3, np.int64)}),
  "Range_int32": Case("Range", {}, init={"s": np.array(9, np.int32), "l": np.array(-3, np.int32),
                                         "d": np.array(-4, np.int32)}),
  "Range_float": Case("Range", {}, init={"s": np.array(0.5, np.float32), "l": np.array(-2.0, np.float32),
                                         "d": np.array(-0.75, np.float32)}),
  "Reshape": Case("Reshape", {"x": X}, init={"shape": i64(0, -1, 2)}),
  "Reshape_allowzero": Case("Reshape", {"x": f32(0, 3)}, {"allowzero": 1}, init={"shape": i64(3, 0)}),
  "Flatten": Case("Flatten", {"x": IMG}, {"axis": 2}),
  "Flatten_negative": Case("Flatten", {"x": IMG}, {"axis": -1}),
  "Flatten_0": Case("Flatten", {"x": X}, {"axis": 0}),
  "Transpose": Case("Transpose", {"x": X}, {"perm": [1, 2, 0]}),
  "Transpose_default": Case("Transpose", {"x": X}),
  "Squeeze": Case("Squeeze", {"x": f32(1, 3, 1, 2)}, init={"axes": i64(-2)}),
  "Squeeze_all": Case("Squeeze", {"x": f32(1, 3, 1, 2)}),
  "Squeeze_opset11": Case("Squeeze", {"x": f32(1, 3, 1, 2)}, {"axes": [0]}, opset=11),
  "Unsqueeze": Case("Unsqueeze", {"x": X}, init={"axes": i64(0, -1)}),
  "Unsqueeze_middle": Case("Unsqueeze", {"x": X}, init={"axes": i64(4, 1)}),
  "Concat": Case("Concat", {"a": f32(2, 3), "b": f32(2, 1), "c": f32(2, 2)}, {"axis": -1}),
  "Split": Case("Split", {"x": f32(2, 6)}, {"axis": 1}, n_out=3, opset=13),
  "Split_sizes": Case("Split", {"x": f32(5, 2)}, init={"split": i64(2, 3)}, n_out=2),
  "Split_num_outputs": Case("Split", {"x": f32(2, 7)}, {"axis": 1, "num_outputs": 3}, n_out=3),
  "Split_opset11": Case("Split", {"x": f32(5, 2)}, {"split": [1, 4]}, n_out=2, opset=11),
  "Slice": Case("Slice", {"x": f32(5, 6, 4)}, init={"starts": i64(1, -5), "ends": i64(100, -1), "axes": i64(0, 1)}),
  "Slice_steps": Case("Slice", {"x": f32(5, 6)}, init={"starts": i64(-1, 0), "ends": i64(-100, 6), "axes": i64(0, 1),
                                                      "steps": i64(-2, 3)}),
  "Slice_all_axes": Case("Slice", {"x": f32(4, 5)}, init={"starts": i64(1, 1), "ends": i64(3, 2**62)}),
  "Slice_opset9_attributes": Case("Slice", {"x": f32(5, 6)}, {"starts": [1], "ends": [-1], "axes": [1]}, opset=9),
  "Gather": Case("Gather", {"x": f32(5, 4, 3), "i": np.array([[0, -1], [3, 2]], np.int64)}, {"axis": 1}),
  "Gather_scalar": Case("Gather", {"x": f32(5, 4)}, init={"i": np.array(-2, np.int64)}),
  "GatherElements": Case("GatherElements", {"x": f32(3, 4), "i": ints(-4, 4, 3, 2)}, {"axis": 1}),
  "GatherND": Case("GatherND", {"x": f32(3, 4, 2), "i": np.array([[0, 1], [2, -1]], np.int64)}),
  "GatherND_batch_dims": Case("GatherND", {"x": f32(2, 3, 4), "i": np.array([[[1], [2]], [[0], [-1]]], np.int64)},
                              {"batch_dims": 1}),
  "ReverseSequence": Case("ReverseSequence", {"x": f32(4, 3, 2)}, init={"lens": i64(4, 1, 2)}),
  "ReverseSequence_batch_first": Case("ReverseSequence", {"x": f32(3, 5)}, {"batch_axis": 0, "time_axis": 1},
                                      init={"lens": i64(2, 5, 3)}),
  "ScatterElements": Case("ScatterElements", {"x": f32(3, 4), "i": np.array([[1, 3], [0, -4], [2, 2]], np.int64),
                                              "u": f32(3, 2)}, {"axis": 1}),
  "ScatterElements_add": Case("ScatterElements", {"x": f32(3, 4), "i": np.array([[1, 1], [0, 2], [3, 3]], np.int64),
                                                  "u": f32(3, 2)}, {"axis": 1, "reduction": "add"}),
  "ScatterND": Case("ScatterND", {"x": f32(4, 3, 2), "i": np.array([[1], [-1]], np.int64), "u": f32(2, 3, 2)}),
  "ScatterND_elements": Case("ScatterND", {"x": f32(4, 3), "i": np.array([[0, 1], [3, 2], [2, 0]], np.int64),
                                           "u": f32(3)}),
  "ScatterND_mul": Case("ScatterND", {"x": f32(4, 3), "i": np.array([[1], [1]], np.int64), "u": f32(2, 3)},
                        {"reduction": "mul"}),
  "Expand": Case("Expand", {"x": f32(3, 1)}, init={"shape": i64(2, 1, 4)}),
  "Expand_keeps_larger_dims": Case("Expand", {"x": f32(3, 5)}, init={"shape": i64(1, 1)}),
  "Tile": Case("Tile", {"x": f32(2, 3)}, init={"r": i64(2, 3)}),
  "Pad": Case("Pad", {"x": f32(2, 3, 4)}, init={"pads": i64(0, 1, 2, 1, 0, -1), "v": np.array(1.5, np.float32)}),
  "Pad_axes": Case("Pad", {"x": f32(2, 3, 4)}, init={"pads": i64(1, 2, 3, 0), "axes": i64(0, -1)},
                   order=["x", "pads", "", "axes"]),
  **{f"Pad_{m}": Case("Pad", {"x": f32(1, 2, 4, 5)}, {"mode": m}, init={"pads": i64(0, 0, 2, 1, 0, 0, 1, 3)})
     for m in ["reflect", "edge", "wrap"]},
  "Pad_opset2_attribute": Case("Pad", {"x": f32(3, 4)}, {"pads": [1, 0, 0, 2], "value": 2.0}, opset=10),
  "DepthToSpace": Case("DepthToSpace", {"x": f32(1, 8, 2, 3)}, {"blocksize": 2}),
  "DepthToSpace_CRD": Case("DepthToSpace", {"x": f32(1, 8, 2, 3)}, {"blocksize": 2, "mode": "CRD"}),
  "SpaceToDepth": Case("SpaceToDepth", {"x": f32(1, 2, 4, 6)}, {"blocksize": 2}),
  "SpaceToDepth_CRD": Case("SpaceToDepth", {"x": f32(1, 2, 4, 6)}, {"blocksize": 2, "mode": "CRD"}, reference=True),
  "NonZero": Case("NonZero", {"x": np.array([[0, 1.5, 0], [2, 0, -1]], np.float32)}),
  "Compress": Case("Compress", {"x": f32(3, 4), "c": np.array([True, False, True])}, {"axis": 0}),
  "Compress_flat": Case("Compress", {"x": f32(2, 3), "c": np.array([False, True, True, False, True])}),
  "Upsample": Case("Upsample", {"x": f32(1, 2, 2, 3)}, {"mode": "nearest"},
                   init={"scales": np.array([1, 1, 2, 1.5], np.float32)}, opset=9),
  "Trilu": Case("Trilu", {"x": f32(4, 5)}, init={"k": np.array(1, np.int64)}),
  "Trilu_lower": Case("Trilu", {"x": f32(2, 4, 5)}, {"upper": 0}),
  "OneHot": Case("OneHot", {"i": np.array([[1, -1], [0, 3]], np.int64)}, {"axis": 1},
                 init={"depth": np.array(4, np.int64), "values": np.array([-1.0, 2.0], np.float32)}),
  "EyeLike": Case("EyeLike", {"x": f32(3, 5)}, {"k": -1}),
  "Dropout": Case("Dropout", {"x": X}),
  "Dropout_mask": Case("Dropout", {"x": X}, n_out=2),
  # reductions
  **{op: Case(op, {"x": pos(2, 3, 4)}, init={"axes": i64(0, -1)})
     for op in ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]},
  "ReduceSum_keepdims0": Case("ReduceSum", {"x": X}, {"keepdims": 0}, init={"axes": i64(1)}),
  "ReduceMean_all": Case("ReduceMean", {"x": X}, {"keepdims": 0}),
  "ReduceMax_opset13_attribute": Case("ReduceMax", {"x": X}, {"axes": [1], "keepdims": 0}, opset=13),
  "ReduceSum_noop": Case("ReduceSum", {"x": X}, {"noop_with_empty_axes": 1}),
  "ReduceSum_int": Case("ReduceSum", {"x": ints(-9, 9, 3, 4)}, init={"axes": i64(1)}),
  # integers keep their dtype, the result truncated toward zero (they were float32)
  "ReduceMean_int": Case("ReduceMean", {"x": np.array([[-7, 0, 0], [7, 1, 0], [-1, -1, 0], [3, 3, 3]], np.int32)},
                         init={"axes": i64(1)}),
  "ReduceL2_int": Case("ReduceL2", {"x": np.array([[-3, 4, 1], [0, 2, -7]], np.int64)}, init={"axes": i64(1)}),
  "ReduceLogSum_int": Case("ReduceLogSum", {"x": np.array([[1, 5, 3], [2, 2, 30]], np.int32)}, init={"axes": i64(1)}),
  # onnxruntime truncates each exp(x - max) into the integer type; here that leaves the result's integer part alone
  "ReduceLogSumExp_int": Case("ReduceLogSumExp", {"x": np.array([[1, 5, 3], [9, 0, 7]], np.int32)},
                              init={"axes": i64(1)}),
  # no axes still runs the elementwise steps: sqrt(x * x), log(x) (both returned x)
  "ReduceL2_noop": Case("ReduceL2", {"x": X}, {"noop_with_empty_axes": 1}),
  "ReduceLogSum_noop": Case("ReduceLogSum", {"x": np.abs(X)}, {"noop_with_empty_axes": 1},
                            init={"axes": np.zeros(0, np.int64)}),
  # the spec leaves an empty mean undefined; onnxruntime gives 0 (it was NaN)
  "ReduceMean_empty_axis": Case("ReduceMean", {"x": np.zeros((2, 0, 3), np.float32)}, init={"axes": i64(1)}),
  # -inf and +inf (the dtype's least and largest integer), as the spec says from opset 20 (they raised)
  "ReduceMax_empty_axis": Case("ReduceMax", {"x": np.zeros((2, 0, 3), np.float32)}, init={"axes": i64(1)}),
  "ReduceMin_empty_axis": Case("ReduceMin", {"x": np.zeros((2, 0, 3), np.float32)}, init={"axes": i64(1)}),
  "ReduceMax_empty_axis_int": Case("ReduceMax", {"x": np.zeros((0, 3), np.int32)}, {"keepdims": 0},
                                   init={"axes": i64(0)}),
  "ArgMax": Case("ArgMax", {"x": X}, {"axis": 1}),
  "ArgMin": Case("ArgMin", {"x": X}, {"axis": -1, "keepdims": 0}),
  "ArgMax_last": Case("ArgMax", {"x": np.array([[1, 3, 3, 0], [2, 2, 1, 2]], np.float32)},
                      {"axis": 1, "select_last_index": 1}),
  "CumSum": Case("CumSum", {"x": X}, init={"axis": np.array(1, np.int64)}),
  "CumSum_exclusive_reverse": Case("CumSum", {"x": X}, {"exclusive": 1, "reverse": 1},
                                   init={"axis": np.array(-1, np.int64)}),
  "TopK": Case("TopK", {"x": f32(3, 6)}, init={"k": i64(3)}, n_out=2),
  "TopK_smallest": Case("TopK", {"x": f32(5, 3)}, {"axis": 0, "largest": 0}, init={"k": i64(2)}, n_out=2),
  "TopK_opset9": Case("TopK", {"x": f32(3, 6)}, {"k": 2}, n_out=2, opset=9),  # k an attribute (it was refused)
  "CumProd": Case("CumProd", {"x": pos(2, 3, 4)}, {"exclusive": 1}, init={"axis": np.array(1, np.int64)}, opset=26),
  "Softmax": Case("Softmax", {"x": X}, {"axis": 1}),
  "Softmax_opset11": Case("Softmax", {"x": X}, {"axis": 1}, opset=11),
  # an explicit axis=-1 before opset 13 is the last axis, not the default 1 (3-D: values differ)
  "Softmax_opset11_last_axis": Case("Softmax", {"x": X}, {"axis": -1}, opset=11),
  "LogSoftmax_opset11_default": Case("LogSoftmax", {"x": X}, opset=11),
  "Hardmax_opset11_last_axis": Case("Hardmax", {"x": X}, {"axis": -1}, opset=11),
  "LogSoftmax": Case("LogSoftmax", {"x": X}),
  "Hardmax": Case("Hardmax", {"x": X}, {"axis": 1}),
  # losses
  "NegativeLogLikelihoodLoss": Case("NegativeLogLikelihoodLoss", {"x": f32(3, 4, 2), "t": ints(0, 4, 3, 2)},
                                    init={"w": pos(4)}),
  "NegativeLogLikelihoodLoss_ignore_none": Case("NegativeLogLikelihoodLoss",
                                                {"x": f32(3, 4), "t": np.array([1, -1, 3], np.int64)},
                                                {"ignore_index": -1, "reduction": "none"}),
  "SoftmaxCrossEntropyLoss": Case("SoftmaxCrossEntropyLoss", {"x": f32(3, 5), "t": np.array([4, 0, 2], np.int64)},
                                  {"reduction": "sum", "ignore_index": 0}, n_out=2),
  # matrix products
  "MatMul": Case("MatMul", {"a": f32(2, 1, 3, 4), "b": f32(3, 4, 5)}),
  "MatMul_vector": Case("MatMul", {"a": f32(4), "b": f32(2, 4, 3)}),
  "Gemm": Case("Gemm", {"a": f32(4, 3), "b": f32(5, 4)}, {"alpha": 0.5, "beta": 2.0, "transA": 1, "transB": 1},
               init={"c": f32(5)}),
  "Gemm_no_bias": Case("Gemm", {"a": f32(2, 3), "b": f32(3, 4)}),
  "Einsum": Case("Einsum", {"a": f32(2, 3, 4), "b": f32(2, 4, 5)}, {"equation": "bij, bjk -> bik"}),
  "Einsum_trace_like": Case("Einsum", {"a": f32(3, 4)}, {"equation": "ij->ji"}),
  "Attention": Case("Attention", {"q": f32(2, 3, 4, 8), "k": f32(2, 3, 6, 8), "v": f32(2, 3, 6, 5)},
                    {"is_causal": 1, "softcap": 2.0}, opset=23),
  "Attention_3d_gqa_mask_past": Case(
    "Attention", {"q": f32(2, 4, 16), "k": f32(2, 3, 8), "v": f32(2, 3, 8), "m": rng.random((4, 5)) > 0.3,
                  "pk": f32(2, 2, 2, 4), "pv": f32(2, 2, 2, 4)}, {"q_num_heads": 4, "kv_num_heads": 2, "scale": 0.3},
    n_out=3, opset=23),
  # quantization
  "DequantizeLinear": Case("DequantizeLinear", {"x": ints(0, 255, 2, 3, 4, dtype=np.uint8)}, {"axis": 1},
                           init={"s": pos(3), "z": ints(0, 255, 3, dtype=np.uint8)}),
  "QuantizeLinear": Case("QuantizeLinear", {"x": f32(2, 3) * 100}, init={"s": np.array(0.7, np.float32),
                                                                        "z": np.array(-3, np.int8)}),
  "QuantizeLinear_blocked": Case("QuantizeLinear", {"x": f32(3, 5) * 50}, {"axis": 1, "block_size": 2},
                                 init={"s": pos(3, 3), "z": ints(0, 9, 3, 3, dtype=np.uint8)}, opset=21),
  "DynamicQuantizeLinear": Case("DynamicQuantizeLinear", {"x": f32(3, 4)}, n_out=3),
  "MatMulInteger": Case("MatMulInteger", {"a": ints(0, 255, 3, 4, dtype=np.uint8),
                                          "b": ints(-128, 127, 4, 2, dtype=np.int8)},
                        init={"az": np.array(9, np.uint8), "bz": ints(-5, 5, 2, dtype=np.int8)}),
  "ConvInteger": Case("ConvInteger", {"x": ints(0, 255, 1, 2, 5, 5, dtype=np.uint8)}, {"pads": [1, 1, 1, 1]},
                      init={"w": ints(0, 255, 3, 2, 3, 3, dtype=np.uint8), "xz": np.array(7, np.uint8)}),
  "QLinearMatMul": Case("QLinearMatMul", {"a": ints(0, 255, 2, 4, dtype=np.uint8)},
                        init={"as": np.array(0.05, np.float32), "az": np.array(100, np.uint8),
                              "b": ints(0, 255, 4, 3, dtype=np.uint8), "bs": np.array(0.02, np.float32),
                              "bz": np.array(120, np.uint8), "ys": np.array(0.3, np.float32),
                              "yz": np.array(128, np.uint8)}),
  "QLinearConv": Case("QLinearConv", {"x": ints(0, 255, 1, 2, 5, 5, dtype=np.uint8)}, {"pads": [1, 1, 1, 1]},
                      init={"xs": np.array(0.05, np.float32), "xz": np.array(100, np.uint8),
                            "w": ints(0, 255, 3, 2, 3, 3, dtype=np.uint8), "ws": pos(3) / 50,
                            "wz": np.array(120, np.uint8), "ys": np.array(0.5, np.float32),
                            "yz": np.array(128, np.uint8), "b": ints(-50, 50, 3, dtype=np.int32)}),
  # convolution and pooling
  "Conv": Case("Conv", {"x": IMG}, {"pads": [1, 1, 1, 1]}, init={"w": f32(5, 4, 3, 3), "b": f32(5)}),
  "Conv_groups_dilations_strides": Case("Conv", {"x": IMG}, {"group": 2, "dilations": [2, 1], "strides": [1, 2],
                                                             "pads": [0, 1, 2, 0]}, init={"w": f32(6, 2, 2, 3)}),
  "Conv_depthwise": Case("Conv", {"x": IMG}, {"group": 4, "kernel_shape": [3, 3]}, init={"w": f32(4, 1, 3, 3)}),
  "Conv_same_upper": Case("Conv", {"x": IMG}, {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
                          init={"w": f32(3, 4, 2, 2)}),
  "Conv_same_lower": Case("Conv", {"x": IMG}, {"auto_pad": "SAME_LOWER"}, init={"w": f32(3, 4, 2, 4)}),
  "Conv_1d": Case("Conv", {"x": f32(2, 3, 9)}, {"strides": [2]}, init={"w": f32(4, 3, 3), "b": f32(4)}),
  "ConvTranspose": Case("ConvTranspose", {"x": f32(1, 4, 3, 3)}, {"strides": [2, 2]}, init={"w": f32(4, 2, 3, 3)}),
  "ConvTranspose_pads_output_padding": Case(
    "ConvTranspose", {"x": f32(2, 4, 3, 4)}, {"strides": [2, 3], "pads": [1, 0, 0, 2], "output_padding": [1, 2],
                                              "group": 2, "dilations": [1, 2]}, init={"w": f32(4, 3, 3, 2),
                                                                                     "b": f32(6)}),
  "ConvTranspose_output_shape": Case("ConvTranspose", {"x": f32(1, 2, 3, 3)}, {"strides": [2, 2],
                                                                              "output_shape": [6, 7]},
                                     init={"w": f32(2, 3, 3, 3)}),
  "ConvTranspose_same_upper": Case("ConvTranspose", {"x": f32(1, 2, 3, 3)}, {"strides": [2, 2],
                                                                            "auto_pad": "SAME_UPPER"},
                                   init={"w": f32(2, 3, 3, 3)}),
  "MaxPool": Case("MaxPool", {"x": IMG}, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
  "MaxPool_ceil_dilations": Case("MaxPool", {"x": IMG}, {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1,
                                                         "dilations": [2, 1]}),
  "MaxPool_indices": Case("MaxPool", {"x": IMG}, {"kernel_shape": [2, 3], "pads": [0, 1, 1, 0]}, n_out=2),
  "MaxPool_indices_column_major": Case("MaxPool", {"x": f32(1, 2, 4, 5)}, {"kernel_shape": [2, 2],
                                                                         "storage_order": 1}, n_out=2),
  "MaxPool_same_upper": Case("MaxPool", {"x": IMG}, {"kernel_shape": [3, 3], "strides": [2, 2],
                                                     "auto_pad": "SAME_UPPER"}),
  "MaxPool_1d": Case("MaxPool", {"x": f32(2, 3, 9)}, {"kernel_shape": [3], "strides": [2]}),
  "AveragePool": Case("AveragePool", {"x": IMG}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
  "AveragePool_count_include_pad": Case("AveragePool", {"x": IMG}, {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1],
                                                                    "strides": [2, 1], "count_include_pad": 1}),
  "AveragePool_ceil": Case("AveragePool", {"x": f32(1, 2, 5, 5)}, {"kernel_shape": [2, 2], "strides": [2, 2],
                                                                   "ceil_mode": 1}),
  "LpPool": Case("LpPool", {"x": IMG}, {"kernel_shape": [2, 2], "p": 3, "pads": [1, 0, 0, 1]}),
  "MaxUnpool": Case("MaxUnpool", {"x": f32(1, 2, 2, 2)}, {"kernel_shape": [2, 2], "strides": [2, 2]},
                    init={"i": np.array([[[[0, 3], [9, 14]], [[17, 18], [28, 31]]]], np.int64)}),
  "GlobalAveragePool": Case("GlobalAveragePool", {"x": IMG}),
  "GlobalMaxPool": Case("GlobalMaxPool", {"x": IMG}),
  "GlobalLpPool": Case("GlobalLpPool", {"x": IMG}, {"p": 3}),
  # normalization
  "BatchNormalization": Case("BatchNormalization", {"x": IMG}, {"epsilon": 1e-3},
                             init={"s": f32(4), "b": f32(4), "m": f32(4), "v": pos(4)}),
  "BatchNormalization_training": Case("BatchNormalization", {"x": IMG}, {"training_mode": 1, "momentum": 0.8},
                                      init={"s": f32(4), "b": f32(4), "m": f32(4), "v": pos(4)}, n_out=3),
  "LayerNormalization": Case("LayerNormalization", {"x": X}, init={"s": f32(4), "b": f32(4)}),
  "LayerNormalization_axis_stats": Case("LayerNormalization", {"x": X}, {"axis": 1, "epsilon": 1e-3},
                                        init={"s": f32(3, 4)}, n_out=3),
  "InstanceNormalization": Case("InstanceNormalization", {"x": IMG}, init={"s": f32(4), "b": f32(4)}),
  "GroupNormalization": Case("GroupNormalization", {"x": IMG}, {"num_groups": 2}, init={"s": f32(4), "b": f32(4)},
                             opset=21),
  "RMSNormalization": Case("RMSNormalization", {"x": X}, {"axis": 1}, init={"s": f32(3, 4)}, opset=23),
  "LRN": Case("LRN", {"x": f32(2, 6, 3, 3)}, {"size": 3, "alpha": 0.01, "beta": 0.6, "bias": 2.0}),
  "LpNormalization": Case("LpNormalization", {"x": X}, {"axis": 1, "p": 1}),
  "MeanVarianceNormalization": Case("MeanVarianceNormalization", {"x": IMG}),
  # resize
  "Resize_nearest_scales": Case("Resize", {"x": f32(1, 2, 3, 4)}, init={"scales": np.array([1, 1, 2, 1.5], np.float32)},
                                order=["x", "", "scales"]),
  # opset 10's (X, scales): the scales were read as roi ("Resize needs scales or sizes")
  **{f"Resize_opset10_{m}": Case("Resize", {"x": f32(1, 2, 3, 4)}, {"mode": m},
                                 init={"scales": np.array([1, 1, 2, 1.5], np.float32)}, opset=10)
     for m in ("nearest", "linear")},
  **{f"Resize_nearest_{nm}": Case("Resize", {"x": f32(1, 2, 4, 5)}, {"nearest_mode": nm,
                                                                     "coordinate_transformation_mode": "asymmetric"},
                                  init={"sizes": i64(1, 2, 7, 3)}, order=["x", "", "", "sizes"])
     for nm in ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]},
  **{f"Resize_linear_{ct}": Case("Resize", {"x": f32(1, 2, 4, 5)}, {"mode": "linear",
                                                                    "coordinate_transformation_mode": ct},
                                 init={"sizes": i64(1, 2, 7, 3)}, order=["x", "", "", "sizes"])
     for ct in ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"]},
  "Resize_cubic": Case("Resize", {"x": f32(1, 1, 5, 6)}, {"mode": "cubic"},
                       init={"scales": np.array([1, 1, 1.6, 0.5], np.float32)}, order=["x", "", "scales"]),
  "Resize_cubic_exclude_outside": Case("Resize", {"x": f32(1, 1, 5, 6)}, {"mode": "cubic", "exclude_outside": 1,
                                                                          "cubic_coeff_a": -0.5},
                                       init={"sizes": i64(1, 1, 8, 4)}, order=["x", "", "", "sizes"]),
  "Resize_axes_keep_aspect": Case("Resize", {"x": f32(1, 2, 4, 6)}, {"axes": [2, 3], "mode": "linear",
                                                                     "keep_aspect_ratio_policy": "not_larger"},
                                  init={"sizes": i64(6, 6)}, order=["x", "", "", "sizes"]),
  # recurrent layers
  "LSTM": Case("LSTM", {"x": f32(4, 2, 3)}, {"hidden_size": 5},
               init={"w": f32(1, 20, 3), "r": f32(1, 20, 5), "b": f32(1, 40)}, n_out=3),
  "LSTM_bidirectional_initial_peephole": Case(
    "LSTM", {"x": f32(3, 2, 3), "h0": f32(2, 2, 4), "c0": f32(2, 2, 4)}, {"hidden_size": 4,
                                                                          "direction": "bidirectional"},
    init={"w": f32(2, 16, 3), "r": f32(2, 16, 4), "b": f32(2, 32), "p": f32(2, 12)},
    order=["x", "w", "r", "b", "", "h0", "c0", "p"], n_out=3),
  "LSTM_layout1_reverse": Case("LSTM", {"x": f32(2, 4, 3)}, {"hidden_size": 3, "layout": 1, "direction": "reverse"},
                               init={"w": f32(1, 12, 3), "r": f32(1, 12, 3)}, n_out=2, reference=True),
  "GRU": Case("GRU", {"x": f32(4, 2, 3)}, {"hidden_size": 5}, init={"w": f32(1, 15, 3), "r": f32(1, 15, 5),
                                                                     "b": f32(1, 30)}, n_out=2),
  "GRU_linear_before_reset_bidirectional": Case(
    "GRU", {"x": f32(3, 2, 3), "h0": f32(2, 2, 4)}, {"hidden_size": 4, "linear_before_reset": 1,
                                                     "direction": "bidirectional"},
    init={"w": f32(2, 12, 3), "r": f32(2, 12, 4), "b": f32(2, 24)}, order=["x", "w", "r", "b", "", "h0"], n_out=2),
  "RNN": Case("RNN", {"x": f32(4, 2, 3)}, {"hidden_size": 5}, init={"w": f32(1, 5, 3), "r": f32(1, 5, 5),
                                                                     "b": f32(1, 10)}, n_out=2),
}


@pytest.mark.parametrize("name", list(CASES))
def test_op_matches_onnxruntime(name: str, dev: str) -> None:
  check(CASES[name], dev)


def test_every_registered_op_has_a_case() -> None:
  from plugrad.nn.onnx import supported_ops
  tested = {c.op for c in CASES.values()}
  # Scatter is the pre-opset-11 name of ScatterElements, one function
  assert set(supported_ops()) - tested == {"Scatter"}


def test_lrn_even_size_follows_the_spec(dev: str) -> None:
  # onnxruntime takes odd sizes only, and onnx's reference loops over the batch instead of the channels:
  # the spec's formula in numpy, floor((size-1)/2) channels before and ceil((size-1)/2) after
  x, size, alpha, beta, bias = f32(2, 6, 3, 3), 4, 0.02, 0.75, 1.0
  sq = np.stack([(x[:, max(0, c - 1):c + 3] ** 2).sum(1) for c in range(6)], 1)
  want = x / (bias + alpha / size * sq) ** beta
  got = OnnxRunner(Case("LRN", {"x": x}, {"size": size, "alpha": alpha}).model(), device=dev)({"x": x})["y0"]
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_opset6_broadcast_aligns_from_axis(dev: str) -> None:
  # before opset 7 B lined up with A's axes from `axis` on; neither onnxruntime nor the reference runs it any more
  a, b = f32(2, 3, 4), f32(3)
  got = OnnxRunner(Case("Add", {"a": a, "b": b}, {"broadcast": 1, "axis": 1}, opset=6).model(), device=dev)
  np.testing.assert_allclose(got({"a": a, "b": b})["y0"].numpy(), a + b[None, :, None], rtol=1e-6)


def test_matmul_integer_per_row_zero_points(dev: str) -> None:
  # the spec allows one zero point per row of A; onnxruntime and the reference take only a scalar
  a, b, az = ints(0, 255, 3, 4, dtype=np.uint8), ints(0, 255, 4, 2, dtype=np.uint8), ints(0, 255, 3, dtype=np.uint8)
  runner = OnnxRunner(Case("MatMulInteger", {"a": a, "b": b}, init={"az": az}).model(), device=dev)
  want = (a.astype(np.int32) - az.astype(np.int32)[:, None]) @ b.astype(np.int32)
  np.testing.assert_array_equal(runner({"a": a, "b": b})["y0"].numpy(), want)
