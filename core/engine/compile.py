"""Kernels from ASTs: lower, render, compile and load each kernel once per (device, structure)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from plugrad.codegen.lowerer import kernel_features, lower, symbolic_ast
from plugrad.codegen.opt import Opt
from plugrad.codegen.opt.heuristic import hand_coded_optimizations
from plugrad.codegen.opt.search import INFEASIBLE, PlanCache, beam_search, plan_key
from plugrad.codegen.program import LoopProgram
from plugrad.device import CompileError, Program, UnsupportedError, check_supported
from plugrad.registry import Device
from plugrad.spec import check_program, kernel_spec, program_spec
from plugrad.uops import Ops, UOp, check_spec


@dataclass(frozen=True)
class CompiledKernel:
  """A kernel ready to launch, with everything that produced it (for DEBUG and the CLI)."""
  program: LoopProgram
  source: str
  binary: bytes
  runner: Program


def lower_for(device: Device, ast: UOp, opts: tuple[Opt, ...] | None = None) -> LoopProgram:
  """The loop program of `ast` for `device` (its capabilities and rewrite rules) with the plan `opts`
  (None: the heuristic's); with `config.check_spec`, the AST and every stage of the lowering are checked
  against their spec. Raises UnsupportedError when the kernel needs a dtype or op the device declares it lacks."""
  nodes = ast.toposort
  check_supported(device.name, device.caps, {n.dtype for n in nodes if n.dtype is not None},
                  {n.op.name for n in nodes} | {n.arg[0].name for n in nodes if n.op is Ops.REDUCE_AXIS})
  nbufs = len({n.arg[0] for n in nodes if n.op is Ops.PARAM})
  if (limit := device.buffer_limit) is not None and nbufs > limit:
    # only a kernel scheduled for another device gets here (the scheduler splits for this one)
    raise UnsupportedError(f"kernel binds {nbufs} buffers and device {device.name} allows {limit}; it was scheduled "
                           "for another device's limit")
  if not device.registry.config.check_spec: return lower(ast, device.caps, device.rewrite_rules, opts=opts)
  check_spec(ast, kernel_spec, "kernel AST")
  prog = lower(ast, device.caps, device.rewrite_rules,
               lambda g, stage: check_spec(g, program_spec, f"{device.name} {stage}"), opts=opts)
  check_program(prog)
  return prog


def render_for(device: Device, ast: UOp, opts: tuple[Opt, ...] | None = None) -> tuple[LoopProgram, str]:
  """Lower (with the plan `opts`, None: the heuristic's) and render `ast` for `device`; needs only the
  device's plugin, not its hardware."""
  prog = lower_for(device, ast, opts)
  return prog, device.renderer.render(prog)


_compiled: dict[tuple[Device, UOp], CompiledKernel] = {}


def compile_for(device: Device, ast: UOp) -> CompiledKernel:
  """Lower, render, compile and load `ast` on `device`, cached by (device, AST structure): a graph
  of the same shape on new buffers reuses everything. The key is the Device object, whose roles
  and capabilities are fixed, so another registry's same-named device compiles its own."""
  key = (device, ast)
  if (ck := _compiled.get(key)) is not None: return ck
  # a kernel with Variables keeps its one plan: it cannot be timed for every value it serves
  beam = device.registry.config.beam and not symbolic_ast(ast)
  prog, src = render_for(device, ast, searched_plan(device, ast) if beam else None)
  st = time.perf_counter()
  try:
    binary, cached = device.compiler.compile(src)
  except CompileError:
    raise
  except Exception as e:
    raise CompileError(f"{device.name} failed to compile kernel {prog.name}: {type(e).__name__}: {e}\n--- source ---\n{src}") from e
  device.registry.notify("plugrad_kernel_compiled", device=device.name, name=prog.name, source=src,
                         seconds=0.0 if cached else time.perf_counter() - st, cached=cached, ast=ast)
  ck = _compiled[key] = CompiledKernel(prog, src, binary, _load(device, prog.name, src, binary, cached))
  return ck


_plan_caches: dict[Path, PlanCache] = {}


def _plan_cache(device: Device) -> PlanCache:
  config = device.registry.config
  if (cache := _plan_caches.get(config.cache_dir)) is None:
    cache = _plan_caches[config.cache_dir] = PlanCache(Path(config.cache_dir) / "plans")
  return cache


def cached_plan(device: Device, ast: UOp) -> tuple[Opt, ...] | None:
  """The plan a beam search found for `ast` on `device` in this or an earlier process; None when none did (no
  timing: what `python -m plugrad kernels --opts` shows under PLUGRAD_BEAM without the hardware)."""
  return _plan_cache(device).get(plan_key(ast, device.name, device.caps))


def searched_plan(device: Device, ast: UOp) -> tuple[Opt, ...]:
  """The fastest plan for `ast` that a beam search of width `config.beam` finds on `device`, from the
  disk cache when an earlier process searched it already (plugrad.codegen.opt.search)."""
  cache, key = _plan_cache(device), plan_key(ast, device.name, device.caps)
  if (plan := cache.get(key)) is not None: return plan
  features = kernel_features(ast, device.caps)
  plan = beam_search(hand_coded_optimizations(features, device.caps), features, lambda p: _time_plan(device, ast, p),
                     device.registry.config.beam)
  cache.put(key, plan)
  return plan


def _time_plan(device: Device, ast: UOp, plan: tuple[Opt, ...]) -> float:
  """The best of 3 launches of `ast` lowered with `plan`, on scratch buffers (OptError: the plan does not apply)."""
  prog, src = render_for(device, ast, plan)
  runner = device.runtime.load(prog.name, device.compiler.compile(src)[0])
  sizes = [max(p.size * p.dtype.itemsize, 1) for p in prog.params]
  raws = [device.allocator.alloc(n) for n in sizes]
  try:
    times = [runner(*raws, global_size=prog.global_size, local_size=prog.local_size, wait=True) for _ in range(3)]
  finally:
    for raw, n in zip(raws, sizes): device.allocator.free(raw, n)
  return min((t for t in times if t is not None), default=INFEASIBLE)


def _load(device: Device, name: str, src: str, binary: bytes, cached: bool) -> Program:
  """Load `binary`. A cached one the runtime refuses (built by an earlier build of the same versions) is
  evicted and rebuilt once, so a stale entry never needs a manual cache clear."""
  try:
    return device.runtime.load(name, binary)
  except Exception:
    if not cached: raise
  device.compiler.evict(src)
  return device.runtime.load(name, device.compiler.compile(src)[0])
