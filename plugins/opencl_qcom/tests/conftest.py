"""Shared fixtures (the repository runs pytest with --import-mode=importlib, so tests share code
through fixtures, not imports):

- `needs_cl` / `needs_images`: skip, saying why, when no OpenCL device (with images) is here;
- `cl_registry` / `qcom_registry`: the process-wide registry replaced by a fresh one for CL, or
  for QCOM with the PLUGRAD_QCOM_ANY switch on, restored afterwards.
"""
from __future__ import annotations

import os

import pytest

from plugrad.config import Config
from plugrad.registry import Registry, get_registry, set_registry

from plugrad_opencl_qcom.cldevice import CL, QCOM, probe


@pytest.fixture(scope="session")
def needs_cl() -> None:
  if (reason := probe(CL, False)) is not None: pytest.skip(f"no OpenCL device: {reason}")


@pytest.fixture(scope="session")
def needs_images() -> None:
  if (reason := probe(QCOM, True)) is not None: pytest.skip(f"no OpenCL device with images: {reason}")


def _registry(**env: str) -> Registry:
  return Registry(Config.from_env({**os.environ, **env}))


@pytest.fixture
def qcom_registry(needs_images):
  prev = set_registry(_registry(PLUGRAD_QCOM_ANY="1"))
  try:
    yield get_registry()
  finally:
    set_registry(prev)


@pytest.fixture
def cl_registry(needs_cl):
  prev = set_registry(_registry())
  try:
    yield get_registry()
  finally:
    set_registry(prev)
