"""Device memory: `cl.Buffer`s, and RGBA images (`cl.create_image`) for buffers whose options ask
for one (`plugrad.device.ImageSpec`), reused by size through the LRU cache."""
from __future__ import annotations

from typing import Any

import numpy as np

from plugrad.plugin import LRUAllocator

from plugrad_opencl_qcom.cldevice import CLDevice


def image_shape(options: Any) -> tuple[int, int] | None:
  """(height, width) when `options` asks for an image, else None."""
  h, w = getattr(options, "height", None), getattr(options, "width", None)
  return (int(h), int(w)) if h is not None and w is not None else None


def _round_up(x: int, n: int) -> int: return (x + n - 1) // n * n


class CLAllocator(LRUAllocator):
  """Buffers and images on one OpenCL device.

  An image's channel type follows from its byte size: 16 bytes a pixel is FLOAT, 8 is HALF_FLOAT.

  :param pitch_alignment: when set (QCOM: 64 bytes), host rows of image copies are padded to it,
    the row pitch Adreno drivers want, and plain buffers are allocated in whole multiples of it.
  """

  def __init__(self, cldev: CLDevice, pitch_alignment: int | None = None):
    super().__init__()
    self.cldev, self.pitch_alignment = cldev, pitch_alignment
    self.max_alloc = int(cldev.device.max_mem_alloc_size)  # asked of the driver once, not on every allocation

  def _alloc(self, nbytes: int, options: Any) -> Any:
    import pyopencl as cl
    ctx = self.cldev.context
    try:
      if (hw := image_shape(options)) is not None:
        h, w = hw
        pixel = nbytes // (h * w) if h * w else 0
        if pixel not in (8, 16) or pixel * h * w != nbytes:
          raise ValueError(f"an image of {h}x{w} RGBA pixels cannot hold {nbytes} bytes (float32 or float16 only)")
        channel = cl.channel_type.FLOAT if pixel == 16 else cl.channel_type.HALF_FLOAT
        fmt = cl.ImageFormat(cl.channel_order.RGBA, channel)
        return cl.create_image(ctx, cl.mem_flags.READ_WRITE, fmt, shape=(w, h))
      size = _round_up(nbytes, self.pitch_alignment) if self.pitch_alignment else nbytes
      if size > (most := self.max_alloc):  # the driver's INVALID_BUFFER_SIZE, said plainly
        raise MemoryError(f"{self.cldev.info.name} allocates at most {most} bytes in one buffer; {nbytes} were asked "
                          f"for (split the tensor, or use a device with more memory)")
      return cl.Buffer(ctx, cl.mem_flags.READ_WRITE, size)
    except cl.MemoryError as e:
      raise MemoryError(f"{self.cldev.info.name}: cannot allocate {nbytes} bytes: {e}") from e

  def _free(self, raw: Any, nbytes: int, options: Any) -> None: raw.release()

  def _memory_total(self) -> int: return int(self.cldev.device.global_mem_size)

  def _pitch(self, w: int, pixel: int) -> int:
    return _round_up(w * pixel, self.pitch_alignment) if self.pitch_alignment else w * pixel

  def _image_rows(self, image: Any) -> tuple[int, int, int, int]:
    """(width, height, bytes per pixel, row pitch in bytes) of an image's host copies."""
    import pyopencl as cl
    w, h = image.shape
    pixel = image.get_image_info(cl.image_info.ELEMENT_SIZE)
    return w, h, pixel, self._pitch(w, pixel)

  def _copyin(self, raw: Any, src: memoryview) -> None:
    import pyopencl as cl
    host = np.frombuffer(src, dtype=np.uint8)
    if isinstance(raw, cl.Image):
      w, h, pixel, pitch = self._image_rows(raw)
      if pitch != w * pixel:  # stage through rows padded to the device's pitch
        staged = np.zeros((h, pitch), np.uint8)
        staged[:, :w * pixel] = host.reshape(h, w * pixel)
        host = staged
      cl.enqueue_copy(self.cldev.queue, raw, host, origin=(0, 0), region=(w, h), pitches=(pitch,), is_blocking=True)
    else:
      cl.enqueue_copy(self.cldev.queue, raw, host, is_blocking=True)

  def _copyout(self, dest: memoryview, raw: Any) -> None:
    import pyopencl as cl
    out = np.frombuffer(dest, dtype=np.uint8)
    if isinstance(raw, cl.Image):
      w, h, pixel, pitch = self._image_rows(raw)
      staged = out if pitch == w * pixel else np.empty((h, pitch), np.uint8)
      cl.enqueue_copy(self.cldev.queue, staged, raw, origin=(0, 0), region=(w, h), pitches=(pitch,), is_blocking=True)
      if staged is not out: out.reshape(h, w * pixel)[:] = staged[:, :w * pixel]
    else:
      cl.enqueue_copy(self.cldev.queue, out, raw, is_blocking=True)
