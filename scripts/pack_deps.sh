#!/usr/bin/env bash
# Copies the Debian build dependencies that the GPU machine's image lacks (nlohmann-json, fmt, CLI11, GoogleTest
# sources, PCRE2, utf8proc: headers, libraries and CMake package files) into DIR/usr, to carry there as DIR.
# scripts/gpu/lib.sh points CMAKE_PREFIX_PATH at it. Usage: bash scripts/pack_deps.sh [DIR=.deps]
set -euo pipefail
cd "$(dirname "$0")/.."
dst=${1:-.deps}
arch=x86_64-linux-gnu
mkdir -p "$dst/usr/include" "$dst/usr/lib/$arch/cmake" "$dst/usr/share/cmake" "$dst/usr/src"
cp -a /usr/include/pcre2.h /usr/include/utf8proc.h "$dst/usr/include/"
for d in nlohmann fmt CLI gtest gmock; do [[ -d /usr/include/$d ]] && cp -a "/usr/include/$d" "$dst/usr/include/"; done
for f in "/usr/lib/$arch"/libfmt.so* "/usr/lib/$arch"/libpcre2-8.so* "/usr/lib/$arch"/libutf8proc.so*; do
    [[ -e $f ]] && cp -a "$f" "$dst/usr/lib/$arch/"
done
[[ -d /usr/lib/$arch/cmake/fmt ]] && cp -a "/usr/lib/$arch/cmake/fmt" "$dst/usr/lib/$arch/cmake/"
for d in nlohmann_json CLI11; do [[ -d /usr/share/cmake/$d ]] && cp -a "/usr/share/cmake/$d" "$dst/usr/share/cmake/"; done
[[ -d /usr/src/googletest ]] && cp -a /usr/src/googletest "$dst/usr/src/"
echo "packed into $dst ($(du -sh "$dst" | cut -f1)); carry it as $dst"
