"""pytest plugin for plugrad and device-plugin test suites.

Load it with `-p plugrad.testing.pytest_plugin` or `pytest_plugins = ["plugrad.testing.pytest_plugin"]`.

- `--plugrad-device NAME`: tests taking the `device` fixture run on NAME only (repeatable);
  without it they run once per available device.
- `--fuzz-long`: the random-graph fuzzer (test_graphs.py) runs its long, randomly seeded profile.
- `--plugrad-shadow-device NAME`: every kernel the tests compile is also lowered, rendered and
  compiled for NAME (which needs its plugin and compiler, not its hardware); a test whose kernels
  fail to render or compile for NAME fails. This is how CUDA and Metal kernels are checked on
  machines without those GPUs.
"""
from __future__ import annotations

import pytest

from plugrad.hookspecs import CONTRACT_VERSION, hookimpl


def pytest_addoption(parser: pytest.Parser) -> None:
  group = parser.getgroup("plugrad")
  group.addoption("--plugrad-device", action="append", default=[], metavar="NAME",
                  help="run device tests on NAME only (repeatable); default: every available device")
  group.addoption("--plugrad-shadow-device", default=None, metavar="NAME",
                  help="also render and compile every kernel for NAME (no hardware needed)")
  group.addoption("--fuzz-long", action="store_true", default=False,
                  help="the random-graph fuzzer's nightly profile: 3000 graphs per device from a random seed, "
                       "bigger and deeper than the normal run's 60")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
  if "device" not in metafunc.fixturenames: return
  chosen = metafunc.config.getoption("plugrad_device")
  if not chosen:
    from plugrad.testing import available_devices
    chosen = available_devices()
  metafunc.parametrize("device", chosen)


@pytest.hookimpl(hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
  """A test that needs a dtype or op its device declares unsupported skips, saying which."""
  outcome = yield
  from plugrad.device import UnsupportedError
  exc = outcome.excinfo[1] if outcome.excinfo else None
  if isinstance(exc, UnsupportedError): outcome.force_exception(pytest.skip.Exception(str(exc), _use_item_location=True))


class ShadowCompiler:
  """Renders and compiles, for another device, every kernel compiled in this process."""
  PLUGRAD_CONTRACT = CONTRACT_VERSION

  def __init__(self, target: str):
    from plugrad.registry import get_registry
    self.target = target
    self.device = get_registry().render_device(target)
    self.seen: set = set()
    self.failures: list[str] = []
    self.compiled = self.unsupported = 0

  @hookimpl
  def plugrad_kernel_compiled(self, device, name, source, seconds, cached, ast) -> None:
    from plugrad.engine import render_for
    if ast in self.seen: return
    self.seen.add(ast)
    src = "<not rendered>"
    from plugrad.device import UnsupportedError
    try:
      src = render_for(self.device, ast)[1]
      self.device.compiler.compile(src)
      self.compiled += 1
    except UnsupportedError:
      self.unsupported += 1
    except Exception as e:
      self.failures.append(f"kernel {name} for {self.target}: {type(e).__name__}: {e}\n{src}")


@pytest.fixture(autouse=True)
def _plugrad_shadow(request: pytest.FixtureRequest):
  shadow: ShadowCompiler | None = getattr(request.config, "_plugrad_shadow", None)
  if shadow is None:
    yield
    return
  before = len(shadow.failures)
  yield
  new = shadow.failures[before:]
  if new: pytest.fail(f"{len(new)} kernel(s) failed for shadow device {shadow.target}:\n" + "\n".join(new), pytrace=False)


def pytest_configure(config: pytest.Config) -> None:
  from plugrad.registry import get_registry
  reg = get_registry()
  reg.config = reg.config.replace(check_spec=True)  # every graph the tests make is checked against its stage's spec
  target = config.getoption("plugrad_shadow_device", default=None)
  if target:
    from plugrad.registry import get_registry
    shadow = ShadowCompiler(target)
    get_registry().pm.register(shadow, name="plugrad-shadow")
    config._plugrad_shadow = shadow  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
  shadow = getattr(config, "_plugrad_shadow", None)
  if shadow is not None:
    terminalreporter.write_line(f"plugrad shadow device {shadow.target}: {shadow.compiled} kernels rendered and compiled, "
                                f"{shadow.unsupported} skipped (dtype or op the device lacks), {len(shadow.failures)} failed")
