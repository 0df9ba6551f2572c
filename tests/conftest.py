"""Fixtures the core tests share."""
import pytest

#: The devices the Tensor API tests run on: the reference interpreter and the default device.
API_DEVICES = ["PYTHON", "CPU"]


@pytest.fixture(params=API_DEVICES)
def dev(request) -> str:
  """Each of API_DEVICES in turn."""
  return request.param
