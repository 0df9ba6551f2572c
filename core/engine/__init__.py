"""The engine: from tensor graphs to launches. `realize` is the one orchestrator (schedule with its
structural cache, compile with its caches, allocate, run); `TinyJit` captures and replays launches.
It works on UOp graphs and buffers and never imports the Tensor frontend."""
from plugrad.engine.compile import CompiledKernel, compile_for, lower_for, render_for
from plugrad.engine.jit import TinyJit
from plugrad.engine.realize import realize, realized_view
from plugrad.engine.run import Capture, Launch, replay, run_schedule
from plugrad.engine.schedule import kernelize_roots, schedule

__all__ = ["CompiledKernel", "compile_for", "lower_for", "render_for", "TinyJit", "realize", "realized_view", "Capture",
           "Launch", "replay", "run_schedule", "kernelize_roots", "schedule"]
