"""Kernels from ASTs: lower, render, compile and load each kernel once per (device, structure)."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import pickle
import time
import warnings
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from plugrad.codegen.lowerer import kernel_features, lower, symbolic_ast
from plugrad.codegen.opt import Opt, OptError
from plugrad.codegen.opt.heuristic import hand_coded_optimizations
from plugrad.codegen.opt.search import INFEASIBLE, PlanCache, beam_search, capabilities_text, plan_key
from plugrad.codegen.program import LoopProgram
from plugrad.device import CompileError, DeviceError, Program, UnsupportedError, check_supported
from plugrad.kernel_cache import KernelCache, package_version
from plugrad.registry import DEVICE_GROUP, PLUGIN_GROUP, Device, Registry
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
  try:
    src = device.renderer.render(prog)
  except (NotImplementedError, DeviceError, OptError):  # what a renderer says on purpose (unsupported, no such plan)
    raise
  except Exception as e:  # a plugin's renderer: say whose and for which kernel, as a compile error does
    raise CompileError(f"{device.name}'s renderer failed on kernel {prog.name}: {type(e).__name__}: {e}") from e
  if not isinstance(src, str):  # else compiled as it is: a shadow compile of nothing passed
    raise TypeError(f"{device.name}'s renderer returned {type(src).__name__} for kernel {prog.name}, not its source (str)")
  return prog, src


_compiled: dict[tuple[Device, UOp], CompiledKernel] = {}
# kernels `prepare_kernels` lowered whose compile runs on the compile thread: (program, source, the compile's future)
_pending: dict[tuple[Device, UOp], tuple[LoopProgram, str, Future]] = {}
_compile_thread: ThreadPoolExecutor | None = None


def _forget_compile_thread() -> None:
  # a forked child has no compile thread (only the thread that forked survives): it starts its own when it needs one
  global _compile_thread
  _compile_thread = None
  _pending.clear()


if hasattr(os, "register_at_fork"): os.register_at_fork(after_in_child=_forget_compile_thread)


def compile_for(device: Device, ast: UOp) -> CompiledKernel:
  """Lower, render, compile and load `ast` on `device`, cached by (device, AST structure): a graph
  of the same shape on new buffers reuses everything. The key is the Device object, whose roles
  and capabilities are fixed, so another registry's same-named device compiles its own."""
  key = (device, ast)
  if (ck := _compiled.get(key)) is not None: return ck
  if (pending := _pending.pop(key, None)) is not None:
    prog, src, future = pending
    return _finish(device, ast, prog, src, future.result)
  prog, src = _program(device, ast)
  return _finish(device, ast, prog, src, lambda: _compile(device, prog, src))


def prepare_kernels(kernels: list[tuple[Device, UOp]]) -> None:
  """Start compiling the kernels not compiled yet, in the order given, where their device's compiler may run on a
  thread of its own (`Compiler.threadsafe`): each is lowered and rendered here (Python, holding the interpreter)
  while the one before it compiles (the compiler, not holding it), and `compile_for` then waits for it. A training
  step's first run lowers and compiles a hundred kernels: 4.3 -> 3.7 s for beautiful_mnist's on the 2-core CPU (the
  compile thread waits for the interpreter between its calls into LLVM, so the two overlap only in part)."""
  global _compile_thread
  todo = [(d, a) for d, a in dict.fromkeys(kernels) if (d, a) not in _compiled and (d, a) not in _pending
          and d.compiler.threadsafe and not (d.registry.config.beam and not symbolic_ast(a))]
  if len(todo) < 2: return  # nothing to overlap
  if _compile_thread is None: _compile_thread = ThreadPoolExecutor(1, thread_name_prefix="plugrad-compile")
  for device, ast in todo:
    prog, src = _program(device, ast)  # a kernel that cannot be lowered raises here, before any launch
    _pending[(device, ast)] = (prog, src, _compile_thread.submit(_compile, device, prog, src))


def _program(device: Device, ast: UOp) -> tuple[LoopProgram, str]:
  """The loop program and source of `ast` on `device`: from the program cache, else lowered and rendered."""
  # a kernel with Variables keeps its one plan: it cannot be timed for every value it serves
  beam = device.registry.config.beam and not symbolic_ast(ast)
  plan = searched_plan(device, ast) if beam else None
  if (found := _programs.get(device, ast, plan)) is not None: return found
  prog, src = render_for(device, ast, plan)
  _programs.put(device, ast, plan, prog, src)
  return prog, src


def _compile(device: Device, prog: LoopProgram, src: str) -> tuple[bytes, bool, float]:
  """(binary, whether it came from the cache, seconds the compiler took)."""
  st = time.perf_counter()
  try:
    binary, cached = device.compiler.compile(src)
  except CompileError:
    raise
  except Exception as e:
    raise CompileError(f"{device.name} failed to compile kernel {prog.name}: {type(e).__name__}: {e}\n--- source ---\n{src}") from e
  return binary, cached, time.perf_counter() - st


def _finish(device: Device, ast: UOp, prog: LoopProgram, src: str,
            compiled: Callable[[], tuple[bytes, bool, float]]) -> CompiledKernel:
  """Tell the observers and load the kernel, once its compile is done (on this thread: observers and runtimes)."""
  binary, cached, seconds = compiled()
  device.registry.notify("plugrad_kernel_compiled", device=device.name, name=prog.name, source=src,
                         seconds=0.0 if cached else seconds, cached=cached, ast=ast)
  ck = _compiled[(device, ast)] = CompiledKernel(prog, src, binary, _load(device, prog.name, src, binary, cached))
  return ck


class ProgramCache:
  """Lowered and rendered kernels on disk (under the cache folder's `programs`, private and signed as the compiled
  binaries are), by everything they depend on: the kernel's structure, the device, its capabilities, the plan, and
  the code of plugrad and of the plugins installed (`code_fingerprint`: an edited lowerer or renderer misses). A new
  process takes a kernel's loop program and source from here instead of lowering it again: most of the first step
  of a program whose binaries are cached (beautiful_mnist's first TinyJit step 1.7 -> 0.4 s). Not used while
  PLUGRAD_CHECK_SPEC checks every lowering stage."""

  def __init__(self) -> None:
    self._caches: dict[Path, KernelCache] = {}
    self._fingerprints: weakref.WeakKeyDictionary[Registry, str] = weakref.WeakKeyDictionary()

  def _cache(self, device: Device) -> KernelCache | None:
    config = device.registry.config
    if config.check_spec: return None
    if (cache := self._caches.get(config.cache_dir)) is None:
      cache = self._caches[config.cache_dir] = KernelCache(Path(config.cache_dir) / "programs")
    return cache if cache.on_disk else None

  def key(self, device: Device, ast: UOp, plan: tuple[Opt, ...] | None) -> str:
    registry = device.registry
    if (fp := self._fingerprints.get(registry)) is None: fp = self._fingerprints[registry] = code_fingerprint(registry)
    text = "\n".join([ast.pretty(), device.name, capabilities_text(device.caps), repr(plan),
                      type(device.renderer).__qualname__, fp])
    return hashlib.sha256(text.encode()).hexdigest()

  def get(self, device: Device, ast: UOp, plan: tuple[Opt, ...] | None) -> tuple[LoopProgram, str] | None:
    if (cache := self._cache(device)) is None: return None
    raw = cache.get(self.key(device, ast, plan), _PROGRAM_HEADER)
    if raw is None: return None
    try:
      prog, src = pickle.loads(raw)  # a signed entry this user's plugrad wrote (KernelCache checks the MAC)
    except Exception:  # written by other code under the same fingerprint (it cannot be): lowered again
      return None
    return (prog, src) if isinstance(prog, LoopProgram) and isinstance(src, str) else None

  def put(self, device: Device, ast: UOp, plan: tuple[Opt, ...] | None, prog: LoopProgram, src: str) -> None:
    if (cache := self._cache(device)) is not None:
      cache.put(self.key(device, ast, plan), _PROGRAM_HEADER, pickle.dumps((prog, src), pickle.HIGHEST_PROTOCOL))


_PROGRAM_HEADER = {"kind": "plugrad lowered program", "plugrad": package_version("plugrad")}


def code_fingerprint(registry: Registry) -> str:
  """A hash of the Python code that lowers and renders kernels: plugrad's and that of every plugin installed for
  the registry (the packages its entry points name, their .py files; loaded or not, so the hash is the same
  whichever a program happened to load first)."""
  roots = {Path(__file__).resolve().parents[1]}  # plugrad's package
  for ep in [*registry._eps(DEVICE_GROUP), *registry._eps(PLUGIN_GROUP)]:
    try:
      spec = importlib.util.find_spec(ep.value.split(":")[0].split(".")[0])
    except (ImportError, ValueError):
      continue
    if spec is not None and spec.origin is not None and spec.origin not in ("built-in", "frozen"):
      path = Path(spec.origin).resolve()
      roots.add(path.parent if path.name == "__init__.py" else path)
  digest = hashlib.sha256()
  for root in sorted(roots):
    for f in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
      digest.update(str(f.relative_to(root.parent)).encode() + b"\0" + f.read_bytes())
  return digest.hexdigest()


_programs = ProgramCache()
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
  if (plan := cache.get(key)) is not None:
    if _programs.get(device, ast, plan) is not None: return plan  # lowered with it before: it applies
    try:
      # lowered once here for the caller (`_program`) to find, not again
      _programs.put(device, ast, plan, *render_for(device, ast, plan))
      return plan
    except OptError:
      pass  # saved by an earlier build whose lowering numbered the kernel's axes otherwise: searched again
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
    # written, not just allocated: a fresh allocation's pages may all read as one shared zero page, which stays in
    # cache and times a convolution's loads 10-20% faster than its real inputs (9.1 against 8.0 ms, AVX-512)
    for raw, n in zip(raws, sizes): device.allocator.copyin(raw, memoryview(bytearray(n)))
    times = [runner(*raws, global_size=prog.global_size, local_size=prog.local_size, wait=True) for _ in range(3)]
  finally:
    for raw, n in zip(raws, sizes): device.allocator.free(raw, n)
  if all(t is None for t in times) and device.name not in _untimed:
    # a Program that times nothing under wait=True (the contract asks for seconds): every plan ties, the search keeps
    # the heuristic's, and without this nothing would say why
    _untimed.add(device.name)
    warnings.warn(f"PLUGRAD_BEAM: {device.name}'s kernels return no time when launched with wait=True, so the search "
                  f"keeps the heuristic's plans", stacklevel=2)
  return min((t for t in times if t is not None), default=INFEASIBLE)


_untimed: set[str] = set()  # devices the search found untimed (warned once each)


def _load(device: Device, name: str, src: str, binary: bytes, cached: bool) -> Program:
  """Load `binary`. A cached one the runtime refuses (built by an earlier build of the same versions) is
  evicted and rebuilt once, so a stale entry never needs a manual cache clear."""
  try:
    return _loaded(device, name, device.runtime.load(name, binary))
  except Exception:
    if not cached: raise
  device.compiler.evict(src)
  return _loaded(device, name, device.runtime.load(name, device.compiler.compile(src)[0]))


def _loaded(device: Device, name: str, program: Program) -> Program:
  # a runtime's load returning None failed at the launch as "'NoneType' object is not callable"
  if not callable(program):
    raise TypeError(f"{device.name}'s runtime.load returned {type(program).__name__} for kernel {name}, not a Program")
  return program
