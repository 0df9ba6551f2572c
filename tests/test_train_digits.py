"""examples/train_digits.py, briefly: a few training steps, the checkpoint it saves, and a second run
that loads that checkpoint and evaluates to the same accuracy."""
import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("sklearn", reason="the digits example needs scikit-learn (pip install -e '.[examples]')")

_spec = importlib.util.spec_from_file_location("train_digits", Path(__file__).parents[1] / "examples/train_digits.py")
train_digits = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train_digits)


def test_train_save_then_load_and_evaluate(tmp_path, capsys):
  ckpt = tmp_path / "digits.safetensors"
  trained = train_digits.main(["--checkpoint", str(ckpt), "--steps", "20", "--batch", "32"])
  out = capsys.readouterr()
  assert ckpt.exists() and "saved" in out.out
  assert "20/20" in out.err and "steps/s" in out.err and "loss" in out.err  # the progress bar
  assert trained > 0.5  # 20 steps already learn most digits; the full run reaches 97% and more
  loaded = train_digits.main(["--checkpoint", str(ckpt)])  # the file exists: load and evaluate
  assert "loaded" in capsys.readouterr().out
  assert loaded == trained


def test_eval_without_a_checkpoint_says_what_to_do(tmp_path):
  with pytest.raises(SystemExit, match="run without --eval"):
    train_digits.main(["--checkpoint", str(tmp_path / "none.safetensors"), "--eval"])
