"""nn.datasets (MNIST, Fashion-MNIST, CIFAR-10) and nn.state.tar_extract, on small files written to tmp_path:
the suite runs offline, so no loader here touches the network."""
import gzip
import io
import struct
import tarfile

import numpy as np
import pytest

from plugrad import Tensor, dtypes
from plugrad.nn import datasets
from plugrad.nn.datasets import DownloadError, cifar, mnist
from plugrad.nn.state import tar_extract

rng = np.random.default_rng(0)


def _write_idx(path, magic: int, values: np.ndarray, dims: tuple[int, ...] | None = None) -> None:
  dims = values.shape if dims is None else dims
  path.write_bytes(gzip.compress(struct.pack(f">{1 + len(dims)}i", magic, *dims) + values.tobytes()))


def _mnist_files(folder, n_train: int = 3, n_test: int = 2) -> dict[str, np.ndarray]:
  arrays = {"train-images-idx3-ubyte.gz": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
            "train-labels-idx1-ubyte.gz": rng.integers(0, 10, (n_train,), dtype=np.uint8),
            "t10k-images-idx3-ubyte.gz": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
            "t10k-labels-idx1-ubyte.gz": rng.integers(0, 10, (n_test,), dtype=np.uint8)}
  for name, a in arrays.items(): _write_idx(folder / name, 2051 if a.ndim == 3 else 2049, a)
  return arrays


def test_mnist_from_local_copy(tmp_path):
  arrays = _mnist_files(tmp_path)
  X_train, Y_train, X_test, Y_test = mnist(base_url=tmp_path.as_uri() + "/")
  assert X_train.shape == (3, 1, 28, 28) and Y_train.shape == (3,)
  assert X_test.shape == (2, 1, 28, 28) and Y_test.shape == (2,)
  assert all(t.dtype == dtypes.uint8 for t in (X_train, Y_train, X_test, Y_test))
  np.testing.assert_array_equal(X_train.numpy(), arrays["train-images-idx3-ubyte.gz"][:, None])
  np.testing.assert_array_equal(Y_train.numpy(), arrays["train-labels-idx1-ubyte.gz"])
  np.testing.assert_array_equal(X_test.numpy(), arrays["t10k-images-idx3-ubyte.gz"][:, None])
  np.testing.assert_array_equal(Y_test.numpy(), arrays["t10k-labels-idx1-ubyte.gz"])


def test_mnist_positional_signature_and_base_urls(tmp_path, monkeypatch, dev):
  (tmp_path / "fashion").mkdir()
  arrays = _mnist_files(tmp_path / "fashion", n_train=2, n_test=1)
  # the module's table is the override tinygrad's positional mnist(device, fashion) goes through
  monkeypatch.setitem(datasets.BASE_URLS, "fashion_mnist", (tmp_path / "fashion").as_uri())  # no trailing slash
  X_train, Y_train, X_test, Y_test = mnist(None, True)
  assert X_train.shape == (2, 1, 28, 28) and X_test.shape == (1, 1, 28, 28)
  np.testing.assert_array_equal(Y_test.numpy(), arrays["t10k-labels-idx1-ubyte.gz"])
  out = mnist(dev, fashion=True)  # a device given: the same values there
  assert all(t.device == dev for t in out)
  np.testing.assert_array_equal(out[0].numpy(), arrays["train-images-idx3-ubyte.gz"][:, None])
  np.testing.assert_array_equal(out[3].numpy(), arrays["t10k-labels-idx1-ubyte.gz"])


@pytest.mark.parametrize("name,magic,values,dims,match", [
  # the wrong magic number
  ("t10k-labels-idx1-ubyte.gz", 2051, np.zeros(2, np.uint8), None,
   r"t10k-labels-idx1-ubyte\.gz.*magic number 2051, expected 2049"),
  # the header claims 5 images, the file holds 3
  ("train-images-idx3-ubyte.gz", 2051, np.zeros((3, 28, 28), np.uint8), (5, 28, 28),
   r"train-images-idx3-ubyte\.gz.*\(5, 28, 28\)"),
  # 4 labels for 3 images
  ("train-labels-idx1-ubyte.gz", 2049, np.zeros(4, np.uint8), None,
   r"train-labels-idx1-ubyte\.gz has 4 labels for the 3 images"),
], ids=["wrong_magic", "header_count", "label_count"])
def test_mnist_bad_idx_file_names_the_file(tmp_path, name, magic, values, dims, match):
  _mnist_files(tmp_path)
  _write_idx(tmp_path / name, magic, values, dims=dims)
  with pytest.raises(ValueError, match=match):
    mnist(base_url=tmp_path.as_uri() + "/")


def test_mnist_not_gzip_is_a_value_error(tmp_path):
  _mnist_files(tmp_path)
  (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"not gzip at all")
  with pytest.raises(ValueError, match=r"train-images-idx3-ubyte\.gz is not a complete gzip file"):
    mnist(base_url=tmp_path.as_uri())


def test_unreachable_base_url_names_the_url(tmp_path):
  base = (tmp_path / "missing").as_uri() + "/"
  with pytest.raises(DownloadError, match="could not download .*missing/train-images-idx3-ubyte.gz.*base_url") as e:
    mnist(base_url=base)
  assert isinstance(e.value, OSError) and e.value.__cause__ is not None
  with pytest.raises(DownloadError, match="missing/cifar-10-binary.tar.gz"):
    cifar(base_url=base)


def _tar(files: dict[str, bytes], dirs: tuple[str, ...] = ()) -> bytes:
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w") as tar:
    for d in dirs:
      info = tarfile.TarInfo(d)
      info.type = tarfile.DIRTYPE
      tar.addfile(info)
    for name, data in files.items():
      info = tarfile.TarInfo(name)
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  return buf.getvalue()


def test_cifar_from_local_copy(tmp_path, dev):
  counts = {f"data_batch_{i}.bin": i for i in range(1, 6)} | {"test_batch.bin": 2}  # 15 train records, 2 test
  recs = {name: rng.integers(0, 256, (n, 3073), dtype=np.uint8) for name, n in counts.items()}
  files = {f"cifar-10-batches-bin/{name}": r.tobytes() for name, r in recs.items()}
  files["cifar-10-batches-bin/readme.html"] = b"<html></html>"
  (tmp_path / "cifar-10-binary.tar.gz").write_bytes(gzip.compress(_tar(files, dirs=("cifar-10-batches-bin",))))
  X_train, Y_train, X_test, Y_test = cifar(dev, base_url=tmp_path.as_uri() + "/")
  assert all(t.device == dev for t in (X_train, Y_train, X_test, Y_test))
  assert X_train.shape == (15, 3, 32, 32) and Y_train.shape == (15,)
  assert X_test.shape == (2, 3, 32, 32) and Y_test.shape == (2,)
  assert all(t.dtype == dtypes.uint8 for t in (X_train, Y_train, X_test, Y_test))
  train = np.concatenate([recs[f"data_batch_{i}.bin"] for i in range(1, 6)])
  np.testing.assert_array_equal(X_train.numpy(), train[:, 1:].reshape(-1, 3, 32, 32))
  np.testing.assert_array_equal(Y_train.numpy(), train[:, 0])
  np.testing.assert_array_equal(X_test.numpy(), recs["test_batch.bin"][:, 1:].reshape(-1, 3, 32, 32))
  np.testing.assert_array_equal(Y_test.numpy(), recs["test_batch.bin"][:, 0])


def test_cifar_bad_archive(tmp_path):
  good = {f"cifar-10-batches-bin/data_batch_{i}.bin": bytes(3073) for i in range(1, 6)}
  (tmp_path / "cifar-10-binary.tar.gz").write_bytes(gzip.compress(_tar(good)))
  with pytest.raises(ValueError, match="has no member cifar-10-batches-bin/test_batch.bin"):
    cifar(base_url=tmp_path.as_uri())
  partial = good | {"cifar-10-batches-bin/test_batch.bin": bytes(3000)}
  (tmp_path / "cifar-10-binary.tar.gz").write_bytes(gzip.compress(_tar(partial)))
  with pytest.raises(ValueError, match="test_batch.bin .* is 3000 bytes, not whole 3073-byte records"):
    cifar(base_url=tmp_path.as_uri())


def test_tar_extract_regular_files_only(dev):
  files = {"a.txt": b"hello", "sub/b.bin": bytes(range(256)) * 3}
  out = tar_extract(Tensor(np.frombuffer(_tar(files, dirs=("sub",)), dtype=np.uint8), device=dev))
  assert sorted(out) == ["a.txt", "sub/b.bin"]
  for name, data in files.items():
    assert out[name].dtype == dtypes.uint8 and out[name].shape == (len(data),) and out[name].device == dev
    assert out[name].numpy().tobytes() == data


def test_tar_extract_empty_member():
  out = tar_extract(Tensor(np.frombuffer(_tar({"empty": b""}), dtype=np.uint8)))
  assert list(out) == ["empty"] and out["empty"].shape == (0,)


def test_tar_extract_rejects_non_tar_and_wrong_tensors():
  with pytest.raises(ValueError, match="not a tar archive"):
    tar_extract(Tensor(np.frombuffer(b"hello world" * 100, dtype=np.uint8)))
  with pytest.raises(ValueError, match="not a tar archive"):
    tar_extract(Tensor(np.zeros(0, np.uint8), dtype=dtypes.uint8))
  with pytest.raises(ValueError, match="not a tar archive"):  # compressed: gunzip it first (from_url(gunzip=True))
    tar_extract(Tensor(np.frombuffer(gzip.compress(_tar({"a": b"x"})), dtype=np.uint8)))
  with pytest.raises(ValueError, match="1-D uint8"):
    tar_extract(Tensor(np.zeros((2, 512), np.uint8)))
  with pytest.raises(ValueError, match="1-D uint8"):
    tar_extract(Tensor(np.zeros(1024, np.float32)))
  with pytest.raises(TypeError, match="takes a Tensor"):
    tar_extract(b"bytes")  # type: ignore[arg-type]
