#!/usr/bin/env bash
# The source tree of a commit, for gpu_check.sh's `before` step to build beside this one on the GPU machine (which
# gets the working tree, not .git). Writes .gpubin/src-<short sha> (ignored by git; pass `.gpubin` in the run's carry)
# and prints its path.
# Usage: bash scripts/gpu/export_tree.sh [REF]   (default: HEAD)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
sha=$(git rev-parse --short "${1:-HEAD}^{commit}")
dir=.gpubin/src-$sha
rm -rf "$dir"
mkdir -p "$dir"
git archive "$sha" | tar -x -C "$dir"
echo "$dir"
