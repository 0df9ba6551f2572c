"""The PYTHON reference device: the executable definition of the loop program.

Its renderer writes the loop program as text (one UOp a line), its "compiler" checks and encodes
that text, and its runtime runs it with numpy (`plugrad.builtins.loop_interpreter`): one array
operation per UOp over the launch grid and every iteration of the loops around it, with the
program's sequential meaning kept (accumulation order and dtype, loops whose iterations depend on
each other). It is registered through the same hooks as any other device plugin, so core runs and
is tested with no plugin installed. Exactness and checking are its purpose (out-of-bounds accesses
raise instead of reading garbage); whole-array evaluation keeps it fast enough to use, a fused
reduction costing about what the split kernels do.

It takes vector ops (Capabilities.vector_ops), so the core tests run the vectorised lowering: a
vector of n lanes is an array with one more axis, of n, in front.

A kernel with Variables (symbolic shapes) is launched with `vals`, their values in DEFINE_VAR order; its
header writes a launch size that depends on them as -1, and the launch's own global size is used.
"""
from __future__ import annotations

import ast
import time
from typing import Any

import numpy as np

from plugrad.plugin import (CONTRACT_VERSION, Allocator, Capabilities, CompileError, Compiler, Config, DeviceDecl,
                            DevicePlugin, DType, LoopProgram, Ops, Program, Renderer, Runtime, dtypes)
from plugrad.builtins.loop_interpreter import Instr, LoopInterpreter

NAME = "PYTHON"
VIRTUAL_DEVICES = 8
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
    # a launch size that depends on a Variable is written as -1: the launch gives it
    head = [f"# {prog.name}", "global " + " ".join(str(g) if isinstance(g, int) else "-1" for g in prog.global_size),
            "params " + " ".join(f"{p.index}:{p.dtype.name}:{p.size}" for p in prog.params)]
    body = [f"{u.op.name} {_enc_dtype(u.dtype)} {_enc_arg(u.arg)} | {' '.join(str(num[s]) for s in u.src)}"
            for u in prog.uops]
    return "\n".join(head + body) + "\n"


class PythonCompiler(Compiler):
  """Parses the text (so a malformed program fails at compile time) and returns it as bytes."""

  def identity(self) -> str: return "python-reference-1"

  def _compile(self, src: str) -> bytes:
    try:
      LoopInterpreter("check", *_parse(src))
    except Exception as e:
      raise CompileError(f"malformed PYTHON program: {e}\n{src}") from e
    return src.encode()

  def compile(self, src: str) -> tuple[bytes, bool]:
    return self._compile(src), False  # parsing is cheaper than the disk cache


def _parse(src: str) -> tuple[tuple[int, ...], list[Instr]]:
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
  def _as_host(self, raw: np.ndarray, nbytes: int) -> memoryview: return memoryview(raw[:nbytes])
  def _from_host(self, mem: np.ndarray) -> np.ndarray: return mem


class PythonProgram(Program):
  """A parsed program and its interpreter."""

  def __init__(self, name: str, src: str):
    self.name = name
    self.global_size, prog = _parse(src)
    self.interpreter = LoopInterpreter(name, self.global_size, prog)

  def __call__(self, *bufs: np.ndarray, global_size=None, local_size=None, vals: tuple[int, ...] = (),
               wait: bool = False) -> float | None:
    st = time.perf_counter()
    # the grid of a program with Variables is the launch's (its sizes may depend on them)
    self.interpreter.run(bufs, local_size, global_size if vals else None, vals)
    return time.perf_counter() - st if wait else None


class PythonRuntime(Runtime):
  def load(self, name: str, binary: bytes) -> Program: return PythonProgram(name, binary.decode())


class PythonDevicePlugin(DevicePlugin):
  """The built-in plugin that provides the PYTHON device."""
  PLUGRAD_CONTRACT = CONTRACT_VERSION
  names = (NAME,)

  def devices(self, config: Config) -> list[DeviceDecl]:
    # several virtual instances (PYTHON:0 .. PYTHON:7), so copies between devices are tested without hardware
    return [DeviceDecl(NAME, priority=0, description="reference interpreter of the loop program (numpy)",
                       count=lambda: VIRTUAL_DEVICES)]

  def capabilities(self, device: str, config: Config) -> Capabilities:
    return Capabilities(vector_ops=True, masked_loads=True, optional_ops=frozenset({"COS"}))
  def renderer(self, device: str, config: Config) -> Renderer: return PythonRenderer(device)
  def compiler(self, device: str, config: Config) -> Compiler: return PythonCompiler()
  def allocator(self, device: str, config: Config) -> Allocator: return PythonAllocator()
  def runtime(self, device: str, config: Config) -> Runtime: return PythonRuntime()
