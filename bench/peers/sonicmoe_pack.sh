#!/usr/bin/env bash
# Packs SonicMoE (the PyPI `sonic-moe` and the wheels it needs, in the version pairing that imports with the GPU
# machine's torch; ../shared/perf/peers/README.md) into DIR (default .peers, git-ignored) for bench/cuda_side_by_side.sh
# to carry to the GPU machine, which has no package index. Run here (needs network), once:
#   bash bench/peers/sonicmoe_pack.sh [DIR]
# DIR gets: wheels/ (the small wheels, ~4.6 MB), libs-base.part-NN (nvidia-cutlass-dsl-libs-base unpacked, its shared
# libraries stripped, tar.xz, cut in parts of PART_MB so that each part plus the working tree fits one call's 64 MiB
# carry) and sonicmoe_bench.py (the shared peers' bench script). Env: PART_MB (28), PEERS_BENCH (that script's path).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DIR=$(realpath -m "${1:-$ROOT/.peers}")
PART_MB=${PART_MB:-28}
BENCH=${PEERS_BENCH:-$ROOT/../shared/perf/peers/sonicmoe_bench.py}
# sonic-moe 0.1.2.post1 pins nvidia-cutlass-dsl 4.4.2; quack-kernels 0.6.x needs a newer cutlass-dsl, so 0.4.1.
PINS=(sonic-moe==0.1.2.post1 quack-kernels==0.4.1 nvidia-cutlass-dsl==4.4.2 "apache-tvm-ffi<0.2" torch-c-dlpack-ext)
LIBS=nvidia-cutlass-dsl-libs-base==4.4.2
pip_get() {
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --platform manylinux_2_28_x86_64 -d "$@"
}

for tool in xz strip split unzip; do command -v "$tool" >/dev/null || { echo "sonicmoe_pack: needs $tool" >&2; exit 1; }; done
[[ -f $BENCH ]] || { echo "sonicmoe_pack: no bench script at $BENCH (set PEERS_BENCH)" >&2; exit 1; }
# Only this script's own outputs are replaced: DIR also holds other peers' files (cpu/ for the CPU host's ggml binary,
# quack-cache.tar.xz from a GPU run).
rm -rf "$DIR/wheels" "$DIR"/libs-base.* "$DIR/sonicmoe_bench.py" && mkdir -p "$DIR/wheels"
work=$(mktemp -d /tmp/sonicmoe_pack.XXXXXX)
trap 'rm -rf "$work"' EXIT

pip_get "$DIR/wheels" "${PINS[@]}"
pip_get "$work" "$LIBS"
mkdir "$work/site"
unzip -q "$work"/nvidia_cutlass_dsl_libs_base-*.whl -d "$work/site"
find "$work/site" -name '*.so*' -type f -exec strip --strip-unneeded {} + 2>/dev/null || true
tar -C "$work/site" -cf - . | xz -9e -T0 >"$work/libs-base.tar.xz"
split -b "${PART_MB}M" -d -a 2 "$work/libs-base.tar.xz" "$DIR/libs-base.part-"
cp "$BENCH" "$DIR/sonicmoe_bench.py"
(cd "$DIR" && sha256sum libs-base.part-* >libs-base.sha256)
echo "sonicmoe_pack: $(du -sh "$DIR" | cut -f1) in $DIR:"
find "$DIR" -type f -printf '  %P  %s bytes\n' | sort
