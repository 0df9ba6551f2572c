"""The PYTHON reference device: the executable definition of the loop program.

Its renderer writes the loop program as text (one UOp a line), its "compiler" checks and encodes
that text, and its runtime interprets it with numpy, vectorised over the launch indices. It is
registered through the same hooks as any other device plugin, so core runs and is tested with no
plugin installed. Speed is not its purpose: exactness and checking are (out-of-bounds accesses
raise instead of reading garbage).

It takes vector ops (Capabilities.vector_ops), so the core tests run the vectorised lowering: a
vector of n lanes is an array with a trailing axis of n after the launch-grid axes.
"""
from __future__ import annotations

import ast
import time
from typing import Any

import numpy as np

from plugrad.alu import exec_alu, to_np_compute
from plugrad.codegen.program import LoopProgram
from plugrad.codegen.renderer import Renderer
from plugrad.config import Config
from plugrad.device import Allocator, Capabilities, CompileError, Compiler, DeviceDecl, Program, Runtime
from plugrad.dtype import DType, bf16_to_f32, dtypes, f32_to_bf16
from plugrad.hookspecs import CONTRACT_VERSION, hookimpl
from plugrad.uops import GroupOp, Ops

NAME = "PYTHON"
_DTYPES = {d.name: d for d in dtypes.all()}


def _enc_arg(arg: Any) -> str:
  if isinstance(arg, float): return "f" + arg.hex()
  if isinstance(arg, Ops): return "op:" + arg.name
  return repr(arg)


def _enc_dtype(dt: DType | None) -> str:
  if dt is None: return "-"
  return dt.name if dt.count == 1 else f"{dt.name}x{dt.count}"


def _dec_dtype(text: str) -> DType | None:
  if text == "-": return None
  name, _, count = text.partition("x")
  return _DTYPES[name].vec(int(count)) if count else _DTYPES[name]


def _dec_arg(text: str) -> Any:
  if text.startswith("f"): return float.fromhex(text[1:])
  if text.startswith("op:"): return Ops[text[3:]]
  return ast.literal_eval(text)


class PythonRenderer(Renderer):
  """Writes one line per UOp: `op dtype arg | sources`, sources as indices of earlier lines."""

  def render(self, prog: LoopProgram) -> str:
    num = {u: i for i, u in enumerate(prog.uops)}
    head = [f"# {prog.name}", "global " + " ".join(map(str, prog.global_size)),
            "params " + " ".join(f"{p.index}:{p.dtype.name}:{p.size}" for p in prog.params)]
    body = [f"{u.op.name} {_enc_dtype(u.dtype)} {_enc_arg(u.arg)} | {' '.join(str(num[s]) for s in u.src)}"
            for u in prog.uops]
    return "\n".join(head + body) + "\n"


class PythonCompiler(Compiler):
  """Parses the text (so a malformed program fails at compile time) and returns it as bytes."""

  def identity(self) -> str: return "python-reference-1"

  def _compile(self, src: str) -> bytes:
    try:
      _parse(src)
    except Exception as e:
      raise CompileError(f"malformed PYTHON program: {e}\n{src}") from e
    return src.encode()

  def compile(self, src: str) -> tuple[bytes, bool]:
    return self._compile(src), False  # parsing is cheaper than the disk cache


def _parse(src: str) -> tuple[tuple[int, ...], list[tuple[Ops, DType | None, Any, tuple[int, ...]]]]:
  lines = [ln for ln in src.splitlines() if ln and not ln.startswith("#")]
  global_size = tuple(int(x) for x in lines[0].split()[1:])
  prog = []
  for ln in lines[2:]:
    head, _, srcs = ln.partition(" | ")
    op, dt, arg = head.split(" ", 2)
    prog.append((Ops[op], _dec_dtype(dt), _dec_arg(arg), tuple(int(s) for s in srcs.split())))
  return global_size, prog


class PythonAllocator(Allocator):
  """Host memory as numpy byte arrays."""

  def _alloc(self, nbytes: int, options: Any) -> np.ndarray: return np.zeros(nbytes, dtype=np.uint8)
  def _copyin(self, raw: np.ndarray, src: memoryview) -> None: raw[:len(src)] = np.frombuffer(src, dtype=np.uint8)
  def _copyout(self, dest: memoryview, raw: np.ndarray) -> None: np.frombuffer(dest, dtype=np.uint8)[:] = raw[:len(dest)]


class PythonProgram(Program):
  """Interprets a parsed program, every value an array over the launch grid."""

  def __init__(self, name: str, src: str):
    self.name = name
    self.global_size, self.prog = _parse(src)

  def __call__(self, *bufs: np.ndarray, global_size=None, local_size=None, wait: bool = False) -> float | None:
    st = time.perf_counter()
    grid = tuple(self.global_size)
    # work-groups: each grid point's group coordinates, which pick its group's copy of local memory
    local = tuple(local_size) if local_size else (1,) * len(grid)
    groups = tuple(g // lo for g, lo in zip(grid, local))
    group_of = tuple(np.broadcast_to((np.arange(g) // lo).reshape([g if i == d else 1 for i in range(len(grid))]), grid)
                     for d, (g, lo) in enumerate(zip(grid, local)))
    views: dict[int, tuple[np.ndarray, DType]] = {}
    vals: list[Any] = [None] * len(self.prog)
    loops: list[tuple[int, int, int]] = []  # (pc of RANGE, current, end)
    pc = 0
    while pc < len(self.prog):
      op, dt, arg, src = self.prog[pc]
      if op is Ops.PARAM:
        # the allocator rounds empty buffers up to one byte: view exactly the param's elements
        views[pc] = (bufs[arg[0]][:arg[1] * dt.itemsize].view(dt.storage_np), dt)
      elif op is Ops.CONST: vals[pc] = to_np_compute(arg, dt)
      elif op is Ops.SPECIAL:
        shape = [1] * len(grid)
        shape[arg[1]] = arg[2]
        vals[pc] = np.arange(arg[2], dtype=dt.np).reshape(shape)
      elif op is Ops.RANGE:
        end = int(vals[src[0]])
        if end <= 0:  # an empty loop: skip to its end
          pc = next(i for i in range(pc + 1, len(self.prog)) if self.prog[i][0] is Ops.ENDRANGE and self.prog[i][3][0] == pc)
        else:
          loops.append((pc, 0, end))
          vals[pc] = to_np_compute(0, dt)
      elif op is Ops.ENDRANGE:
        start, cur, end = loops.pop()
        if cur + 1 < end:
          loops.append((start, cur + 1, end))
          vals[start] = to_np_compute(cur + 1, self.prog[start][1])
          pc = start
      elif op is Ops.DEFINE_ACC: vals[pc] = vals[src[0]]
      elif op is Ops.ACCUMULATE:
        vals[src[0]] = exec_alu(arg, dt, [vals[src[0]], vals[src[1]]], [dt, dt])
      elif op is Ops.DEFINE_LOCAL: vals[pc] = np.zeros((arg[1],) + groups, dtype=dt.np)
      elif op is Ops.BARRIER:  # every op runs on the whole grid at once: the stores before it are all done
        vals[pc] = vals[self.prog[src[0]][3][0]]
      elif op is Ops.LOAD and self.prog[src[0]][0] is Ops.BARRIER:
        vals[pc] = vals[src[0]][(np.broadcast_to(vals[src[1]], grid),) + group_of]
      elif op is Ops.STORE and self.prog[src[0]][0] is Ops.DEFINE_LOCAL:
        sel = (np.broadcast_to(vals[src[1]], grid),) + group_of
        val = np.broadcast_to(vals[src[2]], grid)
        if len(src) > 3:
          gate = np.broadcast_to(vals[src[3]], grid)
          sel, val = tuple(x[gate] for x in sel), val[gate]
        vals[src[0]][sel] = val
      elif op is Ops.LOAD:
        idx, gate = vals[src[1]], vals[src[2]] if len(src) > 2 else None
        if dt.count > 1:  # a vector of consecutive elements: the lanes on a trailing axis
          idx, gate = _lanes(idx, dt.count), None if gate is None else np.asarray(gate)[..., None]
        vals[pc] = self._load(views[src[0]], idx, gate)
      elif op is Ops.STORE:
        idx, gate, shape = vals[src[1]], vals[src[3]] if len(src) > 3 else None, grid
        if (n := self.prog[src[2]][1].count) > 1:
          idx, gate, shape = _lanes(idx, n), None if gate is None else np.asarray(gate)[..., None], grid + (n,)
        self._store(views[src[0]], idx, vals[src[2]], gate, shape)
      elif op is Ops.VECTORIZE: vals[pc] = np.stack(np.broadcast_arrays(*(vals[s] for s in src)), axis=-1)
      elif op is Ops.GEP: vals[pc] = vals[src[0]][..., arg]
      elif op in GroupOp.ALU:
        vals[pc] = exec_alu(op, dt, [vals[s] for s in src], [self.prog[s][1] for s in src])
      else: raise RuntimeError(f"PYTHON device cannot run {op}")
      pc += 1
    return time.perf_counter() - st if wait else None

  def _load(self, view: tuple[np.ndarray, DType], idx: np.ndarray, gate: np.ndarray | None) -> np.ndarray:
    buf, dt = view
    idx = np.asarray(idx)
    if gate is not None: idx, gate = np.broadcast_arrays(idx, np.asarray(gate))
    live = idx[gate] if gate is not None else idx  # a false gate reads nothing, not even index 0
    if live.size and (live.min() < 0 or live.max() >= len(buf)):
      raise IndexError(f"{self.name}: load out of bounds: index range [{live.min()}, {live.max()}] for a buffer of {len(buf)}")
    if gate is None: v = buf[idx]
    else:
      v = np.zeros(idx.shape, buf.dtype)
      v[gate] = buf[live]
    return bf16_to_f32(v) if dt == dtypes.bfloat16 else v

  def _store(self, view: tuple[np.ndarray, DType], idx: np.ndarray, val: np.ndarray, gate: np.ndarray | None, grid) -> None:
    buf, dt = view
    idx, val = np.broadcast_to(idx, grid), np.broadcast_to(val, grid)
    if gate is not None:
      g = np.broadcast_to(gate, grid)
      idx, val = idx[g], val[g]
    idx = np.asarray(idx).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= len(buf)):
      raise IndexError(f"{self.name}: store out of bounds: index range [{idx.min()}, {idx.max()}] for a buffer of {len(buf)}")
    val = np.asarray(val).reshape(-1)
    buf[idx] = f32_to_bf16(val) if dt == dtypes.bfloat16 else val.astype(dt.storage_np, copy=False)


def _lanes(idx: np.ndarray, n: int) -> np.ndarray:
  """The indices of the n consecutive elements a vector access at `idx` touches (trailing axis)."""
  return np.asarray(idx)[..., None] + np.arange(n, dtype=np.asarray(idx).dtype)


class PythonRuntime(Runtime):
  def load(self, name: str, binary: bytes) -> Program: return PythonProgram(name, binary.decode())


class PythonDevicePlugin:
  """The built-in plugin that provides the PYTHON device."""
  PLUGRAD_CONTRACT = CONTRACT_VERSION

  @hookimpl
  def plugrad_declare_devices(self, config: Config) -> list[DeviceDecl]:
    return [DeviceDecl(NAME, priority=0, description="reference interpreter of the loop program (numpy)")]

  @hookimpl
  def plugrad_device_capabilities(self, device: str, config: Config) -> Capabilities | None:
    return Capabilities(vector_ops=True) if device.split(":")[0] == NAME else None

  @hookimpl
  def plugrad_renderer(self, device: str, config: Config) -> Renderer | None:
    return PythonRenderer(device) if device.split(":")[0] == NAME else None

  @hookimpl
  def plugrad_compiler(self, device: str, config: Config) -> Compiler | None:
    return PythonCompiler() if device.split(":")[0] == NAME else None

  @hookimpl
  def plugrad_allocator(self, device: str, config: Config) -> Allocator | None:
    return PythonAllocator() if device.split(":")[0] == NAME else None

  @hookimpl
  def plugrad_runtime(self, device: str, config: Config) -> Runtime | None:
    return PythonRuntime() if device.split(":")[0] == NAME else None
