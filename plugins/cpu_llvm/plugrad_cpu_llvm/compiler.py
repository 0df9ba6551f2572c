"""The compiler role: LLVM IR text -> an optimised x86-64 (or any host) object file, by llvmlite.

The IR is optimised with LLVM's new pass manager at speed level 3 for the host CPU's name and
features, then emitted as a relocatable object. The binary handed to the runtime is a small
header (the launch metadata the renderer wrote into the IR's first line, as JSON) followed by the
object file's bytes: plain bytes, so the core's disk cache stores it without pickle.
"""
from __future__ import annotations

import json
import re
import struct
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from plugrad.plugin import CompileError, Compiler

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


def host_vector_registers() -> int:
  """The host's vector registers: 32 with AVX-512 (zmm0-31) or on AArch64 (v0-v31), else 16."""
  triple, _, feats = host_target()
  return 32 if "+avx512f" in feats.split(",") or triple.startswith(("aarch64", "arm64")) else 16


@lru_cache(maxsize=None)
def host_cache_bytes() -> int:
  """The L2 cache of one core in bytes, from Linux's sysfs; 0 where it does not say."""
  try:
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
      if (index / "level").read_text().strip() == "2" and (index / "type").read_text().strip() in ("Data", "Unified"):
        size = (index / "size").read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
        return int(size.rstrip("KM")) * scale
  except (OSError, ValueError):
    pass
  return 0


def jit_target_machine() -> Any:
  """The host's target machine for MCJIT."""
  triple, cpu, feats = host_target()
  return _llvm().Target.from_triple(triple).create_target_machine(cpu=cpu, features=feats, opt=0, reloc="pic",
                                                                   codemodel="default", jit=True)


def jit_module(ir: str) -> Any:
  """An MCJIT engine holding the machine code of `ir` (the runtime's own helpers: the worker pool, graph runs),
  compiled for the host; the code lives as long as the engine. Call with `_llvm_lock` held."""
  llvm = _llvm()
  mod = llvm.parse_assembly(ir)
  mod.triple = host_target()[0]
  mod.verify()
  engine = llvm.create_mcjit_compiler(mod, jit_target_machine())
  engine.finalize_object()
  return engine


def pack_binary(meta: dict[str, Any], obj: bytes) -> bytes:
  """Header (magic, JSON length, JSON) + object bytes."""
  head = json.dumps(meta, sort_keys=True).encode()
  return BINARY_MAGIC + struct.pack("<I", len(head)) + head + obj


def unpack_binary(binary: bytes) -> tuple[dict[str, Any], bytes]:
  """Inverse of `pack_binary`, checking what can be checked before the object is mapped into the
  process: the metadata's fields and types, and that the object file is a relocatable object for
  this host (format, word size, byte order, machine, section table in bounds). Raises ValueError
  for bytes this compiler did not make."""
  if len(binary) < 12 or binary[:8] != BINARY_MAGIC: raise ValueError("not a plugrad-cpu-llvm binary (bad magic)")
  (n,) = struct.unpack("<I", binary[8:12])
  if 12 + n > len(binary): raise ValueError("truncated plugrad-cpu-llvm binary")
  try:
    meta = json.loads(binary[12:12 + n])
  except ValueError:
    raise ValueError("plugrad-cpu-llvm binary with an unreadable metadata header") from None
  obj = binary[12 + n:]
  check_meta(meta)
  check_object(obj, host_target()[0])
  return meta, obj


def check_meta(meta: Any) -> None:
  """Raise ValueError unless `meta` has the launch fields the runtime reads, of the right types."""
  def need(d: Any, key: str, types: type | tuple[type, ...]) -> Any:
    v = d.get(key) if isinstance(d, dict) else None
    if not isinstance(v, types) or (isinstance(v, bool) and types is int):
      raise ValueError(f"plugrad-cpu-llvm binary: metadata field {key!r} is {v!r}")
    return v
  need(meta, "fn", str)
  if need(meta, "nparams", int) < 0 or need(meta, "outer", int) < 0:
    raise ValueError("plugrad-cpu-llvm binary: negative parameter or iteration count")
  need(meta, "splittable", bool)
  need(meta, "cost", (int, float))
  if meta.get("reduce_split") is not None:
    split = meta["reduce_split"]
    need(split, "part", str)
    need(split, "fin", str)
    need(split, "outer", int)


#: ELF e_machine of the architectures LLVM names first in a target triple
_ELF_MACHINES = {"x86_64": 62, "aarch64": 183, "arm64": 183, "riscv64": 243, "powerpc64le": 21, "ppc64le": 21,
                 "s390x": 22}


def check_object(obj: bytes, triple: str) -> None:
  """Raise ValueError unless `obj` looks like a relocatable object file for `triple`. (On ELF
  hosts every header field LLVM trusts is checked; Mach-O and COFF get a magic and machine check.)"""
  arch = triple.split("-")[0]
  if "linux" in triple or "bsd" in triple or "elf" in triple:
    if len(obj) < 64 or obj[:4] != b"\x7fELF": raise ValueError("the object is not an ELF file")
    if obj[4] != 2 or obj[5] != 1: raise ValueError("the object is not 64-bit little-endian ELF")
    e_type, e_machine = struct.unpack_from("<HH", obj, 16)
    if e_type != 1: raise ValueError(f"the object is ELF type {e_type}, not a relocatable object")
    if arch in _ELF_MACHINES and e_machine != _ELF_MACHINES[arch]:
      raise ValueError(f"the object is for ELF machine {e_machine}, not {arch}")
    (shoff,) = struct.unpack_from("<Q", obj, 40)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", obj, 58)
    if shentsize != 64 or shnum == 0 or shstrndx >= shnum or shoff + shnum * shentsize > len(obj):
      raise ValueError("the object's section table lies outside it")
    for i in range(shnum):  # every section's data must lie inside the file (SHT_NOBITS has none)
      sh_type, = struct.unpack_from("<I", obj, shoff + i * 64 + 4)
      off, size = struct.unpack_from("<QQ", obj, shoff + i * 64 + 24)
      if sh_type != 8 and off + size > len(obj): raise ValueError(f"the object's section {i} lies outside it")
  elif "apple" in triple or "darwin" in triple:
    if obj[:4] != b"\xcf\xfa\xed\xfe": raise ValueError("the object is not a 64-bit Mach-O file")
  elif "windows" in triple:
    machine = {"x86_64": 0x8664, "aarch64": 0xAA64}.get(arch)
    if len(obj) < 2 or (machine is not None and struct.unpack_from("<H", obj)[0] != machine):
      raise ValueError(f"the object is not a COFF file for {arch}")


#: LLVM 22's SLP vectorizer (its minimum-bitwidth analysis) narrows `uitofp (sext iN x to i64)` to
#: `uitofp (sext iN x to i32)`: int8 -> uint64 -> float32 of -2 gave 2**32 - 2 instead of 2**64 - 2 (in the unrolled
#: remainder of a concatenation's kernel; the loop vectoriser's code was right). A module that converts 64-bit
#: unsigned integers to floats is optimised without SLP vectorization: such casts are rare.
_SLP_UNSAFE = re.compile(r"uitofp (?:i64|<\d+ x i64>) ")
#: Bumped when the pipeline changes what a source compiles to, so that binaries cached before are not reused.
PIPELINE_VERSION = 3


def object_code_model(triple: str) -> str:
  """The code model kernels' object files are compiled for. MCJIT maps an object's code and its constants in
  separate allocations, which land more than 2 GiB apart in a fragmented address space (seen with CUDA's context in
  the process, 16 cores: 11 of 14 processes aborted within 600 loads on RuntimeDyldELF's `isInt<32>(RealOffset)`,
  a silently wrong address where LLVM is built without assertions); x86-64's large model addresses both with 64-bit
  absolute relocations, in range wherever they land (0 of 14 under the same load)."""
  return "large" if triple.startswith("x86_64") else "default"


class LLVMCompiler(Compiler):
  """llvmlite at speed level 3 for the host CPU; binaries cached under `cache_dir` (private).

  :param cache_dir: the cache directory (None: no disk cache).
  :param opt_level: LLVM speed level (0-3).
  """
  # llvmlite's calls release the interpreter, and every use of LLVM here holds _llvm_lock
  threadsafe = True

  def __init__(self, cache_dir: Path | None = None, opt_level: int = 3) -> None:
    super().__init__(cache_dir)
    self.opt_level = opt_level

  def identity(self) -> str:
    import llvmlite
    llvm = _llvm()
    triple, cpu, feats = host_target()
    version = ".".join(map(str, llvm.llvm_version_info))
    return (f"plugrad-cpu-llvm/{BINARY_MAGIC.decode()} llvmlite {llvmlite.__version__} LLVM {version} {triple} {cpu} {feats} "
            f"O{self.opt_level} pipeline {PIPELINE_VERSION}")

  def _compile(self, src: str) -> bytes:
    first = src.split("\n", 1)[0]
    if not first.startswith(META_MARKER): raise CompileError(f"CPU source lacks its metadata line ({META_MARKER!r})\n{src}")
    meta = json.loads(first[len(META_MARKER):])
    return pack_binary(meta, self.compile_object(src))

  def compile_object(self, src: str) -> bytes:
    """Optimise the IR for the host and return the object file's bytes."""
    llvm = _llvm()
    with _llvm_lock:
      try:
        mod = llvm.parse_assembly(src)
        mod.verify()
      except RuntimeError as e:
        raise CompileError(f"LLVM rejected the CPU kernel: {e}\n--- source ---\n{src}") from e
      tm = self._optimise(llvm, mod, src)
      return bytes(tm.emit_object(mod))

  def assembly(self, src: str) -> str:
    """The optimised machine code of `src` as assembly text (for reading what the vectoriser did)."""
    llvm = _llvm()
    with _llvm_lock:
      mod = llvm.parse_assembly(src)
      return self._optimise(llvm, mod, src).emit_assembly(mod)

  def _optimise(self, llvm: Any, mod: Any, src: str) -> Any:
    """Run the optimisation pipeline on `mod` (parsed from `src`) for the host; returns the target machine."""
    triple, cpu, feats = host_target()
    mod.triple = triple
    tm = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=feats, opt=self.opt_level, reloc="pic",
                                                                codemodel=object_code_model(triple))
    mod.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=self.opt_level)
    pto.loop_vectorization = self.opt_level >= 2
    pto.slp_vectorization = self.opt_level >= 2 and not _SLP_UNSAFE.search(src)
    pto.loop_unrolling = self.opt_level >= 2
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return tm
