"""nn.state: state dicts of models, safetensors files (checked against the `safetensors` package) and
PyTorch checkpoints written by torch itself."""
import pickle
from collections import OrderedDict, namedtuple

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

from plugrad import Tensor, dtypes
from plugrad.nn.state import (get_parameters, get_state_dict, load_state_dict, safe_load, safe_load_metadata, safe_save,
                              torch_load)

rng = np.random.default_rng(0)


class Block:
  def __init__(self):
    self.weight = Tensor(rng.standard_normal((3, 2)).astype(np.float32))
    self.bias = Tensor(np.zeros(3, np.float32))
    self.act = Tensor.relu  # a function attribute is not walked


class Model:
  def __init__(self):
    self.layers = [Block(), Block()]
    self.heads = {"cls": Block()}
    self.scale = Tensor([2.0])
    self.name = "model"


def test_state_dict_keys_follow_attributes():
  m = Model()
  sd = get_state_dict(m)
  assert list(sd) == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias", "heads.cls.weight",
                      "heads.cls.bias", "scale"]
  assert sd["layers.1.weight"] is m.layers[1].weight
  assert get_parameters(m) == list(sd.values())
  assert list(get_state_dict(m, prefix="model."))[0] == "model.layers.0.weight"
  Pair = namedtuple("Pair", "left right")
  assert list(get_state_dict(Pair(Tensor([1.0]), Tensor([2.0])))) == ["left", "right"]


def test_shared_layers_and_cycles():
  m = Model()
  m.layers.append(m.layers[0])  # a shared layer: under both paths (as torch's state_dict), one parameter
  m.heads["cls"].owner = m      # a cycle is not followed
  sd = get_state_dict(m)
  assert sd["layers.2.weight"] is sd["layers.0.weight"] and not any("owner" in k for k in sd)
  assert len(get_parameters(m)) == 7 and len(sd) == 9


def test_load_state_dict_copies_values():
  src, dst = Model(), Model()
  loaded = load_state_dict(dst, get_state_dict(src))
  assert len(loaded) == 7
  for k, v in get_state_dict(dst).items(): np.testing.assert_array_equal(v.numpy(), get_state_dict(src)[k].numpy())
  # a copy: changing the source afterwards leaves the model alone
  src.scale.assign(Tensor([7.0])).realize()
  assert dst.scale.numpy().tolist() == [2.0]


def test_load_state_dict_errors_name_the_key():
  m = Model()
  sd = get_state_dict(Model())
  sd["layers.0.weight"] = Tensor(np.zeros((2, 3), np.float32))
  with pytest.raises(ValueError, match=r"'layers.0.weight'.*\(3, 2\).*\(2, 3\)"): load_state_dict(m, sd)
  sd = get_state_dict(Model())
  del sd["scale"]
  sd["extra"] = Tensor([1.0])
  with pytest.raises(ValueError, match=r"missing keys \['scale'\]"): load_state_dict(m, sd)
  sd["layers.0.bias"] = Tensor(np.full(3, 4.0, np.float32))
  with pytest.warns(UserWarning, match="extra"): load_state_dict(m, sd, strict=False)  # loads the keys both have
  assert m.layers[0].bias.numpy().tolist() == [4.0] * 3 and m.scale.numpy().tolist() == [2.0]


def test_load_state_dict_leaves_keys_the_model_lacks_with_a_warning():
  # tinygrad's rule (a GPT-2 checkpoint carries attn.bias, which the model recomputes): it raised, so tinygrad's
  # loading code failed; and tinygrad's verbose= keyword was refused
  m = Model()
  sd = get_state_dict(Model())
  sd["layers.0.bias"] = Tensor(np.full(3, 4.0, np.float32))
  sd["attn.bias"] = Tensor([1.0])
  with pytest.warns(UserWarning, match=r"no tensor for \['attn.bias'\]: not loaded"):
    load_state_dict(m, sd, verbose=False)
  assert m.layers[0].bias.numpy().tolist() == [4.0] * 3


def test_load_state_dict_casts_and_consumes():
  m = Model()
  sd = {k: np.full(v.shape, 0.5, np.float64) for k, v in get_state_dict(m).items()}
  load_state_dict(m, sd, consume=True)
  assert sd == {} and m.scale.dtype == dtypes.float32 and m.scale.numpy().tolist() == [0.5]


ALL_SAFE = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i8": np.int8, "i16": np.int16, "i32": np.int32,
            "i64": np.int64, "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}


def test_safetensors_round_trip_with_the_safetensors_package(tmp_path):
  arrays = {k: (rng.standard_normal((2, 3)) * 50).astype(t) for k, t in ALL_SAFE.items()}
  arrays["bool"] = rng.standard_normal(5) > 0
  arrays["scalar"], arrays["empty"] = np.array(1.5, np.float32), np.zeros((0, 4), np.float32)
  # theirs -> ours
  safetensors.numpy.save_file(arrays, tmp_path / "a.safetensors", metadata={"format": "np"})
  ours = safe_load(tmp_path / "a.safetensors")
  assert set(ours) == set(arrays)
  for k, a in arrays.items():
    assert ours[k].shape == a.shape and ours[k].dtype == dtypes.from_any(a.dtype), k
    np.testing.assert_array_equal(ours[k].numpy(), a, err_msg=k)
  assert safe_load_metadata(tmp_path / "a.safetensors")[0]["__metadata__"] == {"format": "np"}
  # ours -> theirs, and ours -> ours
  safe_save(ours, tmp_path / "b.safetensors", metadata={"step": "3"})
  theirs = safetensors.numpy.load_file(tmp_path / "b.safetensors")
  for k, a in arrays.items(): np.testing.assert_array_equal(theirs[k], a, err_msg=k)
  again = safe_load(tmp_path / "b.safetensors")
  for k, a in arrays.items(): np.testing.assert_array_equal(again[k].numpy(), a, err_msg=k)


def test_safetensors_bfloat16_both_ways(tmp_path):
  t = torch.tensor([[1.0, -2.5, 3.140625], [1e-3, 65280.0, -0.0]], dtype=torch.bfloat16)
  safetensors.torch.save_file({"x": t}, tmp_path / "t.safetensors")
  ours = safe_load(tmp_path / "t.safetensors")["x"]
  assert ours.dtype == dtypes.bfloat16
  np.testing.assert_array_equal(ours.numpy(), t.float().numpy())
  safe_save({"x": ours, "h": Tensor([0.5, 2.0], dtype=dtypes.float16)}, tmp_path / "o.safetensors")
  back = safetensors.torch.load_file(tmp_path / "o.safetensors")
  assert back["x"].dtype == torch.bfloat16 and torch.equal(back["x"], t)
  assert back["h"].dtype == torch.float16 and back["h"].tolist() == [0.5, 2.0]


def test_safe_load_reads_through_a_memory_map(tmp_path, monkeypatch):
  safe_save({"w": Tensor(np.arange(6, dtype=np.float32))}, tmp_path / "w.safetensors")
  maps = []
  real = np.memmap
  monkeypatch.setattr(np, "memmap", lambda *a, **k: maps.append(a[0]) or real(*a, **k))
  assert safe_load(tmp_path / "w.safetensors")["w"].numpy().tolist() == list(range(6))
  assert maps == [tmp_path / "w.safetensors"]


def test_safe_load_rejects_bad_files(tmp_path):
  (tmp_path / "short").write_bytes(b"abc")
  with pytest.raises(ValueError, match="not a safetensors file"): safe_load(tmp_path / "short")
  (tmp_path / "long").write_bytes((1000).to_bytes(8, "little") + b"{}")
  with pytest.raises(ValueError, match="header length 1000"): safe_load(tmp_path / "long")
  header = b'{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}}'
  (tmp_path / "cut").write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
  with pytest.raises(ValueError, match="'w'.*16 bytes"): safe_load(tmp_path / "cut")
  header = b'{"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}}'
  (tmp_path / "f8").write_bytes(len(header).to_bytes(8, "little") + header + bytes(1))
  with pytest.raises(ValueError, match="'w' has dtype 'F8_E4M3'"): safe_load(tmp_path / "f8")
  with pytest.raises(TypeError, match="'w' is a ndarray"): safe_save({"w": np.zeros(2)}, tmp_path / "x")


TORCH_SD = OrderedDict(
  weight=torch.randn(4, 3, generator=torch.Generator().manual_seed(0)),
  transposed=torch.arange(12, dtype=torch.float32).reshape(3, 4).t(),  # a strided view of a storage
  sliced=torch.arange(10, dtype=torch.int64)[3:8],                     # an offset into a storage
  half=torch.tensor([1.5, -2.0], dtype=torch.float16),
  bf16=torch.tensor([0.1, 300.0], dtype=torch.bfloat16),
  flags=torch.tensor([True, False]),
  count=torch.tensor(7),
)


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_torch_load_reads_files_torch_wrote(tmp_path, zip_format):
  torch.save(TORCH_SD, tmp_path / "m.pt", _use_new_zipfile_serialization=zip_format)
  ours = torch_load(tmp_path / "m.pt")
  assert isinstance(ours, OrderedDict) and list(ours) == list(TORCH_SD)
  for k, t in TORCH_SD.items():
    assert ours[k].shape == tuple(t.shape), k
    want = t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()
    np.testing.assert_array_equal(ours[k].numpy(), want, err_msg=k)
  assert ours["bf16"].dtype == dtypes.bfloat16 and ours["half"].dtype == dtypes.float16


def test_torch_state_dict_loads_into_a_model(tmp_path):
  class Net:  # the attribute layout of torch.nn.Sequential(Linear(3, 4), ReLU(), Linear(4, 2))
    def __init__(self): self.layers = {"0": Block(), "2": Block()}
  tnet = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
  torch.save(tnet.state_dict(), tmp_path / "net.pth")
  net = Net()
  net.layers["0"].weight, net.layers["0"].bias = Tensor.zeros(4, 3).contiguous(), Tensor.zeros(4).contiguous()
  net.layers["2"].weight, net.layers["2"].bias = Tensor.zeros(2, 4).contiguous(), Tensor.zeros(2).contiguous()
  load_state_dict(net, {f"layers.{k}": v for k, v in torch_load(tmp_path / "net.pth").items()})
  x = rng.standard_normal((5, 3)).astype(np.float32)
  ours = (Tensor(x).linear(net.layers["0"].weight.T, net.layers["0"].bias).relu()
          .linear(net.layers["2"].weight.T, net.layers["2"].bias))
  np.testing.assert_allclose(ours.numpy(), tnet(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_torch_load_refuses_code(tmp_path):
  torch.save(torch.nn.Linear(2, 2), tmp_path / "module.pt")  # a whole pickled module, not a state dict
  with pytest.raises(pickle.UnpicklingError, match="torch.nn.modules.linear.Linear.*state_dict"):
    torch_load(tmp_path / "module.pt")
  (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
  with pytest.raises(ValueError, match="torch"): torch_load(tmp_path / "junk.pt")


def test_torch_load_never_runs_code_from_a_non_torch_pickle(tmp_path):
  class Payload:
    def __reduce__(self): return (print, ("this must not run",))
  (tmp_path / "evil.pt").write_bytes(pickle.dumps(Payload()))
  with pytest.raises(ValueError, match="neither a torch zip checkpoint nor a legacy torch file"):
    torch_load(tmp_path / "evil.pt")


def test_safe_load_reads_a_tensor_holding_the_files_bytes(tmp_path):
  # tinygrad's safe_load(Tensor(...)) (a file fetched into memory): it raised "stat: path should be string"
  sd = {"w": Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)), "b": Tensor(np.array([1, 2], np.int64))}
  safe_save(sd, tmp_path / "m.safetensors")
  loaded = safe_load(Tensor((tmp_path / "m.safetensors").read_bytes()))
  assert loaded["w"].tolist() == sd["w"].tolist() and loaded["b"].tolist() == [1, 2]
  with pytest.raises(TypeError, match="1-D uint8 tensor"): safe_load(Tensor([1.0, 2.0]))
  (tmp_path / "empty").write_bytes(b"")
  with pytest.raises(ValueError, match="0 bytes is shorter than the header length"): safe_load(tmp_path / "empty")
