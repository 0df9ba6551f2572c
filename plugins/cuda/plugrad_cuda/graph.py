"""The graph role: a TinyJit capture replayed as one CUDA graph (one cuGraphLaunch per replay).

The launches become kernel nodes of one graph, each depending on the one before (the capture's order is
the order its kernels read and write in). A replay whose buffers differ from the last one's updates just
the nodes that use them (cuGraphExecKernelNodeSetParams) before it launches the graph.
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable

from plugrad.plugin import Graph, GraphLaunch

from plugrad_cuda.driver import KernelNodeParams
from plugrad_cuda.runtime import CUDAContext, CUDAProgram, launch_dims


class CUDAGraphExec:
  """An instantiated graph of `launches`; calling it with the raw buffers (device pointers) runs it."""

  def __init__(self, ctx: CUDAContext, launches: list[GraphLaunch], nbuffers: int):
    self.ctx, self.launches = ctx, launches
    self.current: list[Any] = [None] * nbuffers  # the buffers the graph's nodes point at now
    self.params: list[KernelNodeParams] = []
    self.storage: list[Any] = []  # the argument values each node's kernelParams point at
    self.graph, self.exec = ctypes.c_void_p(), ctypes.c_void_p()
    self.nodes: list[ctypes.c_void_p] = []
    with ctx as drv:
      drv.cuGraphCreate(ctypes.byref(self.graph), 0)
      for ln in launches:
        prog = ln.program
        assert isinstance(prog, CUDAProgram)
        storage, args = prog.args(tuple(0 for _ in ln.buffers))  # null pointers until the first call sets them
        grid, block = launch_dims(ln.global_size, ln.local_size)
        p = KernelNodeParams(prog.function, *grid, *block, 0, args, None, None, None)
        node, deps = ctypes.c_void_p(), (ctypes.c_void_p * 1)(*self.nodes[-1:])
        drv.cuGraphAddKernelNode_v2(ctypes.byref(node), self.graph, deps if self.nodes else None, len(self.nodes[-1:]),
                                    ctypes.byref(p))
        self.nodes.append(node)
        self.params.append(p)
        self.storage.append((storage, args))
      drv.cuGraphInstantiateWithFlags(ctypes.byref(self.exec), self.graph, 0)

  def __call__(self, raws: list[Any]) -> None:
    with self.ctx as drv:
      if raws != self.current:
        changed = {i for i, (new, old) in enumerate(zip(raws, self.current)) if new != old}
        for k, ln in enumerate(self.launches):
          if changed.isdisjoint(ln.buffers): continue
          storage = self.storage[k][0]
          for slot, i in zip(storage, ln.buffers): slot.value = int(raws[i])
          drv.cuGraphExecKernelNodeSetParams_v2(self.exec, self.nodes[k], ctypes.byref(self.params[k]))
        self.current = list(raws)
      drv.cuGraphLaunch(self.exec, None)

  def __del__(self) -> None:
    try:
      with self.ctx as drv:
        if self.exec: drv.cuGraphExecDestroy(self.exec)
        if self.graph: drv.cuGraphDestroy(self.graph)
    except Exception:  # the driver may be gone at interpreter exit
      pass


class CUDAGraph(Graph):
  """Native replay for a CUDA GPU (see the module docstring)."""

  def __init__(self, ctx: CUDAContext):
    self.ctx = ctx

  def _prepare(self, launches: list[GraphLaunch], nbuffers: int) -> Callable[[list[Any]], None] | None:
    if len(launches) < 2 or not all(isinstance(ln.program, CUDAProgram) for ln in launches): return None
    return CUDAGraphExec(self.ctx, launches, nbuffers)


__all__ = ["CUDAGraph", "CUDAGraphExec"]
