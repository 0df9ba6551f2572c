"""Optimizers with tinygrad 0.14's names and arguments and PyTorch's update rules.

An optimizer holds the parameters and its state (momentum buffers, moment estimates) as tensors.
`step()` builds every update as a lazy graph, assigns it into the parameter and state buffers, and
realizes all of them together: one schedule per step, which the schedule cache reuses from the
second step on. The learning rate is a one-element tensor (`opt.lr`), so it can change between
steps (`opt.lr.assign(...)`) without building different kernels.

Sorted by increasing complexity: SGD is LARS without the trust ratio; Adam and AdamW are LAMB
without it; Muon is SGD with Nesterov momentum whose update is orthogonalised.

`fused=True` (tinygrad's argument; FUSE_OPTIM=1 makes it the default) steps all parameters as one flat vector: their
concatenation and their gradients' go through the update once, and each parameter takes back its slice. The update is
then built from a few dozen tensor operations instead of a dozen per parameter (an eager step spends its time building
them); the state is one flat tensor per kind, and LARS's and LAMB's trust ratio is the whole model's.
"""
from __future__ import annotations

import itertools
import math
from typing import Sequence

from plugrad.dtype import dtypes
from plugrad.registry import get_registry
from plugrad.tensor import Tensor, _backward_outputs


class Optimizer:
  """The base class: parameters, learning rate, `zero_grad` and `step`.

  :param params: the tensors to optimize. A tensor with `requires_grad` None is switched to True;
    one with False is not updated but is realized with each step (e.g. BatchNorm running statistics).
  :param lr: the learning rate, kept as a float32 tensor `self.lr` of shape (1,).
  :param device: where the learning rate and the optimizer state live (the first parameter's device).
  :param fused: step all parameters as one flat vector (see the module's docstring); None: FUSE_OPTIM's choice.
  """
  def __init__(self, params: Sequence[Tensor], lr: float, device: str | None = None, fused: bool | None = None):
    if isinstance(params, Tensor): raise TypeError("params must be a list of tensors, not a single Tensor")
    params = list(params)
    if not all(isinstance(p, Tensor) for p in params):
      raise TypeError(f"params must be Tensors, got {sorted({type(p).__name__ for p in params})}")
    if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not math.isfinite(lr) or lr < 0:
      raise ValueError(f"learning rate must be a finite number >= 0, got {lr!r}")
    for p in params:
      if p.requires_grad is None: p.requires_grad_(True)
    self.params: list[Tensor] = _dedup([p for p in params if p.requires_grad])
    if not self.params:
      raise ValueError("the optimizer got no parameters to optimize (an empty list, or only tensors with "
                       "requires_grad=False)")
    for p in self.params:
      if not p.dtype.is_float:
        raise TypeError(f"a parameter of shape {p.shape} is {p.dtype.name}; only float tensors are optimized")
    self.buffers: list[Tensor] = _dedup([p for p in params if not p.requires_grad])
    self.device = device or self.params[0].device
    self.lr = Tensor([lr], device=self.device, dtype=dtypes.float32, requires_grad=False)
    # one flat vector needs every parameter on one device, unsharded: FUSE_OPTIM leaves other optimizers unfused
    one_device = len({p.device for p in self.params}) == 1 and not isinstance(self.params[0].device, tuple)
    if fused and not one_device:
      raise ValueError(f"fused=True steps the parameters as one vector on one device; these are on "
                       f"{sorted({str(p.device) for p in self.params})}: use fused=False")
    self.fused = (get_registry().config.fuse_optim and one_device) if fused is None else bool(fused)
    # where each parameter's elements start in the flat vector of a fused step
    self._offsets = list(itertools.accumulate((p.numel() for p in self.params), initial=0)) if self.fused else []

  def _zeros_like_params(self) -> list[Tensor]:
    """One float32 state tensor per parameter (fused: one for all, flat), zero at the start."""
    shapes = [(self._offsets[-1],)] if self.fused else [p.shape for p in self.params]
    return [Tensor.zeros(*shape, dtype=dtypes.float32, device=self.device).requires_grad_(False) for shape in shapes]

  def _realize_state(self, *state: Tensor) -> None:
    """Put the parameters, buffers and state in buffers before the first step, so every update is
    an in-place write (a tensor still waiting for its first value would take the update as a new
    value instead, unbound from the buffer that graphs built before the step read)."""
    Tensor.realize(*self.params, *self.buffers, *state)

  def zero_grad(self) -> None:
    """Forget the parameters' gradients (the next backward starts from none)."""
    for p in self.params: p.grad = None

  def step(self) -> None:
    """Update every parameter from its `.grad`, all in one realize."""
    Tensor.realize(*self.schedule_step())

  def schedule_step(self) -> list[Tensor]:
    """Assign the updates into the parameters and state without running anything; returns the tensors
    to realize (to realize them together with other work, as tinygrad's `schedule_step`). Parameters
    without a gradient are left as they are, as in PyTorch."""
    if not Tensor.training:
      raise RuntimeError("Tensor.training is False; an optimizer step needs training mode: wrap the step in "
                         "`with Tensor.train():` (or Context(TRAINING=1), or set Tensor.training = True)")
    # what the backward calls before this step saw, and the gradients wanted of it: computed from the parameters
    # as they were (taken first: the parameters themselves are buffers still)
    seen = _backward_outputs.take_pending()
    live = [(i, p) for i, p in enumerate(self.params) if p.grad is not None]
    for _, p in live:
      if p.grad.shape != p.shape:
        raise ValueError(f"a parameter of shape {p.shape} has a gradient of shape {p.grad.shape}")
    if self.fused:
      if len(live) != len(self.params):
        shape = next(p.shape for p in self.params if p.grad is None)
        raise RuntimeError(f"a fused optimizer steps every parameter at once, and the one of shape {shape} has no "
                           f"gradient (the loss does not depend on it); use fused=False to step only those that have one")
      (flat,), state = self._step([0], [Tensor.cat(*[p.detach().flatten() for p in self.params])],
                                  [Tensor.cat(*[p.grad.flatten() for p in self.params])])
      new_params = [flat[a:b].reshape(p.shape) for p, a, b in zip(self.params, self._offsets, self._offsets[1:])]
    else:
      new_params, state = self._step([i for i, _ in live], [p.detach() for _, p in live], [p.grad for _, p in live])
    for (_, p), new in zip(live, new_params): p.assign(new.cast(p.dtype))
    return state + [p for _, p in live] + self.buffers + seen

  def _step(self, idx: list[int], params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    """The new values of the parameters numbered `idx` (given detached, with their gradients), and the
    state tensors that were assigned. Subclasses implement it."""
    raise NotImplementedError(f"{type(self).__name__} does not implement _step")


def _dedup(ts: list[Tensor]) -> list[Tensor]:
  seen: set[int] = set()
  return [t for t in ts if not (id(t) in seen or seen.add(id(t)))]


class OptimizerGroup(Optimizer):
  """Several optimizers stepped as one (e.g. Muon for the matrices, AdamW for the rest): one realize."""
  def __init__(self, *optimizers: Optimizer):  # pylint: disable=super-init-not-called
    if not optimizers: raise ValueError("OptimizerGroup needs at least one optimizer")
    self.optimizers = optimizers
    self.params = [p for o in optimizers for p in o.params]
    self.buffers = [b for o in optimizers for b in o.buffers]

  def __getitem__(self, i: int) -> Optimizer: return self.optimizers[i]
  def zero_grad(self) -> None:
    for o in self.optimizers: o.zero_grad()
  def schedule_step(self) -> list[Tensor]: return [t for o in self.optimizers for t in o.schedule_step()]


def _l2(t: Tensor) -> Tensor: return t.square().sum().sqrt()


class LARS(Optimizer):
  """SGD with a per-layer trust ratio (You et al. 2017): the step of each parameter is scaled by
  tcoef * |w| / (|g| + weight_decay * |w|). `tcoef=0` turns the ratio off (plain SGD).

  :param momentum: heavy-ball momentum (0: none). `classic` applies the learning rate before the
    momentum buffer (b = m*b + lr*g), otherwise after it (PyTorch's SGD: b = m*b + g; w -= lr*b).
  :param nesterov: step with g + m*b instead of b.
  :param weight_decay: L2 penalty added to the gradient (`pre_wd`), or, with `pre_wd=False`, decoupled
    decay w *= 1 - lr*weight_decay (Muon).
  :param ns_steps, ns_coefficients: orthogonalise each update with that many Newton-Schulz steps (Muon).
  """
  def __init__(self, params: Sequence[Tensor], lr: float = 0.001, momentum: float = 0.9, weight_decay: float = 1e-4,
               ns_steps: int = 0, ns_coefficients: tuple[float, float, float] | None = None, nesterov: bool = False,
               classic: bool = True, pre_wd: bool = True, tcoef: float = 0.001, device: str | None = None,
               fused: bool | None = None):
    if momentum < 0: raise ValueError(f"momentum must be >= 0, got {momentum}")
    if weight_decay < 0: raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
    if nesterov and momentum == 0: raise ValueError("nesterov needs a momentum above 0")
    if ns_coefficients is not None and (len(ns_coefficients) != 3 or ns_steps < 1):
      raise ValueError(f"Newton-Schulz needs 3 coefficients and ns_steps >= 1, got {ns_coefficients} and {ns_steps}")
    super().__init__(params, lr, device, fused)
    if ns_coefficients is not None and self.fused:
      raise ValueError("Muon orthogonalises each parameter's matrix: it cannot step them fused into one vector")
    self.momentum, self.wd, self.ns_steps, self.ns_coefficients = momentum, weight_decay, ns_steps, ns_coefficients
    self.nesterov, self.classic, self.pre_wd, self.tcoef = nesterov, classic, pre_wd, tcoef
    if ns_coefficients is not None:
      for p in self.params:
        if p.ndim < 2:
          raise ValueError(f"Muon updates matrices; a parameter has shape {p.shape} (optimize it with AdamW)")
    self.b = self._zeros_like_params() if momentum else []
    self._realize_state(*self.b)

  def _step(self, idx: list[int], params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    out = []
    for i, w, g in zip(idx, params, grads):
      g = g.cast(dtypes.float32)
      if self.tcoef != 0:
        r1, r2 = _l2(w), _l2(g)
        r: Tensor | float = (r1 > 0).where((r2 > 0).where(self.tcoef * r1 / (r2 + self.wd * r1), 1.0), 1.0)
      else: r = 1.0
      if self.pre_wd and self.wd > 0: g = g + self.wd * w
      if self.classic: g = (g if isinstance(r, float) else g * r) * self.lr  # r is 1.0 without a trust ratio
      if self.momentum:
        self.b[i].assign(self.momentum * self.b[i] + g)  # zero at the start, so the first step stores g
        g = g + self.momentum * self.b[i] if self.nesterov else self.b[i]
      lr = self.lr
      if self.ns_coefficients is not None:
        m = g.reshape(g.shape[0], -1)
        g = newton_schulz(m, self.ns_steps, self.ns_coefficients).reshape(g.shape)
        lr = lr * math.sqrt(max(1.0, m.shape[0] / m.shape[1]))  # PyTorch's "original" scaling for non-square matrices
      if not self.pre_wd and self.wd > 0: w = w * (1.0 - self.lr * self.wd)
      if not self.classic: g = (g if isinstance(r, float) else g * r) * lr  # r is 1.0 without a trust ratio
      out.append(w - g)
    return out, self.b


def newton_schulz(g: Tensor, steps: int, coefficients: tuple[float, float, float], eps: float = 1e-7) -> Tensor:
  """An approximately orthogonal matrix with the singular vectors of `g` (Muon's quintic iteration):
  X = g/|g|; then `steps` times A = X X^T, X = a X + (b A + c A A) X, on the wider orientation."""
  if g.ndim != 2: raise ValueError(f"newton_schulz takes a matrix, got shape {g.shape}")
  if g.shape[0] > g.shape[1]: return newton_schulz(g.T, steps, coefficients, eps).T
  a, b, c = coefficients
  x = g / _l2(g).maximum(eps)
  for _ in range(steps):
    gram = x @ x.T
    x = a * x + (b * gram + c * (gram @ gram)) @ x
  return x


def SGD(params: Sequence[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0,
        nesterov: bool = False, classic: bool = False, device: str | None = None, fused: bool | None = None) -> LARS:
  """Stochastic gradient descent with optional momentum, Nesterov momentum and L2 weight decay
  (PyTorch's SGD with dampening 0; `classic` puts the learning rate inside the momentum buffer)."""
  return LARS(params, lr, momentum, weight_decay, 0, None, nesterov, classic=classic, pre_wd=True, tcoef=0.0,
              device=device, fused=fused)


def Muon(params: Sequence[Tensor], lr: float = 0.001, momentum: float = 0.95, weight_decay: float = 0.1,
         ns_steps: int = 5, ns_coefficients: tuple[float, float, float] = (3.4445, -4.775, 2.0315),
         nesterov: bool = True, device: str | None = None, fused: bool | None = None) -> LARS:
  """Muon (Jordan et al. 2024): momentum SGD whose update is orthogonalised by Newton-Schulz steps,
  with decoupled weight decay and the step scaled by sqrt(max(1, rows/cols)) as PyTorch's Muon.
  Parameters of more than 2 dimensions are treated as (shape[0], rest) matrices.

  PyTorch's Muon keeps its momentum as an average (b = m*b + (1-m)*g); the orthogonalisation divides
  by the norm, so the sum used here (b = m*b + g, as tinygrad) gives the same steps.
  """
  # each matrix is orthogonalised on its own: FUSE_OPTIM does not apply (fused=True is refused)
  return LARS(params, lr, momentum, weight_decay, ns_steps, ns_coefficients, nesterov, classic=False, pre_wd=False,
              tcoef=0.0, device=device, fused=bool(fused))


class LAMB(Optimizer):
  """LAMB (You et al. 2019): Adam's step with weight decay, scaled per parameter by the trust ratio
  |w| / |step|. With `adam=True` the ratio is 1: Adam (weight_decay 0) or AdamW.

  :param b1, b2: the decay rates of the first and second moment estimates.
  :param eps: added to the square root of the second moment.
  """
  def __init__(self, params: Sequence[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
               weight_decay: float = 0.0, adam: bool = False, device: str | None = None, fused: bool | None = None):
    if not (0 <= b1 < 1 and 0 <= b2 < 1): raise ValueError(f"b1 and b2 must be in [0, 1), got {b1} and {b2}")
    if eps < 0: raise ValueError(f"eps must be >= 0, got {eps}")
    if weight_decay < 0: raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
    super().__init__(params, lr, device, fused)
    self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, weight_decay, adam
    # b1**t and b2**t for the bias correction, kept as tensors so every step runs the same kernels
    self.b1_t = Tensor.ones(1, dtype=dtypes.float32, device=self.device).requires_grad_(False)
    self.b2_t = Tensor.ones(1, dtype=dtypes.float32, device=self.device).requires_grad_(False)
    self.m = self._zeros_like_params()
    self.v = self._zeros_like_params()
    self._realize_state(self.b1_t, self.b2_t, *self.m, *self.v)

  def _step(self, idx: list[int], params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    self.b1_t.assign(self.b1_t * self.b1)
    self.b2_t.assign(self.b2_t * self.b2)
    # the bias corrections, once per step (the parameters' graphs share them); a step builds every op below for
    # every parameter in Python each time (each some microseconds), so none is made that changes nothing (x * 1.0,
    # x + 0.0 * w) and what depends on the step alone is made once
    c1, c2 = 1.0 - self.b1_t, 1.0 - self.b2_t
    if self.adam:  # torch's form: w * (1 - lr * wd) - lr / c1 * m / (sqrt(v) / sqrt(c2) + eps)
      step_size, c2_sqrt = self.lr / c1, c2.sqrt()
      decay = 1.0 - self.lr * self.wd if self.wd else None
    out = []
    for i, w, g in zip(idx, params, grads):
      g = g.cast(dtypes.float32)
      m = self.m[i].assign(self.b1 * self.m[i] + (1.0 - self.b1) * g)
      v = self.v[i].assign(self.b2 * self.v[i] + (1.0 - self.b2) * (g * g))
      if self.adam:
        out.append((w if decay is None else w * decay) - step_size * (m / (v.sqrt() / c2_sqrt + self.eps)))
        continue
      up = (m / c1) / ((v / c2).sqrt() + self.eps)
      if self.wd: up = up + self.wd * w
      r1, r2 = _l2(w), _l2(up)
      out.append(w - self.lr * (r1 > 0).where((r2 > 0).where(r1 / r2, 1.0), 1.0) * up)
    return out, [self.b1_t, self.b2_t] + self.m + self.v


def AdamW(params: Sequence[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
          weight_decay: float = 0.01, device: str | None = None, fused: bool | None = None) -> LAMB:
  """Adam with decoupled weight decay (Loshchilov & Hutter 2019): w -= lr * (adam_step + weight_decay * w)."""
  return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True, device=device, fused=fused)


def Adam(params: Sequence[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
         device: str | None = None, fused: bool | None = None) -> LAMB:
  """Adam (Kingma & Ba 2015) with bias-corrected moment estimates."""
  return LAMB(params, lr, b1, b2, eps, 0.0, adam=True, device=device, fused=fused)


__all__ = ["Optimizer", "OptimizerGroup", "LARS", "SGD", "Muon", "LAMB", "AdamW", "Adam", "newton_schulz"]
