"""The UOp IR: hash-consing, pattern matching, graph rewriting, the printer, the spec checks."""
import subprocess
import sys

import pytest

from plugrad.dtype import dtypes
from plugrad.spec import kernel_spec, program_spec, tensor_spec
from plugrad.uops import Ops, PatternMatcher, SpecError, UOp, UPat, check_spec, graph_rewrite, toposort


def c(v, dt=dtypes.int32): return UOp.const(dt, v)


def test_structurally_equal_nodes_are_one_object():
  a = UOp(Ops.ADD, dtypes.int32, (c(1), c(2)))
  b = UOp(Ops.ADD, dtypes.int32, (c(1), c(2)))
  assert a is b
  assert a.replace(arg=None) is a
  assert a.replace(op=Ops.MUL) is UOp(Ops.MUL, dtypes.int32, (c(1), c(2)))


def test_float_constants_keep_sign_and_nan():
  assert UOp.const(dtypes.float32, 0.0) is not UOp.const(dtypes.float32, -0.0)
  assert UOp.const(dtypes.float32, float("nan")) is UOp.const(dtypes.float32, float("nan"))
  # inside an argument's tuples too (nested at any depth), while tuples of ints, ops and strings key themselves
  b = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("b", 0, 9))
  for plain, floating in [((1, 2), (1.0, 2)), ((Ops.ADD, (1,)), (Ops.ADD, (1.0,))), (((0, 1), (0, 0)), ((0, 1), (0, -0.0)))]:
    assert UOp(Ops.PAD, None, (b,), plain) is not UOp(Ops.PAD, None, (b,), floating)
    assert UOp(Ops.PAD, None, (b,), plain).key_arg is plain
  zero, minus_zero = (UOp(Ops.PAD, None, (b,), ((0, 1), (s, 0))) for s in (0.0, -0.0))
  assert zero is not minus_zero and zero.arg[1][0] == 0.0 and str(minus_zero.arg[1][0]) == "-0.0"


def test_uop_is_immutable():
  with pytest.raises(AttributeError): c(1).arg = 2


def test_upat_binds_names_and_matches_any_order():
  x = UOp(Ops.SPECIAL, dtypes.int32, (), ("gidx0", 0, 8))
  pat = UPat.alu(Ops.ADD, UPat.var("x"), UPat.cvar("k"))
  for u in (x + 3, UOp(Ops.ADD, dtypes.int32, (c(3), x))):
    (b,) = list(pat.match(u, {}))
    assert b["x"] is x and b["k"].arg == 3
  assert list(UPat(Ops.MUL).match(x + 3, {})) == []


def test_graph_rewrite_reaches_a_fixpoint():
  # x + 1 -> x, applied until nothing changes: ((x+1)+1)+1 -> x
  pm = PatternMatcher([(UPat.alu(Ops.ADD, UPat.var("x"), UPat(Ops.CONST, arg=1)), lambda x: x)])
  x = UOp(Ops.SPECIAL, dtypes.int32, (), ("gidx0", 0, 8))
  assert graph_rewrite(((x + 1) + 1) + 1, pm) is x


def test_graph_rewrite_handles_deep_graphs():
  x = UOp(Ops.SPECIAL, dtypes.int32, (), ("gidx0", 0, 8))
  deep = x
  for i in range(3000): deep = deep * 1
  pm = PatternMatcher([(UPat.alu(Ops.MUL, UPat.var("x"), UPat(Ops.CONST, arg=1)), lambda x: x)])
  assert graph_rewrite(deep, pm) is x


def test_toposort_puts_sources_first_and_shares():
  a = c(1) + c(2)
  b = a * a
  order = toposort([b])
  assert order[-1] is b and order.index(a) < order.index(b)
  assert len(order) == len(set(order))


def test_toposort_is_depth_first_in_source_order_and_respects_descend():
  # the order kernels and caches are built in: each node's sources left to right, depth first, shared nodes once
  x, y = c(1) + c(2), c(3) * c(4)
  root = (x + y) * x
  assert toposort([root]) == (c(1), c(2), x, c(3), c(4), y, x + y, root)
  assert toposort([root, y, c(9)]) == toposort([root]) + (c(9),)
  # descend=False for y: y is listed, its sources are not visited
  assert toposort([root], descend=lambda n: n is not y) == (c(1), c(2), x, y, x + y, root)
  deep = c(0)
  for i in range(5000): deep = deep + i  # iterative: no recursion limit
  assert len(toposort([deep])) == 10000  # the consts 0..4999 (c(0) among them) and 5000 ADDs


def test_pretty_prints_shared_nodes_once():
  a = c(1) + c(2)
  text = (a * a).pretty()
  assert text.count("ADD") == 1 and "MUL" in text


def test_bounds_of_index_math():
  r = UOp(Ops.RANGE, dtypes.int32, (c(10),), 0)
  assert (r.vmin, r.vmax) == (0, 9)
  e = r * 4 + 3
  assert (e.vmin, e.vmax) == (3, 39)
  assert ((r % 3).vmin, (r % 3).vmax) == (0, 2)
  assert ((r // 4).vmin, (r // 4).vmax) == (0, 2)


def test_spec_rejects_ill_formed_graphs():
  f = UOp.const(dtypes.float32, 1.0)
  bad = UOp(Ops.ADD, dtypes.float32, (f, c(1)))  # mixed dtypes
  with pytest.raises(SpecError): check_spec(bad, tensor_spec, "test")
  with pytest.raises(SpecError): check_spec(UOp(Ops.XOR, dtypes.float32, (f, f)), program_spec, "test")  # bitwise: ints only
  with pytest.raises(SpecError): check_spec(UOp(Ops.SINK, None, (f,)), kernel_spec, "test")
  check_spec(UOp(Ops.ADD, dtypes.float32, (f, f)), tensor_spec, "test")
  check_spec(UOp(Ops.ARANGE, dtypes.float16, (), 2049), tensor_spec, "test")  # 0 .. 2048: exact in float16
  with pytest.raises(SpecError): check_spec(UOp(Ops.ARANGE, dtypes.float16, (), 2050), tensor_spec, "test")
  with pytest.raises(SpecError): check_spec(UOp(Ops.ARANGE, dtypes.int32, (f,), 3), tensor_spec, "test")


def test_spec_is_checked_in_the_test_suite():
  from plugrad.registry import get_registry
  assert get_registry().config.check_spec, "the pytest plugin turns spec checking on for every kernel"


def test_nodes_that_die_while_the_interpreter_exits_say_nothing():
  # a gc callback (a profiler's, say) keeps its module alive to the last teardown, after plugrad's globals were cleared:
  # the nodes it holds die then, and forgetting them must not print "Exception ignored" for each
  code = ("import gc\nfrom plugrad import Tensor\ny = (Tensor.ones(4) + 1).realize() * 2 + 1\nobjs = gc.get_objects()\n"
          "def cb(phase, info): pass\ngc.callbacks.append(cb)\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
  assert out.returncode == 0 and out.stderr == "", out.stderr


def test_op_codes_behave_as_the_enum_they_replace():
  # Ops is a plain class (an Enum's class attribute reads were 4x slower on Python 3.11): one immutable object per
  # op, found by name, iterated in declaration order, pickled and copied as itself
  import copy
  import pickle
  assert [op.value for op in Ops] == list(range(1, len(Ops) + 1)) and next(iter(Ops)) is Ops.BUFFER
  assert Ops["ADD"] is Ops.ADD and Ops.ADD.name == "ADD" and repr(Ops.ADD) == str(Ops.ADD) == "Ops.ADD"
  assert pickle.loads(pickle.dumps(Ops.MUL)) is Ops.MUL and copy.deepcopy(Ops.MUL) is Ops.MUL
  assert isinstance(Ops.SIN, Ops) and len({Ops.ADD, Ops.ADD, Ops.MUL}) == 2
  with pytest.raises(KeyError, match="no op named 'ADDD'"): Ops["ADDD"]
  with pytest.raises(AttributeError, match="immutable"): Ops.ADD.name = "SUB"
  with pytest.raises(TypeError, match="the ops are fixed"): Ops("NEW", 99)
