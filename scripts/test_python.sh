#!/usr/bin/env bash
# The Python package's test (part of scripts/test.sh): `pip install .` from this checkout into a virtual environment
# kept outside it (PyPI's torch wheel is large: the environment and pip's download cache are reused between runs),
# then pytest over tests/python against the installed package. Env: MOEX_PY_VENV (default ~/.cache/moex/venv),
# MOEX_PY_REQUIREMENTS (default the pins below).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${MOEX_PY_VENV:-$HOME/.cache/moex/venv}
if [[ ! -x $venv/bin/python ]]; then
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
fi
py=$venv/bin/python
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
# shellcheck disable=SC2086  # a list of requirement specifiers
"$py" -m pip install -q ${MOEX_PY_REQUIREMENTS:-torch==2.15.0 transformers==5.23.0 accelerate==1.15.0 pytest}
# The package itself, built from this checkout by scikit-build-core + nanobind (CUDA sources too when nvcc is found).
"$py" -m pip install -q --force-reinstall --no-deps .
cd tests/python  # the installed package, not the source folder, is what the tests import
"$py" -m pytest -q -p no:cacheprovider .
