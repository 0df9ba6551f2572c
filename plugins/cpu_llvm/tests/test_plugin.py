"""The CPU plugin's own machinery: registration, the compile cache, the thread split, the allocator."""
import hashlib
import hmac
import os
import re
import stat
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import plugrad
from plugrad import Tensor, dtypes
from plugrad.codegen.lowerer import lower
from plugrad.codegen.opt import Opt, OptOps
from plugrad.config import Config
from plugrad.engine import compile_for, render_for
from plugrad.registry import Registry, get_registry, set_registry

from plugrad_cpu_llvm import CPULLVMPlugin, plugin
from plugrad_cpu_llvm.allocator import ALIGNMENT, CPUAllocator
from plugrad_cpu_llvm.compiler import LLVMCompiler, pack_binary, unpack_binary
from plugrad_cpu_llvm.runtime import CHUNKS_PER_THREAD, CPURuntime

def kernel_source(t: Tensor) -> str:
  """The LLVM IR of the (only) compute kernel realizing `t`."""
  item = [it for it in t.schedule() if not it.is_copy][0]
  return render_for(get_registry().device("CPU"), item.ast)[1]


# ------------------------------------------------------------------ registration

def test_cpu_is_the_default_device_without_DEVICE(tmp_path):
  reg = Registry(Config.from_env({"PLUGRAD_CACHE_DIR": str(tmp_path)}))
  assert "CPU" in reg.device_names()
  st = reg.status("CPU")
  assert st.available and st.decl.priority > 0
  assert reg.default_device() == "CPU"
  assert Registry(Config.from_env({"DEVICE": "PYTHON", "PLUGRAD_CACHE_DIR": str(tmp_path)})).default_device() == "PYTHON"


def test_plugin_contract_and_roles():
  assert CPULLVMPlugin.PLUGRAD_CONTRACT == plugrad.plugin.CONTRACT_VERSION == 2
  cfg = Config.from_env({})
  for hook in ("plugrad_device_capabilities", "plugrad_renderer", "plugrad_compiler", "plugrad_allocator", "plugrad_runtime"):
    assert getattr(plugin, hook)(device="CUDA", config=cfg) is None  # first-result hooks leave other devices alone
    assert getattr(plugin, hook)(device="CPU", config=cfg) is not None
  caps = plugin.plugrad_device_capabilities(device="CPU", config=cfg)
  assert caps.max_buffers is None and caps.launch_dims == 0 and caps.max_vector_bytes in (16, 32, 64)
  assert caps.vector_ops and caps.masked_loads


def test_the_cache_size_is_read_from_the_machine():
  from pathlib import Path
  from plugrad_cpu_llvm.compiler import host_cache_bytes
  caps = plugin.plugrad_device_capabilities(device="CPU", config=Config.from_env({}))
  assert caps.cache_bytes == host_cache_bytes()
  levels = [(d / "level").read_text().strip() for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")]
  if "2" not in levels: pytest.skip("this system does not list its L2 cache in /sys/devices/system/cpu")
  assert 64 << 10 <= caps.cache_bytes <= 64 << 20  # any core's L2


def test_threads_option(tmp_path):
  cfg = Config.from_env({"PLUGRAD_CPU_THREADS": "1"})
  assert plugin.plugrad_runtime(device="CPU", config=cfg).threads == 1
  with pytest.raises(ValueError, match="PLUGRAD_CPU_THREADS"):
    plugin.plugrad_runtime(device="CPU", config=Config.from_env({"PLUGRAD_CPU_THREADS": "many"}))


def test_devices_option():
  (decl,) = plugin.plugrad_declare_devices(config=Config.from_env({}))
  assert decl.count() == 2  # CPU:0 and CPU:1, for sharding
  (decl,) = plugin.plugrad_declare_devices(config=Config.from_env({"PLUGRAD_CPU_DEVICES": "4"}))
  assert decl.count() == 4
  with pytest.raises(ValueError, match="PLUGRAD_CPU_DEVICES"):
    plugin.plugrad_declare_devices(config=Config.from_env({"PLUGRAD_CPU_DEVICES": "0"}))
  one, two = (plugin.plugrad_runtime(device=d, config=Config.from_env({})) for d in ("CPU", "CPU:1"))
  assert one is not two and one.pool is two.pool  # the same cores: one set of worker threads (runtime._POOL)


# ------------------------------------------------------------------ rendering

def test_rendered_ir_golden_pieces():
  a = Tensor.rand(64, 64, device="CPU").realize()
  src = kernel_source((a * 2).sum(axis=1))
  assert src.startswith("; plugrad-meta: ")
  assert "define void @k_r_64(ptr noalias align 4 %d0, ptr noalias align 4 %d1, i64 %start, i64 %end)" in src
  assert re.search(r"fadd reassoc contract (<\d+ x )?float", src)  # the reduction may be vectorised
  assert "sdiv" not in src and "srem" not in src  # index math was simplified away
  one = kernel_source(a.max())
  assert "@k_r_1_part(" in one and "@k_r_1_fin(" in one  # a reduction to one element splits its outer loop


@pytest.mark.parametrize("n", [1001, 50257])
def test_a_padded_windows_lane_gates_are_whole_mask_operations(n):
  # a cumsum's windows of 32 are padded before each chunk, so every lane of a vector has a gate of its own: compared
  # as one <16 x i32> with a constant vector and and-ed as <16 x i1>, never built bit by bit (50257: the row's end
  # is a gate of the lanes past it, which the lanes before it dropped)
  a = Tensor.rand(4, n, device="CPU").realize()
  items = [it for it in a.cumsum(1).schedule() if not it.is_copy]
  src = render_for(get_registry().device("CPU"), items[-1].ast)[1]  # the last: the windows, plus what came before
  assert "llvm.masked.load" in src
  assert re.search(r"icmp slt <\d+ x i32> <i32 ", src) and re.search(r"and <\d+ x i1>", src)
  # (a splat of one bool inserts lane 0 only)
  assert not re.search(r"insertelement <\d+ x i1> [^,]+, i1 [^,]+, i32 [1-9]", src)
  assert not re.search(r"extractelement <\d+ x i1>", src)
  np.testing.assert_allclose(a.cumsum(1).numpy(), np.cumsum(a.numpy(), 1), rtol=1e-5, atol=1e-4)


def _render_with(out: Tensor, opts: tuple) -> str:
  dev = get_registry().device("CPU")
  item = [it for it in out.schedule() if not it.is_copy][-1]
  return dev.renderer.render(lower(item.ast, dev.caps, dev.rewrite_rules, opts=opts))


def test_an_outer_product_tile_adds_each_product_to_its_accumulator_as_one_fmuladd():
  a, b = (Tensor(np.random.default_rng(i).standard_normal((64, 64)).astype(np.float32)) for i in range(2))
  # 8 accumulators, each adding 4 products of a broadcast element of A a step (the sum unrolled by 4)
  tile = _render_with(a @ b, (Opt(OptOps.UNROLL, 0, 4), Opt(OptOps.VECTORIZE, 0, 8), Opt(OptOps.UPCAST, 1, 8)))
  assert tile.count("call reassoc contract <8 x float> @llvm.fmuladd.v8f32(") == 8 * 4
  assert not re.search(r"fmul contract <8 x float>", tile)  # no product left apart from its add
  assert "!llvm.loop !2" not in tile  # 8 accumulators: LLVM may still unroll the loop
  # one vector accumulator: its unrolled terms stay a tree of adds (a chain would wait on each add in turn)
  row = _render_with((a * a).sum(axis=1), (Opt(OptOps.LANES, 0, 8), Opt(OptOps.UNROLL, 0, 4)))
  assert "fmuladd" not in row and re.search(r"fadd reassoc contract <8 x float>", row)
  # a dot-product tile (x @ W.T: both operands vector loads along the sum) stays with DAG contraction
  dot = _render_with(a @ b.T, (Opt(OptOps.LANES, 0, 8), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 2)))
  assert "fmuladd" not in dot and re.search(r"fmul contract <8 x float>", dot)


def test_a_tile_of_16_accumulators_is_not_unrolled_further():
  a, b = (Tensor(np.random.default_rng(i).standard_normal((64, 64)).astype(np.float32)) for i in range(2))
  wide = _render_with(a @ b, (Opt(OptOps.VECTORIZE, 0, 8), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 8)))
  assert wide.count(", !llvm.loop !2") == 1 and '!3 = !{!"llvm.loop.unroll.disable"}' in wide


def test_a_vector_accumulator_is_aligned_as_its_loads_and_stores_assume(tmp_path):
  # the accumulator's alloca had an element's alignment while its loads and stores assume the vector's: unoptimised,
  # an aligned vector move faulted on it (a crash, so in a process of its own)
  script = textwrap.dedent("""
    import numpy as np
    from plugrad import Tensor
    from plugrad.registry import get_registry
    from plugrad.scheduler import mark_done
    from plugrad_cpu_llvm.compiler import LLVMCompiler
    dev = get_registry().device("CPU")
    x = np.random.default_rng(0).standard_normal((16, 256)).astype(np.float32)
    out = Tensor(x, device="CPU").realize().sum(axis=1)
    item = [it for it in out.schedule() if not it.is_copy][-1]
    prog, src = __import__("plugrad.engine", fromlist=["render_for"]).render_for(dev, item.ast)
    assert "<16 x float>" in src or "<8 x float>" in src  # a vector accumulator (LANES)
    runner = dev.runtime.load(prog.name, LLVMCompiler(None, opt_level=0).compile(src)[0])
    runner(*(b.raw for b in item.bufs), global_size=prog.global_size, local_size=prog.local_size)
    mark_done(item.kernel)
    np.testing.assert_allclose(out.numpy(), x.sum(axis=1), rtol=1e-5, atol=1e-4)
    print("ok")
  """)
  run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PLUGRAD_CACHE_DIR": str(tmp_path)})
  assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


# ------------------------------------------------------------------ compile cache

def compile_in(cache, src):
  return LLVMCompiler(cache).compile(src)


def test_cache_is_private_and_bytes(tmp_path):
  cache = tmp_path / "deep" / "cpu_llvm"
  src = kernel_source(Tensor.rand(8, device="CPU") + 1)
  binary, cached = compile_in(cache, src)
  assert not cached and compile_in(cache, src) == (binary, True)
  meta, obj = unpack_binary(binary)
  assert obj[:4] == b"\x7fELF" and meta["nparams"] == 2
  assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700 and stat.S_IMODE(os.stat(tmp_path / "deep").st_mode) == 0o700
  entries = [p for p in cache.rglob("*") if p.is_file() and p.name != ".key"]
  assert len(entries) == 1 and stat.S_IMODE(entries[0].stat().st_mode) == 0o600
  assert stat.S_IMODE((cache / ".key").stat().st_mode) == 0o600  # the signing key is the user's alone
  assert all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in cache.rglob("*") if p.is_dir())
  assert b"pickle" not in entries[0].read_bytes()[:16]


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_cache_survives_damaged_entry(tmp_path, damage):
  src = kernel_source(Tensor.rand(8, device="CPU") * 3)
  good, _ = compile_in(tmp_path, src)
  (entry,) = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != ".key"]
  data = entry.read_bytes()
  entry.write_bytes({"truncate": data[:len(data) // 2], "garbage": b"\x00junk" * 50, "empty": b""}[damage])
  binary, cached = compile_in(tmp_path, src)
  assert not cached and unpack_binary(binary)[0] == unpack_binary(good)[0]
  assert compile_in(tmp_path, src)[1]  # repaired
  prog = CPURuntime().load("k", binary)  # and it loads and runs
  assert prog.nparams == 2


def test_cache_two_processes_at_once(tmp_path):
  src = kernel_source(Tensor.rand(16, device="CPU").sqrt() + 2)
  srcfile = tmp_path / "k.ll"
  srcfile.write_text(src)
  script = textwrap.dedent(f"""
    import hashlib, sys
    from pathlib import Path
    from plugrad_cpu_llvm.compiler import LLVMCompiler, unpack_binary
    from plugrad_cpu_llvm.runtime import CPURuntime
    src = Path({str(srcfile)!r}).read_text()
    for _ in range(20):
      binary, cached = LLVMCompiler(Path({str(tmp_path / 'cache')!r})).compile(src)
      CPURuntime().load("k", binary)
    print(hashlib.sha256(unpack_binary(binary)[1]).hexdigest())
  """)
  procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for _ in range(2)]
  outs = [p.communicate(timeout=120) for p in procs]
  assert all(p.returncode == 0 for p in procs), outs
  assert outs[0][0] == outs[1][0]
  assert not [p for p in (tmp_path / "cache").rglob(".tmp-*")]  # no temp files left behind


def test_stale_signed_entry_is_rebuilt(tmp_path):
  # an entry this user's plugrad signed, in a layout this build's runtime refuses (as after an upgrade
  # that kept the version number): evicted and recompiled, no manual cache clear
  reg = Registry(Config.from_env({"PLUGRAD_CACHE_DIR": str(tmp_path)}))
  prev = set_registry(reg)
  try:
    dev = reg.device("CPU")
    def out(): return Tensor(np.arange(4, dtype=np.float32), device="CPU") * 3 - 1
    (item,) = [it for it in out().schedule() if not it.is_copy]
    src = render_for(dev, item.ast)[1]
    comp = dev.compiler
    comp.cache().put(comp.cache_key(src), comp.versions(), pack_binary({"fn": "gone"}, b"\x7fELF stale"))
    np.testing.assert_array_equal(out().numpy(), np.arange(4) * 3 - 1)
    binary, cached = comp.compile(src)
    assert cached and unpack_binary(binary)[0]["nparams"] == 2  # the rebuilt entry replaced the stale one
  finally:
    set_registry(prev)


def test_binary_format_rejects_foreign_bytes():
  with pytest.raises(ValueError): unpack_binary(b"PLUGRAD1" + b"\x00" * 40)
  good = LLVMCompiler(None).compile(kernel_source(Tensor.rand(8, device="CPU") - 4))[0]
  meta, obj = unpack_binary(good)
  assert unpack_binary(pack_binary(meta, obj)) == (meta, obj)
  with pytest.raises(plugrad.DeviceError, match="LLVMCompiler.compile"): CPURuntime().load("k", b"garbage")


def elf_with(obj: bytes, offset: int, fmt: str, value: int) -> bytes:
  """`obj` with one header field overwritten."""
  out = bytearray(obj)
  struct.pack_into(fmt, out, offset, value)
  return bytes(out)


def test_junk_objects_are_refused_before_llvm_maps_them():
  # what the runtime checks before MCJIT sees the bytes: junk must be an error, never a crash
  meta, obj = unpack_binary(LLVMCompiler(None).compile(kernel_source(Tensor.rand(8, device="CPU") * 5))[0])
  junk = {
    "not ELF": b"\x00junk" * 40,
    "32-bit": elf_with(obj, 4, "<B", 1),
    "shared object": elf_with(obj, 16, "<H", 3),
    "other machine": elf_with(obj, 18, "<H", 40),  # ARM
    "section table past the end": elf_with(obj, 40, "<Q", len(obj)),
    "truncated": obj[:len(obj) // 2],
  }
  for what, bad in junk.items():
    try:
      unpack_binary(pack_binary(meta, bad))
    except ValueError:
      continue
    pytest.fail(f"an object file that is {what} was accepted")
  for field, value in [("nparams", "2"), ("fn", None), ("outer", -1), ("splittable", 1), ("reduce_split", {"part": 1})]:
    with pytest.raises(ValueError, match="plugrad-cpu-llvm binary"): unpack_binary(pack_binary({**meta, field: value}, obj))
  with pytest.raises(plugrad.DeviceError): CPURuntime().load("k", pack_binary(meta, junk["other machine"]))


def test_forged_cache_entry_is_discarded_not_loaded(tmp_path):
  # someone (with a recomputed checksum, but not this user's key) replaces an entry with junk code
  src = kernel_source(Tensor.rand(8, device="CPU") + 7)
  good, _ = compile_in(tmp_path, src)
  (entry,) = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != ".key"]
  meta, obj = unpack_binary(good)
  forged_binary = pack_binary(meta, obj[:64] + b"\xcc" * (len(obj) - 64))
  old = entry.read_bytes()
  body = old[40:44 + struct.unpack("<I", old[40:44])[0]] + forged_binary
  entry.write_bytes(old[:8] + hmac.new(b"not the key", body, hashlib.sha256).digest() + body)
  binary, cached = compile_in(tmp_path, src)
  assert not cached and binary == good  # a miss, recompiled
  assert compile_in(tmp_path, src) == (good, True)  # and the entry was replaced
  assert CPURuntime().load("k", binary).nparams == 2


# ------------------------------------------------------------------ threads

def test_split_launches_are_correct():
  n = 512  # 512*512 floats: well above the split threshold
  rng = np.random.default_rng(0)
  an, bn = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
  a, b = Tensor(an, device="CPU"), Tensor(bn, device="CPU")
  out = a * b + 1
  item = [it for it in out.schedule() if not it.is_copy][0]
  ck = compile_for(get_registry().device("CPU"), item.ast)
  threads = get_registry().device("CPU").runtime.threads
  chunks = ck.runner.chunks
  # idle threads pull chunks: more of them than threads (up to CHUNKS_PER_THREAD each), covering 0..n in order
  assert min(threads, n) <= len(chunks) <= threads * CHUNKS_PER_THREAD
  assert chunks[0][0] == 0 and chunks[-1][1] == n and all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))
  np.testing.assert_allclose(out.numpy(), an * bn + 1, rtol=1e-6)
  np.testing.assert_allclose(a.sum(axis=1).numpy(), an.sum(axis=1), rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose((a.T * 2).numpy(), an.T * 2)
  np.testing.assert_allclose((a @ b).numpy(), an @ bn, rtol=1e-4, atol=1e-3)


def test_a_cat_runs_its_launch_loop_in_pieces_without_gates():
  rng = np.random.default_rng(1)
  # odd sizes, large enough to split across threads: chunks end inside pieces and pieces inside vectors
  parts = [rng.standard_normal(n, dtype=np.float32) for n in (70001, 37, 130003, 1)]
  out = Tensor.cat(*[Tensor(p, device="CPU") for p in parts]) * 2 + 1
  src = kernel_source(out)
  assert all(f"@k_E_200042_p{j}(" in src for j in range(4)) and "@k_E_200042_p4(" not in src
  assert "%ld" not in src  # each piece loads its part unconditionally: no branch per element
  np.testing.assert_allclose(out.numpy(), np.concatenate(parts) * 2 + 1, rtol=1e-6)
  # the pieces' dispatch and an int64 max both call llvm.smax.i64: declared once
  ints = [np.arange(n, dtype=np.int64) - 9 for n in (5000, 3000)]
  np.testing.assert_array_equal(Tensor.cat(*[Tensor(i, device="CPU") for i in ints]).maximum(7).numpy(),
                                np.maximum(np.concatenate(ints), 7))
  # rows: pieces of the outer loop; columns (an elementwise kernel): pieces of the inner loop, run block of rows
  # by block of rows; a middle axis too
  an, bn = rng.standard_normal((300, 70), dtype=np.float32), rng.standard_normal((211, 70), dtype=np.float32)
  a, b = Tensor(an, device="CPU"), Tensor(bn, device="CPU")
  np.testing.assert_allclose(a.cat(b).exp2().numpy(), np.exp2(np.concatenate([an, bn])), rtol=1e-6)
  cols = Tensor.cat(a.T, b.T, a.T[:, :5], dim=1)
  assert "%blk" in kernel_source(cols + 0) and "%ld" not in kernel_source(cols + 0)
  np.testing.assert_allclose((cols + 0).numpy(), np.concatenate([an.T, bn.T, an.T[:, :5]], axis=1))
  c3, d3 = rng.standard_normal((4, 30, 50), dtype=np.float32), rng.standard_normal((4, 11, 50), dtype=np.float32)
  np.testing.assert_allclose(Tensor.cat(Tensor(c3), Tensor(d3), dim=1).exp2().numpy(),
                             np.exp2(np.concatenate([c3, d3], axis=1)), rtol=1e-6)
  # a kernel with reduce loops keeps an inner loop whole: its pieces would copy the whole body for the compiler
  x = Tensor(rng.standard_normal((2, 3, 40, 40), dtype=np.float32))
  w = Tensor(rng.standard_normal((4, 3, 3, 3), dtype=np.float32))
  assert "_p0(" not in kernel_source(x.conv2d(w, padding=1))
  np.testing.assert_allclose(a.pad(((5, 7), (0, 0)), value=-1.0).numpy(), np.pad(an, ((5, 7), (0, 0)), constant_values=-1.0))


@pytest.mark.parametrize("red", ["sum", "max", "min", "prod", "mean"])
@pytest.mark.parametrize("shape", [(653 * 659,), (653, 659)], ids=["1d", "2d"])
def test_split_reduction_to_one_element(red, shape):
  # 653 and 659 are primes (and the launch is big enough to split across threads): the core's two-stage reduce
  # split finds no chunk size and leaves a one-element kernel with a long loop, which the plugin splits itself
  an = np.random.default_rng(1).uniform(0.9999, 1.0001, shape).astype(np.float32)
  an.reshape(-1)[1234] = 0.5
  an.reshape(-1)[-2] = 1.5
  t = getattr(Tensor(an, device="CPU"), red)()
  items = [it for it in t.schedule() if not it.is_copy]
  ck = compile_for(get_registry().device("CPU"), items[-1].ast)
  if len(items) == 1 and get_registry().device("CPU").runtime.threads > 1:
    assert ck.runner.reduce_chunks is not None and len(ck.runner.reduce_chunks) > 1
  want = getattr(an.astype(np.float64), red)()
  np.testing.assert_allclose(t.item(), want, rtol=3e-3 if red == "prod" else 1e-4)  # 67591 float32 roundings


def test_split_reduction_with_epilogue_and_ints():
  an = np.arange(400 * 400, dtype=np.int32).reshape(400, 400) % 7
  t = Tensor(an, device="CPU")
  assert t.sum().item() == int(an.sum())
  assert ((t * 2).sum() + 5).item() == int((an * 2).sum() + 5)
  assert (t == 3).sum().item() == int((an == 3).sum())
  fn = Tensor(an.astype(np.float32), device="CPU")
  np.testing.assert_allclose(((fn - 3).relu().sum() / 10).sqrt().item(), np.sqrt(np.maximum(an - 3, 0).sum() / 10), rtol=1e-5)


def test_split_reduction_keeps_vector_accumulators_whole():
  # 8 outputs vectorised into one <8 x float> accumulator: the partials (8 bytes a piece) cannot hold it, so the
  # kernel is not split (it wrote 32 bytes per slot and crashed: a conv bias update in training at batch 16)
  gn = np.random.default_rng(3).standard_normal((16, 8, 26, 26)).astype(np.float32)
  g, b, lr = Tensor(gn, device="CPU").realize(), Tensor(np.zeros(8, np.float32), device="CPU").realize(), 0.5
  b.assign(b - Tensor([lr], device="CPU") * g.sum((0, 2, 3))).realize()
  np.testing.assert_allclose(b.numpy(), -lr * gn.sum((0, 2, 3)), rtol=1e-4, atol=1e-3)


def test_small_kernels_run_on_one_thread():
  t = Tensor.rand(4, 4, device="CPU") + 1
  item = [it for it in t.schedule() if not it.is_copy][0]
  ck = compile_for(get_registry().device("CPU"), item.ast)
  assert ck.runner.chunks == [(0, 16)] and ck.runner.reduce_chunks is None  # one loop of 16: the axes merge


def test_one_thread_runtime_gives_the_same_answer():
  n = 700
  an = np.random.default_rng(2).standard_normal((n, n)).astype(np.float32)
  item = [it for it in (Tensor(an, device="CPU") * 3).sum(axis=0).schedule() if not it.is_copy][0]
  dev = get_registry().device("CPU")
  ck = compile_for(dev, item.ast)
  results = []
  for threads in (1, 2, 3):
    prog = CPURuntime(threads).load(ck.program.name, ck.binary)
    raws = [b.raw for b in item.bufs]
    prog(*raws, global_size=ck.program.global_size, local_size=None, wait=True)
    results.append(item.bufs[0].numpy().copy())
  np.testing.assert_allclose(results[0], (an * 3).sum(axis=0), rtol=1e-4, atol=1e-3)
  np.testing.assert_array_equal(results[0], results[1])
  np.testing.assert_array_equal(results[0], results[2])


# ------------------------------------------------------------------ allocator

def test_allocator_aligned_and_reused():
  alloc = CPUAllocator()
  bufs = [alloc.alloc(n) for n in (1, 3, 100, 4096, 1 << 20)]
  assert all(b.addr % ALIGNMENT == 0 for b in bufs)
  raw = alloc.alloc(1 << 16)
  alloc.free(raw, 1 << 16)
  again = alloc.alloc(1 << 16)
  assert again is raw and alloc.stats.cache_hits == 1
  src = np.arange(1 << 14, dtype=np.float32)
  alloc.copyin(again, memoryview(src.view(np.uint8)))
  out = np.empty_like(src)
  alloc.copyout(memoryview(out.view(np.uint8)), again)
  np.testing.assert_array_equal(out, src)


def test_dropped_tensors_stay_within_the_cache_bound(tmp_path):
  reg = Registry(Config.from_env({"PLUGRAD_ALLOC_CACHE": "1M", "PLUGRAD_CACHE_DIR": str(tmp_path)}))
  prev = set_registry(reg)
  try:
    alloc = reg.device("CPU").allocator
    assert alloc.cache_limit == 1 << 20
    for i in range(6):
      t = (Tensor.rand(1 << 20, device="CPU") + i).realize()  # 4 MiB a result, more with the inputs
      del t  # freed by reference counting: no cycle holds a dropped result
    assert 0 < alloc.stats.peak and alloc.cached_bytes <= 1 << 20
    assert CPUAllocator().cache_limit == int(0.02 * CPUAllocator().memory_total())  # the default: 2% of the host's
  finally:
    set_registry(prev)


def test_repeated_realize_reuses_memory():
  # a dropped result's buffer goes back to the allocator by reference counting alone (no cycle holds it)
  a = Tensor.rand(256, 256, device="CPU").realize()
  alloc = get_registry().device("CPU").allocator
  for _ in range(3): ((a + 1) * 2).realize()
  before = alloc.stats.allocations
  for _ in range(5): ((a + 1) * 2).realize()
  assert alloc.stats.allocations == before


def test_float_exp2_is_inline_and_within_two_ulp():
  # exp2 of float32 is a polynomial in the IR (LLVM's exp2 was a libm call per element, never vectorised)
  x = np.concatenate([np.linspace(-155, 130, 20001, dtype=np.float32),
                      np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 127.99, 128, -126, -149, -160, 1e-8], np.float32)])
  t = Tensor(x, device="CPU").exp2()
  item = [it for it in t.schedule() if not it.is_copy][0]
  assert "llvm.exp2" not in render_for(get_registry().device("CPU"), item.ast)[1]
  got, want = t.numpy(), np.exp2(x.astype(np.float64))
  assert np.array_equal(np.isnan(got), np.isnan(want))
  with np.errstate(over="ignore"):
    w32 = want.astype(np.float32)
  finite = np.isfinite(w32) & (w32 != 0)
  np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], w32[~finite & ~np.isnan(want)])  # inf and 0 exactly
  ulp = np.abs(got[finite] - want[finite]) / np.spacing(np.abs(w32[finite])).astype(np.float64)
  assert ulp.max() <= 2, ulp.max()


@pytest.mark.parametrize("negate", [False, True])
def test_exp_reduces_its_own_argument_and_is_within_one_ulp(negate):
  # Tensor.exp hands exp2 the product x * log2(e), whose rounding put |x| ulps of error into the result (60 at
  # exp(80)); the renderer computes e**x from x itself (e**-x for x * -log2(e): sigmoid's, a negated exp's)
  x = np.concatenate([np.linspace(-110, 110, 40001, dtype=np.float32),
                      np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 88.72, 88.73, -87.33, -103.9, -104.0, 1e-30],
                               np.float32)])
  t = Tensor(x, device="CPU")
  t = (-t).exp() if negate else t.exp()
  assert "0x3FE62E4300000000" in _rendered(t)  # ln 2's first float32 part: the argument reduced by ln 2
  with np.errstate(over="ignore"):
    want = np.exp(-x.astype(np.float64) if negate else x.astype(np.float64))
    w32 = want.astype(np.float32)
  got = t.numpy()
  assert np.array_equal(np.isnan(got), np.isnan(want))
  normal = np.isfinite(w32) & (np.abs(w32) >= np.finfo(np.float32).tiny)
  ulp = np.abs(got[normal] - want[normal]) / np.spacing(np.abs(w32[normal])).astype(np.float64)
  assert ulp.max() <= 1, ulp.max()
  rest = ~normal & np.isfinite(w32)  # 0 and the subnormals: within one subnormal step
  assert np.all(np.abs(got[rest].astype(np.float64) - want[rest]) <= np.finfo(np.float32).smallest_subnormal)
  assert np.array_equal(got[np.isinf(w32)], w32[np.isinf(w32)])


def test_float_log2_is_inline_and_within_two_ulp():
  # log2 of float32 is inline too (a libm call per element before: Box-Muller's randn spent a third of its time
  # there), from normal and subnormal inputs, exact at powers of two and at the special values
  rng = np.random.default_rng(0)
  x = np.concatenate([rng.uniform(0, 10, 20000), np.exp(rng.uniform(-103, 88, 20000)), rng.uniform(0.9, 1.1, 20000),
                      [1.0, 2.0, 0.5, 2.0 ** -149, 2.0 ** -126, 3.4e38, 1.0000001, 0.99999994]]).astype(np.float32)
  t = Tensor(x, device="CPU").log2()
  item = [it for it in t.schedule() if not it.is_copy][0]
  assert "llvm.log2" not in render_for(get_registry().device("CPU"), item.ast)[1]
  got, want = t.numpy(), np.log2(x.astype(np.float64))
  w32 = want.astype(np.float32)
  exact = want == np.round(want)  # powers of two
  np.testing.assert_array_equal(got[exact], w32[exact])
  ulp = np.abs(got - want) / np.spacing(np.abs(w32)).astype(np.float64)
  assert ulp[~exact].max() <= 2, ulp.max()
  special = np.array([0.0, -0.0, -1.0, -np.inf, np.inf, np.nan, -1e-45], np.float32)
  np.testing.assert_array_equal(Tensor(special, device="CPU").log2().numpy(), [-np.inf, -np.inf, np.nan, np.nan, np.inf,
                                                                              np.nan, np.nan])


def test_log_is_its_own_and_within_one_ulp():
  # Tensor.log is log2(x) * ln 2, whose two roundings cost up to 2.6 ulps; the renderer computes ln x directly
  x = np.concatenate([np.geomspace(1e-45, 3.4e38, 40001, dtype=np.float32), np.linspace(0.5, 2, 4001, dtype=np.float32),
                      np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1.0000001, 0.99999994], np.float32)])
  t = Tensor(x, device="CPU").log()
  assert "llvm.log" not in _rendered(t)
  got, want = t.numpy(), torch_free_log(x)
  special = ~np.isfinite(want)  # -inf at +-0, inf at inf, NaN below 0 and at NaN
  assert np.array_equal(got[special], want[special], equal_nan=True)
  ok = np.isfinite(want) & (want != 0)
  ulp = np.abs(got[ok] - want[ok]) / np.spacing(np.abs(want[ok]).astype(np.float32)).astype(np.float64)
  assert ulp.max() <= 1, ulp.max()
  assert got[x == 1].tolist() == [0.0]


def torch_free_log(x: np.ndarray) -> np.ndarray:
  """ln x in float64, with -inf at 0 and NaN below (numpy's, without its warnings)."""
  with np.errstate(divide="ignore", invalid="ignore"):
    return np.log(x.astype(np.float64))


def _rendered(t: Tensor) -> str: return _render(t)[1]


def _render(t: Tensor):
  """(program, LLVM IR) of the last kernel realizing `t` would run."""
  item = [it for it in t.schedule() if not it.is_copy][-1]
  return render_for(get_registry().device("CPU"), item.ast)


def test_sin_of_a_bounded_argument_is_inline_and_within_two_ulp():
  # an angle computed from indices or random bits (Box-Muller's) lies within +-SIN_FAST_LIMIT: its sin is a
  # polynomial after a three-part reduction by pi/2 (randn of 1M: 13.7 -> 1.5 ms), with no branch; a loaded value may
  # be anything (1e30), so its sin keeps LLVM's (accurate for every float) for the lanes beyond the limit
  n = 1 << 16
  def angles(): return Tensor.arange(1, 2600, device="CPU").cast(dtypes.float32) * 3.1415927  # noqa: E306
  for x in (Tensor.arange(n, device="CPU").cast(dtypes.float32) * (16384.0 / n) - 8192.0, angles(), angles() * 0.5):
    assert "llvm.sin" not in _rendered(x.sin())  # before x.numpy(), which makes x a buffer
    got, want = x.sin().numpy(), np.sin(x.numpy().astype(np.float64))
    ulp = np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    assert ulp.max() <= 2, ulp.max()
  zeros = (Tensor.arange(4, device="CPU").cast(dtypes.float32) - 3.0) * -0.0  # +0, +0, +0, -0: sin keeps the sign
  np.testing.assert_array_equal(np.signbit(zeros.sin().numpy()), [False, False, False, True])
  loaded = Tensor(np.array([1e30, -4000.3, np.inf, np.nan], np.float32), device="CPU").realize()
  assert "llvm.sin" in _rendered(loaded.sin())
  np.testing.assert_allclose(loaded.sin().numpy()[:2], np.sin(np.array([1e30, -4000.3], np.float32).astype(np.float64)),
                             rtol=1e-6)


@pytest.mark.parametrize("n", [16, 1000, 4103])
def test_sin_of_a_loaded_value_takes_libm_only_for_the_lanes_beyond_the_limit(n):
  # values from memory: the polynomial for every lane, LLVM's sin behind a rarely taken branch for lanes beyond
  # +-SIN_FAST_LIMIT, infinite or NaN; the elementwise kernel takes vector lanes (with a masked last vector)
  rng = np.random.default_rng(n)
  x = (rng.standard_normal(n) * 50).astype(np.float32)
  far = rng.choice(n, 9, replace=False)
  x[far] = [1e30, -1e30, 8192.5, -9000.0, 3.4e38, np.inf, -np.inf, np.nan, -0.0]
  t = Tensor(x, device="CPU").realize()
  prog, src = _render(t.sin())
  assert ".far:" in src and any(o.op is OptOps.VECTORIZE for o in prog.opts), prog.opts
  with np.errstate(invalid="ignore"): got, want = t.sin().numpy(), np.sin(x.astype(np.float64))  # sin(inf): NaN
  finite = np.isfinite(x)
  ulp = np.abs(got[finite] - want[finite]) / np.spacing(np.abs(want[finite]).astype(np.float32)).astype(np.float64)
  assert ulp.max() <= 2, ulp.max()
  assert np.isnan(got[~finite]).all()
  assert np.signbit(got[far[-1]]) and got[far[-1]] == 0  # sin(-0.0) is -0.0
  # cos: the same reduction a quadrant on, and LLVM's cos for the far lanes (it was three sins of every value)
  prog, src = _render(t.cos())
  assert ".far:" in src and "llvm.cos" in src and "llvm.sin" not in src
  with np.errstate(invalid="ignore"): got, want = t.cos().numpy(), np.cos(x.astype(np.float64))
  ulp = np.abs(got[finite] - want[finite]) / np.spacing(np.abs(want[finite]).astype(np.float32)).astype(np.float64)
  assert ulp.max() <= 2, ulp.max()
  assert np.isnan(got[~finite]).all() and got[far[-1]] == 1


def test_cos_of_a_bounded_argument_is_inline_and_within_two_ulp():
  # the CPU renders COS itself (Capabilities.optional_ops): sin's polynomial one quadrant on, no branch for an
  # argument within +-SIN_FAST_LIMIT, within two ulps across the range (zeros of cos included)
  n = 1 << 16
  x = Tensor.arange(n, device="CPU").cast(dtypes.float32) * (16384.0 / n) - 8192.0
  assert "llvm.cos" not in _rendered(x.cos()) and "llvm.sin" not in _rendered(x.cos())
  got, want = x.cos().numpy(), np.cos(x.numpy().astype(np.float64))
  ulp = np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
  assert ulp.max() <= 2, ulp.max()
  assert (Tensor([0.0, -0.0], device="CPU").cos().numpy() == 1).all()


@pytest.mark.parametrize("name", ["sin", "cos", "sqrt", "exp2", "log2"])
def test_half_and_bfloat16_math_runs_in_float32_and_rounds_once(name):
  # every finite half: in float32 with the inline polynomials, then rounded, as torch's opmath (LLVM's half sin called
  # libm element by element, 7.6 ms for 1M); a float32 result on a half's rounding midpoint may round the other way
  # (sin(300): f32 gives the midpoint, torch's the value below it)
  torch = pytest.importorskip("torch")
  halves = np.arange(65536, dtype=np.uint16).view(np.float16)
  x = halves[np.isfinite(halves)]
  if name in ("sqrt", "log2"): x = np.abs(x)
  t = Tensor(x, device="CPU")
  assert not re.search(r"llvm\.(sin|cos|sqrt|exp2|log2)\.(v\d+)?f16", _rendered(getattr(t, name)()))  # no half math
  got, want = getattr(t, name)().numpy(), getattr(torch, name)(torch.tensor(x)).numpy()
  differ = (got != want) & ~(np.isnan(got) & np.isnan(want))
  off = np.abs(got[differ].astype(np.float64) - want[differ])
  assert differ.sum() <= 2 and np.all(off <= np.spacing(np.abs(want[differ])))
  b = Tensor(x.astype(np.float32), device="CPU").cast(dtypes.bfloat16)
  got_b = getattr(b, name)().cast(dtypes.float32).numpy()
  want_b = getattr(torch, name)(torch.tensor(x.astype(np.float32)).to(torch.bfloat16)).float().numpy()
  np.testing.assert_array_equal(got_b, want_b)


def test_a_first_run_compiles_on_the_compile_thread_in_schedule_order(monkeypatch):
  import threading
  import plugrad.engine.compile as compile_mod
  from plugrad.hookspecs import hookimpl as impl
  threads: list[str] = []
  real = compile_mod._compile
  monkeypatch.setattr(compile_mod, "_compile", lambda *a: threads.append(threading.current_thread().name) or real(*a))
  rng = np.random.default_rng(7)
  an = rng.standard_normal((37, 23), dtype=np.float32)
  a = Tensor(an, device="CPU")
  # shapes no other test uses: every kernel of this schedule is new to the process
  outs = [(a * 3.5).sum(0), (a.exp2() @ a.T).max(1), (a - 1.25).relu().cumsum(1)]

  class Seen:
    PLUGRAD_CONTRACT = plugrad.CONTRACT_VERSION
    names: list[str] = []
    @impl
    def plugrad_kernel_compiled(self, device, name, source, seconds, cached, ast) -> None: self.names.append(name)
  seen, reg = Seen(), get_registry()
  items = [it.ast for it in Tensor.schedule(*outs) if not it.is_copy]
  reg.pm.register(seen)
  try:
    Tensor.realize(*outs)
  finally:
    reg.pm.unregister(seen)
  assert threads and all(t.startswith("plugrad-compile") for t in threads) and not compile_mod._pending
  assert len(seen.names) == len(items) >= 3  # told once each, on this thread, as the launches come
  np.testing.assert_allclose(outs[0].numpy(), (an * 3.5).sum(0), rtol=1e-5)
  np.testing.assert_allclose(outs[1].numpy(), (np.exp2(an) @ an.T).max(1), rtol=1e-4)
  np.testing.assert_allclose(outs[2].numpy(), np.maximum(an - 1.25, 0).cumsum(1), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")
def test_a_forked_child_compiles_without_the_parents_compile_thread():
  # the parent's compile thread does not survive a fork: a child that compiled through it would wait forever
  code = textwrap.dedent("""
    import os, numpy as np
    from plugrad import Tensor
    a = Tensor(np.ones((40, 30), np.float32))
    ((a * 2).sum(0) + (a - 1).max(1).sum()).numpy()
    pid = os.fork()
    if pid == 0:
      b = Tensor(np.ones((41, 29), np.float32))
      os._exit(0 if ((b * 3).sum(0) + (b + 1).max(1).sum()).numpy()[0] == 205 else 1)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
  """)
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
  assert out.returncode == 0 and out.stdout.strip() == "0", out.stderr
