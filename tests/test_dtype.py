"""DType limits: numpy's for every integer type, the exact-integer range of every float type, a vector's lanes'."""
import numpy as np
import pytest

from plugrad.dtype import dtypes

INTS = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64]


@pytest.mark.parametrize("dt", INTS, ids=lambda d: d.name)
def test_integer_limits_are_numpys(dt):
  info = np.iinfo(dt.np)
  assert (dt.min, dt.max, dt.exact_int_max) == (info.min, info.max, info.max)
  assert (dt.vec(4).min, dt.vec(4).max, dt.vec(4).exact_int_max) == (info.min, info.max, info.max)


@pytest.mark.parametrize("dt, bits", [(dtypes.float16, 11), (dtypes.bfloat16, 8), (dtypes.float32, 24), (dtypes.float64, 53)],
                         ids=lambda v: getattr(v, "name", str(v)))
def test_float_limits(dt, bits):
  assert (dt.min, dt.max, dt.exact_int_max) == (-np.inf, np.inf, 2 ** bits)
  assert dt.vec(8).exact_int_max == 2 ** bits  # a lane's, not the whole vector's


def test_bool_limits():
  assert (dtypes.bool.min, dtypes.bool.max, dtypes.bool.exact_int_max) == (False, True, 1)


def test_tinygrads_dtype_predicates_groups_and_formats():
  # tinygrad programs ask dtypes.is_float(p.dtype), iterate dtypes.floats, pack with DType.fmt: AttributeError before
  assert dtypes.is_float(dtypes.half) and dtypes.is_int(dtypes.uint8) and not dtypes.is_unsigned(dtypes.int8)
  assert dtypes.is_bool(dtypes.bool) and not dtypes.is_float(dtypes.int32)
  assert dtypes.finfo(dtypes.float32) == (8, 23) and dtypes.finfo(dtypes.bfloat16) == (8, 7)
  assert dtypes.floats == (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
  assert set(dtypes.ints) == set(dtypes.uints) | set(dtypes.sints) and len(dtypes.ints) == 8
  assert (dtypes.float16.fmt, dtypes.uint64.fmt, dtypes.bfloat16.fmt, dtypes.int16.bitsize) == ("e", "Q", None, 16)
  with pytest.raises(TypeError, match="float dtype"): dtypes.finfo(dtypes.int32)
