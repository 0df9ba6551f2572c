"""Which integer selects the C-style renderers treat as |x| (so a dialect can render a builtin in
their place), and that the plain C dialect keeps the select as written."""
import pytest

from plugrad.codegen.cstyle import CStyleRenderer, int_abs_idiom
from plugrad.dtype import dtypes
from plugrad.uops import Ops, UOp

x = UOp(Ops.PARAM, dtypes.int32, (), (1, 4))  # any int32 value; the idiom looks only at the graph's shape


def lt(a, b) -> UOp: return UOp(Ops.CMPLT, dtypes.bool, (a, b))
def c(v, dt=dtypes.int32) -> UOp: return UOp.const(dt, v)


@pytest.mark.parametrize("where, expected", [
  (lt(x, c(0)).where(-x, x), False),  # x < 0 ? -x : x  (Tensor.abs)
  (lt(x, c(1)).where(-x, x), False),  # x <= 0 ? -x : x
  (lt(c(0), x).where(x, -x), False),  # x > 0 ? x : -x
  (lt(c(-1), x).where(x, -x), False),  # x >= 0 ? x : -x
  (lt(x, c(0)).where(x, -x), True),  # -|x|
  (lt(c(0), x).where(-x, x), True),  # -|x|
])
def test_abs_selects_are_recognised(where, expected):
  assert int_abs_idiom(where) == (x, expected)


@pytest.mark.parametrize("where", [
  lt(x, c(2)).where(-x, x),  # x = 1 gives -1
  lt(c(1), x).where(x, -x),  # x = 1 gives -1
  lt(x, c(0)).where(-x, x + 1),  # arms are not x and -x
  lt(x + 1, c(0)).where(-x, x),  # compares something else
  UOp(Ops.CMPNE, dtypes.bool, (x, c(0))).where(-x, x),
])
def test_other_selects_are_not(where):
  assert int_abs_idiom(where) is None


def test_float_and_unsigned_selects_are_not_integer_abs():
  f = UOp(Ops.PARAM, dtypes.float32, (), (1, 4))
  assert int_abs_idiom(lt(f, c(0.0, dtypes.float32)).where(-f, f)) is None
  u = UOp(Ops.PARAM, dtypes.uint32, (), (1, 4))
  assert int_abs_idiom(lt(u, c(1, dtypes.uint32)).where(-u, u)) is None


def test_plain_c_keeps_the_select():
  assert CStyleRenderer("C").render_int_abs("v", dtypes.int32) is None
