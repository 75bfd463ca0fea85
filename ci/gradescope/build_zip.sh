#!/usr/bin/env bash
# ci/gradescope/build_zip.sh [ZIP]: the autograder zip to upload to Gradescope (default
# autograder.zip): setup.sh and run_autograder at its root, as Gradescope wants them, and the
# course at HEAD in course/ (its checks hold the references and hidden cases: keep the zip
# with the instructors).
set -euo pipefail
cd "$(dirname "$0")/../.."
zip_path=$(realpath -m "${1:-autograder.zip}")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
git archive --format=tar --prefix=course/ HEAD | tar -x -C "$stage"
cp ci/gradescope/setup.sh ci/gradescope/run_autograder "$stage/"
chmod +x "$stage/setup.sh" "$stage/run_autograder"
rm -f "$zip_path"
(cd "$stage" && python3 -m zipfile -c "$zip_path" setup.sh run_autograder course)
echo "wrote $zip_path: upload it as the assignment's autograder (Configure Autograder, zip)"
