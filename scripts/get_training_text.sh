#!/usr/bin/env bash
# Writes the training text of the embedded model: the King James Bible (public domain) from Debian's bible-kjv-text
# package, as clean UTF-8: one verse per line without its reference, one blank line between chapters.
# Usage: scripts/get_training_text.sh OUT.txt   (installs bible-kjv and bible-kjv-text with apt-get when missing)
set -euo pipefail

out=${1:?usage: $0 OUT.txt}

# The text ships compressed (/usr/lib/bible.data); the `bible` reader from bible-kjv decompresses it.
if ! command -v bible >/dev/null 2>&1 || [ ! -f /usr/lib/bible.data ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends bible-kjv bible-kjv-text
fi

raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
# -f turns pretty-printing off: one verse a line, "Ge1:1 In the beginning ...". Gen1:1-Rev22:21 is the whole text.
bible -f Gen1:1-Rev22:21 </dev/null >"$raw"

verses=$(wc -l <"$raw")
if [ "$verses" -ne 31102 ]; then  # the KJV has 31,102 verses
  echo "get_training_text.sh: expected 31102 verses from 'bible', got $verses" >&2
  exit 1
fi

# Drop the reference ("1Sm3:10 ") and start a new paragraph whenever book or chapter changes. The references are
# dropped because a model this small spends much of its capacity on them and then prints number soup; the chapter
# breaks stay, as the places where the training script puts <|endoftext|>.
mkdir -p "$(dirname "$out")"
awk '
  match($0, /^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ /) {
    ref = substr($0, 1, RLENGTH - 1)
    chapter = ref; sub(/:[0-9]+$/, "", chapter)
    if (NR > 1 && chapter != last) printf "\n"
    last = chapter
    text = substr($0, RLENGTH + 1); sub(/[ \t\r]+$/, "", text)
    print text
    next
  }
  { printf "get_training_text.sh: line %d has no verse reference: %s\n", NR, $0 > "/dev/stderr"; exit 1 }
' "$raw" >"$out"

# The text is ASCII today; check it is at least valid UTF-8 so that a changed package cannot slip bad bytes in.
iconv -f UTF-8 -t UTF-8 "$out" >/dev/null
chapters=$(grep -c '^$' "$out" || true)
echo "wrote $out: $verses verses, $((chapters + 1)) chapters, $(wc -c <"$out") bytes" >&2
