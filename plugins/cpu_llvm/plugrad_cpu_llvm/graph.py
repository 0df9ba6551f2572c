"""The graph role: a TinyJit capture replayed by generated code instead of a Python call per kernel.

A run of launches that each go on one thread (too small to split across cores) becomes one LLVM function
that loads its buffers' addresses from a table and calls each kernel in order; a launch split across
threads stays a call of its Program (the pool that pulls its chunks is Python's). A replay fills the table
with the buffers it is given and makes one ctypes call per run of small launches.
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable

from plugrad.plugin import Graph, GraphLaunch

from plugrad_cpu_llvm.compiler import _llvm, _llvm_lock, host_target
from plugrad_cpu_llvm.runtime import CPUProgram, _jit_target_machine

_TABLE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _segment_ir(name: str, launches: list[GraphLaunch]) -> str:
  """`void name(ptr table)`: each launch's kernel called on the table's buffers, its one chunk (start, end)."""
  lines = [f"define void @{name}(ptr %t) {{", "entry:"]
  loaded: dict[int, str] = {}
  for k, ln in enumerate(launches):
    prog = ln.program
    assert isinstance(prog, CPUProgram)
    args = []
    for i in ln.buffers:
      if i not in loaded:
        loaded[i] = f"%b{i}"
        lines += [f"  %p{i} = getelementptr inbounds ptr, ptr %t, i64 {i}", f"  %b{i} = load ptr, ptr %p{i}"]
      args.append(f"ptr {loaded[i]}")
    start, end = prog.chunks[0]
    lines += [f"  %f{k} = inttoptr i64 {prog.address} to ptr",
              f"  call void %f{k}({', '.join(args)}, i64 {start}, i64 {end})"]
  return "\n".join(lines + ["  ret void", "}", ""])


class CPUGraph(Graph):
  """Native replay for the CPU device (see the module docstring)."""

  def _prepare(self, launches: list[GraphLaunch], nbuffers: int) -> Callable[[list[Any]], None] | None:
    progs = [ln.program for ln in launches]
    if not all(isinstance(p, CPUProgram) and not p.nvars for p in progs): return None
    # runs of one-thread launches, each one native call; a threaded launch between them stays a Program call
    steps: list[list[GraphLaunch] | GraphLaunch] = []
    for ln in launches:
      if ln.program.single_call:  # type: ignore[attr-defined]
        if steps and isinstance(steps[-1], list): steps[-1].append(ln)
        else: steps.append([ln])
      else: steps.append(ln)
    runs = [s for s in steps if isinstance(s, list)]
    if not runs or sum(len(r) for r in runs) < 2: return None  # nothing saved over calling the programs
    llvm = _llvm()
    with _llvm_lock:
      mod = llvm.parse_assembly("".join(_segment_ir(f"run{i}", r) for i, r in enumerate(runs)))
      mod.triple = host_target()[0]
      mod.verify()
      engine = llvm.create_mcjit_compiler(mod, _jit_target_machine())
      engine.finalize_object()
      fns = [_TABLE(engine.get_function_address(f"run{i}")) for i in range(len(runs))]
    return _Replay(steps, fns, nbuffers, engine, progs)


class _Replay:
  """What `CPUGraph.prepare` returns: called with the raw buffers of one replay."""

  def __init__(self, steps: list, fns: list, nbuffers: int, engine: Any, progs: list[Any]):
    # the engine owns the generated code and `progs` the kernels it calls: both live as long as this does
    self.engine, self.progs, self.table_type = engine, progs, ctypes.c_void_p * nbuffers
    fn_iter = iter(fns)
    self.calls: list[tuple[Any, Any]] = [(next(fn_iter), None) if isinstance(s, list) else (s.program, s) for s in steps]

  def __call__(self, raws: list[Any]) -> None:
    table = self.table_type(*(r.addr for r in raws))
    for fn, ln in self.calls:
      if ln is None: fn(table)
      else: fn(*(raws[i] for i in ln.buffers), global_size=ln.global_size, local_size=ln.local_size)
