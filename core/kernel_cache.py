"""The compiled-kernel cache behind `Compiler.compile`: binaries on disk, keyed by their source and
everything else that shapes them, and trusted only when this user's plugrad wrote them.

Runtimes load cached binaries as machine code (the CPU device maps object files into the
process), so an entry is only read when

- the cache directory is private: owned by this user, not writable by group or others (a group
  that is the user's own private group excepted), and every directory above it either owned by
  this user or root and not writable by others, or sticky like /tmp. Otherwise the disk cache
  is refused with one warning and binaries are kept in memory for the process (as ssh refuses
  keys in unsafe directories and pip disables a cache it does not own);
- its MAC verifies: every entry is signed with HMAC-SHA256 under a random key kept in the
  directory's `.key` file (0600), so a foreign entry, or junk with a recomputed checksum, is
  a miss and is deleted rather than loaded;
- its header names the same plugrad version, plugin version, compiler identity and key as the
  lookup. The versions are also part of the key, so an upgrade never even looks at old entries.

Entry layout: MAGIC (8) | HMAC (32) | header length (u32 LE) | header (JSON) | binary. The MAC
covers everything after itself.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import importlib.metadata
import json
import os
import secrets
import stat
import struct
import sys
import tempfile
import threading
import warnings
from pathlib import Path

MAGIC = b"PLUGRAD2"
KEY_FILE = ".key"
KEY_BYTES = 32
MAX_ENTRY_BYTES = 256 << 20


class KernelCacheWarning(UserWarning):
  """The disk cache of compiled kernels was refused; kernels are cached in memory instead."""


# ---------------------------------------------------------------- versions

@functools.lru_cache(maxsize=None)
def package_version(module: str) -> str:
  """'<distribution> <version>' of the installed package that provides top-level `module`
  ('plugrad_cpu_llvm' -> 'plugrad-cpu-llvm 0.1.0'), else the module's `__version__`."""
  top = module.split(".")[0]
  try:
    dist = importlib.metadata.distribution(top)
    return f"{dist.metadata['Name']} {dist.version}"
  except importlib.metadata.PackageNotFoundError:
    return f"{top} {getattr(sys.modules.get(top), '__version__', 'unknown')}"


# ---------------------------------------------------------------- is the directory private?

def _private_gid() -> int | None:
  """The user's private group (a group named after the user, holding no one else), whose write
  bit gives no one else access; None when the user has none."""
  try:
    import grp
    import pwd
    user = pwd.getpwuid(os.getuid())
    group = grp.getgrgid(user.pw_gid)
  except (ImportError, KeyError):
    return None
  return user.pw_gid if group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name} else None


def _writers(st: os.stat_result) -> str | None:
  """Who besides the owner may write a directory with status `st` ('others', 'group'), or None."""
  if st.st_mode & stat.S_IWOTH: return "others"
  if st.st_mode & stat.S_IWGRP and st.st_gid != _private_gid(): return "its group"
  return None


_ELSEWHERE = "set PLUGRAD_CACHE_DIR to a directory of your own"


def directory_problem(path: Path) -> str | None:
  """Why `path` (an existing directory) is not safe for a cache other users must not control, and
  what fixes it; None when it is safe. The check follows ssh's StrictModes: the directory must be
  the user's, its parents the user's or root's, and none writable by anyone else unless sticky."""
  if not hasattr(os, "getuid"): return None  # Windows: ACLs, not modes, decide; the default profile folder is private
  uid = os.getuid()
  path = Path(os.path.realpath(path))  # check where the entries really live, not a symlink to it
  for p in (path, *path.parents):
    st = p.stat()
    if p == path:
      if not stat.S_ISDIR(st.st_mode): return f"it is not a directory; {_ELSEWHERE}"
      if st.st_uid != uid: return f"it is owned by uid {st.st_uid}, not by you (uid {uid}); {_ELSEWHERE}"
      if (who := _writers(st)):
        return f"{who} can write to it (mode {stat.S_IMODE(st.st_mode):o}); run `chmod go-w {path}` or {_ELSEWHERE}"
    else:
      if st.st_uid not in (uid, 0):
        return f"its parent {p} is owned by uid {st.st_uid}, not by you or root; {_ELSEWHERE}"
      if (who := _writers(st)) and not st.st_mode & stat.S_ISVTX:
        mode = stat.S_IMODE(st.st_mode)
        return f"{who} can write to its parent {p} (mode {mode:o}) and could replace it; {_ELSEWHERE}"
  return None


def _make_private_dir(path: Path) -> None:
  """Create `path` and its missing parents, each readable by this user only (umask can only narrow it)."""
  missing = []
  p = path
  while not p.exists() and p.parent != p:
    missing.append(p)
    p = p.parent
  for d in reversed(missing):
    try:
      d.mkdir(mode=0o700)
    except FileExistsError:
      pass  # another process made it; the check that follows decides whether it is trusted


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(path: Path, problem: str) -> None:
  with _warned_lock:
    if str(path) in _warned: return
    _warned.add(str(path))
  warnings.warn(f"plugrad: kernels are cached in memory only, not in {path}: {problem}", KernelCacheWarning,
                stacklevel=4)


# ---------------------------------------------------------------- the cache

class KernelCache:
  """Binaries of one compiler: under `path` when that directory is private, else in memory.

  :param path: the directory (created 0700 when missing), or None for a memory-only cache.
  """

  def __init__(self, path: Path | None) -> None:
    self.path = path
    self.memory: dict[str, bytes] = {}
    self.problem: str | None = None  # why the disk cache is not used (None: it is, or there is none)
    self._secret: bytes | None = None
    if path is None: return
    try:
      _make_private_dir(path)
      self.problem = directory_problem(path)
      if self.problem is None: self._secret = self._load_secret()
    except OSError as e:
      self.problem = f"it cannot be used ({e.strerror or e}); {_ELSEWHERE}"
    if self.problem is not None: _warn_once(path, self.problem)

  @property
  def on_disk(self) -> bool:
    """Whether entries are read from and written to disk (False: kept in memory)."""
    return self._secret is not None

  def _load_secret(self) -> bytes | None:
    """The signing key of this directory, made on first use (0600, written whole before it appears)."""
    key_path = self.path / KEY_FILE
    for _ in range(3):
      try:
        fd = os.open(key_path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
      except FileNotFoundError:
        self._create_secret(key_path)
        continue
      with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if hasattr(os, "getuid") and (st.st_uid != os.getuid() or st.st_mode & 0o077):
          self.problem = (f"its key file {key_path} is not private to you (mode {stat.S_IMODE(st.st_mode):o}, uid "
                          f"{st.st_uid}); delete it (a new key is made and entries are rebuilt)")
          return None
        secret = f.read(KEY_BYTES + 1)
      if len(secret) == KEY_BYTES: return secret
      key_path.unlink(missing_ok=True)  # a damaged key: entries signed with it become misses
    self.problem = f"its key file {key_path} could not be created; {_ELSEWHERE}"
    return None

  @staticmethod
  def _create_secret(key_path: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=key_path.parent, prefix=".key-")  # mkstemp files are 0600
    try:
      with os.fdopen(fd, "wb") as f: f.write(secrets.token_bytes(KEY_BYTES))
      try:
        os.link(tmp, key_path)  # atomic and never overwrites: when two processes race, both read the winner's
      except FileExistsError:
        pass
      except OSError:  # a filesystem without hard links
        os.replace(tmp, key_path)
    finally:
      try:
        os.unlink(tmp)
      except FileNotFoundError:
        pass

  # ---------------------------------------------------------------- entries

  def _entry(self, key: str) -> Path: return self.path / key[:2] / key

  def get(self, key: str, header: dict[str, str]) -> bytes | None:
    """The binary stored under `key` with exactly this `header`, or None. An entry that fails
    its MAC or names other versions is deleted, so the next compile replaces it."""
    if not self.on_disk: return self.memory.get(key)
    entry = self._entry(key)
    try:
      with open(entry, "rb") as f:
        # no kernel binary is this big: a larger file is junk, and reading it whole could exhaust memory
        data = f.read(MAX_ENTRY_BYTES + 1)
    except OSError:
      return None
    binary = self._open(data, key, header) if len(data) <= MAX_ENTRY_BYTES else None
    if binary is None:
      with contextlib.suppress(OSError): entry.unlink()
    return binary

  def _open(self, data: bytes, key: str, header: dict[str, str]) -> bytes | None:
    if len(data) < 44 or data[:8] != MAGIC: return None
    if not hmac.compare_digest(data[8:40], hmac.new(self._secret, data[40:], hashlib.sha256).digest()): return None
    (n,) = struct.unpack("<I", data[40:44])
    try:
      stored = json.loads(data[44:44 + n])
    except ValueError:
      return None
    return data[44 + n:] if stored == {**header, "key": key} else None

  def put(self, key: str, header: dict[str, str], binary: bytes) -> None:
    """Store `binary`; a read-only or full disk only costs a recompile next time."""
    if not self.on_disk:
      self.memory[key] = binary
      return
    head = json.dumps({**header, "key": key}, sort_keys=True).encode()
    body = struct.pack("<I", len(head)) + head + binary
    entry = self._entry(key)
    tmp = None
    try:
      entry.parent.mkdir(mode=0o700, exist_ok=True)
      fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-")
      # a private temp file renamed into place: readers never see a partial entry, even across processes
      with os.fdopen(fd, "wb") as f: f.write(MAGIC + hmac.new(self._secret, body, hashlib.sha256).digest() + body)
      os.replace(tmp, entry)
    except OSError:
      if tmp is not None:  # a full disk: leave no partial file behind
        with contextlib.suppress(OSError): os.unlink(tmp)

  def discard(self, key: str) -> None:
    """Forget the entry under `key` (for a binary the runtime could not load)."""
    self.memory.pop(key, None)
    if self.on_disk: self._entry(key).unlink(missing_ok=True)


__all__ = ["KernelCache", "KernelCacheWarning", "directory_problem", "package_version"]
