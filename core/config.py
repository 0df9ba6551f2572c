"""The one place that reads environment variables. Everything else receives a Config.

Also the switches code changes for a block (`Context(TRAINING=1)`), kept beside the settings they complement."""
from __future__ import annotations

import contextlib
import gc
import os
import warnings
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping, TypeVar


@dataclass(frozen=True)
class ConfigOption:
  """An environment variable a plugin declares (through `plugrad_config_options`)."""
  env: str
  default: str
  help: str


@dataclass(frozen=True)
class MemoryBound:
  """An amount of memory given as a share of a total (`share`, 0 to 1) or as a byte count (`nbytes`)."""
  share: float | None = None
  nbytes: int | None = None

  def bytes_of(self, total: int) -> int:
    """The bound in bytes, for a memory of `total` bytes."""
    return self.nbytes if self.nbytes is not None else int(total * (self.share or 0.0))

  @staticmethod
  def parse(name: str, raw: str, default: MemoryBound) -> MemoryBound:
    """'5%' or '0.05' (a share), '512M', '2G', '1048576' or '0' (bytes; K/M/G/T are powers of 1024); '' is `default`."""
    text = raw.strip().upper().removesuffix("IB").removesuffix("B")
    if text == "": return default
    try:
      if text.endswith("%"): share = float(text[:-1]) / 100
      elif "." in text: share = float(text)
      else:
        scale = 1024 ** ("KMGT".index(text[-1]) + 1) if text[-1] in "KMGT" else 1
        nbytes = int(text[:-1] if scale > 1 else text) * scale
        if nbytes < 0: raise ValueError
        return MemoryBound(nbytes=nbytes)
      if not 0.0 <= share <= 1.0: raise ValueError
      return MemoryBound(share=share)
    except ValueError:
      raise ValueError(f"environment variable {name}={raw!r} must be a share of memory (0.05 or 5%) or a size in "
                       f"bytes (512M, 2G; 0 turns it off)") from None


#: Freed device blocks an allocator keeps for reuse: 2% of the device's memory (of host memory for host devices)
DEFAULT_ALLOC_CACHE = MemoryBound(share=0.02)

#: The generation-0 threshold of Python's cyclic garbage collector that plugrad raises it to (PLUGRAD_GC_THRESHOLD).
#: A lazy graph keeps its nodes alive until it is realized: an eager training step of a small transformer (bench_train's
#: TinyLM) holds about 8000 collector-tracked objects at its peak. At Python's default of 700 allocations the collector
#: scanned them 6-7 times a step, promoting them to the oldest generation, which it then scanned whole every ~18 steps
#: (16-18 ms each): that step took 12.2 ms on average, 10.2-10.7 ms with 10000 or 20000. Its garbage is freed by
#: reference counting (1318 collections found 317 objects), so a higher threshold holds no memory to speak of.
DEFAULT_GC_THRESHOLD = 20000


@dataclass(frozen=True)
class Config:
  """Settings for one plugrad session.

  :param device: the device asked for with DEVICE (or DEV, tinygrad 0.14's name; None: pick the best available).
  :param debug: the DEBUG environment variable's level (1: kernels per realize, 2: a line per kernel, 4: kernel
    source): the start value of `DEBUG`, the ContextVar the built-in DEBUG output follows.
  :param cache_dir: where compiled kernels are cached (PLUGRAD_CACHE_DIR, else the user's cache).
  :param disable_autoload: PLUGRAD_DISABLE_PLUGIN_AUTOLOAD=1: load only plugins named in `plugins`.
  :param plugins: PLUGRAD_PLUGINS, comma-separated entry-point names to load when autoload is off.
  :param check_spec: PLUGRAD_CHECK_SPEC=1: check every graph against the IR spec of its stage
    (slow; the test suite turns it on).
  :param alloc_cache: PLUGRAD_ALLOC_CACHE, the most memory freed buffers stay cached for reuse per
    device: a share of the device's memory ("2%", the default, or "0.02") or bytes ("512M", "0": none).
  :param beam: PLUGRAD_BEAM=N: lower each kernel with the fastest plan a beam search of width N finds
    on the device (plugrad.codegen.opt.search), cached on disk; 0 (the default): the heuristic's plan.
  :param fuse_optim: FUSE_OPTIM=1: optimizers step all their parameters as one flat vector unless told
    otherwise (their `fused` argument; tinygrad's variable).
  :param gc_threshold: PLUGRAD_GC_THRESHOLD, the generation-0 threshold the process-wide registry raises Python's
    garbage collector to when it starts (never lowering one set higher); 0 leaves the collector as it is.
  :param env: the raw environment snapshot, for options plugins declare; read with `option()`.
  """
  device: str | None = None
  debug: int = 0
  cache_dir: Path = field(default_factory=lambda: _default_cache_dir({}))
  disable_autoload: bool = False
  plugins: tuple[str, ...] = ()
  check_spec: bool = False
  alloc_cache: MemoryBound = DEFAULT_ALLOC_CACHE
  beam: int = 0
  fuse_optim: bool = False
  gc_threshold: int = DEFAULT_GC_THRESHOLD
  env: Mapping[str, str] = field(default_factory=dict)

  @staticmethod
  def from_env(environ: Mapping[str, str] | None = None) -> Config:
    """Read the configuration from `environ` (os.environ by default)."""
    env = dict(os.environ if environ is None else environ)
    return Config(
      device=env.get("DEVICE") or env.get("DEV") or None,  # DEV: tinygrad 0.14's name for it
      debug=_int(env, "DEBUG", 0),
      cache_dir=_default_cache_dir(env),
      disable_autoload=env.get("PLUGRAD_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0"),
      plugins=tuple(p.strip() for p in env.get("PLUGRAD_PLUGINS", "").split(",") if p.strip()),
      check_spec=env.get("PLUGRAD_CHECK_SPEC", "") not in ("", "0"),
      alloc_cache=MemoryBound.parse("PLUGRAD_ALLOC_CACHE", env.get("PLUGRAD_ALLOC_CACHE", ""), DEFAULT_ALLOC_CACHE),
      beam=_int(env, "PLUGRAD_BEAM", 0),
      fuse_optim=env.get("FUSE_OPTIM", "") not in ("", "0"),
      gc_threshold=_int(env, "PLUGRAD_GC_THRESHOLD", DEFAULT_GC_THRESHOLD),
      env=env,
    )

  def option(self, opt: ConfigOption) -> str:
    """The value of a plugin-declared option."""
    return self.env.get(opt.env, opt.default)

  def replace(self, **kwargs) -> Config: return replace(self, **kwargs)

  def raise_gc_threshold(self) -> None:
    """Raise the garbage collector's generation-0 threshold to `gc_threshold` (see DEFAULT_GC_THRESHOLD); a
    threshold already at least that high or 0 (automatic collection off), and `gc_threshold` 0, leave it as it is."""
    gen0, *older = gc.get_threshold()
    if 0 < gen0 < self.gc_threshold: gc.set_threshold(self.gc_threshold, *older)


T = TypeVar("T")


def getenv(key: str, default: T = 0) -> T:  # type: ignore[assignment]
  """A program's own setting from the environment (`BS=128 python train.py`, tinygrad's helper): the variable
  `key` converted to the type of `default` (a bool from an integer: "0" is False), or `default` when it is unset
  or empty."""
  raw = os.environ.get(key, "")
  if raw == "": return default
  try:
    if isinstance(default, bool): return int(raw) != 0  # type: ignore[return-value]
    return type(default)(raw)  # type: ignore[call-arg]
  except ValueError:
    raise ValueError(f"environment variable {key}={raw!r} must be a {type(default).__name__}") from None


def _int(env: Mapping[str, str], name: str, default: int) -> int:
  raw = env.get(name, "")
  if raw == "": return default
  try:
    return int(raw)
  except ValueError:
    raise ValueError(f"environment variable {name}={raw!r} must be an integer") from None


def _default_cache_dir(env: Mapping[str, str]) -> Path:
  if env.get("PLUGRAD_CACHE_DIR"): return Path(env["PLUGRAD_CACHE_DIR"])
  base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", str(Path.home()))) / ".cache")
  return Path(base) / "plugrad"


class ContextVar:
  """A switch that code flips for a block with `Context(NAME=value)` and reads as `.value`.

  Config holds what the environment fixed for the session; a ContextVar holds what the program
  changes while it runs (training mode), so it is the one place that fact lives."""
  _by_key: dict[str, ContextVar] = {}
  value: int

  def __init__(self, key: str, default: int):
    if key in ContextVar._by_key: raise ValueError(f"a ContextVar named {key} already exists")
    self._watchers: list[weakref.WeakMethod] = []
    self.key, self.value = key, default
    ContextVar._by_key[key] = self

  def __setattr__(self, name: str, value: object) -> None:
    # `value` stays a plain attribute (hot paths read it on every realize); only a change pays for the watchers
    object.__setattr__(self, name, value)
    if name == "value":
      for ref in self._watchers:
        if (method := ref()) is not None: method()

  def watch(self, method: Callable[[], None]) -> None:
    """Call the bound `method` after every change of the value; it is held weakly (its object may go away)."""
    self._watchers = [r for r in self._watchers if r() is not None] + [weakref.WeakMethod(method)]  # type: ignore[arg-type]

  def __bool__(self) -> bool: return bool(self.value)
  # compared as its value, as tinygrad's (`if DEBUG >= 2:`)
  def __eq__(self, other: object) -> bool: return self.value == other
  def __ge__(self, other: int) -> bool: return self.value >= other
  def __gt__(self, other: int) -> bool: return self.value > other
  def __le__(self, other: int) -> bool: return self.value <= other
  def __lt__(self, other: int) -> bool: return self.value < other
  __hash__ = object.__hash__  # one object per name: hashed as itself, though compared as its value
  def __repr__(self) -> str: return f"ContextVar({self.key}={self.value!r})"


#: tinygrad's tuning and tooling variables a program may set in a Context, with what plugrad does instead
TINYGRAD_KNOBS = {
  "BEAM": "set PLUGRAD_BEAM=N in the environment for a beam search of each kernel's plan",
  "NOOPT": "the heuristic's plans always apply", "JIT": "TinyJit always captures on the second call",
  "WINO": "convolutions are not Winograd-transformed", "IMAGE": "image layouts are the device plugin's choice",
  "FUSE_OPTIM": "optimizers take fused=True", "SPLIT_REDUCEOP": "large reductions are split by size",
  "TRANSCENDENTAL": "transcendentals are built from the device's ops", "CACHELEVEL": "PLUGRAD_CACHE_DIR sets the cache",
  "VIZ": "there is no graph viewer", "PROFILE": "DEBUG=2 times each kernel", "DEV": "DEVICE (or DEV) in the environment",
}
_warned_knobs: set[str] = set()


class Context(contextlib.ContextDecorator):
  """Set ContextVars for the length of a `with` block (or a decorated function), as tinygrad's
  `Context`: `with Context(TRAINING=1): ...`. The previous values come back on exit."""

  def __init__(self, **kwargs: int):
    for knob in sorted(set(kwargs) & set(TINYGRAD_KNOBS) - set(ContextVar._by_key)):
      # a tinygrad program tunes its kernels so (`with Context(BEAM=2):`); it runs here as it is
      if knob not in _warned_knobs:
        _warned_knobs.add(knob)
        warnings.warn(f"Context({knob}=...) is tinygrad's and has no effect in plugrad: {TINYGRAD_KNOBS[knob]}",
                      stacklevel=2)
      del kwargs[knob]
    unknown = sorted(set(kwargs) - set(ContextVar._by_key))
    if unknown: raise KeyError(f"unknown context variable(s) {unknown}; known: {sorted(ContextVar._by_key)}")
    self.kwargs = kwargs
    self._saved: list[dict[str, int]] = []  # a stack, so one Context object may be entered again while active

  def __enter__(self) -> Context:
    self._saved.append({k: ContextVar._by_key[k].value for k in self.kwargs})
    for k, v in self.kwargs.items(): ContextVar._by_key[k].value = v
    return self

  def __exit__(self, *exc: object) -> None:
    for k, v in self._saved.pop().items(): ContextVar._by_key[k].value = v


# 1 inside `with Tensor.train():` or `with Context(TRAINING=1):`: dropout is active, BatchNorm uses batch statistics
TRAINING = ContextVar("TRAINING", 0)
# 0 inside `with Context(HFUSE=0):`: no horizontal fusion, each sibling kernel of a realize runs on its own (for
# comparing, as bench_cpu does; the schedule cache keys on it)
HFUSE = ContextVar("HFUSE", 1)
# 0 inside `with Context(GRAPH=0):`: TinyJit replays its captures from Python even where the device's graph role
# could run them natively (for comparing, as bench_engine does)
GRAPH = ContextVar("GRAPH", 1)
# the DEBUG level the built-in DEBUG output follows: the environment's to start with, changed for a block with
# `with Context(DEBUG=2):` (or for good with `DEBUG.value = 2`), as in tinygrad
DEBUG = ContextVar("DEBUG", _int(os.environ, "DEBUG", 0))  # read as Config.from_env reads it
