"""Weights in and out: state dicts of models, safetensors files, PyTorch checkpoints and tar archives.

Names and behaviour follow tinygrad 0.14's `nn.state`. A state dict maps dotted attribute paths
(`layers.0.weight`) to tensors, so it lines up with tinygrad's and PyTorch's for the same model.
Files are read through a memory map: only the bytes of the tensors asked for are paged in, and
each is copied once, into a buffer on the target device. Nothing here imports torch.
"""
from __future__ import annotations

import io
import json
import os
import pickle
import struct
import tarfile
import types
import zipfile
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from plugrad.dtype import DType, bf16_to_f32, dtypes, f32_to_bf16
from plugrad.tensor import Tensor

PathLike = str | os.PathLike

# ---------------------------------------------------------------- state dicts

# objects whose attributes are not part of a model (a model may hold a function or a class)
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
  """Every tensor reachable from `obj` through attributes, dicts, lists and tuples, by dotted path.

  `model.layers[0].weight` is found as "layers.0.weight" (with `prefix` in front). Something reached
  by two paths (a shared layer, a tied weight) is listed under both, as in tinygrad and PyTorch; a
  reference back to an object being walked (a child holding its parent) is not followed.
  """
  out: dict[str, Tensor] = {}
  _walk(obj, prefix, tensor_type, out, set())
  return out


def _walk(obj: Any, prefix: str, tensor_type: type, out: dict[str, Tensor], on_path: set[int]) -> None:
  if isinstance(obj, tensor_type):
    out[prefix.rstrip(".")] = obj
    return
  if isinstance(obj, _OPAQUE) or id(obj) in on_path: return
  if hasattr(obj, "_asdict"): obj = obj._asdict()  # a namedtuple: by field name, not position
  if isinstance(obj, dict): items = [(str(k), v) for k, v in obj.items()]
  elif isinstance(obj, (list, tuple)): items = [(str(i), v) for i, v in enumerate(obj)]
  elif hasattr(obj, "__dict__"): items = list(vars(obj).items())
  else: return
  on_path.add(id(obj))
  for k, v in items: _walk(v, f"{prefix}{k}.", tensor_type, out, on_path)
  on_path.discard(id(obj))


def get_parameters(obj: Any) -> list[Tensor]:
  """The tensors of `obj`'s state dict in attribute order, each once (what an optimizer is given)."""
  seen: set[int] = set()
  return [t for t in get_state_dict(obj).values() if not (id(t) in seen or seen.add(id(t)))]


def load_state_dict(model: Any, state_dict: dict[str, Tensor | np.ndarray], strict: bool = True,
                    consume: bool = False, realize: bool = True) -> list[Tensor]:
  """Copy `state_dict` into the tensors of `model` (each keeps its device and dtype).

  :param strict: raise ValueError when a key of the model is missing from `state_dict` or a key of
    `state_dict` has no tensor in the model; False loads the keys both have.
  :param consume: remove each loaded entry from `state_dict` (frees memory while loading a big model).
  :param realize: run the copies now (False leaves them lazy, to realize together with other work).
  :return: the model's tensors that were loaded.
  A shape mismatch always raises ValueError naming the key and both shapes.
  """
  model_sd = get_state_dict(model)
  if strict:
    missing = [k for k in model_sd if k not in state_dict]
    unexpected = [k for k in state_dict if k not in model_sd]
    if missing or unexpected:
      parts = [f"missing keys {missing}"] if missing else []
      if unexpected: parts.append(f"unexpected keys {unexpected}")
      raise ValueError(f"load_state_dict: {' and '.join(parts)} (pass strict=False to load the keys both have)")
  loaded = []
  for k, v in model_sd.items():
    if k not in state_dict: continue
    src = state_dict[k]
    if isinstance(src, np.ndarray): src = Tensor(src, device=v.device)
    if not isinstance(src, Tensor): raise TypeError(f"load_state_dict: {k!r} is a {type(src).__name__}, not a Tensor")
    if src.shape != v.shape and {src.shape, v.shape} == {(), (1,)}:
      src = src.reshape(v.shape)  # BatchNorm's num_batches_tracked: PyTorch's is 0-d, tinygrad's has shape (1,)
    if src.shape != v.shape:
      raise ValueError(f"load_state_dict: shape mismatch for {k!r}: the model has {v.shape}, "
                       f"the state dict {src.shape}")
    # a copy, so the model never shares a buffer with the state dict it was loaded from
    v.assign(src.to(v.device).cast(v.dtype).contiguous())
    loaded.append(v)
    if consume: del state_dict[k]
  if realize and loaded: Tensor.realize(*loaded)
  return loaded


# ---------------------------------------------------------------- safetensors

# safetensors dtype codes (https://github.com/huggingface/safetensors, "format")
_SAFE_DTYPES: dict[str, DType] = {
  "BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "U16": dtypes.uint16, "I16": dtypes.int16,
  "U32": dtypes.uint32, "I32": dtypes.int32, "U64": dtypes.uint64, "I64": dtypes.int64,
  "F16": dtypes.float16, "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64,
}
_SAFE_CODES = {v: k for k, v in _SAFE_DTYPES.items()}


def _tensor_from_raw(raw: np.ndarray, dt: DType, shape: tuple[int, ...], device: str | None) -> Tensor:
  """A tensor on `device` from little-endian storage bytes reinterpreted as `dt` (bfloat16: uint16 bits)."""
  arr = bf16_to_f32(raw).reshape(shape) if dt == dtypes.bfloat16 else raw.reshape(shape)
  return Tensor(arr, device=device, dtype=dt)


def _raw_bytes(t: Tensor) -> bytes:
  """A realized tensor's values as little-endian storage bytes (bfloat16 as its 16-bit patterns)."""
  arr = t.numpy()
  if t.dtype == dtypes.bfloat16: arr = f32_to_bf16(arr)
  return np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()


def safe_load_metadata(fn: PathLike) -> tuple[dict[str, Any], int, np.memmap]:
  """The JSON header of a safetensors file, where its data starts, and the file mapped as bytes."""
  size = os.path.getsize(fn)
  if size < 8:
    raise ValueError(f"{os.fspath(fn)!r} is not a safetensors file: {size} bytes is shorter than the header length")
  mm = np.memmap(fn, dtype=np.uint8, mode="r")
  n = int(mm[:8].view("<u8")[0])
  if n > size - 8: raise ValueError(f"{os.fspath(fn)!r} is not a safetensors file: header length {n} exceeds the file")
  try:
    header = json.loads(bytes(mm[8:8 + n]).decode("utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ValueError(f"{os.fspath(fn)!r} is not a safetensors file: its header is not JSON ({e})") from None
  if not isinstance(header, dict): raise ValueError(f"{os.fspath(fn)!r}: the safetensors header is not a JSON object")
  return header, 8 + n, mm


def safe_load(fn: PathLike, device: str | None = None) -> dict[str, Tensor]:
  """The tensors of a safetensors file, by name, on `device` (the default device when None).

  The file is memory-mapped: each tensor's bytes are read once, straight into its device buffer.
  The file's `__metadata__` (if any) is not returned; read it with `safe_load_metadata`.
  """
  header, start, mm = safe_load_metadata(fn)
  out: dict[str, Tensor] = {}
  for name, info in header.items():
    if name == "__metadata__": continue
    code, shape, (b, e) = info.get("dtype"), tuple(info.get("shape", ())), info.get("data_offsets", (0, -1))
    if code not in _SAFE_DTYPES:
      raise ValueError(f"safe_load: tensor {name!r} has dtype {code!r}; plugrad reads {', '.join(_SAFE_DTYPES)}")
    dt = _SAFE_DTYPES[code]
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if not 0 <= b <= e <= len(mm) - start or e - b != nbytes:
      raise ValueError(f"safe_load: tensor {name!r} ({code}, shape {shape}) has data offsets [{b}, {e}), which do not "
                       f"hold its {nbytes} bytes inside the file's {len(mm) - start} data bytes")
    raw = mm[start + b:start + e].view(np.dtype(dt.storage_np).newbyteorder("<"))
    out[name] = _tensor_from_raw(raw, dt, shape, device)
  return out


def safe_save(tensors: dict[str, Tensor], fn: PathLike, metadata: dict[str, str] | None = None) -> None:
  """Write `tensors` to `fn` in the safetensors format (readable by the `safetensors` package).

  :param metadata: string pairs stored as the header's `__metadata__`.
  """
  for k, t in tensors.items():
    if not isinstance(k, str) or k == "__metadata__": raise ValueError(f"safe_save: invalid tensor name {k!r}")
    if not isinstance(t, Tensor): raise TypeError(f"safe_save: {k!r} is a {type(t).__name__}, not a Tensor")
    if t.dtype not in _SAFE_CODES:
      raise ValueError(f"safe_save: {k!r} has dtype {t.dtype.name}, which safetensors cannot store")
  if metadata is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
    raise TypeError("safe_save: metadata must map strings to strings")
  if tensors: Tensor.realize(*tensors.values())
  # the largest items first keeps every tensor aligned to its item size, as the safetensors package does
  names = sorted(tensors, key=lambda k: (-tensors[k].dtype.itemsize, k))
  header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
  offset = 0
  for k in names:
    t = tensors[k]
    nbytes = t.numel() * t.dtype.itemsize
    header[k] = {"dtype": _SAFE_CODES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + nbytes]}
    offset += nbytes
  text = json.dumps(header, separators=(",", ":")).encode("utf-8")
  text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
  with open(fn, "wb") as f:
    f.write(struct.pack("<Q", len(text)))
    f.write(text)
    for k in names: f.write(_raw_bytes(tensors[k]))


# ---------------------------------------------------------------- PyTorch files

_TORCH_STORAGES: dict[str, DType] = {
  "FloatStorage": dtypes.float32, "DoubleStorage": dtypes.float64, "HalfStorage": dtypes.float16,
  "BFloat16Storage": dtypes.bfloat16, "LongStorage": dtypes.int64, "IntStorage": dtypes.int32,
  "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool,
}
_LEGACY_MAGIC = 0x1950a86a20f9469cfc6c


class _StorageType:
  """What unpickling `torch.FloatStorage` and the like gives: the dtype its bytes hold."""
  def __init__(self, dtype: DType): self.dtype = dtype


def _rebuild_tensor(storage: Callable[[int, tuple, tuple], Tensor] | None, offset: int, size: tuple, stride: tuple,
                    *_: Any) -> Tensor | None:
  """torch._utils._rebuild_tensor_v2: a strided view of a storage, made into a plugrad Tensor (None
  in the first pass over a legacy file, where the storages are not located yet)."""
  return None if storage is None else storage(offset, tuple(size), tuple(stride))


def _rebuild_parameter(data: Any, *_: Any) -> Any: return data  # a Parameter is its tensor here


class _TorchUnpickler(pickle.Unpickler):
  """Unpickles only what a saved state dict is made of: containers, tensors and storages. Any other
  global (a whole pickled nn.Module, arbitrary code) raises UnpicklingError instead of running."""
  _ALLOWED: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
  }

  def __init__(self, file: Any, load_storage: Callable[[tuple], Any]):
    super().__init__(file)
    self.load_storage = load_storage

  def find_class(self, module: str, name: str) -> Any:
    if module == "torch" and name in _TORCH_STORAGES: return _StorageType(_TORCH_STORAGES[name])
    if (module, name) in self._ALLOWED: return self._ALLOWED[(module, name)]
    raise pickle.UnpicklingError(f"torch_load: the file needs {module}.{name}, which plugrad does not unpickle "
                                 "(only state dicts of tensors load; save model.state_dict() rather than the model)")

  def persistent_load(self, pid: Any) -> Any:
    if not (isinstance(pid, tuple) and pid and pid[0] == "storage" and isinstance(pid[1], _StorageType)):
      raise pickle.UnpicklingError(f"torch_load: unknown persistent id {pid!r}")
    return self.load_storage(pid)


def _view_maker(flat: np.ndarray, dt: DType, device: str | None) -> Callable[[int, tuple, tuple], Tensor]:
  """A function turning (offset, size, stride) into a Tensor viewing `flat` (a storage's elements)."""
  def make(offset: int, size: tuple, stride: tuple) -> Tensor:
    n = int(np.prod(size, dtype=np.int64))
    if n and offset + sum((s - 1) * st for s, st in zip(size, stride)) >= len(flat):
      raise ValueError(f"torch_load: a tensor of size {size}, stride {stride} at offset {offset} overruns its storage "
                       f"of {len(flat)} elements")
    view = np.lib.stride_tricks.as_strided(flat[offset:] if n else flat[:0], shape=size,
                                           strides=tuple(s * flat.itemsize for s in stride))
    return _tensor_from_raw(np.ascontiguousarray(view), dt, size, device)
  return make


def _storage_dtype(dt: DType, little: bool) -> np.dtype:
  return np.dtype(dt.storage_np).newbyteorder("<" if little else ">")


def torch_load(fn: PathLike, device: str | None = None) -> Any:
  """Load a PyTorch `.pt`/`.pth` file (torch.save's zip format, or the legacy format before it) without torch.

  Tensors come back as plugrad Tensors on `device` (the default device when None), inside the
  file's own containers (usually an OrderedDict state dict). Only containers and tensors are
  unpickled: a file holding anything else (a pickled module, custom classes) raises
  pickle.UnpicklingError naming the class. Stored (uncompressed) zip members are memory-mapped.
  """
  if zipfile.is_zipfile(fn): return _torch_load_zip(fn, device)
  return _torch_load_legacy(fn, device)


def _torch_load_zip(fn: PathLike, device: str | None) -> Any:
  with zipfile.ZipFile(fn) as zf:
    pkl = next((n for n in zf.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
    if pkl is None: raise ValueError(f"{os.fspath(fn)!r} is a zip file but not a torch checkpoint (no data.pkl)")
    root = pkl[:-len("data.pkl")]
    little = zf.read(root + "byteorder").decode().strip() != "big" if root + "byteorder" in zf.namelist() else True
    storages: dict[str, Callable] = {}

    def load_storage(pid: tuple) -> Callable:
      _, stype, key, _location, numel = pid[:5]
      if key not in storages:
        info = zf.getinfo(f"{root}data/{key}")
        npdt = _storage_dtype(stype.dtype, little)
        if info.compress_type == zipfile.ZIP_STORED:
          with open(fn, "rb") as f:  # the member's bytes start after its local header (30 bytes, name, extra)
            f.seek(info.header_offset)
            local = f.read(30)
          name_len, extra_len = struct.unpack("<HH", local[26:30])
          start = info.header_offset + 30 + name_len + extra_len
          flat = np.memmap(fn, dtype=npdt, mode="r", offset=start, shape=(numel,)) if numel else np.zeros(0, npdt)
        else: flat = np.frombuffer(zf.read(info), dtype=npdt, count=numel)
        storages[key] = _view_maker(flat, stype.dtype, device)
      return storages[key]

    with zf.open(pkl) as f: return _TorchUnpickler(f, load_storage).load()


def _torch_load_legacy(fn: PathLike, device: str | None) -> Any:
  """torch.save(..., _use_new_zipfile_serialization=False): pickles of a magic number, the protocol,
  system info, the object, then the storage keys, then each storage as (int64 count, bytes)."""
  with open(fn, "rb") as f:
    try:
      # restricted like the rest: a file that turns out not to be a torch file may hold anything
      magic = _TorchUnpickler(f, lambda pid: None).load()
    except Exception:
      raise ValueError(f"{os.fspath(fn)!r} is neither a torch zip checkpoint nor a legacy torch file") from None
    if magic != _LEGACY_MAGIC: raise ValueError(f"{os.fspath(fn)!r} is not a torch file (bad magic number)")
    _protocol, sys_info = _TorchUnpickler(f, lambda pid: None).load(), _TorchUnpickler(f, lambda pid: None).load()
    little = not isinstance(sys_info, dict) or sys_info.get("little_endian", True)
    obj_at = f.tell()
    # the storages follow the object: a first pass over it only finds where it ends
    dtypes_of: dict[str, tuple[DType, int]] = {}

    def note_storage(pid: tuple) -> None:
      if len(pid) > 5 and pid[5] is not None:
        raise ValueError("torch_load: storage views of very old torch files are not supported")
      dtypes_of[str(pid[2])] = (pid[1].dtype, pid[4])
    _TorchUnpickler(f, note_storage).load()
    keys = _TorchUnpickler(f, lambda pid: None).load()
    storages: dict[str, Callable] = {}
    pos = f.tell()
    for key in keys:
      dt, _ = dtypes_of[str(key)]
      f.seek(pos)
      (count,) = struct.unpack("<q" if little else ">q", f.read(8))
      npdt = _storage_dtype(dt, little)
      flat = np.memmap(fn, dtype=npdt, mode="r", offset=pos + 8, shape=(count,)) if count else np.zeros(0, npdt)
      storages[str(key)] = _view_maker(flat, dt, device)
      pos += 8 + count * npdt.itemsize
    f.seek(obj_at)
    return _TorchUnpickler(f, lambda pid: storages[str(pid[2])]).load()


# ---------------------------------------------------------------- tar archives

def tar_extract(t: Tensor) -> dict[str, Tensor]:
  """The regular files of the (uncompressed) tar archive whose bytes `t` holds, by member name.

  `t` is a 1-D uint8 tensor, as `Tensor.from_url(url)` (with `gunzip=True` for a .tar.gz) returns; each
  file comes back as a 1-D uint8 tensor of its bytes on `t`'s device. Directories, links and other
  special members are left out. Raises ValueError when `t` is not 1-D uint8 or its bytes are not a tar archive
  (TypeError when it is not a Tensor).
  """
  if not isinstance(t, Tensor): raise TypeError(f"tar_extract takes a Tensor, got {type(t).__name__}")
  if t.ndim != 1 or t.dtype != dtypes.uint8:
    raise ValueError(f"tar_extract takes a 1-D uint8 tensor of an archive's bytes, got shape {t.shape} {t.dtype.name}")
  try:
    # "r:" reads plain tar only: a compressed archive fails with one clear reason instead of one per method tried
    with tarfile.open(fileobj=io.BytesIO(t.numpy().tobytes()), mode="r:") as tar:
      files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
  except tarfile.TarError as e:
    raise ValueError(f"the {t.shape[0]} bytes given to tar_extract are not a tar archive: {e}") from e
  return {name: Tensor(np.frombuffer(data, dtype=np.uint8).copy(), device=t.device, dtype=dtypes.uint8)
          for name, data in files.items()}


__all__ = ["get_state_dict", "get_parameters", "load_state_dict", "safe_load_metadata", "safe_load", "safe_save",
           "torch_load", "tar_extract"]
