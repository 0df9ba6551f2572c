"""Neural network layers with tinygrad 0.14's names, constructor arguments and initialisation.

A layer is a plain object: its tensors are attributes (`weight`, `bias`, `running_mean`, ...), so
`nn.state.get_state_dict(model)` gives the same keys as tinygrad and PyTorch for the same model,
and calling the layer builds a lazy graph like any Tensor method. Training mode (`with
Tensor.train():` or `with Context(TRAINING=1):`) switches BatchNorm to batch statistics.
`nn.optim` holds the optimizers, `nn.state` the state dicts and weight files, `nn.datasets` MNIST and CIFAR-10.
"""
from __future__ import annotations

import math
from typing import Sequence

from plugrad.dtype import dtypes
from plugrad.gradient import custom_gradients
from plugrad.nn import datasets, optim, state  # noqa: F401  (nn.datasets, nn.optim and nn.state, as in tinygrad)
from plugrad.registry import get_registry
from plugrad.shape import prod
from plugrad.tensor import Tensor
from plugrad.uops import UOp


def _owned(value: Tensor, requires_grad: bool | None = None) -> Tensor:
  """`value` in a buffer of its own, filled now. Needed for weights that start as a constant: two
  layers built alike would otherwise hold the same graph node (`Tensor.ones(16)` is one node however
  often it is made), realize into one buffer, and then share every update. Filled now because a
  write still pending when the first update is assigned would leave the update unbound to the buffer."""
  return value.clone().realize().requires_grad_(requires_grad)  # realized first: a buffer already, so a leaf as it is


def _tuple(x: int | Sequence[int], n: int) -> tuple[int, ...]:
  return (x,) * n if isinstance(x, int) else tuple(x)


def _affine_shape(x: Tensor) -> tuple[int, ...]:
  """Where a per-channel vector goes to broadcast over (N, C, ...): (1, C, 1, ...)."""
  return (1, -1) + (1,) * (x.ndim - 2)


def _check_channels(name: str, x: Tensor, channels: int) -> None:
  if x.ndim < 2 or x.shape[1] != channels:
    raise ValueError(f"{name} expects input of shape (N, {channels}, ...), got {x.shape}")


class BatchNorm:
  """Batch normalisation over axis 1 of (N, C, ...) input (BatchNorm1d/2d/3d alike).

  In training mode it normalises with the batch's mean and (biased) variance, moves `running_mean`
  and `running_var` (unbiased) toward them by `momentum` and counts `num_batches_tracked`; otherwise
  it normalises with the running statistics. Without `track_running_stats` it always uses the
  batch's and has none of the three.

  :param sz: the number of channels C.
  :param affine: learn a per-channel scale `weight` (ones) and shift `bias` (zeros).
  """
  def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True,
               momentum: float = 0.1):
    self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
    self.weight: Tensor | None = _owned(Tensor.ones(sz)) if affine else None
    self.bias: Tensor | None = _owned(Tensor.zeros(sz)) if affine else None
    if track_running_stats:
      # no counter without running statistics, as in PyTorch, so its state dicts load either way
      self.running_mean = _owned(Tensor.zeros(sz), requires_grad=False)
      self.running_var = _owned(Tensor.ones(sz), requires_grad=False)
      # PyTorch counts in int64; a device without int64 gets int32, as in tinygrad
      caps = get_registry().device(get_registry().default_device()).caps
      count_dtype = dtypes.int64 if dtypes.int64 in caps.dtypes else dtypes.int32
      self.num_batches_tracked = _owned(Tensor.zeros((), dtype=count_dtype), requires_grad=False)  # 0-d: torch's, tinygrad 0.14's
    self.sz = sz

  def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
    """The mean and variance this call normalises with: the batch's in training mode, else the running ones."""
    if self.track_running_stats and not Tensor.training: return self.running_mean, self.running_var
    axes = tuple(a for a in range(x.ndim) if a != 1)
    mean = x.mean(axis=axes)
    # the variance's own dependence on the mean has zero gradient (sum of deviations is 0): detach saves work
    y = x - mean.detach().reshape(_affine_shape(x))
    return mean, (y * y).mean(axis=axes)

  def __call__(self, x: Tensor) -> Tensor:
    _check_channels("BatchNorm", x, self.sz)
    n = x.numel() // x.shape[1]
    if Tensor.training and n < 2:  # as PyTorch: one value has no variance to normalise by
      raise ValueError(f"BatchNorm in training mode needs more than one value per channel, "
                       f"got input of shape {x.shape}")
    mean, var = self.calc_stats(x)
    if self.track_running_stats and Tensor.training:
      unbiased = var.detach() * (n / (n - 1))
      self.running_mean.assign((1 - self.momentum) * self.running_mean + self.momentum * mean.detach())
      self.running_var.assign((1 - self.momentum) * self.running_var + self.momentum * unbiased)
      self.num_batches_tracked.assign(self.num_batches_tracked + 1)
    return x.batchnorm(self.weight, self.bias, mean, (var + self.eps).rsqrt())


BatchNorm2d = BatchNorm3d = BatchNorm


class Conv2d:
  """An N-d convolution (2-d for an int `kernel_size`, else one axis per entry) of (N, C, ...) input.

  Weight (out_channels, in_channels // groups, *kernel_size) and bias are uniform in
  ±1/sqrt(in_channels * prod(kernel_size)), as in tinygrad.

  :param padding: an int, one int per spatial axis, PyTorch's flat (left, right, top, bottom, ...),
    or "same" (output as large as the input; stride 1 only) and "valid" (none), as PyTorch.
  """
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...],
               stride: int | tuple[int, ...] = 1, padding: int | tuple[int, ...] | str = 0,
               dilation: int | tuple[int, ...] = 1, groups: int = 1, bias: bool = True):
    if groups < 1 or in_channels % groups or out_channels % groups:
      raise ValueError(f"in_channels {in_channels} and out_channels {out_channels} must be divisible by "
                       f"groups={groups}")
    self.kernel_size = _tuple(kernel_size, 2)
    if isinstance(padding, str):  # refused here, as PyTorch does; Tensor.conv2d computes it
      Tensor._conv_pads(padding, len(self.kernel_size), "Conv2d", self.kernel_size,
                        _tuple(dilation, len(self.kernel_size)), _tuple(stride, len(self.kernel_size)))
    self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
    scale = 1 / math.sqrt(in_channels * prod(self.kernel_size))
    self.weight = Tensor.uniform(out_channels, in_channels // groups, *self.kernel_size, low=-scale, high=scale)
    self.bias: Tensor | None = Tensor.uniform(out_channels, low=-scale, high=scale) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    return x.conv2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation,
                    padding=self.padding)


def Conv1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int | str = 0,
           dilation: int = 1, groups: int = 1, bias: bool = True) -> Conv2d:
  """A 1-d convolution of (N, C, L) input: a Conv2d with a one-axis kernel (as tinygrad)."""
  return Conv2d(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups, bias)


class ConvTranspose2d(Conv2d):
  """The transpose (gradient) of Conv2d: upsamples (N, C, ...) input.

  Weight (in_channels, out_channels // groups, *kernel_size), uniform in ±1/sqrt(in_channels *
  prod(kernel_size)) as in tinygrad; `output_padding` adds rows at the end of each spatial axis.
  """
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...],
               stride: int | tuple[int, ...] = 1, padding: int | tuple[int, ...] = 0,
               output_padding: int | tuple[int, ...] = 0, dilation: int | tuple[int, ...] = 1, groups: int = 1,
               bias: bool = True):
    super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
    scale = 1 / math.sqrt(in_channels * prod(self.kernel_size))
    self.weight = Tensor.uniform(in_channels, out_channels // groups, *self.kernel_size, low=-scale, high=scale)
    self.output_padding = output_padding

  def __call__(self, x: Tensor) -> Tensor:
    return x.conv_transpose2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation,
                              padding=self.padding, output_padding=self.output_padding)


def ConvTranspose1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                    output_padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = True) -> ConvTranspose2d:
  """A 1-d transposed convolution of (N, C, L) input: a ConvTranspose2d with a one-axis kernel."""
  return ConvTranspose2d(in_channels, out_channels, (kernel_size,), stride, padding, output_padding, dilation, groups,
                         bias)


class Linear:
  """y = x @ weight.T + bias, with weight (out_features, in_features) as in PyTorch; both uniform
  in ±1/sqrt(in_features)."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    bound = 1 / math.sqrt(in_features)
    self.weight = Tensor.uniform(out_features, in_features, low=-bound, high=bound)
    self.bias: Tensor | None = Tensor.uniform(out_features, low=-bound, high=bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim == 0 or x.shape[-1] != self.weight.shape[1]:
      raise ValueError(f"Linear({self.weight.shape[1]}, {self.weight.shape[0]}) expects input of shape "
                       f"(..., {self.weight.shape[1]}), got {x.shape}")
    return x.linear(self.weight.transpose(), self.bias)


class GroupNorm:
  """Normalise (N, C, ...) input over each group of C // num_groups channels and the spatial axes,
  then scale and shift per channel (`weight` ones, `bias` zeros when `affine`)."""
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
    if num_groups < 1 or num_channels % num_groups:
      raise ValueError(f"num_channels {num_channels} must be divisible by num_groups {num_groups}")
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight: Tensor | None = _owned(Tensor.ones(num_channels)) if affine else None
    self.bias: Tensor | None = _owned(Tensor.zeros(num_channels)) if affine else None

  def __call__(self, x: Tensor) -> Tensor:
    _check_channels("GroupNorm", x, self.num_channels)
    x = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps).reshape(x.shape)
    if self.weight is None or self.bias is None: return x
    return x * self.weight.reshape(_affine_shape(x)) + self.bias.reshape(_affine_shape(x))


class InstanceNorm:
  """Normalise each channel of each sample of (N, C, ...) input over its spatial axes, then scale
  and shift per channel (`weight` ones, `bias` zeros when `affine`)."""
  def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True):
    self.num_features, self.eps = num_features, eps
    self.weight: Tensor | None = _owned(Tensor.ones(num_features)) if affine else None
    self.bias: Tensor | None = _owned(Tensor.zeros(num_features)) if affine else None

  def __call__(self, x: Tensor) -> Tensor:
    _check_channels("InstanceNorm", x, self.num_features)
    x = x.reshape(x.shape[0], self.num_features, -1).layernorm(eps=self.eps).reshape(x.shape)
    if self.weight is None or self.bias is None: return x
    return x * self.weight.reshape(_affine_shape(x)) + self.bias.reshape(_affine_shape(x))


class LayerNorm:
  """Normalise over the last len(normalized_shape) axes, then scale by `weight` (ones) and shift by
  `bias` (zeros) of that shape when `elementwise_affine`."""
  def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True):
    self.normalized_shape: tuple[int, ...] = _tuple(normalized_shape, 1)
    self.axis = tuple(-1 - i for i in range(len(self.normalized_shape)))
    self.eps, self.elementwise_affine = eps, elementwise_affine
    self.weight: Tensor | None = _owned(Tensor.ones(*self.normalized_shape)) if elementwise_affine else None
    self.bias: Tensor | None = _owned(Tensor.zeros(*self.normalized_shape)) if elementwise_affine else None

  def __call__(self, x: Tensor) -> Tensor:
    n = len(self.normalized_shape)
    if x.shape[x.ndim - n:] != self.normalized_shape:
      raise ValueError(f"LayerNorm{self.normalized_shape} expects input ending in {self.normalized_shape}, "
                       f"got {x.shape}")
    x = x.layernorm(eps=self.eps, axis=self.axis)
    if self.weight is None or self.bias is None: return x
    return x * self.weight + self.bias


class LayerNorm2d(LayerNorm):
  """LayerNorm over the channels of (N, C, H, W) input, at every position."""
  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim != 4: raise ValueError(f"LayerNorm2d expects (N, C, H, W) input, got {x.shape}")
    return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class RMSNorm:
  """x / sqrt(mean(x**2 over the last axis) + eps), computed in float32, times `weight` (ones)."""
  def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True):
    self.eps = eps
    self.weight: Tensor | None = _owned(Tensor.ones(dim)) if elementwise_affine else None

  def _norm(self, x: Tensor) -> Tensor: return x * (x.square().mean(-1, keepdim=True) + self.eps).rsqrt()

  def __call__(self, x: Tensor) -> Tensor:
    if self.weight is not None and (x.ndim == 0 or x.shape[-1] != self.weight.shape[0]):
      dim = self.weight.shape[0]
      raise ValueError(f"RMSNorm({dim}) expects input of shape (..., {dim}), got {x.shape}")
    x = self._norm(x.float()).cast(x.dtype)
    return x if self.weight is None else x * self.weight


class Embedding:
  """A lookup table: integer indices of any shape -> rows of `weight` (vocab_size, embed_size),
  initialised glorot-uniform as in tinygrad. The lookup is a one-hot sum of where(hit, row, 0), which the lowering
  reads as the one row it picks (a gather); a NaN in a row not picked stays out of the result, as in torch. Its
  gradient sums each token's row of the output gradient into the row of `weight` it picked (`_embedding_gradient`);
  an index outside the table picks nothing (a row of zeros) and gets no gradient."""
  def __init__(self, vocab_size: int, embed_size: int):
    self.vocab_sz, self.embed_sz = vocab_size, embed_size
    self.weight = Tensor.glorot_uniform(vocab_size, embed_size)

  def __call__(self, idx: Tensor) -> Tensor:
    if not isinstance(idx, Tensor) or not idx.dtype.is_int:
      raise TypeError(f"Embedding takes a Tensor of integer indices, got {getattr(idx, 'dtype', type(idx).__name__)}")
    # not kept as an attribute: it is no weight, and state dicts must hold weights only
    arange = Tensor.arange(self.vocab_sz, device=self.weight.device).reshape(self.vocab_sz, 1)
    big = idx.shape + (self.vocab_sz, self.embed_sz)
    hit = arange.expand(big) == idx.reshape(idx.shape + (1, 1)).expand(big)
    out = hit.where(self.weight.expand(big), 0).sum(-2).cast(self.weight.dtype)
    if _segment_sums(self.weight, idx): out = out._with_gradient("embedding", self.weight, idx, params=(idx.device,))
    return out


#: the generic rules differentiate the one-hot lookup into a sum over every (row, token, column): vocab x tokens x
#: width. The segment sums of `_embedding_gradient` cost 2 tokens^2 compares and ten kernels more (1.5 ms on the
#: 2-core CPU); they pay from about this much generic work on (forward and backward: 1000 x 64 rows, 1024 tokens:
#: 1.9 ms against 1.1 one-hot; 4000 x 64, 512 tokens: 1.8 against 2.0; 512 x 512, 2048 tokens: 3.6 against 4.3)
EMBEDDING_SEGMENT_MIN_WORK = 1 << 27
#: the largest (index, position) key `_embedding_gradient` ranks tokens by in int32 (twice the lanes); past it, int64
EMBEDDING_KEY32_MAX = dtypes.int32.max


def _segment_sums(weight: Tensor, idx: Tensor) -> bool:
  """Whether Embedding's gradient takes `_embedding_gradient`: on one device that has float64 (its running sums),
  for tables and token counts where the generic one-hot sum would do far more work."""
  dev = weight.device
  if isinstance(dev, tuple) or idx.device != dev or not all(isinstance(d, int) for d in idx.shape + weight.shape):
    return False
  tokens, (vocab, width) = prod(idx.shape), weight.shape
  work = vocab * tokens * width
  return work >= EMBEDDING_SEGMENT_MIN_WORK and work >= 8 * tokens * tokens and \
    dtypes.float64 in get_registry().device(dev).caps.dtypes


def _embedding_gradient(ctx: UOp, node: UOp) -> tuple[UOp, None]:
  """Embedding's weight gradient (custom_gradients["embedding"]): row v is the sum of the output gradient's rows of
  the tokens that picked v. The tokens are ranked by (index, position) (tokens^2 compares), their gradient rows
  gathered in that order and summed running in float64, and row v is the difference of the running sums at the
  ends of its tokens (found by `Tensor._first_reaching` on the sorted indices), rounded once to the weight's dtype
  (float64's error is far below it), where the generic rules' one-hot sum takes vocab x tokens x width (4096
  tokens into 10000x256, forward and
  backward: 66-74 ms -> 4.9-5.8 ms, torch 2.4-2.6 ms; GPT-2's 50257x768, 1024 tokens: 730 -> 8 ms)."""
  weight, idx = (Tensor._from(u, node.arg[1]) for u in node.src[1:])
  vocab, width = weight.shape
  tokens = prod(idx.shape)
  flat = idx.reshape(tokens)
  # an index outside the table picked nothing: as the table's size it sorts last, past every row's tokens
  ids = ((flat >= 0) & (flat < vocab)).where(flat, vocab).cast(dtypes.int32)
  grad = Tensor._from(ctx, node.arg[1]).reshape(tokens, width)
  pos = Tensor.arange(tokens, dtype=dtypes.int32, device=ids.device)
  # (index, position) as one key (int32 where it fits), in a buffer: a token's rank, how many tokens come before it,
  # is how many keys are below its own, one compare each (4096 tokens: 0.42-0.47 -> 0.27-0.31 ms; five before)
  kdt = dtypes.int32 if (vocab + 1) * tokens - 1 <= EMBEDDING_KEY32_MAX else dtypes.int64
  key = (ids.cast(kdt) * tokens + pos.cast(kdt)).contiguous()
  rank = (key.reshape(1, tokens) < key.reshape(tokens, 1)).sum(1, dtype=dtypes.int32)
  # the token of each rank: the one position whose rank it is
  by_rank = rank.reshape(1, tokens) == pos.reshape(tokens, 1)
  order = by_rank.where(pos.reshape(1, tokens), 0).sum(1, dtype=dtypes.int32)
  sorted_ids = ids.gather(0, order)
  running = grad.gather(0, order.reshape(tokens, 1).expand(tokens, width)).cast(dtypes.float64).cumsum(0)
  running = running.pad(((1, 0), (0, 0)))  # running[j]: the first j sorted rows
  ends = Tensor._first_reaching(sorted_ids.reshape(1, tokens), vocab).reshape(vocab)  # sorted ids <= v
  starts = ends.pad(((1, 0),))[:vocab]
  at = lambda j: running.gather(0, j.reshape(vocab, 1).expand(vocab, width))  # noqa: E731
  return (at(ends) - at(starts)).cast(weight.dtype).uop, None


custom_gradients["embedding"] = _embedding_gradient


class LSTMCell:
  """One step of an LSTM: (x, (h, c)) -> (h', c') with PyTorch's gate order (input, forget, cell, output).

  Weights uniform in ±1/sqrt(hidden_size), biases zeros (tinygrad's initialisation); `weight_ih`
  (4*hidden, input), `weight_hh` (4*hidden, hidden), `bias_ih`, `bias_hh` (4*hidden) as in PyTorch.
  """
  def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
    stdv = 1.0 / math.sqrt(hidden_size)
    self.weight_ih = Tensor.uniform(hidden_size * 4, input_size, low=-stdv, high=stdv)
    self.weight_hh = Tensor.uniform(hidden_size * 4, hidden_size, low=-stdv, high=stdv)
    self.bias_ih: Tensor | None = _owned(Tensor.zeros(hidden_size * 4)) if bias else None
    self.bias_hh: Tensor | None = _owned(Tensor.zeros(hidden_size * 4)) if bias else None

  def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    hidden = self.weight_hh.shape[1]
    if x.ndim != 2 or x.shape[1] != self.weight_ih.shape[1]:
      raise ValueError(f"LSTMCell expects input of shape (batch, {self.weight_ih.shape[1]}), got {x.shape}")
    if hc is None: hc = (Tensor.zeros(x.shape[0], hidden, dtype=x.dtype, device=x.device),) * 2
    if any(t.shape != (x.shape[0], hidden) for t in hc):
      raise ValueError(f"LSTMCell expects h and c of shape ({x.shape[0]}, {hidden}), "
                       f"got {hc[0].shape} and {hc[1].shape}")
    gates = x.linear(self.weight_ih.T, self.bias_ih) + hc[0].linear(self.weight_hh.T, self.bias_hh)
    i, f, g, o = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
    new_c = f.sigmoid() * hc[1] + i.sigmoid() * g.tanh()
    new_h = o.sigmoid() * new_c.tanh()
    return new_h.contiguous(), new_c.contiguous()


__all__ = ["BatchNorm", "BatchNorm2d", "BatchNorm3d", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d",
           "Linear", "GroupNorm", "InstanceNorm", "LayerNorm", "LayerNorm2d", "RMSNorm", "Embedding", "LSTMCell",
           "datasets", "optim", "state"]
