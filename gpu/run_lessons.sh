#!/usr/bin/env bash
# Usage: gpu/run_lessons.sh OUT_DIR [PART...]   (on a CUDA machine, from the repository root)
# PART: checks (gpu/check_*.py), notebooks (every solution under strict nbval), replay (the
# grader's record and replay); all three when none is named. NBVAL_WORKERS=N runs N notebooks
# at once (pytest-xdist), for a machine whose time is counted.
set -uo pipefail
out="${1:?usage: gpu/run_lessons.sh OUT_DIR [checks] [notebooks] [replay]}"
shift
parts="${*:-checks notebooks replay}"
mkdir -p "$out/results"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export FLASHCOURSE_INTERPRET=0 FLASHCOURSE_RESULTS_DIR="$out/results"
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU'" || exit 1
python3 -c "import torch, triton; print(f'torch {torch.__version__}, Triton {triton.__version__}, '
                                    f'{torch.cuda.get_device_name()}')"
status=0
if [[ " $parts " == *" checks "* ]]; then
  for check in gpu/check_*.py; do
    echo "== $check"
    start=$(date +%s)
    python3 "$check" || status=1
    echo "   $(( $(date +%s) - start )) s"
  done
fi
if [[ " $parts " == *" notebooks "* ]]; then
  echo "== solution notebooks under nbval (compiled Triton)"
  start=$(date +%s)
  workers=()
  [[ "${NBVAL_WORKERS:-1}" -gt 1 ]] && workers=(-n "$NBVAL_WORKERS" --dist loadscope)
  python3 -m pytest -q -p no:cacheprovider -o addopts= --nbval --nbval-current-env \
    --nbval-cell-timeout=600 --nbval-kernel-startup-timeout=300 "${workers[@]}" \
    solutions/*.ipynb 2>&1 | tail -15 || status=1
  echo "   $(( $(date +%s) - start )) s"
fi
if [[ " $parts " == *" replay "* ]]; then
  echo "== grading: each solution notebook recorded in a sandbox's way, then replayed"
  start=$(date +%s)
  python3 gpu/grading_replay.py --csv "$out/grading-replay.csv" || status=1
  echo "   $(( $(date +%s) - start )) s"
fi
exit $status
