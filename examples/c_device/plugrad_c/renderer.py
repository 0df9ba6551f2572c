"""Loop program -> C. Every default of the core's C-style renderer is plain C already."""
from plugrad.plugin import CStyleRenderer


class CRenderer(CStyleRenderer):
  """C11 with GCC extensions; kernels loop over their launch indices (no threads)."""
