"""pytest plugin: check, for METAL, every kernel a test run compiles on another device.

Load it into a run of the core tests (tests/test_metal_generated_kernels.py does):

    PLUGRAD_METAL_KERNEL_REPORT=report.json python -m pytest tests --plugrad-device PYTHON \
        -p metal_kernel_collector        # with plugins/metal/tests on PYTHONPATH

It records the AST of every kernel compiled in the run (the same hook the core's shadow device
uses), and at the end lowers each for METAL, renders it, and runs the clang syntax check on the
distinct sources in batches, in parallel (the shadow run checks one kernel at a time).
Every outcome is attributed to its stage, so a failure says whose it is:

- skipped: the core refused the kernel because METAL lacks a dtype or op (float64), with reasons;
- lowering_failures: the core's lowering raised, or produced a program whose launch indices do
  not match its launch sizes (InvalidProgramError from the renderer): core bugs, not this plugin's;
- render_failures / syntax_failures: this plugin's renderer, or its MSL failed the check.

The JSON report goes to PLUGRAD_METAL_KERNEL_REPORT.
"""
from __future__ import annotations

import json
import os
from collections import Counter

from plugrad.hookspecs import CONTRACT_VERSION, hookimpl


class KernelCollector:
  PLUGRAD_CONTRACT = CONTRACT_VERSION

  def __init__(self) -> None:
    self.asts: dict = {}  # ast -> kernel name, in first-seen order

  @hookimpl
  def plugrad_kernel_compiled(self, device, name, source, seconds, cached, ast) -> None:
    self.asts.setdefault(ast, name)


def pytest_configure(config) -> None:
  from plugrad.registry import get_registry
  collector = KernelCollector()
  get_registry().pm.register(collector, name="metal-kernel-collector")
  config._metal_collector = collector


def check_kernels(asts: dict) -> dict:
  """Lower, render and syntax-check every AST for METAL; the report as a dict."""
  from plugrad.device import UnsupportedError
  from plugrad.engine import lower_for
  from plugrad.registry import get_registry
  from plugrad_metal.renderer import InvalidProgramError
  from plugrad_metal.syntax_check import SyntaxChecker
  device = get_registry().render_device("METAL")
  skipped: Counter = Counter()
  lowering, rendering, sources = [], [], {}
  for ast, name in asts.items():
    try:
      prog = lower_for(device, ast)
    except UnsupportedError as e:
      skipped[str(e)] += 1
      continue
    except Exception as e:
      lowering.append(f"kernel {name}: {type(e).__name__}: {e}")
      continue
    try:
      sources.setdefault(device.renderer.render(prog), name)
    except InvalidProgramError as e:  # the renderer refused a self-contradicting program from the lowering
      lowering.append(f"kernel {name}: {type(e).__name__}: {e}")
    except Exception as e:
      rendering.append(f"kernel {name}: {type(e).__name__}: {e}\n{prog}")
  srcs = list(sources)
  syntax = [f"kernel {sources[src]}: {err}" for src, err in zip(srcs, SyntaxChecker().check_many(srcs)) if err is not None]
  return {"kernels": len(asts), "rendered": len(asts) - sum(skipped.values()) - len(lowering) - len(rendering),
          "distinct_sources": len(sources), "checked": len(sources) - len(syntax), "skipped": dict(skipped),
          "lowering_failures": lowering, "render_failures": rendering, "syntax_failures": syntax}


def pytest_sessionfinish(session, exitstatus) -> None:
  collector = getattr(session.config, "_metal_collector", None)
  path = os.environ.get("PLUGRAD_METAL_KERNEL_REPORT")
  if collector is None or not path: return
  report = check_kernels(collector.asts)
  with open(path, "w") as f: json.dump(report, f, indent=1)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
  path = os.environ.get("PLUGRAD_METAL_KERNEL_REPORT")
  if not path or not os.path.exists(path): return
  with open(path) as f: r = json.load(f)
  terminalreporter.write_line(
    f"METAL kernels: {r['kernels']} collected, {r['checked']} distinct sources passed the syntax check, "
    f"{len(r['syntax_failures'])} failed it, {len(r['render_failures'])} failed to render, "
    f"{len(r['lowering_failures'])} failed in the core's lowering, {sum(r['skipped'].values())} skipped {r['skipped']}")
