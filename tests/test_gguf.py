"""nn.state.gguf_load, ggml_data_to_tensor and zip_extract.

The GGUF files are written here, from docs/gguf.md's layout. Quantized blocks are packed from random quant
values and scales; what they must decode to is computed by reference dequantizers written as plain loops after
ggml's dequantize_row_* (and checked against the values packed), so the reader is held to ggml's bit layouts.
"""
import io
import struct
import zipfile

import numpy as np
import pytest

from plugrad import Tensor, dtypes
from plugrad.nn.state import ggml_data_to_tensor, gguf_load, zip_extract

F32, F16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, I8, I16, I32, I64, F64, BF16, MXFP4 = 0, 1, 2, 3, 8, 12, 14, 24, 25, 26, 27, \
  28, 30, 39

# GGUF metadata value types
U8, I8V, U16, I16V, U32, I32V, F32V, BOOL, STR, ARR, U64, I64V, F64V = range(13)
_PACK = {U8: "<B", I8V: "<b", U16: "<H", I16V: "<h", U32: "<I", I32V: "<i", F32V: "<f", BOOL: "<?", U64: "<Q",
         I64V: "<q", F64V: "<d"}


# ---------------------------------------------------------------- a GGUF writer

def _str(s: str) -> bytes:
  b = s.encode("utf-8")
  return struct.pack("<Q", len(b)) + b


def _value(typ: int, v) -> bytes:
  if typ == STR: return _str(v)
  if typ == ARR:
    elem, items = v
    return struct.pack("<IQ", elem, len(items)) + b"".join(_value(elem, x) for x in items)
  return struct.pack(_PACK[typ], v)


def _round_up(x: int, a: int) -> int: return -(-x // a) * a


def gguf_file(kv: list, tensors: list, alignment: int = 32, version: int = 3) -> tuple[bytes, int, int]:
  """A GGUF file of metadata `kv` [(key, type, value)] and `tensors` [(name, dims innermost first, ggml type,
  data bytes)], each tensor's data at an `alignment`-aligned offset; where its data section starts, and where
  its header ends."""
  head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv))
  for key, typ, v in kv: head += _str(key) + struct.pack("<I", typ) + _value(typ, v)
  offset, datas = 0, b""
  for name, dims, typ, data in tensors:
    head += _str(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, typ, offset)
    datas += data + b"\0" * (_round_up(len(data), alignment) - len(data))
    offset = len(datas)
  start = _round_up(len(head), alignment)
  return head + b"\0" * (start - len(head)) + datas, start, len(head)


def as_tensor(b: bytes, dev: str | None = None) -> Tensor:
  return Tensor(np.frombuffer(b, dtype=np.uint8).copy(), device=dev)


# ---------------------------------------------------------------- quantized blocks: packers and references

rng = np.random.default_rng(0)


def _halves(n: int, lo: float = 0.01, hi: float = 0.5) -> np.ndarray:
  """n fp16 scales of random sign (exact in float32 once converted)."""
  return (rng.uniform(lo, hi, n) * rng.choice([-1, 1], n)).astype(np.float16)


def _pack_nibble_blocks(nb: int, scales: int) -> bytes:
  """nb blocks of `scales` fp16 values, then 32 random 4-bit values, the first 16 in the low nibbles."""
  out = b""
  for _ in range(nb):
    q = rng.integers(0, 16, 32, dtype=np.uint8)
    out += _halves(scales).tobytes() + (q[:16] | (q[16:] << 4)).astype(np.uint8).tobytes()
  return out


def pack_q4_0(nb: int) -> bytes: return _pack_nibble_blocks(nb, 1)  # d


def ref_q4_0(b: bytes) -> np.ndarray:
  y = []
  for i in range(0, len(b), 18):
    d = np.float32(np.frombuffer(b[i:i + 2], np.float16)[0])
    qs = b[i + 2:i + 18]
    y += [np.float32((qs[j] & 0xF) - 8) * d for j in range(16)] + [np.float32((qs[j] >> 4) - 8) * d for j in range(16)]
  return np.array(y, np.float32)


def pack_q4_1(nb: int) -> bytes: return _pack_nibble_blocks(nb, 2)  # d, m


def ref_q4_1(b: bytes) -> np.ndarray:
  y = []
  for i in range(0, len(b), 20):
    d, m = np.frombuffer(b[i:i + 4], np.float16).astype(np.float32)
    qs = b[i + 4:i + 20]
    y += [np.float32(qs[j] & 0xF) * d + m for j in range(16)] + [np.float32(qs[j] >> 4) * d + m for j in range(16)]
  return np.array(y, np.float32)


def pack_q8_0(nb: int) -> bytes:
  return b"".join(_halves(1).tobytes() + rng.integers(-128, 128, 32, dtype=np.int8).tobytes() for _ in range(nb))


def ref_q8_0(b: bytes) -> np.ndarray:
  y = []
  for i in range(0, len(b), 34):
    d = np.float32(np.frombuffer(b[i:i + 2], np.float16)[0])
    y += [np.float32(q) * d for q in np.frombuffer(b[i + 2:i + 34], np.int8)]
  return np.array(y, np.float32)


def pack_q4_k(nb: int) -> tuple[bytes, np.ndarray]:
  """Q4_K blocks and the values they hold, from 6-bit scales and mins and 4-bit quants."""
  out, vals = b"", []
  for _ in range(nb):
    d, dmin = np.abs(_halves(2)).astype(np.float32)
    sc, mn = rng.integers(0, 64, 8), rng.integers(0, 64, 8)
    q = rng.integers(0, 16, 256)
    s = [0] * 12
    for j in range(4):  # scales and mins 0-3 in the low 6 bits of bytes 0-7, 4-7 split over bytes 8-11 and the top bits
      s[j] = sc[j] | ((sc[j + 4] >> 4) << 6)
      s[j + 4] = mn[j] | ((mn[j + 4] >> 4) << 6)
      s[j + 8] = (sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4)
    qs = [q[64 * c + l] | (q[64 * c + 32 + l] << 4) for c in range(4) for l in range(32)]
    out += np.array([d, dmin], np.float16).tobytes() + bytes(s) + bytes(qs)
    vals += [(d * np.float32(sc[e // 32])) * np.float32(q[e]) - dmin * np.float32(mn[e // 32]) for e in range(256)]
  return out, np.array(vals, np.float32)


def ref_q4_k(b: bytes) -> np.ndarray:
  def scale_min(j: int, s: bytes) -> tuple[int, int]:
    if j < 4: return s[j] & 63, s[j + 4] & 63
    return (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)
  y = []
  for i in range(0, len(b), 144):
    d, dmin = np.frombuffer(b[i:i + 4], np.float16).astype(np.float32)
    s, q = b[i + 4:i + 16], b[i + 16:i + 144]
    for c in range(4):
      for k, shift in ((2 * c, 0), (2 * c + 1, 4)):
        sc, m = scale_min(k, s)
        d1, m1 = d * np.float32(sc), dmin * np.float32(m)
        y += [d1 * np.float32((q[32 * c + l] >> shift) & 0xF) - m1 for l in range(32)]
  return np.array(y, np.float32)


def pack_q6_k(nb: int) -> tuple[bytes, np.ndarray]:
  """Q6_K blocks and the values they hold, from 6-bit quants and int8 scales (one per 16 values)."""
  out, vals = b"", []
  for _ in range(nb):
    q, sc, d = rng.integers(0, 64, 256), rng.integers(-128, 128, 16), _halves(1)
    ql, qh = [0] * 128, [0] * 64
    for h in range(2):
      for l in range(32):
        q1, q2, q3, q4 = (q[128 * h + 32 * r + l] for r in range(4))
        ql[64 * h + l] = (q1 & 0xF) | ((q3 & 0xF) << 4)
        ql[64 * h + l + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4)
        qh[32 * h + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)
    out += bytes(ql) + bytes(qh) + sc.astype(np.int8).tobytes() + d.tobytes()
    vals += [(np.float32(d[0]) * np.float32(sc[e // 16])) * np.float32(q[e] - 32) for e in range(256)]
  return out, np.array(vals, np.float32)


def ref_q6_k(b: bytes) -> np.ndarray:
  y = np.zeros(len(b) // 210 * 256, np.float32)
  for i in range(len(b) // 210):
    blk = b[210 * i:210 * (i + 1)]
    d = np.float32(np.frombuffer(blk[208:210], np.float16)[0])
    sc = np.frombuffer(blk[192:208], np.int8)
    for h in range(2):
      ql, qh, s, base = blk[64 * h:64 * h + 64], blk[128 + 32 * h:160 + 32 * h], sc[8 * h:8 * h + 8], 256 * i + 128 * h
      for l in range(32):
        k = l // 16
        y[base + l] = d * np.float32(s[k]) * np.float32(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32)
        y[base + l + 32] = d * np.float32(s[k + 2]) * np.float32(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32)
        y[base + l + 64] = d * np.float32(s[k + 4]) * np.float32(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32)
        y[base + l + 96] = d * np.float32(s[k + 6]) * np.float32(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32)
  return y


_E2M1_TIMES_2 = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12]


def pack_mxfp4(exps: list[int]) -> bytes:
  return b"".join(bytes([e]) + rng.integers(0, 256, 16, dtype=np.uint8).tobytes() for e in exps)


def ref_mxfp4(b: bytes) -> np.ndarray:
  y = []
  for i in range(0, len(b), 17):
    scale = 2.0 ** (b[i] - 128)  # half the E8M0 value, as ggml applies it to doubled E2M1 codes
    qs = b[i + 1:i + 17]
    y += [_E2M1_TIMES_2[x & 0xF] * scale for x in qs] + [_E2M1_TIMES_2[x >> 4] * scale for x in qs]
  return np.array(y, np.float64).astype(np.float32)  # every value is exact in float32


def test_packers_match_the_references():
  """The test's own packers and its ggml-style references agree (what the reader is checked against)."""
  for pack, ref in ((pack_q4_k, ref_q4_k), (pack_q6_k, ref_q6_k)):
    data, vals = pack(2)
    np.testing.assert_allclose(ref(data), vals, rtol=1e-6, atol=1e-6 * np.abs(vals).max())


# ---------------------------------------------------------------- ggml_data_to_tensor

def _plain_cases() -> list:
  f16 = np.array([1.5, -2.25, 65504, 6e-8, -0.0, np.inf, 0.1], np.float16)
  bf16_bits = (rng.standard_normal(6).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
  return [
    (F32, rng.standard_normal(5).astype(np.float32), dtypes.float32),
    (F16, f16, dtypes.float16),
    (BF16, bf16_bits, dtypes.bfloat16),
    (F64, rng.standard_normal(3), dtypes.float64),
    (I8, np.array([-128, -1, 0, 5, 127], np.int8), dtypes.int8),
    (I16, np.array([-32768, -2, 300, 32767], np.int16), dtypes.int16),
    (I32, np.array([-2**31, -5, 70000, 2**31 - 1], np.int32), dtypes.int32),
    (I64, np.array([-2**63, -7, 2**40, 2**63 - 1], np.int64), dtypes.int64),
  ]


@pytest.mark.parametrize("case", range(8), ids=["F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"])
def test_plain_types_are_exact(dev, case):
  typ, arr, dt = _plain_cases()[case]
  raw = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
  out = ggml_data_to_tensor(as_tensor(raw + b"\xff" * 3, dev), len(arr), typ)  # bytes past the values are ignored
  assert out.shape == (len(arr),) and out.dtype == dt and out.device == dev
  want = (arr.astype(np.uint32) << 16).view(np.float32) if typ == BF16 else arr
  np.testing.assert_array_equal(out.numpy(), want)
  if typ == F16: assert np.signbit(out.numpy()[4])  # -0.0 keeps its sign


@pytest.mark.parametrize("typ", [Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, MXFP4])
def test_quantized_types_match_ggml(dev, typ):
  if typ == Q4_K: data = pack_q4_k(2)[0]
  elif typ == Q6_K: data = pack_q6_k(2)[0]
  elif typ == MXFP4: data = pack_mxfp4([0, 1, 2, 127, 128, 200])
  else: data = {Q4_0: pack_q4_0, Q4_1: pack_q4_1, Q8_0: pack_q8_0}[typ](3)
  want = {Q4_0: ref_q4_0, Q4_1: ref_q4_1, Q8_0: ref_q8_0, Q4_K: ref_q4_k, Q6_K: ref_q6_k, MXFP4: ref_mxfp4}[typ](data)
  out = ggml_data_to_tensor(as_tensor(data, dev), len(want), typ)
  assert out.shape == want.shape and out.dtype == dtypes.float32
  got = out.numpy()
  if typ in (Q4_1, Q4_K):  # a multiply and an add: ggml itself may fuse them, so to float32 rounding
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
  else: np.testing.assert_array_equal(got, want)  # one rounding in ggml's order: exact


def test_ggml_data_to_tensor_errors():
  t = as_tensor(bytes(64))
  with pytest.raises(ValueError, match=r"ggml type 99 is not supported; supported types are 0 \(F32\), 1 \(F16\)"):
    ggml_data_to_tensor(t, 4, 99)
  # ids 16-18 are IQ types in today's ggml (an old ggml numbered its integer types so)
  with pytest.raises(ValueError, match=r"ggml type 16 \(IQ2_XXS\) is not supported.*24 \(I8\)"):
    ggml_data_to_tensor(t, 4, 16)
  with pytest.raises(ValueError, match=r"33 values are not a whole number of Q4_0 blocks of 32"):
    ggml_data_to_tensor(t, 33, Q4_0)
  with pytest.raises(ValueError, match=r"64 Q8_0 values need 68 bytes, the tensor has 64"):
    ggml_data_to_tensor(t, 64, Q8_0)
  with pytest.raises(ValueError, match=r"1-D uint8"): ggml_data_to_tensor(t.reshape(8, 8), 4, F32)
  with pytest.raises(TypeError, match=r"takes a Tensor"): ggml_data_to_tensor(bytes(8), 2, F32)
  assert ggml_data_to_tensor(t, 0, Q6_K).shape == (0,)


# ---------------------------------------------------------------- gguf_load

KV = [
  ("general.architecture", STR, "llama"),
  ("general.name", STR, "tiny ✓ model"),
  ("llama.block_count", U32, 2),
  ("llama.rope.freq_base", F32V, 10000.5),
  ("llama.rms_eps", F32V, 1e-5),
  ("u8", U8, 200), ("i8", I8V, -100), ("u16", U16, 60000), ("i16", I16V, -30000), ("i32", I32V, -123456),
  ("u64", U64, 2**63 + 5), ("i64", I64V, -2**40), ("f64", F64V, 0.1), ("yes", BOOL, True), ("no", BOOL, False),
  ("tokenizer.ggml.tokens", ARR, (STR, ["<s>", "</s>", "héllo", ""])),
  ("tokenizer.ggml.token_type", ARR, (I32V, [1, 3, -1, 6])),
  ("tokenizer.ggml.scores", ARR, (F32V, [0.0, -1.5, 2.25])),
  ("flags", ARR, (BOOL, [True, False])),
  ("nested", ARR, (ARR, [(U8, [1, 2]), (STR, ["a"])])),
  ("empty", ARR, (U64, [])),
]
WANT_KV = {k: (np.float32(v).item() if t == F32V else
               [np.float32(x).item() for x in v[1]] if k == "tokenizer.ggml.scores" else
               [list(x[1]) for x in v[1]] if k == "nested" else
               list(v[1]) if t == ARR else v) for k, t, v in KV}


def _model_tensors() -> tuple[list, dict[str, np.ndarray]]:
  """Tensors of every type with their GGUF dims, and the values each must load as (in its torch-order shape)."""
  w32 = rng.standard_normal((3, 5)).astype(np.float32)
  w16 = rng.standard_normal(7).astype(np.float16)
  q40, q41, q80 = pack_q4_0(6), pack_q4_1(2), pack_q8_0(6)
  q4k, q6k_a, q6k_b, mx = pack_q4_k(1)[0], pack_q6_k(1)[0], pack_q6_k(3)[0], pack_mxfp4([127, 130])
  tensors = [
    ("token_embd.weight", (5, 3), F32, w32.tobytes()),
    ("output_norm.weight", (7,), F16, w16.tobytes()),
    ("blk.0.attn_q.weight", (64, 3), Q4_0, q40),
    ("blk.0.attn_k.weight", (32, 2), Q4_1, q41),
    ("blk.0.ffn_up.weight", (32, 3, 2), Q8_0, q80),
    ("blk.0.ffn_gate.weight", (256,), Q4_K, q4k),
    ("blk.0.ffn_down.weight", (256,), Q6_K, q6k_a),
    ("output.weight", (256, 3), Q6_K, q6k_b),
    ("blk.0.ffn_gate_exps.weight", (32, 2), MXFP4, mx),
  ]
  want = {"token_embd.weight": w32, "output_norm.weight": w16, "blk.0.attn_q.weight": ref_q4_0(q40).reshape(3, 64),
          "blk.0.attn_k.weight": ref_q4_1(q41).reshape(2, 32), "blk.0.ffn_up.weight": ref_q8_0(q80).reshape(2, 3, 32),
          "blk.0.ffn_gate.weight": ref_q4_k(q4k), "blk.0.ffn_down.weight": ref_q6_k(q6k_a),
          "output.weight": ref_q6_k(q6k_b).reshape(3, 256), "blk.0.ffn_gate_exps.weight": ref_mxfp4(mx).reshape(2, 32)}
  return tensors, want


def _check_model(kv_data: dict, sd: dict, want: dict, dev: str | None = None) -> None:
  assert list(sd) == list(want)
  for name, w in want.items():
    t = sd[name]
    assert t.shape == w.shape, name
    if dev is not None: assert t.device == dev
    assert t.dtype == (dtypes.float16 if w.dtype == np.float16 else dtypes.float32), name
    if name in ("blk.0.attn_k.weight", "blk.0.ffn_gate.weight"):
      np.testing.assert_allclose(t.numpy(), w, rtol=1e-6, atol=1e-6 * np.abs(w).max(), err_msg=name)
    else: np.testing.assert_array_equal(t.numpy(), w, err_msg=name)


@pytest.mark.parametrize("version", [2, 3])
def test_gguf_load_metadata_shapes_and_values(dev, version):
  tensors, want = _model_tensors()
  data = gguf_file(KV, tensors, version=version)[0]
  kv_data, sd = gguf_load(as_tensor(data, dev))
  assert kv_data == WANT_KV
  assert isinstance(kv_data["yes"], bool) and isinstance(kv_data["u8"], int) and isinstance(kv_data["f64"], float)
  _check_model(kv_data, sd, want, dev)


def test_gguf_load_alignment():
  tensors, want = _model_tensors()
  # a string sized so the header ends where rounding up to 32 and to 64 bytes differ: a reader that ignores
  # general.alignment starts the data 32 bytes early
  for pad in range(64):
    kv = [("general.alignment", U32, 64), ("pad", STR, "x" * pad)]
    data, start, header_end = gguf_file(kv, tensors, alignment=64)
    if _round_up(header_end, 32) != start: break
  assert start % 64 == 0 and _round_up(header_end, 32) != start
  kv_data, sd = gguf_load(as_tensor(data))
  assert kv_data["general.alignment"] == 64
  _check_model(kv_data, sd, want)
  # the default, 32, with a header ending between two 64-byte boundaries
  for pad in range(64):
    data, start, _ = gguf_file([("pad", STR, "x" * pad)], tensors)
    if start % 64: break
  assert start % 32 == 0 and start % 64
  _check_model(*gguf_load(as_tensor(data)), want)


def test_gguf_load_empty_file_of_metadata_only():
  data = gguf_file([("general.architecture", STR, "llama")], [])[0]
  assert gguf_load(as_tensor(data)) == ({"general.architecture": "llama"}, {})


def test_gguf_load_errors():
  tensors, _ = _model_tensors()
  data = gguf_file(KV, tensors)[0]
  with pytest.raises(ValueError, match=r"not a GGUF file: it starts with b'GGML'"):
    gguf_load(as_tensor(b"GGML" + data[4:]))
  with pytest.raises(ValueError, match=r"not a GGUF file"): gguf_load(as_tensor(b"GG"))
  with pytest.raises(ValueError, match=r"GGUF version 1 is not supported \(versions 2 and 3 are\)"):
    gguf_load(as_tensor(gguf_file(KV, tensors, version=1)[0]))
  big = b"GGUF" + struct.pack(">I", 3) + data[8:]
  with pytest.raises(ValueError, match=r"big-endian GGUF files are not supported"): gguf_load(as_tensor(big))
  # cut inside the metadata, inside the tensor infos and inside the last tensor's data
  with pytest.raises(ValueError, match=r"truncated: metadata 'tokenizer.ggml.tokens'\[2\] at byte"):
    gguf_load(as_tensor(data[:data.index("héllo".encode()) + 2]))
  with pytest.raises(ValueError, match=r"truncated: the dimensions of tensor 'blk.0.attn_q.weight'"):
    gguf_load(as_tensor(data[:data.index(b"blk.0.attn_q.weight") + 19 + 4 + 3]))
  last = r"truncated: tensor 'blk.0.ffn_gate_exps.weight' \(MXFP4, dimensions \[32, 2\]\) needs bytes"
  with pytest.raises(ValueError, match=last):
    gguf_load(as_tensor(data[:len(data) - (64 - 34) - 1]))  # its 2 blocks of 17 bytes, padded to 64, less one
  with pytest.raises(ValueError, match=r"tensor 'x': ggml type 6 \(Q5_0\) is not supported"):
    gguf_load(as_tensor(gguf_file([], [("x", (32,), 6, bytes(22))])[0]))
  with pytest.raises(ValueError, match=r"tensor 'x' of dimensions \[48\] is not a whole number of Q8_0 blocks of 32"):
    gguf_load(as_tensor(gguf_file([], [("x", (48,), Q8_0, bytes(68))])[0]))
  with pytest.raises(ValueError, match=r"metadata 'k' has unknown value type 13"):
    gguf_load(as_tensor(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _str("k") + struct.pack("<I", 13)))
  with pytest.raises(ValueError, match=r"'k' has 1099511627776 elements"):  # a corrupt array length fails at once
    gguf_load(as_tensor(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _str("k") + struct.pack("<IIQ", ARR, STR, 2**40)))
  with pytest.raises(ValueError, match=r"general.alignment must be a positive integer, not 0"):
    gguf_load(as_tensor(gguf_file([("general.alignment", U32, 0)], [])[0]))
  with pytest.raises(ValueError, match=r"metadata key 'a' appears twice"):
    gguf_load(as_tensor(gguf_file([("a", U8, 1), ("a", U8, 2)], [])[0]))
  with pytest.raises(TypeError, match=r"gguf_load takes a Tensor, got bytes"): gguf_load(data)
  with pytest.raises(ValueError, match=r"1-D uint8"): gguf_load(as_tensor(data).cast(dtypes.int32))


# ---------------------------------------------------------------- zip_extract

def test_zip_extract(dev):
  buf = io.BytesIO()
  payload = rng.integers(0, 256, 5000, dtype=np.uint8).tobytes()
  with zipfile.ZipFile(buf, "w") as zf:
    zf.writestr("a.txt", b"hello zip", compress_type=zipfile.ZIP_STORED)
    zf.writestr("dir/", b"")  # a directory entry: left out
    zf.writestr("dir/data.bin", payload, compress_type=zipfile.ZIP_DEFLATED)
    zf.writestr("dir/more.bin", payload[::-1], compress_type=zipfile.ZIP_BZIP2)
    zf.writestr("empty", b"")
  files = zip_extract(as_tensor(buf.getvalue(), dev))
  assert list(files) == ["a.txt", "dir/data.bin", "dir/more.bin", "empty"]
  assert all(t.dtype == dtypes.uint8 and t.ndim == 1 and t.device == dev for t in files.values())
  assert files["a.txt"].numpy().tobytes() == b"hello zip"
  assert files["dir/data.bin"].numpy().tobytes() == payload and files["dir/more.bin"].numpy().tobytes() == payload[::-1]
  assert files["empty"].shape == (0,)


def test_zip_extract_errors():
  with pytest.raises(ValueError, match=r"the 11 bytes given to zip_extract are not a zip archive"):
    zip_extract(as_tensor(b"not a zip!!"))
  with pytest.raises(TypeError, match=r"zip_extract takes a Tensor, got bytes"): zip_extract(b"PK")
  with pytest.raises(ValueError, match=r"1-D uint8"): zip_extract(Tensor([[1, 2]], dtype=dtypes.uint8))
  buf = io.BytesIO()
  with zipfile.ZipFile(buf, "w") as zf: zf.writestr("x", b"some stored bytes", compress_type=zipfile.ZIP_STORED)
  bad = bytearray(buf.getvalue())
  bad[bad.index(b"some stored")] ^= 0xFF  # the member's CRC no longer matches
  with pytest.raises(ValueError, match=r"member 'x' is corrupt"): zip_extract(as_tensor(bytes(bad)))
