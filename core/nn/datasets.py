"""The small image datasets of tinygrad 0.14's `nn.datasets`: MNIST, Fashion-MNIST and CIFAR-10.

Each loader downloads the dataset's files once (`plugrad.helpers.fetch`: into plugrad's cache folder, as tinygrad
keeps them) and returns uint8 tensors (X_train, Y_train, X_test, Y_test), images as (N, C, H, W).
`base_url` (or the module's BASE_URLS) points a loader at another mirror or at a local copy
(`pathlib.Path(folder).as_uri() + "/"`), for use offline.
"""
from __future__ import annotations

import gzip
import zlib

import numpy as np

from plugrad.dtype import dtypes
from plugrad.helpers import fetch
from plugrad.nn.state import tar_extract
from plugrad.tensor import Tensor

# where each dataset's files are found; a loader's `base_url` argument takes precedence
BASE_URLS: dict[str, str] = {
  "mnist": "https://storage.googleapis.com/cvdf-datasets/mnist/",
  "fashion_mnist": "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
  "cifar": "https://www.cs.toronto.edu/~kriz/",
}

_CIFAR_ARCHIVE = "cifar-10-binary.tar.gz"
_CIFAR_RECORD = 1 + 3 * 32 * 32  # a label byte, then the red, green and blue planes


class DownloadError(OSError):
  """A dataset file could not be read from its URL (the network, or a missing local file); the urllib error is
  its __cause__."""


def _fetch(url: str, gunzip: bool) -> Tensor:
  try:
    data = fetch(url).read_bytes()  # downloaded once, then read from the cache folder
  except OSError as e:  # urllib.error.URLError (HTTPError too) and socket errors are all OSErrors
    # fetch's error names the URL
    raise DownloadError(f"could not download the dataset: {e}; pass base_url= (a folder's file:// URI) to read a "
                        f"local copy of it") from e
  try:
    if gunzip: data = gzip.decompress(data)
  except (gzip.BadGzipFile, EOFError, zlib.error) as e:
    raise ValueError(f"{url} is not a complete gzip file: {e}") from e
  return Tensor(np.frombuffer(data, dtype=np.uint8).copy(), dtype=dtypes.uint8)


def _idx(url: str, magic: int, ndim: int) -> tuple[Tensor, tuple[int, ...]]:
  """The values of an IDX file of unsigned bytes (1-D labels or 3-D images) and the dims its header gives."""
  t = _fetch(url, gunzip=True)
  header_len = 4 + 4 * ndim  # the magic number, then one big-endian int32 per dim
  name = url.rsplit("/", 1)[-1]
  if t.shape[0] < header_len: raise ValueError(f"{name} ({url}) is {t.shape[0]} bytes, too short for an IDX header")
  header = t[:header_len].numpy().view(">i4")
  if int(header[0]) != magic:
    raise ValueError(f"{name} ({url}) has IDX magic number {int(header[0])}, expected {magic}")
  dims = tuple(int(d) for d in header[1:])
  if any(d < 0 for d in dims) or t.shape[0] - header_len != int(np.prod(dims)):
    raise ValueError(f"{name} ({url}) header gives dims {dims} ({int(np.prod(dims))} values), but it holds "
                     f"{t.shape[0] - header_len} bytes after the header")
  return t[header_len:], dims


def _base(dataset: str, base_url: str | None) -> str:
  base = BASE_URLS[dataset] if base_url is None else base_url
  return base if base.endswith("/") else base + "/"


def mnist(device: str | None = None, fashion: bool = False,
          base_url: str | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """MNIST (or Fashion-MNIST with `fashion`): X_train (60000, 1, 28, 28), Y_train (60000,), X_test
  (10000, 1, 28, 28), Y_test (10000,), all uint8, on `device` (the default device when None).

  The four IDX files (train-images-idx3-ubyte.gz, ...) are read from `base_url`, by default the public mirror
  in BASE_URLS; the counts come from the files' headers, so a smaller copy loads too. Raises ValueError for a
  file that is not the IDX file expected, DownloadError (an OSError) when a file cannot be read.
  """
  base = _base("fashion_mnist" if fashion else "mnist", base_url)
  out: list[Tensor] = []
  for split in ("train", "t10k"):
    images, (n, rows, cols) = _idx(base + f"{split}-images-idx3-ubyte.gz", 2051, 3)
    labels, (n_labels,) = _idx(base + f"{split}-labels-idx1-ubyte.gz", 2049, 1)
    if n_labels != n:
      raise ValueError(f"{split}-labels-idx1-ubyte.gz has {n_labels} labels for the {n} images of "
                       f"{split}-images-idx3-ubyte.gz")
    out += [images.reshape(n, 1, rows, cols), labels]
  if device is not None: out = [t.to(device) for t in out]
  return out[0], out[1], out[2], out[3]


def cifar(device: str | None = None, base_url: str | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """CIFAR-10: X_train (50000, 3, 32, 32), Y_train (50000,), X_test (10000, 3, 32, 32), Y_test (10000,), all
  uint8, on `device` (the default device when None).

  Reads cifar-10-binary.tar.gz from `base_url`, by default the public copy in BASE_URLS: five training batches
  and a test batch of 3073-byte records (a label byte, then the image's 3072 bytes, channel-major). The counts
  come from the batches' sizes. Raises ValueError for an archive without those batches or with a partial
  record, DownloadError (an OSError) when the archive cannot be read.
  """
  url = _base("cifar", base_url) + _CIFAR_ARCHIVE
  members = tar_extract(_fetch(url, gunzip=True))

  def records(names: list[str]) -> np.ndarray:
    parts = []
    for name in names:
      if name not in members: raise ValueError(f"{url} has no member {name}")
      if members[name].shape[0] % _CIFAR_RECORD:
        raise ValueError(f"{name} in {url} is {members[name].shape[0]} bytes, not whole {_CIFAR_RECORD}-byte records")
      parts.append(members[name].numpy())
    return np.concatenate(parts).reshape(-1, _CIFAR_RECORD)

  splits = ([f"cifar-10-batches-bin/data_batch_{i}.bin" for i in range(1, 6)], ["cifar-10-batches-bin/test_batch.bin"])
  out: list[Tensor] = []
  for names in splits:
    # one tensor of the records; images and labels are views of it, as in the file
    recs = Tensor(records(names), device=device)
    out += [recs[:, 1:].reshape(-1, 3, 32, 32), recs[:, 0]]
  return out[0], out[1], out[2], out[3]


__all__ = ["mnist", "cifar", "BASE_URLS", "DownloadError"]
