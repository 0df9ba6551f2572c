"""Weights in and out: state dicts of models, safetensors files, PyTorch checkpoints, GGUF files, tar and zip archives.

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
import zlib
from collections import OrderedDict
from typing import Any, Callable

import warnings

import numpy as np

from plugrad.dtype import DType, bf16_to_f32, dtypes, f32_to_bf16
from plugrad.shape import prod
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
                    verbose: bool = True, consume: bool = False, realize: bool = True) -> list[Tensor]:
  """Copy `state_dict` into the tensors of `model` (each keeps its device and dtype), as tinygrad's.

  :param strict: raise ValueError when a key of the model is missing from `state_dict`; False loads the keys both
    have. Keys of `state_dict` the model has no tensor for are left, with a warning (tinygrad's rule: a checkpoint
    may carry buffers a model recomputes, GPT-2's attn.bias).
  :param verbose: tinygrad's progress bar; plugrad shows none, and takes it so tinygrad's calls run.
  :param consume: remove each loaded entry from `state_dict` (frees memory while loading a big model).
  :param realize: run the copies now (False leaves them lazy, to realize together with other work).
  :return: the model's tensors that were loaded.
  A shape mismatch always raises ValueError naming the key and both shapes.
  """
  model_sd = get_state_dict(model)
  if strict and (missing := [k for k in model_sd if k not in state_dict]):
    raise ValueError(f"load_state_dict: missing keys {missing} (pass strict=False to load the keys both have)")
  if unexpected := [k for k in state_dict if k not in model_sd]:
    more = f" and {len(unexpected) - 8} more" if len(unexpected) > 8 else ""
    warnings.warn(f"load_state_dict: the model has no tensor for {unexpected[:8]}{more}: not loaded", stacklevel=2)
  loaded = []
  for k, v in model_sd.items():
    if k not in state_dict: continue
    src = state_dict[k]
    if isinstance(src, np.ndarray): src = Tensor(src, device=v.device)
    if not isinstance(src, Tensor): raise TypeError(f"load_state_dict: {k!r} is a {type(src).__name__}, not a Tensor")
    if src.shape != v.shape and {src.shape, v.shape} == {(), (1,)}:
      src = src.reshape(v.shape)  # BatchNorm's num_batches_tracked: 0-d, older tinygrad's of shape (1,)
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


def safe_load_metadata(fn: PathLike | Tensor) -> tuple[dict[str, Any], int, np.ndarray]:
  """The JSON header of a safetensors file, where its data starts, and the file mapped as bytes. `fn` may also be a
  uint8 tensor holding the file's bytes (tinygrad's `safe_load(Tensor(...))`)."""
  if isinstance(fn, Tensor):
    if fn.dtype != dtypes.uint8 or fn.ndim != 1:
      raise TypeError(f"safe_load reads a file's bytes from a 1-D uint8 tensor, not a {fn.dtype.name} {fn.shape} one")
    mm, what = fn.numpy(), "the tensor"
  else:
    mm, what = np.memmap(fn, dtype=np.uint8, mode="r") if os.path.getsize(fn) else np.zeros(0, np.uint8), repr(os.fspath(fn))
  size = len(mm)
  if size < 8: raise ValueError(f"{what} is not a safetensors file: {size} bytes is shorter than the header length")
  n = int(mm[:8].view("<u8")[0])
  if n > size - 8: raise ValueError(f"{what} is not a safetensors file: header length {n} exceeds the file")
  try:
    header = json.loads(bytes(mm[8:8 + n]).decode("utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ValueError(f"{what} is not a safetensors file: its header is not JSON ({e})") from None
  if not isinstance(header, dict): raise ValueError(f"{what}: the safetensors header is not a JSON object")
  return header, 8 + n, mm


def safe_load(fn: PathLike | Tensor, device: str | None = None) -> dict[str, Tensor]:
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


# ---------------------------------------------------------------- tensors of a file's bytes

def _check_bytes(t: Any, caller: str, of: str) -> None:
  """TypeError unless `t` is a Tensor, ValueError unless it is 1-D uint8 (the bytes of `of`)."""
  if not isinstance(t, Tensor): raise TypeError(f"{caller} takes a Tensor, got {type(t).__name__}")
  if t.ndim != 1 or t.dtype != dtypes.uint8:
    raise ValueError(f"{caller} takes a 1-D uint8 tensor of {of}, got shape {t.shape} {t.dtype.name}")


def _byte_tensors(files: dict[str, bytes], device: Any) -> dict[str, Tensor]:
  """Each file's bytes as a 1-D uint8 tensor on `device`."""
  return {name: Tensor(np.frombuffer(data, dtype=np.uint8).copy(), device=device, dtype=dtypes.uint8)
          for name, data in files.items()}


# ---------------------------------------------------------------- tar archives

def tar_extract(t: Tensor) -> dict[str, Tensor]:
  """The regular files of the (uncompressed) tar archive whose bytes `t` holds, by member name.

  `t` is a 1-D uint8 tensor, as `Tensor.from_url(url)` (with `gunzip=True` for a .tar.gz) returns; each
  file comes back as a 1-D uint8 tensor of its bytes on `t`'s device. Directories, links and other
  special members are left out. Raises ValueError when `t` is not 1-D uint8 or its bytes are not a tar archive
  (TypeError when it is not a Tensor).
  """
  _check_bytes(t, "tar_extract", "an archive's bytes")
  try:
    # "r:" reads plain tar only: a compressed archive fails with one clear reason instead of one per method tried
    with tarfile.open(fileobj=io.BytesIO(t.numpy().tobytes()), mode="r:") as tar:
      files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
  except tarfile.TarError as e:
    raise ValueError(f"the {t.shape[0]} bytes given to tar_extract are not a tar archive: {e}") from e
  return _byte_tensors(files, t.device)


def zip_extract(t: Tensor) -> dict[str, Tensor]:
  """The regular files of the zip archive whose bytes `t` holds, by member name.

  `t` is a 1-D uint8 tensor (as `Tensor.from_url(url)` returns); each file comes back decompressed, as a 1-D
  uint8 tensor of its bytes on `t`'s device. Directory entries are left out. Raises ValueError when `t` is not
  1-D uint8, its bytes are not a zip archive or a member is corrupt or encrypted, NotImplementedError for a
  compression method Python's zipfile cannot read, and TypeError when `t` is not a Tensor.
  """
  _check_bytes(t, "zip_extract", "an archive's bytes")
  files: dict[str, bytes] = {}
  try:
    with zipfile.ZipFile(io.BytesIO(t.numpy().tobytes())) as zf:
      for info in zf.infolist():
        if info.is_dir(): continue
        try:
          files[info.filename] = zf.read(info)
        except NotImplementedError as e:
          raise NotImplementedError(f"zip_extract: member {info.filename!r}: {e}") from None
        except RuntimeError as e:  # zipfile's error for an encrypted member (no password is taken here)
          raise ValueError(f"zip_extract: member {info.filename!r} cannot be read: {e}") from None
        except (zipfile.BadZipFile, EOFError, zlib.error) as e:
          raise ValueError(f"zip_extract: member {info.filename!r} is corrupt: {e}") from None
  except zipfile.BadZipFile as e:
    raise ValueError(f"the {t.shape[0]} bytes given to zip_extract are not a zip archive: {e}") from None
  return _byte_tensors(files, t.device)


# ---------------------------------------------------------------- GGUF files (llama.cpp's format)

# every ggml type id (ggml.h, docs/gguf.md), so an error names what a file holds even where it is not read
_GGML_NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 4: "Q4_2", 5: "Q4_3", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0",
               9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS",
               17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS",
               24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0",
               35: "TQ2_0", 39: "MXFP4"}
# the types read here: type id -> (elements per block, bytes per block)
_GGML_BLOCKS = {0: (1, 4), 1: (1, 2), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 30: (1, 2),
                2: (32, 18), 3: (32, 20), 8: (32, 34), 12: (256, 144), 14: (256, 210), 39: (32, 17)}
# plain (unquantized) types: what their elements are
_GGML_PLAIN = {0: dtypes.float32, 1: dtypes.float16, 24: dtypes.int8, 25: dtypes.int16, 26: dtypes.int32,
               27: dtypes.int64, 28: dtypes.float64, 30: dtypes.bfloat16}
_UINTS = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


def _ggml_supported() -> str:
  return ", ".join(f"{k} ({_GGML_NAMES[k]})" for k in sorted(_GGML_BLOCKS))


def _ggml_block(ggml_type: int, where: str) -> tuple[int, int]:
  """(elements, bytes) per block of a type read here; ValueError naming the type otherwise."""
  if ggml_type not in _GGML_BLOCKS:
    name = f" ({_GGML_NAMES[ggml_type]})" if ggml_type in _GGML_NAMES else ""
    raise ValueError(f"{where}: ggml type {ggml_type}{name} is not supported; supported types are {_ggml_supported()}")
  return _GGML_BLOCKS[ggml_type]


def _le(b: Tensor, dt: DType) -> Tensor:
  """The rows of `b` (uint8, shape (rows, dt.itemsize)) as little-endian `dt` values, shape (rows,).

  Built from byte shifts rather than a bitcast of the whole tensor, so it is the same on a big-endian host
  and needs no reinterpretation between item sizes."""
  u = b[:, 0].cast(_UINTS[dt.itemsize])
  for i in range(1, dt.itemsize): u = u.bitwise_or(b[:, i].cast(u.dtype).lshift(8 * i))
  return u.bitcast(dt)


def _f16(b: Tensor) -> Tensor:
  """A (rows, 2) uint8 tensor of fp16 scales as a (rows, 1) float32 column."""
  return _le(b, dtypes.float16).cast(dtypes.float32).unsqueeze(1)


def _nibbles(qs: Tensor) -> Tensor:
  """Bytes (rows, k) as 2k 4-bit values: the low nibbles first, then the high ones (ggml's order in a block)."""
  return qs.bitwise_and(0xF).cat(qs.rshift(4), dim=1)


def _dequantize(blocks: Tensor, ggml_type: int) -> Tensor:
  """Blocks (one per row, uint8) of a quantized type as float32 values, one row of the block's elements each.

  The arithmetic is ggml's reference dequantizer's (dequantize_row_*) in the same order, so the values
  match llama.cpp's to float32 rounding."""
  f32, nb = dtypes.float32, blocks.shape[0]
  if ggml_type == 2:  # Q4_0: fp16 d, 16 bytes of 4-bit q; x = (q - 8) * d
    return (_nibbles(blocks[:, 2:18]).cast(f32) - 8) * _f16(blocks[:, 0:2])
  if ggml_type == 3:  # Q4_1: fp16 d, fp16 m, 16 bytes of 4-bit q; x = q * d + m
    return _nibbles(blocks[:, 4:20]).cast(f32) * _f16(blocks[:, 0:2]) + _f16(blocks[:, 2:4])
  if ggml_type == 8:  # Q8_0: fp16 d, 32 int8 q; x = q * d
    return blocks[:, 2:34].bitcast(dtypes.int8).cast(f32) * _f16(blocks[:, 0:2])
  if ggml_type == 12:  # Q4_K: fp16 d, fp16 dmin, 12 bytes of 6-bit scales and mins for 8 sub-blocks, 128 bytes of q
    s = blocks[:, 4:16]
    # sub-blocks 0-3 keep their 6 bits in bytes 0-7; 4-7 take 4 bits from bytes 8-11 and 2 from the top of 0-7
    sc = s[:, 0:4].bitwise_and(63).cat(s[:, 8:12].bitwise_and(0xF).bitwise_or(s[:, 0:4].rshift(6).lshift(4)), dim=1)
    mn = s[:, 4:8].bitwise_and(63).cat(s[:, 8:12].rshift(4).bitwise_or(s[:, 4:8].rshift(6).lshift(4)), dim=1)
    qs = blocks[:, 16:144].reshape(nb, 4, 32)
    # each 32 bytes hold two sub-blocks: the low nibbles, then the high ones
    q = Tensor.stack(qs.bitwise_and(0xF), qs.rshift(4), dim=2).reshape(nb, 8, 32).cast(f32)
    d, dmin = _f16(blocks[:, 0:2]).unsqueeze(2), _f16(blocks[:, 2:4]).unsqueeze(2)
    return ((d * sc.cast(f32).unsqueeze(2)) * q - dmin * mn.cast(f32).unsqueeze(2)).reshape(nb, 256)
  if ggml_type == 14:  # Q6_K: 128 bytes low 4 bits, 64 bytes high 2 bits, 16 int8 scales, fp16 d
    # each half of 128 elements is four runs of 32: run r takes nibble r//2 of ql[32*(r%2) + l] and bits 2r, 2r+1
    # of qh[l] (ql, qh: that half's 64 and 32 bytes)
    ql = blocks[:, 0:128].reshape(nb, 2, 2, 32)
    low = Tensor.stack(ql.bitwise_and(0xF), ql.rshift(4), dim=2).reshape(nb, 2, 4, 32)
    qh = blocks[:, 128:192].reshape(nb, 2, 32)
    high = Tensor.stack(*[qh.rshift(2 * r).bitwise_and(3) for r in range(4)], dim=2)
    q = low.bitwise_or(high.lshift(4)).cast(f32).reshape(nb, 16, 16) - 32
    sc = blocks[:, 192:208].bitcast(dtypes.int8).cast(f32).unsqueeze(2)  # one scale per 16 elements
    return ((_f16(blocks[:, 208:210]).unsqueeze(2) * sc) * q).reshape(nb, 256)
  if ggml_type == 39:  # MXFP4: E8M0 exponent byte, 16 bytes of 4-bit E2M1 codes
    e = blocks[:, 0:1].cast(dtypes.uint32)
    # ggml scales by half the E8M0 value, 2**(e - 128), built as float32 bits (e < 2 is a subnormal)
    bits = (e >= 2).where(e.maximum(1).sub(1).lshift(23), (e == 0).where(0x00200000, 0x00400000).cast(dtypes.uint32))
    code = _nibbles(blocks[:, 1:17])
    m = code.bitwise_and(7)
    # twice the E2M1 magnitude: 0, 1, 2, 3, then 4, 6, 8, 12 (2 or 3, shifted by 1 or 2)
    mag = (m < 4).where(m, m.bitwise_and(1).add(2).lshift(m.rshift(1).maximum(1).sub(1))).cast(f32)
    return code.rshift(3).cast(dtypes.bool).where(-mag, mag) * bits.bitcast(f32)
  raise AssertionError(f"no dequantizer for ggml type {ggml_type}")  # _GGML_BLOCKS lists only the types above


def ggml_data_to_tensor(t: Tensor, n: int, ggml_type: int) -> Tensor:
  """The `n` values stored in ggml type `ggml_type` at the start of the 1-D uint8 tensor `t`, as a 1-D tensor.

  Plain types keep their type: F32 (id 0) float32, F16 (1) float16, BF16 (30) bfloat16, F64 (28) float64, I8 (24),
  I16 (25), I32 (26), I64 (27) int8 to int64. Quantized types come back as float32: Q4_0 (2), Q4_1 (3), Q8_0 (8),
  Q4_K (12), Q6_K (14), MXFP4 (39). The decoding is lazy tensor work on `t`'s device. Type ids are ggml's current
  ones (docs/gguf.md): 16-18 are IQ2_XXS, IQ2_XS, IQ3_XXS, not the integer types an old ggml numbered so.
  Raises ValueError for another type (naming it), an `n` that is not a whole number of blocks, or a `t` holding
  fewer bytes than the values need.
  """
  _check_bytes(t, "ggml_data_to_tensor", "bytes")
  per_block, block_bytes = _ggml_block(ggml_type, "ggml_data_to_tensor")
  if not isinstance(n, int) or n < 0 or n % per_block:
    raise ValueError(f"ggml_data_to_tensor: {n!r} values are not a whole number of {_GGML_NAMES[ggml_type]} blocks "
                     f"of {per_block}")
  nb = n // per_block
  if nb * block_bytes > t.shape[0]:
    raise ValueError(f"ggml_data_to_tensor: {n} {_GGML_NAMES[ggml_type]} values need {nb * block_bytes} bytes, "
                     f"the tensor has {t.shape[0]}")
  out_dtype = _GGML_PLAIN.get(ggml_type, dtypes.float32)
  if n == 0: return Tensor.zeros(0, dtype=out_dtype, device=t.device)
  blocks = t[:nb * block_bytes].reshape(nb, block_bytes)
  if ggml_type in _GGML_PLAIN:
    return blocks[:, 0].bitcast(out_dtype) if block_bytes == 1 else _le(blocks, out_dtype)
  return _dequantize(blocks, ggml_type).reshape(n)


# GGUF metadata value types (docs/gguf.md, gguf_metadata_value_type) with fixed sizes: their numpy types
_GGUF_NUMERIC = {0: np.dtype("<u1"), 1: np.dtype("<i1"), 2: np.dtype("<u2"), 3: np.dtype("<i2"), 4: np.dtype("<u4"),
                 5: np.dtype("<i4"), 6: np.dtype("<f4"), 7: np.dtype("<u1"), 10: np.dtype("<u8"), 11: np.dtype("<i8"),
                 12: np.dtype("<f8")}
_GGUF_STRING, _GGUF_ARRAY, _GGUF_BOOL = 8, 9, 7


class _GGUFReader:
  """Little-endian reads from the front of a GGUF file held in a uint8 tensor. Bytes are fetched to the host a
  window at a time, so reading the header never copies the (far larger) tensor data off the device."""
  _WINDOW = 1 << 20

  def __init__(self, t: Tensor):
    self.t, self.size, self.pos = t, t.shape[0], 0
    self.buf, self.buf_at = b"", 0

  def take(self, n: int, what: str) -> bytes:
    if n > self.size - self.pos:
      raise ValueError(f"gguf_load: the file is truncated: {what} at byte {self.pos} needs {n} bytes, "
                       f"{self.size - self.pos} are left of {self.size}")
    end = self.pos + n
    if end > self.buf_at + len(self.buf):
      hi = min(self.size, max(end, self.pos + self._WINDOW))
      self.buf, self.buf_at = self.t[self.pos:hi].numpy().tobytes(), self.pos
    out = self.buf[self.pos - self.buf_at:end - self.buf_at]
    self.pos = end
    return out

  def numbers(self, typ: int, count: int, what: str) -> np.ndarray:
    return np.frombuffer(self.take(count * _GGUF_NUMERIC[typ].itemsize, what), dtype=_GGUF_NUMERIC[typ], count=count)

  def u32(self, what: str) -> int: return int(self.numbers(4, 1, what)[0])
  def u64(self, what: str) -> int: return int(self.numbers(10, 1, what)[0])

  def string(self, what: str) -> str:
    raw = self.take(self.u64(f"the length of {what}"), what)
    try:
      return raw.decode("utf-8")
    except UnicodeDecodeError as e:
      raise ValueError(f"gguf_load: {what} (ending at byte {self.pos}) is not UTF-8: {e}") from None

  def value(self, typ: int, what: str) -> Any:
    if typ in _GGUF_NUMERIC:
      v = self.numbers(typ, 1, what)[0]
      return bool(v) if typ == _GGUF_BOOL else v.item()
    if typ == _GGUF_STRING: return self.string(what)
    if typ == _GGUF_ARRAY:
      elem, count = self.u32(f"the element type of {what}"), self.u64(f"the length of {what}")
      if elem in _GGUF_NUMERIC:
        vals = self.numbers(elem, count, what)
        return (vals != 0).tolist() if elem == _GGUF_BOOL else vals.tolist()
      if elem not in (_GGUF_STRING, _GGUF_ARRAY):
        raise ValueError(f"gguf_load: {what} is an array of unknown value type {elem}")
      # every string or array element takes at least 8 bytes: a corrupt length fails here, not after a long loop
      if count * 8 > self.size - self.pos:
        raise ValueError(f"gguf_load: the file is truncated: {what} has {count} elements, which need at least "
                         f"{count * 8} bytes, {self.size - self.pos} are left")
      return [self.value(elem, f"{what}[{i}]") for i in range(count)]
    raise ValueError(f"gguf_load: {what} has unknown value type {typ}")


def gguf_load(tensor: Tensor) -> tuple[dict, dict[str, Tensor]]:
  """The metadata and the tensors of a GGUF file (llama.cpp's checkpoints) whose bytes `tensor` holds.

  `tensor` is a 1-D uint8 tensor of the whole file, e.g. `Tensor(np.fromfile(fn, np.uint8))`. Returns
  `(kv_data, state_dict)`: the metadata by key (numbers as Python ints and floats, strings, arrays as lists),
  and each tensor by name with its shape (GGUF lists dimensions innermost first, so the shape is their
  reverse), decoded by `ggml_data_to_tensor` lazily on `tensor`'s device. Versions 2 and 3 (little-endian)
  are read. Raises ValueError naming the problem for a file that is not GGUF, another version, a truncated or
  malformed header, a tensor whose data runs past the end, or a tensor type not supported (TypeError when
  `tensor` is not a Tensor).
  """
  _check_bytes(tensor, "gguf_load", "a file's bytes")
  tensor.realize()  # the header is read in pieces and the tensors are views of it: compute a lazy file once
  r = _GGUFReader(tensor)
  magic = r.take(min(4, r.size), "the magic number")
  if magic != b"GGUF": raise ValueError(f"gguf_load: not a GGUF file: it starts with {magic!r}, not b'GGUF'")
  version = r.u32("the version")
  if version not in (2, 3):
    if int.from_bytes(version.to_bytes(4, "little"), "big") in (2, 3):
      raise ValueError("gguf_load: big-endian GGUF files are not supported")
    raise ValueError(f"gguf_load: GGUF version {version} is not supported (versions 2 and 3 are)")
  n_tensors, n_kv = r.u64("the tensor count"), r.u64("the metadata count")
  kv_data: dict[str, Any] = {}
  for i in range(n_kv):
    key = r.string(f"metadata key {i}")
    if key in kv_data: raise ValueError(f"gguf_load: metadata key {key!r} appears twice")
    kv_data[key] = r.value(r.u32(f"the value type of {key!r}"), f"metadata {key!r}")
  infos: list[tuple[str, tuple[int, ...], int, int]] = []
  for i in range(n_tensors):
    name = r.string(f"the name of tensor {i}")
    n_dims = r.u32(f"the dimension count of tensor {name!r}")
    dims = tuple(int(d) for d in r.numbers(10, n_dims, f"the dimensions of tensor {name!r}"))
    typ, off = r.u32(f"the type of tensor {name!r}"), r.u64(f"the data offset of tensor {name!r}")
    infos.append((name, dims, typ, off))
  alignment = kv_data.get("general.alignment", 32)
  if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0:
    raise ValueError(f"gguf_load: general.alignment must be a positive integer, not {alignment!r}")
  data_start = -(-r.pos // alignment) * alignment  # the tensor data starts at the first aligned byte after the infos
  state_dict: dict[str, Tensor] = {}
  for name, dims, typ, off in infos:
    if name in state_dict: raise ValueError(f"gguf_load: tensor {name!r} appears twice")
    per_block, block_bytes = _ggml_block(typ, f"gguf_load: tensor {name!r}")
    n = prod(dims)
    if n % per_block:
      raise ValueError(f"gguf_load: tensor {name!r} of dimensions {list(dims)} is not a whole number of "
                       f"{_GGML_NAMES[typ]} blocks of {per_block} values")
    begin, end = data_start + off, data_start + off + n // per_block * block_bytes
    if end > r.size:
      raise ValueError(f"gguf_load: the file is truncated: tensor {name!r} ({_GGML_NAMES[typ]}, dimensions "
                       f"{list(dims)}) needs bytes [{begin}, {end}), the file has {r.size}")
    state_dict[name] = ggml_data_to_tensor(tensor[begin:end], n, typ).reshape(tuple(reversed(dims)))
  return kv_data, state_dict


__all__ = ["get_state_dict", "get_parameters", "load_state_dict", "safe_load_metadata", "safe_load", "safe_save",
           "torch_load", "tar_extract", "zip_extract", "ggml_data_to_tensor", "gguf_load"]
