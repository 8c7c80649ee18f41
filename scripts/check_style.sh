#!/usr/bin/env bash
# The tree's written rules, checked: clang-format (the repository's .clang-format) over every C++/CUDA source, the
# scripts through shellcheck, the layering of includes (what each folder may include; docs/design.md), and that every
# kernel launched through launch_pdl calls pdl_enter first (scripts/check_pdl.py).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
fail=0
mapfile -t sources < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | grep -v '^tests/data/')
if ! clang-format --style=file --dry-run --Werror "${sources[@]}" 2>/tmp/moex-format.txt; then
    echo "check_style: clang-format finds files to reformat (clang-format -i FILE):"
    grep -E '^[^ ].*: (error|warning)' /tmp/moex-format.txt | cut -d: -f1 | sort -u | sed 's/^/  /'
    fail=1
fi
mapfile -t scripts < <(git ls-files '*.sh' .ci/run)
shellcheck -x "${scripts[@]}" || fail=1

# includes_of FOLDER: "file: included path" for every quoted include under FOLDER.
includes_of() { git ls-files "$1" | grep -E '\.(cpp|h|cu|cuh)$' | xargs -r grep -Ho '#include "[^"]*"' | sed 's/#include "//; s/"$//'; }
# forbid FOLDER REGEX WHY [SKIP]: no file under FOLDER (but those whose path matches SKIP) includes a path matching REGEX.
forbid() {
    local bad
    bad=$(includes_of "$1" | awk -F: -v re="$2" -v skip="${4:-^$}" '$2 ~ re && $1 !~ skip')
    if [[ -n $bad ]]; then
        echo "check_style: $3:"
        echo "  ${bad//$'\n'/$'\n'  }"
        fail=1
    fi
}
forbid include/moex '^(src|cuda|tools|bench|common|tests)/' "the public headers include only moex/"
forbid cuda '^(src|tools|bench|common|tests)/|^moex/(tensor|experts|backend|model|device|ep)' \
    "cuda/ includes only cuda/ and moex/ value types (dtype, activation, error)"
forbid src '^(tools|bench|common|tests)/' "the library does not include the programs or the tests"
forbid common '^(src|cuda|tools|bench|tests)/' "common/ uses the public API only"
forbid tools '^(src|tests)/|^cuda/(experts|gemm|routing|model)/' "the programs use the public API, common/ and cuda's memory/timing"
forbid bench '^tests/|^src/([^c]|c[^p]|cp[^u]|cpu/[^gp])' "bench/ is white-box for src/cpu/gemm.h and placement.h only" \
    '^bench/micro/'
forbid bench/micro '^tests/|^src/([^c]|c[^p]|cp[^u])' "bench/micro/ times single kernels: white-box for src/cpu/ only"
outside_io=$(git ls-files src | grep -v '^src/io/' | grep -E '\.(cpp|h)$' | xargs grep -l '"src/io/safetensors_header.h"' || true)
[[ -z $outside_io ]] || { echo "check_style: src/io/safetensors_header.h is internal to src/io: $outside_io"; fail=1; }
python3 scripts/check_pdl.py || fail=1  # every kernel launched with PDL waits first (cuda/common/pdl.cuh)
((fail == 0)) && echo "check_style: format, shellcheck, include layering and the PDL rule OK"
exit $fail
