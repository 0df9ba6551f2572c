"""The one place that reads environment variables. Everything else receives a Config."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping


@dataclass(frozen=True)
class ConfigOption:
  """An environment variable a plugin declares (through `plugrad_config_options`)."""
  env: str
  default: str
  help: str


@dataclass(frozen=True)
class Config:
  """Settings for one plugrad session.

  :param device: the device asked for with DEVICE (None: pick the best available).
  :param debug: DEBUG level (1: kernels per realize, 2: a line per kernel, 4: kernel source).
  :param cache_dir: where compiled kernels are cached (PLUGRAD_CACHE_DIR, else the user's cache).
  :param disable_autoload: PLUGRAD_DISABLE_PLUGIN_AUTOLOAD=1: load only plugins named in `plugins`.
  :param plugins: PLUGRAD_PLUGINS, comma-separated entry-point names to load when autoload is off.
  :param check_spec: PLUGRAD_CHECK_SPEC=1: check every graph against the IR spec of its stage
    (slow; the test suite turns it on).
  :param env: the raw environment snapshot, for options plugins declare; read with `option()`.
  """
  device: str | None = None
  debug: int = 0
  cache_dir: Path = field(default_factory=lambda: _default_cache_dir({}))
  disable_autoload: bool = False
  plugins: tuple[str, ...] = ()
  check_spec: bool = False
  env: Mapping[str, str] = field(default_factory=dict)

  @staticmethod
  def from_env(environ: Mapping[str, str] | None = None) -> Config:
    """Read the configuration from `environ` (os.environ by default)."""
    env = dict(os.environ if environ is None else environ)
    return Config(
      device=env.get("DEVICE") or None,
      debug=_int(env, "DEBUG", 0),
      cache_dir=_default_cache_dir(env),
      disable_autoload=env.get("PLUGRAD_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0"),
      plugins=tuple(p.strip() for p in env.get("PLUGRAD_PLUGINS", "").split(",") if p.strip()),
      check_spec=env.get("PLUGRAD_CHECK_SPEC", "") not in ("", "0"),
      env=env,
    )

  def option(self, opt: ConfigOption) -> str:
    """The value of a plugin-declared option."""
    return self.env.get(opt.env, opt.default)

  def replace(self, **kwargs) -> Config: return replace(self, **kwargs)


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
