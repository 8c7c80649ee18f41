#!/usr/bin/env bash
# Installs the Debian packages moex builds with (idempotent). Needs root or sudo; skips what is already there.
set -euo pipefail
pkgs=(cmake ninja-build g++ nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev googletest libopenblas-dev libpcre2-dev libutf8proc-dev)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  echo "moex: installing ${missing[*]}" >&2
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
