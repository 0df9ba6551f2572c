"""examples/train_digits_dp.py run alone (a group of one): its check against one process runs and matches; under
mpirun it is run by .ci/run (and plugins/mpi's tests cover the collectives)."""
import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("sklearn", reason="the digits example needs scikit-learn (pip install -e '.[examples]')")

EXAMPLES = Path(__file__).parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))  # the example imports train_digits beside it
_spec = importlib.util.spec_from_file_location("train_digits_dp", EXAMPLES / "train_digits_dp.py")
train_digits_dp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train_digits_dp)


def test_alone_the_curves_match(capsys):
  diff = train_digits_dp.main(["--steps", "4", "--batch", "16"])
  lines = capsys.readouterr().out.strip().splitlines()
  assert diff == 0.0 and lines[-1].startswith("loss curves match")


def test_model_without_batchnorm_has_no_batchnorm_state():
  names = train_digits_dp.get_state_dict(train_digits_dp.DigitsNet(batchnorm=False))
  assert not any(n.startswith("bn") for n in names)
