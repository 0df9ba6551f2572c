"""The compiled-kernel cache: used only in a private directory, entries signed by this user's key
and stamped with the versions that built them; anything else is a miss, never a crash."""
import hashlib
import json
import os
import stat
import warnings

import pytest

from plugrad import Compiler
from plugrad import kernel_cache
from plugrad.kernel_cache import KEY_FILE, KernelCache, KernelCacheWarning, directory_problem, package_version


class EchoCompiler(Compiler):
  """A compiler whose binary is its source, counting how often it really compiles."""

  def __init__(self, cache_dir, identity="echo 1"):
    super().__init__(cache_dir)
    self.compiles, self._identity = 0, identity

  def identity(self) -> str: return self._identity

  def _compile(self, src: str) -> bytes:
    self.compiles += 1
    return b"bin:" + src.encode()


def entries(root):
  return [p for p in root.rglob("*") if p.is_file() and p.name != KEY_FILE]


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
  monkeypatch.setattr(kernel_cache, "_warned", set())  # each test sees its own first warning


def test_entries_are_reused_and_carry_their_versions(tmp_path):
  c = EchoCompiler(tmp_path / "cache")
  assert c.compile("k1") == (b"bin:k1", False)
  assert EchoCompiler(tmp_path / "cache").compile("k1") == (b"bin:k1", True)  # another process would hit too
  (entry,) = entries(tmp_path / "cache")
  data = entry.read_bytes()
  header = json.loads(data[44:44 + int.from_bytes(data[40:44], "little")])
  assert header == {"plugrad": package_version("plugrad"), "plugin": package_version(__name__), "identity": "echo 1",
                    "key": entry.name}
  assert header["plugrad"].startswith("plugrad ")


def test_another_version_or_identity_is_a_miss(tmp_path, monkeypatch):
  EchoCompiler(tmp_path).compile("k")
  assert EchoCompiler(tmp_path, identity="echo 2").compile("k")[1] is False
  monkeypatch.setattr("plugrad.device.package_version", lambda module: f"{module} 99.0")
  assert EchoCompiler(tmp_path).compile("k")[1] is False


def test_entry_under_a_foreign_key_is_discarded(tmp_path):
  # a valid, signed entry copied to the name of another kernel's key must not be served for it
  c = EchoCompiler(tmp_path)
  c.compile("a")
  (entry,) = entries(tmp_path)
  other = tmp_path / c.cache_key("b")[:2] / c.cache_key("b")
  other.parent.mkdir(exist_ok=True)
  other.write_bytes(entry.read_bytes())
  assert c.compile("b") == (b"bin:b", False)
  assert c.compile("b") == (b"bin:b", True)  # the impostor was replaced by the real entry


@pytest.mark.parametrize("junk", ["old format with a checksum", "signed with another key", "garbage", "empty"])
def test_junk_entries_are_misses_and_get_replaced(tmp_path, junk):
  c = EchoCompiler(tmp_path)
  c.compile("k")
  (entry,) = entries(tmp_path)
  good = entry.read_bytes()
  payload = b"\xcc" * 64  # would trap if anyone ran it
  forged = {
    "old format with a checksum": b"PLUGRAD1" + hashlib.sha256(payload).digest() + payload,
    "signed with another key": good[:8] + bytes(32) + good[40:-len(b"bin:k")] + payload,
    "garbage": os.urandom(200),
    "empty": b"",
  }[junk]
  entry.write_bytes(forged)
  assert EchoCompiler(tmp_path).compile("k") == (b"bin:k", False)
  assert entry.read_bytes() != forged


def test_key_file_is_private_and_a_damaged_one_is_replaced(tmp_path):
  c = EchoCompiler(tmp_path / "c")
  c.compile("k")
  key = tmp_path / "c" / KEY_FILE
  assert stat.S_IMODE(key.stat().st_mode) == 0o600 and key.stat().st_size == 32
  key.write_bytes(b"short")
  c2 = EchoCompiler(tmp_path / "c")
  assert c2.compile("k") == (b"bin:k", False)  # entries signed with the old key are misses
  assert key.stat().st_size == 32 and c2.compile("k")[1]


def test_key_file_others_can_read_refuses_the_disk_cache(tmp_path):
  EchoCompiler(tmp_path).compile("k")
  os.chmod(tmp_path / KEY_FILE, 0o644)
  with pytest.warns(KernelCacheWarning, match="key file .* delete it"):
    c = EchoCompiler(tmp_path)
    assert c.compile("k") == (b"bin:k", False)


def check_refused(cache_dir, match):
  """A compiler on `cache_dir` warns once, keeps binaries in memory only, and writes nothing there."""
  before = sorted(p.name for p in cache_dir.rglob("*")) if cache_dir.exists() else []
  c = EchoCompiler(cache_dir)
  with pytest.warns(KernelCacheWarning, match=match) as record:
    assert c.compile("k") == (b"bin:k", False)
  assert len(record) == 1 and "PLUGRAD_CACHE_DIR" in str(record[0].message)
  assert "\n" not in str(record[0].message)
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # warned once per directory, not once per compile or compiler
    assert c.compile("k") == (b"bin:k", True) and c.compiles == 1  # memory cache
    assert EchoCompiler(cache_dir).compile("k")[1] is False
  assert sorted(p.name for p in cache_dir.rglob("*")) == before


def test_world_writable_directory_is_refused(tmp_path):
  d = tmp_path / "shared"
  d.mkdir()
  os.chmod(d, 0o777)
  check_refused(d, f"others can write to it .*chmod go-w {d}")


def test_group_writable_directory_is_refused_unless_the_group_is_private(tmp_path, monkeypatch):
  d = tmp_path / "team"
  d.mkdir()
  os.chmod(d, 0o770)
  monkeypatch.setattr(kernel_cache, "_private_gid", lambda: None)
  check_refused(d, "its group can write to it")
  # a user private group (named after the user, no other members) gives no one else access
  monkeypatch.setattr(kernel_cache, "_private_gid", lambda: d.stat().st_gid)
  assert directory_problem(d) is None


def test_directory_of_another_user_is_refused(tmp_path, monkeypatch):
  d = tmp_path / "theirs"
  d.mkdir(mode=0o700)
  me = os.getuid()
  monkeypatch.setattr(os, "getuid", lambda: me + 1)  # the directory now belongs to someone else
  check_refused(d, f"owned by uid {me}, not by you")


def test_parent_others_can_write_is_refused_unless_sticky(tmp_path):
  parent = tmp_path / "drop"
  parent.mkdir()
  os.chmod(parent, 0o777)  # anyone could rename our cache away and put theirs in its place
  check_refused(parent / "cache", "its parent")
  os.chmod(parent, 0o1777)  # like /tmp: only the owner may rename or delete
  assert directory_problem(parent / "cache") is None


def test_symlink_to_an_unsafe_directory_is_refused(tmp_path):
  target = tmp_path / "open"
  target.mkdir()
  os.chmod(target, 0o777)
  (tmp_path / "link").symlink_to(target)
  check_refused(tmp_path / "link", "others can write")


def test_a_file_in_place_of_the_directory_is_refused(tmp_path):
  (tmp_path / "file").write_bytes(b"not a directory")
  check_refused(tmp_path / "file", "not a directory")


def test_oversized_entry_is_junk(tmp_path, monkeypatch):
  monkeypatch.setattr(kernel_cache, "MAX_ENTRY_BYTES", 100)  # no real binary is 256 MiB; a test need not write that
  c = EchoCompiler(tmp_path)
  c.compile("k" * 200)  # an entry of about 500 bytes
  assert [EchoCompiler(tmp_path).compile("k" * 200)[1] for _ in range(2)] == [False, False]


def test_missing_directories_are_created_private(tmp_path):
  c = EchoCompiler(tmp_path / "a" / "b")
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    c.compile("k")
  assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
  assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o700
  assert KernelCache(tmp_path / "a" / "b").on_disk


def test_no_cache_dir_means_no_cache(tmp_path):
  c = EchoCompiler(None)
  assert c.compile("k") == (b"bin:k", False) and c.compile("k") == (b"bin:k", False) and c.compiles == 2


def test_evict_forgets_one_entry(tmp_path):
  c = EchoCompiler(tmp_path)
  c.compile("a")
  c.compile("b")
  c.evict("a")
  assert c.compile("a")[1] is False and c.compile("b")[1] is True


def test_a_new_process_takes_lowered_programs_from_the_disk(tmp_path):
  import subprocess
  import sys
  code = ("import numpy as np\nimport plugrad.engine.compile as C\nlowered = []\nreal = C.lower\n"
          "C.lower = lambda *a, **k: lowered.append(1) or real(*a, **k)\nfrom plugrad import Tensor\n"
          "x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))\n"
          "values = ((x @ x.T).relu() + 1).sum(1).numpy().tolist()\nprint(len(lowered), values)")
  def run(**env):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PLUGRAD_CACHE_DIR": str(tmp_path), "PLUGRAD_CHECK_SPEC": "0", **env})
    assert out.returncode == 0, out.stderr
    count, values = out.stdout.split(" ", 1)
    return int(count), values
  first, values = run()
  assert first > 0 and run() == (0, values)  # the second process lowers nothing: programs and sources from disk
  assert any((tmp_path / "programs").rglob("*")) and run(PLUGRAD_CHECK_SPEC="1") == (first, values)  # checked: lowered
