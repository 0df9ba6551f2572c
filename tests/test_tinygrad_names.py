"""Every public name of tinygrad 0.14's Tensor exists on plugrad's Tensor, so a tinygrad script never fails on
a missing attribute. The list is written out here (tinygrad is never imported): the public names and the
operator dunders of `dir(tinygrad.Tensor)` in tinygrad 0.14.0, minus those every Python object has.

Names not there yet are listed with the issue that brings them; the test also fails when one of those lands,
so a name cannot stay listed as missing once it exists."""
import pytest

from plugrad import Tensor

TINYGRAD_0_14_TENSOR_NAMES = """
T __add__ __and__ __bool__ __delitem__ __floordiv__ __getitem__ __iadd__ __iand__ __ifloordiv__ __ilshift__
__imatmul__ __imul__ __invert__ __ior__ __ipow__ __irshift__ __isub__ __itruediv__ __ixor__ __len__ __lshift__
__matmul__ __mod__ __mul__ __neg__ __or__ __pow__ __radd__ __rand__ __rfloordiv__ __rlshift__ __rmatmul__
__rmod__ __rmul__ __ror__ __rpow__ __rrshift__ __rshift__ __rsub__ __rtruediv__ __rxor__ __setitem__ __sub__
__truediv__ __xor__ abs acos acosh add all allclose alu any arange argmax argmin argsort as_param asin asinh
assign atan atanh avg_pool2d backward batchnorm bfloat16 binary_crossentropy binary_crossentropy_logits
bitcast bitwise_and bitwise_not bitwise_or bitwise_xor bool call callify cast cat ceil celu chunk clamp clip
clone const const_like contiguous contiguous_backward conv2d conv_transpose2d copysign cos cosh cross_entropy
cummax cummin cumprod cumsum custom_kernel data decode_hevc_frame detach device diag diagonal div dot double
dropout dtype einsum element_size elu empty empty_like eq erf exp exp2 expand eye flatten flip float floor
fmod from_blob from_url full full_like gather gelu glorot_uniform grad gradient half hardsigmoid hardswish
hardtanh hash image_conv2d image_dot int interpolate invalids is_floating_point is_param is_param_ isclose
isfinite isinf isnan item kaiming_normal kaiming_uniform keccak layernorm leaky_relu lerp linear
linear_with_vars linspace log log10 log2 log_softmax logaddexp logcumsumexp logical_not logsigmoid logsumexp
long lshift manual_seed masked_fill masked_select matmul max max_numel max_pool2d max_shape max_unpool2d
maximum mean meshgrid min minimum mish mod mul multinomial nbytes ndim ne neg newton_schulz nll_loss nonzero
normal normalize numel numpy one_hot ones ones_like pad pad_to permute pow prod qr quick_gelu rand rand_like
randint randn randn_like random_bits randperm realize rearrange reciprocal relu relu6 repeat repeat_interleave
replace reshape roll round rshift rsqrt scaled_dot_product_attention scaled_uniform scatter scatter_reduce
schedule_linear selu sequential shape shard shard_ shard_like short shrink shrink_to sigmoid sign silu sin
sinh size softmax softmin softplus softsign sort sparse_categorical_crossentropy split sqrt square squeeze
stack std std_mean sub sum svd swish tan tanh threefry to to_ tolist topk transpose tril triu trunc ufix
unflatten unfold uniform unsqueeze uop uprod usum var var_mean view where zeros zeros_like
""".split()

# name -> why it is not there yet: the issue that brings it
PENDING = {
  # issue 15 leaves the image-dtype convolution to its own issue (not filed yet)
  "image_conv2d": "image dtype issue (deferred by issue 15)", "image_dot": "image dtype issue (deferred by issue 15)",
}

# name -> why plugrad does not offer it (outside every open issue; tinygrad internals or hardware features)
NOT_OFFERED = {
  "decode_hevc_frame": "hardware video decoding on NVIDIA GPUs",
  "threefry": "tinygrad's counter-based RNG primitive; plugrad's RNG is a seeded Philox generator on the host",
  "random_bits": "tinygrad's counter-based RNG primitive (see threefry)",
  "keccak": "SHA-3 written in tensor ops, used by tinygrad's own tooling",
  "hash": "tinygrad's tensor hashing built on keccak",
  "invalids": "tinygrad's IR-level Invalid value, which plugrad's IR does not have",
  # tinygrad's function-call IR: their arguments or results are tinygrad UOps (CALL, PARAM, LINEAR nodes, a kernel
  # written as a Python function of tinygrad's UOp API), which plugrad's IR does not share. Issue 16 brought what
  # they are for in plugrad's terms: TinyJit, the schedule cache, Variables, Tensor.schedule().
  "call": "a CALL of a tinygrad function graph", "callify": "turns a graph into a tinygrad CALL",
  "as_param": "a tinygrad PARAM placeholder of a function graph",
  "custom_kernel": "a kernel written in tinygrad's UOp API",
  "linear_with_vars": "returns tinygrad's LINEAR schedule UOp",
  "schedule_linear": "returns tinygrad's LINEAR schedule UOp",
}


def test_the_list_is_tinygrads():
  assert len(TINYGRAD_0_14_TENSOR_NAMES) == len(set(TINYGRAD_0_14_TENSOR_NAMES)) == 296
  for name in {**PENDING, **NOT_OFFERED}:
    assert name in TINYGRAD_0_14_TENSOR_NAMES, f"{name} is listed as missing but is not a tinygrad 0.14 name"
  assert not set(PENDING) & set(NOT_OFFERED)


@pytest.mark.parametrize("name", TINYGRAD_0_14_TENSOR_NAMES)
def test_plugrad_has_tinygrads_name(name):
  if name in PENDING:
    assert not hasattr(Tensor, name), f"Tensor.{name} exists now: remove it from PENDING ({PENDING[name]})"
  elif name in NOT_OFFERED:
    assert not hasattr(Tensor, name), f"Tensor.{name} exists now: remove it from NOT_OFFERED"
  else:
    assert hasattr(Tensor, name), f"Tensor.{name} (tinygrad 0.14) is missing"
