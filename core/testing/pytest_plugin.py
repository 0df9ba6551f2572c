"""pytest plugin: `--plugrad-device NAME` and a `device` fixture parametrised over devices.

Load it with `-p plugrad.testing.pytest_plugin` or `pytest_plugins = ["plugrad.testing.pytest_plugin"]`.
Without the option, tests taking `device` run once per available device.
"""
from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
  group = parser.getgroup("plugrad")
  group.addoption("--plugrad-device", action="append", default=[], metavar="NAME",
                  help="run device tests on NAME only (repeatable); default: every available device")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
  if "device" not in metafunc.fixturenames: return
  chosen = metafunc.config.getoption("plugrad_device")
  if not chosen:
    from plugrad.testing import available_devices
    chosen = available_devices()
  metafunc.parametrize("device", chosen)
