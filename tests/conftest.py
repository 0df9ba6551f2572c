"""Fixtures the core tests share."""
import pytest

#: The devices the Tensor API tests run on: the reference interpreter and the default device.
API_DEVICES = ["PYTHON", "CPU"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
  """Tests taking `dev` run on each of API_DEVICES, or on the devices `--plugrad-device` names (a GPU
  machine runs the API tests on its GPU with `--plugrad-device CUDA`)."""
  # a test that lists its own (device, case) pairs keeps them
  own = any("dev" in str(m.args[0]).replace(" ", "").split(",") for m in metafunc.definition.iter_markers("parametrize"))
  if "dev" in metafunc.fixturenames and not own:
    metafunc.parametrize("dev", metafunc.config.getoption("plugrad_device") or API_DEVICES)
