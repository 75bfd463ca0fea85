#!/usr/bin/env bash
# Usage: gpu/run_lessons.sh OUT_DIR   (on a CUDA machine, from the repository root)
set -uo pipefail
out="${1:?usage: gpu/run_lessons.sh OUT_DIR}"
mkdir -p "$out/results"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export FLASHCOURSE_INTERPRET=0 FLASHCOURSE_RESULTS_DIR="$out/results"
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU'" || exit 1
python3 -c "import torch, triton; print(f'torch {torch.__version__}, Triton {triton.__version__}, '
                                    f'{torch.cuda.get_device_name()}')"
status=0
for check in gpu/check_*.py; do
  echo "== $check"
  start=$(date +%s)
  python3 "$check" || status=1
  echo "   $(( $(date +%s) - start )) s"
done
echo "== solution notebooks under nbval (compiled Triton)"
for nb in solutions/*.ipynb; do
  start=$(date +%s)
  python3 -m pytest -q -p no:cacheprovider -o addopts= --nbval --nbval-current-env \
    --nbval-cell-timeout=600 "$nb" 2>&1 | tail -2 || status=1
  echo "   $nb: $(( $(date +%s) - start )) s"
done
echo "== grading: each solution notebook recorded in a sandbox's way, then replayed"
start=$(date +%s)
python3 gpu/grading_replay.py --csv "$out/grading-replay.csv" || status=1
echo "   $(( $(date +%s) - start )) s"
exit $status
