"""The renderer role: loop program -> source text."""
from __future__ import annotations

from plugrad.codegen.program import LoopProgram


class Renderer:
  """Turns a LoopProgram into source text for one device. Subclasses implement `render`; the
  C-like ones subclass `plugrad.codegen.cstyle.CStyleRenderer` instead.

  :param device: the device string this renderer serves.
  """

  def __init__(self, device: str) -> None:
    self.device = device

  def render(self, prog: LoopProgram) -> str:
    raise NotImplementedError(f"{type(self).__name__} must implement render")
