"""Config settings read from the environment: the garbage collector's threshold (PLUGRAD_GC_THRESHOLD)."""
import gc
import os
import subprocess
import sys

import pytest

from plugrad.config import DEFAULT_GC_THRESHOLD, TRAINING, Config, Context


@pytest.fixture
def gc_threshold():
  """Python's thresholds as this test found them, put back after it."""
  saved = gc.get_threshold()
  yield saved
  gc.set_threshold(*saved)


@pytest.mark.parametrize("raw, want", [("", DEFAULT_GC_THRESHOLD), ("0", 0), ("50000", 50000)])
def test_gc_threshold_from_env(raw, want):
  assert Config.from_env({"PLUGRAD_GC_THRESHOLD": raw}).gc_threshold == want


def test_gc_threshold_must_be_an_integer():
  with pytest.raises(ValueError, match="PLUGRAD_GC_THRESHOLD='many' must be an integer"):
    Config.from_env({"PLUGRAD_GC_THRESHOLD": "many"})


def test_raise_gc_threshold_raises_generation_0_only(gc_threshold):
  gc.set_threshold(700, 11, 12)
  Config(gc_threshold=20000).raise_gc_threshold()
  assert gc.get_threshold() == (20000, 11, 12)


@pytest.mark.parametrize("before", [(100000, 10, 10), (0, 10, 10)])  # set higher, or automatic collection off
def test_raise_gc_threshold_never_lowers_nor_turns_collection_on(gc_threshold, before):
  gc.set_threshold(*before)
  Config(gc_threshold=20000).raise_gc_threshold()
  assert gc.get_threshold() == before


def test_gc_threshold_0_leaves_the_collector_alone(gc_threshold):
  gc.set_threshold(700, 10, 10)
  Config(gc_threshold=0).raise_gc_threshold()
  assert gc.get_threshold() == (700, 10, 10)


def test_the_process_registry_raises_the_threshold_when_it_starts():
  code = ("import gc; from plugrad import Tensor; before = gc.get_threshold()[0]; Tensor([1.0]).numpy(); "
          "print(before, gc.get_threshold()[0])")
  out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PLUGRAD_GC_THRESHOLD": "12345"},
                       capture_output=True, text=True, check=True).stdout.split()
  # Python's own default (700 up to 3.12) before plugrad starts, the configured one after
  assert int(out[0]) < 12345 and out[1] == "12345"


def test_tinygrads_dev_and_tuning_knobs_run_as_they_are(recwarn):
  # DEV=CUDA (tinygrad 0.14) was ignored, and `with Context(BEAM=2):` raised KeyError
  assert Config.from_env({"DEV": "PYTHON"}).device == "PYTHON"
  assert Config.from_env({"DEV": "PYTHON", "DEVICE": "CPU"}).device == "CPU"
  with Context(BEAM=2, TRAINING=1):
    assert TRAINING.value == 1
  assert any("BEAM" in str(w.message) and "PLUGRAD_BEAM" in str(w.message) for w in recwarn.list)
  with pytest.raises(KeyError, match="NOPE"): Context(NOPE=1)
