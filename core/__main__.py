"""`python -m plugrad`: list devices, print the kernels a program generates for a device, run an ONNX model."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from plugrad.device import DeviceError
from plugrad.hookspecs import CONTRACT_VERSION, hookimpl
from plugrad.registry import get_registry
from plugrad.uops import UOp


class CLIError(Exception):
  """A user mistake the CLI reports as one line (with the fix) and exit status 2."""


def cmd_devices(args: argparse.Namespace) -> int:
  reg = get_registry()
  rows = reg.all_status()
  default = None
  try:
    default = reg.default_device()
  except Exception as e:  # still list everything
    print(f"no default device: {e}", file=sys.stderr)
  for st in rows:
    mark = "*" if st.name == default else " "
    prio = st.decl.priority if st.decl else "-"
    state = "available" if st.available else f"unavailable: {st.reason}"
    print(f"{mark} {st.name:<10} {st.plugin.label():<28} priority {prio:<4} {state}")
    if st.decl is not None:
      try:
        caps = reg.render_device(st.name).caps
        limit = reg.render_device(st.name).buffer_limit
        print(f"    buffers/kernel {limit if limit is not None else 'unlimited'}, launch dims {caps.launch_dims}, "
              f"local memory {caps.local_memory} B, images {'yes' if caps.supports_images else 'no'}, "
              f"dtypes {' '.join(sorted(d.name for d in caps.dtypes))}")
      except Exception as e:
        why = e if isinstance(e, DeviceError) else f"{type(e).__name__}: {e}"
        print(f"    capabilities unavailable: {why}{''.join(f' ({n})' for n in getattr(e, '__notes__', []))}")
    for other in st.others:
      print(f"    also claimed by {other.name} ({other.label()}){': ' + other.error if other.error else ''}")
  for err in reg.plugin_errors:
    if not any(err is s.plugin or err in s.others for s in rows): print(f"  plugin error: {err.error}")
  options = [o for opts in reg.pm.hook.plugrad_config_options() for o in (opts or [])]
  if options:
    print("\nplugin options:")
    for o in options: print(f"  {o.env}={reg.config.option(o)!r}  {o.help}")
  return 0


class _CompiledKernels:
  """An observer keeping the AST of every kernel compiled while it is registered, each once, in order."""
  PLUGRAD_CONTRACT = CONTRACT_VERSION

  def __init__(self) -> None: self.asts: dict[UOp, None] = {}

  @hookimpl
  def plugrad_kernel_compiled(self, device: str, name: str, source: str, seconds: float, cached: bool,
                              ast: UOp) -> None:
    self.asts.setdefault(ast)


def cmd_kernels(args: argparse.Namespace) -> int:
  from plugrad import Tensor, dtypes
  from plugrad.engine import render_for, schedule
  from plugrad.engine.compile import cached_plan
  from plugrad.tensor import graph_roots
  import numpy as np
  reg = get_registry()
  target = args.device or reg.default_device()
  device = reg.render_device(target)
  scope: dict = {"Tensor": Tensor, "dtypes": dtypes, "np": np}
  # the graph is built on `target` where it can run here, so the layouts a Tensor chooses for its device (a matmul's
  # operand copied into panels as wide as the device's vectors) are the target's; elsewhere on the reference device,
  # since rendering for `target` needs no hardware, and stderr says whose choices the graph shows. What the code
  # realizes while it runs (Tensor.randn does at once) is kernels of `out` too: listed first, as the run compiled them
  build_on = device.name if reg.status(device.name).available else "PYTHON"
  if build_on != device.name:
    print(f"the graph is built on PYTHON ({device.name} cannot run here): where a Tensor op chooses a layout by its "
          f"device, it is PYTHON's choice", file=sys.stderr)
  ran = _CompiledKernels()
  reg.pm.register(ran, name="plugrad-kernels-cli")
  try:
    with reg.default_device_as(build_on): exec(compile(args.code, "<kernels -c>", "exec"), scope)
  finally:
    reg.pm.unregister(ran)
  if "out" not in scope: raise CLIError("the code must bind a Tensor (or a list of Tensors) to the name `out`")
  out = scope["out"]
  tensors = list(out) if isinstance(out, (list, tuple)) else [out]
  if not all(isinstance(t, Tensor) for t in tensors): raise CLIError("`out` must be a Tensor or a list of Tensors")
  failures = compiled = 0
  # nothing runs, so no handle needs rebinding and no buffer outlives the listing
  roots, devices, _ = graph_roots(tensors)  # a sharded tensor: one graph per device
  items = schedule(roots, devices, live=lambda: (), rebind=lambda becomes: None, registry=reg, limit_device=device.name)
  asts = [(ast, " (ran while the code ran)") for ast in ran.asts] + \
    [(item.ast, "") for item in items if not item.is_copy and item.ast is not None]
  for ast, when in asts:
    # under PLUGRAD_BEAM, the plan a search found for this kernel and device, as a realize would use it
    searched = cached_plan(device, ast) if reg.config.beam else None
    prog, src = render_for(device, ast, searched)
    print(f"// kernel {prog.name}{when}")
    if args.opts: print(f"// opts {list(prog.opts)}{' (searched: PLUGRAD_BEAM)' if searched is not None else ''}")
    print(src)
    if args.compile:
      try:
        binary, cached = device.compiler.compile(src)
      except Exception as e:
        failures += 1
        print(f"// compile failed: {e}", file=sys.stderr)
      else:
        compiled += 1
        print(f"// compiled for {device.name}: {len(binary)} bytes{' (from the cache)' if cached else ''}")
  if args.compile:
    print(f"{compiled} of {compiled + failures} kernels compiled for {device.name}", file=sys.stderr)
  return 1 if failures else 0


def cmd_new_plugin(args: argparse.Namespace) -> int:
  from pathlib import Path
  from plugrad.skeleton import new_plugin
  try:
    paths = new_plugin(args.name, Path(args.dir))
  except (FileExistsError, ValueError) as e:
    raise CLIError(str(e)) from None
  for path in paths: print(path)
  if args.name.upper() in get_registry().device_names():  # written, but it will not get the name as it stands
    print(f"note: a device {args.name.upper()} is installed already; the new plugin takes the name over only with "
          f"DeviceDecl(replaces=True), so pick another name unless that is what you mean", file=sys.stderr)
  return 0


def cmd_run(args: argparse.Namespace) -> int:
  try:
    from plugrad.nn.onnx import random_inputs, time_model, OnnxRunner
  except ImportError as e:
    raise CLIError(str(e)) from None
  import numpy as np
  runner = OnnxRunner(args.model, device=args.device)
  if args.inputs:
    with np.load(args.inputs) as npz: inputs = {k: npz[k] for k in npz.files}
  else: inputs = random_inputs(runner)
  report = time_model(runner, inputs, runs=args.runs)
  for name, out in report.outputs.items(): print(f"{name}: {out.dtype.name} {tuple(out.shape)}")
  print(f"{report.kernels} kernels per call, {report.seconds * 1e3:.3f} ms per call (median of {args.runs}, "
        f"TinyJit replay) on {runner.device}")
  return 0


def cmd_conformance(args: argparse.Namespace) -> int:
  try:
    import pytest
  except ImportError:
    raise CLIError("the conformance suite runs under pytest, which is in plugrad's test extra: "
                   "pip install 'plugrad[test]'") from None
  get_registry().device(args.device)  # an unknown or unavailable device fails here, in one line
  return pytest.main(["-p", "plugrad.testing.pytest_plugin", "--pyargs", "plugrad.testing", "--plugrad-device", args.device,
                      "-p", "no:cacheprovider", *args.pytest_args])


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m plugrad", description=__doc__)
  sub = parser.add_subparsers(dest="cmd", required=True)
  sub.add_parser("devices", help="every known device, its plugin, and whether it can run here")
  k = sub.add_parser("kernels", help="print the kernels CODE generates for a device (no hardware needed)")
  k.add_argument("--device", help="render for this device (default: the default device)")
  k.add_argument("--compile", action="store_true", help="also compile each kernel with the device's compiler")
  k.add_argument("--opts", action="store_true", help="print each kernel's optimization plan (plugrad.codegen.opt)")
  k.add_argument("-c", dest="code", required=True, help="Python code that binds a Tensor or a list of Tensors to `out`")
  n = sub.add_parser("new-plugin", help="write the skeleton of a device plugin")
  n.add_argument("name", help="the device name, e.g. MYDEV")
  n.add_argument("--dir", required=True, help="the folder to create")
  r = sub.add_parser("run", help="run an ONNX model with given or random inputs: output shapes, kernels, time per call")
  r.add_argument("model", help="the .onnx file")
  r.add_argument("--inputs", help="an .npz file with one array per model input (default: random inputs)")
  r.add_argument("--device", help="run on this device (default: the default device)")
  r.add_argument("--runs", type=int, default=10, help="timed calls after the JIT has captured (default 10)")
  c = sub.add_parser("conformance", help="run the device conformance suite (pytest) against a device")
  c.add_argument("device")
  c.add_argument("pytest_args", nargs=argparse.REMAINDER, help="more pytest arguments, e.g. -q -x")
  args = parser.parse_args(argv)
  command = {"devices": cmd_devices, "kernels": cmd_kernels, "new-plugin": cmd_new_plugin,
             "conformance": cmd_conformance, "run": cmd_run}[args.cmd]
  try:
    return command(args)
  except (CLIError, DeviceError, ValueError, FileNotFoundError, NotImplementedError) as e:
    print(f"python -m plugrad {args.cmd}: error: {e}", file=sys.stderr)
    return 2
  except BrokenPipeError:  # `python -m plugrad devices | head`: the reader left, nothing is wrong
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the interpreter's final flush stays quiet
    return 0


if __name__ == "__main__":
  sys.exit(main())
