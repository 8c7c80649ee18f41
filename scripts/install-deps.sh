#!/usr/bin/env bash
# Installs what moex builds and checks with (idempotent; needs root or sudo, skips what is already there): the Debian
# packages, and where nvcc is present but cuobjdump is not (the SASS census test), NVIDIA's cuobjdump and nvdisasm
# wheels from PyPI, linked into /usr/local/bin.
set -euo pipefail
pkgs=(cmake ninja-build g++ nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev googletest libopenblas-dev
      libpcre2-dev libutf8proc-dev pkg-config clang-format shellcheck python3-pip python3-venv ccache)
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
    echo "moex: installing ${missing[*]}" >&2
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The fuzz targets (scripts/fuzz.sh) need clang and its libFuzzer runtime, packaged per clang version.
if ! command -v clang++ >/dev/null; then
    echo "moex: installing clang" >&2
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq clang >/dev/null
fi
clang_major=$(clang++ -dumpversion | cut -d. -f1)
if ! dpkg -s "libclang-rt-$clang_major-dev" >/dev/null 2>&1 && apt-cache show "libclang-rt-$clang_major-dev" >/dev/null 2>&1; then
    echo "moex: installing libclang-rt-$clang_major-dev (libFuzzer)" >&2
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "libclang-rt-$clang_major-dev" >/dev/null
fi
nvcc_bin=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
if [[ -n $nvcc_bin ]] && ! command -v cuobjdump >/dev/null && [[ ! -x $(dirname "$nvcc_bin")/cuobjdump ]]; then
    tools=/opt/moex-cuda-tools
    echo "moex: installing cuobjdump and nvdisasm into $tools" >&2
    PIP_ROOT_USER_ACTION=ignore $sudo_cmd python3 -m pip install -q --disable-pip-version-check --target "$tools" nvidia-cuda-cuobjdump \
        nvidia-cuda-nvdisasm
    for t in cuobjdump nvdisasm; do
        bin=$(find "$tools" -name "$t" -type f | head -1)
        $sudo_cmd chmod +x "$bin"
        $sudo_cmd ln -sf "$bin" "/usr/local/bin/$t"
    done
fi
