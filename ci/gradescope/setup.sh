#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu): it
# installs what the grader needs and the course's virtual environment, from the course tree
# this zip holds in course/ (ci/gradescope/build_zip.sh puts it there).
#   bubblewrap   the sandbox every submission runs in (the grader refuses to grade without it)
#   util-linux   prlimit and setpriv: the sandbox's limits and its uid of its own
#   python3-venv the course's .venv: torch (CPU), Triton, numpy, nbval... pinned by
#                constraints.txt, about 2.5 GB, a few minutes
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq bubblewrap util-linux python3 python3-venv >/dev/null
cd /autograder/source/course
./course grade --help >/dev/null  # its first run sets up .venv, then prints the options
bwrap --ro-bind / / true || echo "warning: bubblewrap cannot make a sandbox in this image;" \
  "run_autograder will then score every submission 0 and say so (grade them offline)"
