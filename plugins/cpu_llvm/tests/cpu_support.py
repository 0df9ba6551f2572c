"""Helpers shared by plugrad-cpu-llvm's tests (imported by name: conftest puts this folder on sys.path)."""
from __future__ import annotations

import os
import time
from typing import Callable

import pytest


def check_in_forked_child(check: Callable[[], bool], timeout: float = 120.0) -> None:
  """Fork, run `check` in the child and fail unless it returned True there; a child that hangs is killed and fails.
  The child leaves without running the parent's cleanup."""
  read, write = os.pipe()
  pid = os.fork()
  if pid == 0:
    try:
      os.write(write, b"ok" if check() else b"wrong")
    finally:
      os._exit(0)
  os.close(write)
  deadline = time.monotonic() + timeout
  while os.waitpid(pid, os.WNOHANG) == (0, 0):
    if time.monotonic() > deadline:
      os.kill(pid, 9)
      pytest.fail("the forked child hung")
    time.sleep(0.05)
  try:
    assert os.read(read, 16) == b"ok", "the check failed in the forked child"
  finally:
    os.close(read)
