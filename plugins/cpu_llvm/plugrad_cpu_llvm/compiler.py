"""The compiler role: LLVM IR text -> an optimised x86-64 (or any host) object file, by llvmlite.

The IR is optimised with LLVM's new pass manager at speed level 3 for the host CPU's name and
features, then emitted as a relocatable object. The binary handed to the runtime is a small
header (the launch metadata the renderer wrote into the IR's first line, as JSON) followed by the
object file's bytes: plain bytes, so the core's disk cache stores it without pickle.
"""
from __future__ import annotations

import json
import os
import struct
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from plugrad import CompileError, Compiler

#: First bytes of every binary this compiler makes; bump it when the layout changes.
BINARY_MAGIC = b"PLCPU001"
#: The renderer writes the launch metadata on the IR's first line after this marker.
META_MARKER = "; plugrad-meta: "

_llvm_lock = threading.Lock()  # LLVM contexts are not safe to use from two threads at once


@lru_cache(maxsize=None)
def _llvm() -> Any:
  """llvmlite's binding, with the native target initialised (once)."""
  import llvmlite.binding as llvm  # imported lazily: `import plugrad_cpu_llvm` stays cheap
  llvm.initialize_native_target()
  llvm.initialize_native_asmprinter()
  llvm.initialize_native_asmparser()
  return llvm


@lru_cache(maxsize=None)
def host_target() -> tuple[str, str, str]:
  """(triple, cpu name, cpu features) of this machine, as LLVM sees them."""
  llvm = _llvm()
  return llvm.get_process_triple(), llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def host_vector_bytes() -> int:
  """The widest SIMD register of the host: 64 with AVX-512, 32 with AVX, else 16."""
  feats = host_target()[2].split(",")
  if "+avx512f" in feats: return 64
  if "+avx" in feats: return 32
  return 16


def pack_binary(meta: dict[str, Any], obj: bytes) -> bytes:
  """Header (magic, JSON length, JSON) + object bytes."""
  head = json.dumps(meta, sort_keys=True).encode()
  return BINARY_MAGIC + struct.pack("<I", len(head)) + head + obj


def unpack_binary(binary: bytes) -> tuple[dict[str, Any], bytes]:
  """Inverse of `pack_binary`; raises ValueError for bytes this compiler did not make."""
  if len(binary) < 12 or binary[:8] != BINARY_MAGIC: raise ValueError("not a plugrad-cpu-llvm binary (bad magic)")
  (n,) = struct.unpack("<I", binary[8:12])
  if 12 + n > len(binary): raise ValueError("truncated plugrad-cpu-llvm binary")
  return json.loads(binary[12:12 + n]), binary[12 + n:]


class LLVMCompiler(Compiler):
  """llvmlite at speed level 3 for the host CPU; binaries cached under `cache_dir` (private).

  :param cache_dir: the cache directory (None: no disk cache).
  :param opt_level: LLVM speed level (0-3).
  """

  def __init__(self, cache_dir: Path | None = None, opt_level: int = 3) -> None:
    super().__init__(cache_dir)
    self.opt_level = opt_level
    self._dir_ready = False

  def identity(self) -> str:
    import llvmlite
    llvm = _llvm()
    triple, cpu, feats = host_target()
    version = ".".join(map(str, llvm.llvm_version_info))
    return f"plugrad-cpu-llvm/{BINARY_MAGIC.decode()} llvmlite {llvmlite.__version__} LLVM {version} {triple} {cpu} {feats} O{self.opt_level}"

  def compile(self, src: str) -> tuple[bytes, bool]:
    if self.cache_dir is not None and not self._dir_ready:
      _private_dir(self.cache_dir)
      self._dir_ready = True
    return super().compile(src)

  def _compile(self, src: str) -> bytes:
    first = src.split("\n", 1)[0]
    if not first.startswith(META_MARKER): raise CompileError(f"CPU source lacks its metadata line ({META_MARKER!r})\n{src}")
    meta = json.loads(first[len(META_MARKER):])
    return pack_binary(meta, self.compile_object(src))

  def compile_object(self, src: str) -> bytes:
    """Optimise the IR for the host and return the object file's bytes."""
    llvm = _llvm()
    triple, cpu, feats = host_target()
    with _llvm_lock:
      try:
        mod = llvm.parse_assembly(src)
        mod.verify()
      except RuntimeError as e:
        raise CompileError(f"LLVM rejected the CPU kernel: {e}\n--- source ---\n{src}") from e
      mod.triple = triple
      tm = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=feats, opt=self.opt_level, reloc="pic",
                                                                  codemodel="default")
      mod.data_layout = str(tm.target_data)
      pto = llvm.create_pipeline_tuning_options(speed_level=self.opt_level)
      pto.loop_vectorization = self.opt_level >= 2
      pto.slp_vectorization = self.opt_level >= 2
      pto.loop_unrolling = self.opt_level >= 2
      pb = llvm.create_pass_builder(tm, pto)
      pb.getModulePassManager().run(mod, pb)
      return bytes(tm.emit_object(mod))

  def assembly(self, src: str) -> str:
    """The optimised machine code of `src` as assembly text (for reading what the vectoriser did)."""
    llvm = _llvm()
    triple, cpu, feats = host_target()
    with _llvm_lock:
      mod = llvm.parse_assembly(src)
      mod.triple = triple
      tm = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=feats, opt=self.opt_level, reloc="pic",
                                                                  codemodel="default")
      mod.data_layout = str(tm.target_data)
      pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=self.opt_level))
      pb.getModulePassManager().run(mod, pb)
      return tm.emit_assembly(mod)


def _private_dir(path: Path) -> None:
  """Create `path` (and any missing parents) readable by this user only; tighten it if it exists."""
  missing = []
  p = Path(path)
  while not p.exists():
    missing.append(p)
    if p.parent == p: break
    p = p.parent
  for d in reversed(missing):
    try:
      d.mkdir(mode=0o700)
    except FileExistsError:
      pass
    except OSError:
      return  # an unwritable cache only costs recompiles; Compiler.compile copes
  try:
    if path.stat().st_uid == os.getuid() and path.stat().st_mode & 0o077: os.chmod(path, 0o700)
  except OSError:
    pass
