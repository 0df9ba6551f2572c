"""The helpers of tinygrad that programs import (`from tinygrad.helpers import getenv, colored, trange, Timing`), under
their names and with their behaviour, so such a program runs with `plugrad` in place of `tinygrad`.

Settings and counters live where plugrad keeps them (`getenv`, `Context`, `DEBUG` in `plugrad.config`,
`GlobalCounters` in the engine) and are re-exported here; the rest are small utilities written for this module.
"""
from __future__ import annotations

import contextlib
import cProfile
import hashlib
import os
import pstats
import re
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, Generic, Iterable, Iterator, Sequence, TypeVar

from plugrad.config import DEBUG, Context, ContextVar, getenv
from plugrad.engine.counters import GlobalCounters
from plugrad.registry import get_registry
from plugrad.shape import prod  # the product of sizes (1 when empty; symbolic sizes too), as tinygrad's helper

T = TypeVar("T")

_COLORS = ("black", "red", "green", "yellow", "blue", "magenta", "cyan", "white")


def dedup(xs: Iterable[T]) -> list[T]:
  """The items of `xs` without repeats, in their first order."""
  return list(dict.fromkeys(xs))


def argfix(*x: Any) -> tuple:
  """Arguments given either spread out (f(1, 2)) or as one tuple or list (f((1, 2))), as a tuple."""
  if x and isinstance(x[0], (tuple, list)):
    if len(x) != 1: raise ValueError(f"pass the values spread out or as one sequence, not both: {x}")
    return tuple(x[0])
  return x


def flatten(xss: Iterable[Iterable[T]]) -> list[T]:
  """One list of the items of each iterable, in order."""
  return [x for xs in xss for x in xs]


def fully_flatten(x: Any) -> list:
  """The scalars of a nested sequence (or array), in order."""
  if isinstance(x, (str, bytes)) or not hasattr(x, "__len__") or not hasattr(x, "__getitem__"): return [x]
  if getattr(x, "shape", None) == (): return [x[()]]
  return [y for item in x for y in fully_flatten(item)]


def all_same(items: Sequence) -> bool: return all(x == items[0] for x in items)
def all_int(items: Sequence) -> bool: return all(isinstance(x, int) for x in items)
def make_tuple(x: int | Sequence[int], n: int) -> tuple[int, ...]: return (x,) * n if isinstance(x, int) else tuple(x)
def round_up(n: int, multiple: int) -> int: return (n + multiple - 1) // multiple * multiple
def round_down(n: int, multiple: int) -> int: return n // multiple * multiple
def ceildiv(n: int, d: int) -> int: return -(-n // d)
def next_power2(n: int) -> int: return 1 if n <= 1 else 1 << (n - 1).bit_length()


def partition(xs: Iterable[T], pred: Callable[[T], bool]) -> tuple[list[T], list[T]]:
  """(the items for which `pred` holds, the others), each in order."""
  yes: list[T] = []
  no: list[T] = []
  for x in xs: (yes if pred(x) else no).append(x)
  return yes, no


def unwrap(x: T | None) -> T:
  """`x`, which must not be None."""
  if x is None: raise ValueError("unwrap: got None")
  return x


def colored(text: Any, color: str | None, background: bool = False) -> str:
  """`text` in an ANSI terminal colour (a lower-case name; upper case for the bright variant), or as it is for None."""
  if color is None: return str(text)
  if color.lower() not in _COLORS: raise ValueError(f"unknown colour {color!r}: one of {', '.join(_COLORS)}")
  code = 30 + _COLORS.index(color.lower()) + (10 if background else 0) + (60 if color.isupper() else 0)
  return f"\x1b[{code}m{text}\x1b[0m"


def ansistrip(text: str) -> str: return re.sub(r"\x1b\[(K|.*?m)", "", text)
def ansilen(text: str) -> int: return len(ansistrip(text))


def time_to_str(seconds: float, width: int = 8) -> str:
  """A duration in s, ms or us, whichever shows it best, right-aligned in `width`."""
  for scale, unit in ((1, "s "), (1e3, "ms")):
    if seconds > 10 / scale: return f"{seconds * scale:{width}.2f}{unit}"
  return f"{seconds * 1e6:{width}.2f}us"


class Timing(contextlib.ContextDecorator):
  """Print how long a block (or a decorated function) took: `with Timing("step "):` prints "step   1.23 ms"
  (`on_exit(nanoseconds)` may add to the line; `enabled=False` prints nothing)."""

  def __init__(self, prefix: str = "", on_exit: Callable[[int], str] | None = None, enabled: bool = True):
    self.prefix, self.on_exit, self.enabled = prefix, on_exit, enabled

  def __enter__(self) -> Timing:
    self.st = time.perf_counter_ns()
    return self

  def __exit__(self, *exc: object) -> None:
    self.et = time.perf_counter_ns() - self.st
    if self.enabled: print(f"{self.prefix}{self.et * 1e-6:6.2f} ms" + (self.on_exit(self.et) if self.on_exit else ""))


class Profiling(contextlib.ContextDecorator):
  """Profile a block with cProfile and print its most expensive functions (`frac` of them, sorted by `sort`);
  `fn` also saves the stats to that file."""

  def __init__(self, enabled: bool = True, sort: str = "cumtime", frac: float = 0.2, fn: str | None = None):
    self.enabled, self.sort, self.frac, self.fn = enabled, sort, frac, fn

  def __enter__(self) -> Profiling:
    self.profile = cProfile.Profile()
    if self.enabled: self.profile.enable()
    return self

  def __exit__(self, *exc: object) -> None:
    if not self.enabled: return
    self.profile.disable()
    if self.fn: self.profile.dump_stats(self.fn)
    stats = pstats.Stats(self.profile).strip_dirs().sort_stats(self.sort)
    stats.print_stats(self.frac)


class tqdm(Generic[T]):  # noqa: N801 (the name programs import)
  """A progress bar on stderr for an iterable (tinygrad's own, as the `tqdm` package's common part): `total`
  (default: len(iterable)), `desc`, `disable`, `unit`; `set_description(text)`, `update(n)`, `close()`."""

  def __init__(self, iterable: Iterable[T] | None = None, desc: str = "", disable: bool = False, unit: str = "it",
               total: int | None = None):
    self.iterable, self.desc, self.disable, self.unit = iterable, desc, disable, unit
    self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)  # type: ignore[arg-type]
    self.n, self.st, self._shown, self._drawn = 0, time.perf_counter(), 0.0, (-1, "")

  def __iter__(self) -> Iterator[T]:
    if self.iterable is None: raise TypeError("tqdm was made without an iterable to iterate")
    try:
      for x in self.iterable:
        yield x
        self.update(1)
    finally:
      self.close()

  def __enter__(self) -> tqdm[T]: return self
  def __exit__(self, *exc: object) -> None: self.close()

  def set_description(self, desc: str = "") -> None:
    self.desc = desc
    self._show()

  def update(self, n: int = 1) -> None:
    self.n += n
    self._show(force=self.total is not None and self.n >= self.total)

  def close(self) -> None:
    if self.disable or not self._shown: return
    if self._drawn != (self.n, self.desc): self._show(force=True)  # the last state, if throttling skipped it
    print(file=sys.stderr, flush=True)
    self.disable = True  # closed: the line is done

  def _show(self, force: bool = False) -> None:
    now = time.perf_counter()
    if self.disable or (not force and now - self._shown < 0.1): return  # at most ten redraws a second
    self._shown, self._drawn, elapsed = now, (self.n, self.desc), now - self.st
    rate = self.n / elapsed if elapsed > 0 else 0.0
    count = f"{self.n}/{self.total}" if self.total is not None else f"{self.n}"
    pct = f"{100 * self.n / self.total:3.0f}% " if self.total else ""
    left = f"<{(self.total - self.n) / rate:.1f}s" if self.total is not None and rate > 0 else ""
    prefix = f"{self.desc}: " if self.desc else ""
    print(f"\r{prefix}{pct}{count} [{elapsed:.1f}s{left}, {rate:.2f}{self.unit}/s]\x1b[K", end="", file=sys.stderr, flush=True)


def trange(n: int, **kwargs: Any) -> tqdm[int]:
  """`tqdm(range(n))`."""
  return tqdm(range(n), total=n, **kwargs)


def fetch(url: str, name: str | Path | None = None, subdir: str | None = None, allow_caching: bool = True) -> Path:
  """The file at `url`, downloaded once into plugrad's cache folder (PLUGRAD_CACHE_DIR/downloads; `name` the file name
  there, or a path of its own; default: a hash of the URL) and its path; a file:// URL is its own path."""
  if url.startswith("file:"):
    local = Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path))
    if not local.is_file(): raise OSError(f"could not read {url}: no such file")
    return local
  if isinstance(name, Path) or (name is not None and "/" in str(name)): path = Path(name)
  else:
    folder = get_registry().config.cache_dir / "downloads" / (subdir or "")
    path = folder / (str(name) if name else hashlib.sha256(url.encode()).hexdigest())
  if path.is_file() and allow_caching: return path
  path.parent.mkdir(parents=True, exist_ok=True)
  try:
    with urllib.request.urlopen(url) as response: data = response.read()
  except OSError as e:
    raise OSError(f"could not download {url}: {e}") from e
  # a temp file of this process and thread renamed into place: whole or not at all, and two processes downloading
  # the same file at once never write into one shared temp file (one name for all let a second writer truncate it
  # under the first one's rename)
  tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.part")
  try:
    tmp.write_bytes(data)
    tmp.replace(path)
  except BaseException:
    tmp.unlink(missing_ok=True)
    raise
  return path


__all__ = ["DEBUG", "Context", "ContextVar", "getenv", "GlobalCounters", "prod", "dedup", "argfix", "flatten",
           "fully_flatten", "all_same", "all_int", "make_tuple", "round_up", "round_down", "ceildiv", "next_power2",
           "partition", "unwrap", "colored", "ansistrip", "ansilen", "time_to_str", "Timing", "Profiling", "tqdm",
           "trange", "fetch"]
