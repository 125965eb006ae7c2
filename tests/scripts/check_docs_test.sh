#!/usr/bin/env bash
# tests/scripts/check_docs_test.sh -- scripts/check_docs.py on a planted tree: docs that name a
# missing file or state a wrong count fail, naming the line; the same docs made true pass.
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/runtime" "$tmp/ir" "$tmp/tools/fuzz" "$tmp/docs" "$tmp/jit"
printf 'OP(Neg, neg, 1, Pointwise)\nOP(Add, add, 2, Pointwise)\nOP(Sum, sum, 1, Reduce)\n' >"$tmp/runtime/ops.def"
printf 'PASS("cse", cse, "")\nPASS("dce", dce, "")\n' >"$tmp/ir/passes.def"
touch "$tmp/tools/fuzz/parse_fuzz.cpp" "$tmp/jit/trace.h" "$tmp/jit/trace.cpp"
cat >"$tmp/README.md" <<'DOC'
The tracer is jit/trace.{h,cpp}; the cache lived in jit/kernels.cpp.
kiln has 4 ops, two passes and 1 fuzz targets; a group spans 5 full-size passes.
DOC
cp "$tmp/README.md" "$tmp/docs/ARCHITECTURE.md"
if out="$(python3 "$src/scripts/check_docs.py" "$tmp")"; then echo "FAIL: stale docs passed: $out"; exit 1; fi
for want in "README.md:1: names jit/kernels.cpp" "README.md:2: says 4 ops; the source has 3" \
            "docs/ARCHITECTURE.md:1: names jit/kernels.cpp"; do
  grep -qF "$want" <<<"$out" || { echo "FAIL: '$want' missing from: $out"; exit 1; }
done
(( $(grep -c "check_docs:" <<<"$out") == 4 )) || { echo "FAIL: expected 4 problems: $out"; exit 1; }
echo "refused as expected:"
echo "$out"
sed -i 's#jit/kernels.cpp#jit/trace.cpp#; s/4 ops/3 ops/' "$tmp/README.md" "$tmp/docs/ARCHITECTURE.md"
python3 "$src/scripts/check_docs.py" "$tmp"
