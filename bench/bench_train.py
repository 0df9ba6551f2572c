"""One training step (forward, backward, optimizer update) of an MLP, of a small CNN, of tinygrad's
`beautiful_mnist` CNN (under TinyJit, as that example runs it) and of a 2-layer GPT-style language model (eager, eager
with each library's fused AdamW, and under TinyJit): plugrad on the default device against torch eager on the CPU,
measured in the same run.

Both start from the same weights and data, and the first step's losses are checked to agree before
anything is timed. Prints the median step time of each (timed in blocks of steps, as a training loop runs them)
and the ratio (>1: plugrad is faster); then the LM's eager mean step time (the collector's pauses included) with
Python's garbage collector as plugrad leaves it and after gc.freeze().
Run: `python bench/bench_train.py` (options: --repeat N, --batch N). Needs torch (the test extra).
"""
from __future__ import annotations

import argparse
import gc
import os
import time
from typing import Callable

import numpy as np
import torch

from plugrad import Tensor, TinyJit, nn
from plugrad.nn.state import get_parameters, get_state_dict

from _timing import median_time  # bench/ is the script's folder, so on sys.path


class MLP:
  def __init__(self):
    self.l1, self.l2 = nn.Linear(784, 256), nn.Linear(256, 10)

  def __call__(self, x: Tensor) -> Tensor: return self.l2(self.l1(x.flatten(1)).relu())


class CNN:
  def __init__(self):
    self.c1, self.c2, self.fc = nn.Conv2d(1, 8, 3), nn.Conv2d(8, 16, 3), nn.Linear(16 * 5 * 5, 10)

  def __call__(self, x: Tensor) -> Tensor:
    x = self.c1(x).relu().max_pool2d(2)
    x = self.c2(x).relu().max_pool2d(2)
    return self.fc(x.flatten(1))


class BeautifulMNIST:
  """The model of tinygrad's examples/beautiful_mnist.py."""

  def __init__(self):
    self.c1, self.c2, self.bn1 = nn.Conv2d(1, 32, 5), nn.Conv2d(32, 32, 5), nn.BatchNorm(32)
    self.c3, self.c4, self.bn2 = nn.Conv2d(32, 64, 3), nn.Conv2d(64, 64, 3), nn.BatchNorm(64)
    self.fc = nn.Linear(576, 10)

  def __call__(self, x: Tensor) -> Tensor:
    x = self.bn1(self.c2(self.c1(x).relu())).relu().max_pool2d()
    x = self.bn2(self.c4(self.c3(x).relu())).relu().max_pool2d()
    return self.fc(x.flatten(1))


class Block:
  """A pre-norm transformer block: causal self-attention from one qkv projection, then a GELU MLP."""

  def __init__(self, d: int, heads: int):
    self.heads = heads
    self.ln1, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
    self.ln2, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

  def __call__(self, x: Tensor) -> Tensor:
    b, t, d = x.shape
    qkv = self.qkv(self.ln1(x)).split(d, dim=-1)
    q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in qkv)
    x = x + self.proj(q.scaled_dot_product_attention(k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
    return x + self.fc2(self.fc1(self.ln2(x)).gelu())


class TinyLM:
  """A 2-layer GPT-style language model (width 64, 4 heads, context 32, 64 tokens)."""
  vocab, width, heads, layers, context = 64, 64, 4, 2, 32

  def __init__(self):
    self.tok, self.pos = nn.Embedding(self.vocab, self.width), nn.Embedding(self.context, self.width)
    self.blocks = [Block(self.width, self.heads) for _ in range(self.layers)]
    self.ln, self.head = nn.LayerNorm(self.width), nn.Linear(self.width, self.vocab, bias=False)

  def __call__(self, idx: Tensor) -> Tensor:
    x = self.tok(idx) + self.pos(Tensor.arange(idx.shape[1]))
    for blk in self.blocks: x = blk(x)
    return self.head(self.ln(x))


def torch_lm() -> torch.nn.Module:
  """TinyLM in torch, with the same state dict names (GELU in its tanh form, as tinygrad's and plugrad's)."""
  F = torch.nn.functional

  class TBlock(torch.nn.Module):
    def __init__(self, d: int, heads: int):
      super().__init__()
      self.heads = heads
      self.ln1, self.qkv, self.proj = torch.nn.LayerNorm(d), torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
      self.ln2, self.fc1, self.fc2 = torch.nn.LayerNorm(d), torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
      b, t, d = x.shape
      qkv = self.qkv(self.ln1(x)).split(d, -1)
      q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in qkv)
      x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
      return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

  class TLM(torch.nn.Module):
    def __init__(self):
      super().__init__()
      c = TinyLM
      self.tok, self.pos = torch.nn.Embedding(c.vocab, c.width), torch.nn.Embedding(c.context, c.width)
      self.blocks = torch.nn.ModuleList([TBlock(c.width, c.heads) for _ in range(c.layers)])
      self.ln, self.head = torch.nn.LayerNorm(c.width), torch.nn.Linear(c.width, c.vocab, bias=False)

    def forward(self, idx):
      x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
      for blk in self.blocks: x = blk(x)
      return self.head(self.ln(x))
  return TLM()


def torch_twin(name: str) -> torch.nn.Module:
  """The same architecture in torch, with attribute names that match the plugrad model's state dict."""
  if name == "beautiful_mnist":
    m = torch.nn.Module()
    m.c1, m.c2, m.bn1 = torch.nn.Conv2d(1, 32, 5), torch.nn.Conv2d(32, 32, 5), torch.nn.BatchNorm2d(32)
    m.c3, m.c4, m.bn2 = torch.nn.Conv2d(32, 64, 3), torch.nn.Conv2d(64, 64, 3), torch.nn.BatchNorm2d(64)
    m.fc = torch.nn.Linear(576, 10)
    relu, pool = torch.relu, torch.nn.functional.max_pool2d
    block1 = lambda x: pool(relu(m.bn1(m.c2(relu(m.c1(x))))), 2)  # noqa: E731
    m.forward = lambda x: m.fc(pool(relu(m.bn2(m.c4(relu(m.c3(block1(x)))))), 2).flatten(1))
  elif name == "mlp":
    m = torch.nn.Module()
    m.l1, m.l2 = torch.nn.Linear(784, 256), torch.nn.Linear(256, 10)
    m.forward = lambda x: m.l2(m.l1(x.flatten(1)).relu())
  else:
    m = torch.nn.Module()
    m.c1, m.c2, m.fc = torch.nn.Conv2d(1, 8, 3), torch.nn.Conv2d(8, 16, 3), torch.nn.Linear(16 * 5 * 5, 10)
    pool = torch.nn.functional.max_pool2d
    m.forward = lambda x: m.fc(pool(m.c2(pool(m.c1(x).relu(), 2)).relu(), 2).flatten(1))
  return m


def train_step_of(model, opt: nn.optim.Optimizer, xt: Tensor, yt: Tensor) -> Callable[[], Tensor]:
  """One training step of `model` on (xt, yt), returning the loss."""
  def train_step() -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      loss = model(xt).sparse_categorical_crossentropy(yt)
      loss.backward()
      # the loss runs with the update, in one realize (as opt.step() would do; tinygrad's form)
      Tensor.realize(loss, *opt.schedule_step())
    return loss
  return train_step


def bench_gc(model: TinyLM, steps: int) -> None:
  """Eager steps of the LM, mean wall time of `steps` in a row (the median hides the collector's pauses): with
  Python's garbage collector as plugrad leaves it (PLUGRAD_GC_THRESHOLD), then after gc.freeze() (what exists now is
  left out of its scans)."""
  rng = np.random.default_rng(1)
  tokens = rng.integers(0, TinyLM.vocab, (16, TinyLM.context + 1)).astype(np.int32)
  step = train_step_of(model, nn.optim.AdamW(get_parameters(model), lr=1e-3), Tensor(tokens[:, :-1]),
                       Tensor(tokens[:, 1:]))
  means = []
  for freeze in (False, True):
    if freeze: gc.freeze()
    for _ in range(3): step().item()
    st = time.perf_counter()
    for _ in range(steps): step().item()
    means.append((time.perf_counter() - st) / steps)
  gc.unfreeze()
  print(f"{'tiny_lm adamw eager, mean of ' + str(steps):<24}  plugrad {means[0] * 1e3:8.2f} ms/step  after gc.freeze() "
        f"{means[1] * 1e3:8.2f} ms/step  ({means[0] / means[1]:.2f}x)", flush=True)


def bench_loss_read_rarely(model: TinyLM, repeat: int, every: int = 10) -> None:
  """Eager steps of the LM whose loss is read every `every` steps (a loop that logs now and then) against the same
  steps reading every loss: a CPU realize returns while its kernels run, so the next step's graph is built
  meanwhile, where reading the loss waits for them at every step."""
  rng = np.random.default_rng(1)
  tokens = rng.integers(0, TinyLM.vocab, (16, TinyLM.context + 1)).astype(np.int32)
  step = train_step_of(model, nn.optim.AdamW(get_parameters(model), lr=1e-3), Tensor(tokens[:, :-1]),
                       Tensor(tokens[:, 1:]))

  def block(read_each: bool) -> float:
    for _ in range(every - 1):
      loss = step()
      if read_each: loss.item()
    return step().item()
  each = median_time(lambda: block(True), repeat, warmup=1) / every
  rarely = median_time(lambda: block(False), repeat, warmup=1) / every
  print(f"{'tiny_lm adamw eager':<24}  loss read every step {each * 1e3:8.2f} ms/step  every {every} steps "
        f"{rarely * 1e3:8.2f} ms/step  ({each / rarely:.2f}x)", flush=True)


def bench(name: str, model, opt_name: str, batch: int, repeat: int, jit: bool = False) -> None:
  rng = np.random.default_rng(0)
  if name == "tiny_lm":  # token windows: each position predicts the next token
    tokens = rng.integers(0, TinyLM.vocab, (batch, TinyLM.context + 1)).astype(np.int32)
    x, y = tokens[:, :-1], tokens[:, 1:]
    tmodel = torch_lm()
  else:
    x = rng.standard_normal((batch, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, batch).astype(np.int32)
    tmodel = torch_twin(name)
  tmodel.load_state_dict({k: torch.tensor(v.numpy()) for k, v in get_state_dict(model).items()})
  make = {"sgd": (lambda p: nn.optim.SGD(p, lr=0.01, momentum=0.9),
                  lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)),
          "adam": (lambda p: nn.optim.Adam(p, lr=1e-3), lambda p: torch.optim.Adam(p, lr=1e-3)),
          "adamw": (lambda p: nn.optim.AdamW(p, lr=1e-3), lambda p: torch.optim.AdamW(p, lr=1e-3)),
          # every parameter in one update: tinygrad's fused=True, torch's fused kernel
          "adamw_fused": (lambda p: nn.optim.AdamW(p, lr=1e-3, fused=True),
                          lambda p: torch.optim.AdamW(p, lr=1e-3, fused=True))}[opt_name]
  opt, topt = make[0](get_parameters(model)), make[1](tmodel.parameters())
  xt, yt = Tensor(x), Tensor(y)
  # torch takes token indices (and class labels) as int64
  xtt, ytt = torch.tensor(x).long() if x.dtype == np.int32 else torch.tensor(x), torch.tensor(y).long()

  train_step = train_step_of(model, opt, xt, yt)
  run = TinyJit(train_step) if jit else train_step

  def step() -> float: return run().item()

  def tstep() -> float:
    topt.zero_grad()
    out = tmodel(xtt)
    loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), ytt.reshape(-1))
    loss.backward()
    topt.step()
    return loss.item()

  ours, theirs = step(), tstep()
  if abs(ours - theirs) > 1e-4 * max(1.0, abs(theirs)): raise AssertionError(f"{name}: loss {ours} != torch's {theirs}")
  # each in a block of its own, after a pause: in alternation each library's worker threads, still spinning after its
  # step, took a core from the other's (torch's TinyLM step: 4.6 ms alone, 6.6 ms alternated; plugrad's under
  # TinyJit 2.4 and 3.9 ms)
  tp, tt = median_time(step, repeat, warmup=3), median_time(tstep, repeat, warmup=3)
  label = f"{name} {opt_name} batch {batch}{' TinyJit' if jit else ''}"
  print(f"{label:<24}  plugrad {tp * 1e3:8.2f} ms/step  torch {tt * 1e3:8.2f} ms/step  ratio {tt / tp:5.2f}x",
        flush=True)


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--repeat", type=int, default=20)
  ap.add_argument("--batch", type=int, default=64)
  args = ap.parse_args()
  torch.set_num_threads(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
  print(f"plugrad device {Tensor(0).device}, torch {torch.__version__} on CPU with {torch.get_num_threads()} threads")
  Tensor.manual_seed(0)
  for opt_name in ("sgd", "adam"):
    bench("mlp", MLP(), opt_name, args.batch, args.repeat)
    bench("cnn", CNN(), opt_name, args.batch, args.repeat)
  bench("beautiful_mnist", BeautifulMNIST(), "adam", 128, max(3, args.repeat // 4), jit=True)
  lm = TinyLM()  # one model for all: the eager runs' steps are the TinyJit run's warm-up
  bench("tiny_lm", lm, "adamw", 16, args.repeat)
  bench("tiny_lm", lm, "adamw_fused", 16, args.repeat)
  bench("tiny_lm", lm, "adamw", 16, args.repeat, jit=True)
  bench_gc(lm, 5 * args.repeat)
  bench_loss_read_rarely(lm, max(3, args.repeat // 2))


if __name__ == "__main__":
  main()
