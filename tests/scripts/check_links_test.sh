#!/usr/bin/env bash
# tests/scripts/check_links_test.sh -- scripts/check_links.sh on planted objects: a runtime
# object that needs a function only nn defines (the inversion the rnn op's definition once made)
# fails the check, naming both; the same objects the right way round pass; a kiln function no
# object defines (a stand-in missing from a build without CUDA) fails too.
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
plant() {  # plant FOLDER NAME CODE: an object of the kiln library from FOLDER
  mkdir -p "$tmp/CMakeFiles/kiln.dir/$1"
  printf '%s\n' "$3" >"$tmp/$2.cpp"
  c++ -c "$tmp/$2.cpp" -o "$tmp/CMakeFiles/kiln.dir/$1/$2.cpp.o"
}
plant runtime low 'int planted_high(int); int planted_low(int x) { return planted_high(x) + 1; }'
plant nn high 'int planted_high(int x) { return 2 * x; }'
if out="$("$src/scripts/check_links.sh" "$tmp" 2>&1)"; then
  echo "FAIL: a runtime object needing nn's planted_high passed: $out"
  exit 1
fi
grep -q "runtime needs planted_high(int), defined only in nn" <<<"$out" || { echo "FAIL: unexpected report: $out"; exit 1; }
echo "refused as expected: $out"

rm -rf "$tmp/CMakeFiles"
plant nn low 'int planted_high(int); int planted_low(int x) { return planted_high(x) + 1; }'
plant runtime high 'int planted_high(int x) { return 2 * x; }'
out="$("$src/scripts/check_links.sh" "$tmp")" || { echo "FAIL: nn needing the runtime was refused: $out"; exit 1; }
echo "passed as expected: $out"

rm -rf "$tmp/CMakeFiles"
plant cuda table 'namespace kiln { int planted_kernel(int); } int table(int x) { return kiln::planted_kernel(x); }'
plant runtime backend 'int backend(int x) { return x; }'
if out="$("$src/scripts/check_links.sh" "$tmp" 2>&1)"; then echo "FAIL: a kiln symbol defined nowhere passed: $out"; exit 1; fi
grep -q "kiln::planted_kernel(int) is needed and no object of the library defines it" <<<"$out" ||
  { echo "FAIL: unexpected report: $out"; exit 1; }
echo "refused as expected: $out"
