#!/usr/bin/env bash
# The CUDA plugin's hardware check, for a machine with an NVIDIA GPU (run from the repository root):
# installs the core and the plugins non-editable as a user would (from this checkout, no network:
# numpy, pluggy, llvmlite, the nvidia-cuda-nvrtc/-runtime wheels and torch must be there already),
# then runs the plugin's tests, the conformance suite on CUDA, the demo and examples/train_digits.py
# on CUDA, bench/bench_cuda.py and bench/bench_engine.py --device CUDA, and last (as time allows)
# the core's test suite with DEVICE=CUDA. Each step has its own time limit, so one hang costs only
# its step; logs go to $OUT (or ./gpu_check_out), one per step.
#
#   bash plugins/cuda/gpu_check.sh [STEP...]     # steps: install tests conformance examples bench suite
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
steps=${*:-install tests conformance examples bench suite}

step() {  # step NAME SECONDS COMMAND...: run COMMAND with a limit, log to $OUT/NAME.log, say how it ended
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "=== $name: $*"
  timeout -k 5 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  tail -n "${TAIL:-15}" "$OUT/$name.log"
  echo "=== $name: rc=$rc in $((SECONDS - t0)) s"
}

for s in $steps; do
  case $s in
    install)
      nvidia-smi -L; $PY --version
      # every plugin, as the README's install does (the suite's tests of other devices skip where those cannot run)
      step install 180 $PY -m pip install --no-deps --no-build-isolation --no-index . ./plugins/cuda ./plugins/cpu_llvm \
        ./plugins/opencl_qcom ./plugins/metal ./plugins/mpi ./examples/c_device
      step devices 60 $PY -m plugrad devices ;;
    tests)
      step plugin_tests 150 $PY -m pytest -q -rs -p no:cacheprovider plugins/cuda/tests ;;
    conformance)
      TAIL=25 step conformance 240 $PY -m plugrad conformance CUDA -q -rf --tb=short --maxfail=30 ;;
    examples)
      step demo 120 env DEVICE=CUDA $PY examples/demo.py
      step train_digits 240 env DEVICE=CUDA $PY examples/train_digits.py --train ;;
    bench)
      TAIL=30 step bench_cuda 300 $PY bench/bench_cuda.py
      step bench_engine 150 $PY bench/bench_engine.py --device CUDA ;;
    suite)
      TAIL=40 step suite "${SUITE_LIMIT:-300}" env DEVICE=CUDA $PY -m pytest -q -rf --tb=line -p no:cacheprovider \
        -n "${SUITE_WORKERS:-8}" --timeout 120 tests ;;
    *) echo "unknown step $s"; exit 2 ;;
  esac
done
