#!/usr/bin/env bash
# tests/tools/kiln_ir_test.sh -- runs every kiln-ir command on the .ir files here and checks
# outputs and exit codes, bad input included.
# Usage: kiln_ir_test.sh path/to/kiln-ir tests/tools [HAVE_CUDA] [libkiln_test_ops.so]
set -uo pipefail
KILN_IR="$1"
DATA="$2"
HAVE_CUDA="${3:-OFF}"  # kiln built with the CUDA toolkit (KILN_HAVE_CUDA): NVRTC makes PTX
TEST_OPS="${4:-}"      # a library that registers mytools::scale_rows (tests/tools/registered_ops.cpp)
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0

fail() {
  echo "FAIL: $*"
  echo "  stdout: $(head -c 600 "$TMP/out")"
  echo "  stderr: $(head -c 600 "$TMP/err")"
  failed=$((failed + 1))
}
# ok NAME ARGS...: exit 0 and no stderr.
ok() {
  local name="$1"
  shift
  "$KILN_IR" "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [[ $rc -ne 0 || -s "$TMP/err" ]]; then fail "$name: exit $rc"; return 1; fi
  passed=$((passed + 1))
}
# bad NAME RC PATTERN ARGS...: exit RC with exactly one line on stderr matching PATTERN.
bad() {
  local name="$1" want="$2" pattern="$3"
  shift 3
  "$KILN_IR" "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [[ $rc -ne $want ]]; then fail "$name: exit $rc, want $want"; return 1; fi
  if [[ $(wc -l <"$TMP/err") -ne 1 ]]; then fail "$name: stderr is not one line"; return 1; fi
  if ! grep -qE -- "$pattern" "$TMP/err"; then fail "$name: stderr lacks /$pattern/"; return 1; fi
  passed=$((passed + 1))
}
# has NAME PATTERN: the last command's stdout matches PATTERN; lacks: it doesn't.
has() {
  if grep -qE -- "$2" "$TMP/out"; then passed=$((passed + 1)); else fail "$1: stdout lacks /$2/"; fi
}
lacks() {
  if grep -qE -- "$2" "$TMP/out"; then fail "$1: stdout has /$2/"; else passed=$((passed + 1)); fi
}

# A .npy (format 1.0) of little-endian f32 values: npy FILE SHAPE BYTES, BYTES as printf escapes.
npy() {
  local header="{'descr': '<f4', 'fortran_order': False, 'shape': $2, }"
  while (((10 + ${#header} + 1) % 64)); do header+=" "; done
  header+=$'\n'
  { printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x $((${#header} % 256)))\\x00"
    printf '%s' "$header"; printf "$3"; } >"$1"
}
ONE='\x00\x00\x80\x3f' TWO='\x00\x00\x00\x40' HALF='\x00\x00\x00\x3f' MINUS_ONE='\x00\x00\x80\xbf'

# dump: the printer's text, which reads back to itself.
ok dump dump "$DATA/mlp.ir" && has dump '^graph @mlp\(%0: f32\[4,8\], %1: i64\[4\]\) params'
cp "$TMP/out" "$TMP/dumped.ir"
ok "dump of stdin" dump - <"$TMP/dumped.ir"
if cmp -s "$TMP/out" "$TMP/dumped.ir"; then passed=$((passed + 1)); else fail "dump is not a fixed point"; fi

# verify
ok verify verify "$DATA/mlp.ir" && has verify '^ok$'
bad "verify of a mistyped node" 1 'bad_type.ir: verify: @bad: .*add gives f32\[4\]' verify "$DATA/bad_type.ir"
bad "parse error" 1 'bad_parse.ir:3:8: unknown op .sine.' verify "$DATA/bad_parse.ir"

# opt
ok "opt cse,dce" opt "$DATA/mlp.ir" --passes=cse,dce
has "opt merges the duplicate mul" 'add %8, %8 : f32\[4,16\]'
lacks "opt drops the dead constant" 'const \[1.0, 2.0\]'
ok "opt -o" opt "$DATA/mlp.ir" --passes cse -o "$TMP/opt.ir"
ok "opt output verifies" verify "$TMP/opt.ir"
ok "opt --print-after-all" opt "$DATA/mlp.ir" --passes=cse,dce --print-after-all
has "print-after-all cse" '^// after cse$'
has "print-after-all dce" '^// after dce$'
if [[ $(grep -c '^graph @mlp' "$TMP/out") -eq 2 ]]; then passed=$((passed + 1)); else fail "print-after-all prints one graph per pass"; fi
ok "opt default pipeline" opt "$DATA/mlp.ir"
bad "opt to an unwritable path" 1 "cannot write '$TMP/no/such/dir.ir'" opt "$DATA/mlp.ir" -o "$TMP/no/such/dir.ir"
bad "opt unknown pass" 1 "unknown pass 'frob' \(known: .*cse" opt "$DATA/mlp.ir" --passes=cse,frob
bad "opt on a graph that fails verify" 1 'verify:' opt "$DATA/bad_type.ir" --passes=cse

# dot
ok dot dot "$DATA/mlp.ir"
has "dot header" '^digraph "mlp" \{'
has "dot input" 'in0 \[label="input %0\\nf32\[4,8\]", shape=invhouse'
has "dot param" 'p0 \[label="param %2 fc.weight\\nf32\[16,8\]", shape=cylinder'
has "dot op with attrs" 'label="%4 = permute %2\\n\{axes=\[1,0\]\}", shape=box'
has "dot edge type" 'n0 -> n1 \[label="f32\[8,16\]"\]'
has "dot const" 'label="%15 = const 0.25\\nf32\[\]", shape=box, style="rounded,filled"'
has "dot output" 'n7 -> out0 \[label="f32\[4,16\]"\]'
has "dot assign" 'n14 -> p1 \[style=dashed'
if command -v dot >/dev/null; then  # Graphviz reads it (when installed; not a dependency)
  if dot -Tsvg "$TMP/out" >/dev/null 2>"$TMP/err"; then passed=$((passed + 1)); else fail "dot rejects it"; fi
fi

# run: random inputs and params, seeded
ok "run random" run "$DATA/mlp.ir" --repeat 3
has "run output 0" '^output 0: f32\[4,16\]  min [0-9.e+-]+ max [0-9.e+-]+ mean [0-9.e+-]+ first \['
has "run output 1" '^output 1: f32\[\]  min '
has "run time" '^time: [0-9.e+-]+ ms per call \(mean of 3 runs, min '
grep '^output' "$TMP/out" >"$TMP/seed0"
ok "run same seed" run "$DATA/mlp.ir" --seed 0
grep '^output' "$TMP/out" >"$TMP/seed0b"
if cmp -s "$TMP/seed0" "$TMP/seed0b"; then passed=$((passed + 1)); else fail "the same seed gives other values"; fi
ok "run other seed" run "$DATA/mlp.ir" --seed 7
grep '^output' "$TMP/out" >"$TMP/seed7"
if cmp -s "$TMP/seed0" "$TMP/seed7"; then fail "another seed gives the same values"; else passed=$((passed + 1)); fi

# run: inputs from .npy files, exact values; outputs saved and fed back
npy "$TMP/x.npy" "(2, 2)" "$ONE$TWO$HALF$MINUS_ONE"
ok "run --input" run "$DATA/affine.ir" --input "$TMP/x.npy" --save "$TMP/saved"
has "run --input values" '^output 0: f32\[2,2\]  min -1 max 5 mean 2.25 first \[3, 5, 2, -1\]$'
ok "run saved output as input" run "$DATA/affine.ir" --input "$TMP/saved/out0.npy"
has "run saved values" 'min -1 max 11 mean 5.5 first \[7, 11, 5, -1\]$'
npy "$TMP/b3.npy" "(2, 3)" "$ONE$ONE$ONE$TWO$TWO$TWO"
ok "run symbolic with --input" run "$DATA/symbolic.ir" --input "$TMP/b3.npy"
has "run symbolic values" '^output 0: f32\[2,3\]  min 3 max 6 mean 4.5'

# run: bad inputs
bad "run symbolic without input" 1 'input 0 has symbolic dim B, which no --input or --dim binds' run "$DATA/symbolic.ir"
ok "run symbolic with --dim" run "$DATA/symbolic.ir" --dim B=5
has "run symbolic --dim sizes" '^output 0: f32\[5,3\]'
bad "run --dim of no dim" 1 '@scale has no dim T' run "$DATA/symbolic.ir" --dim T=2
# A symbolic graph fuses and compiles as a concrete one does.
ok "run --fuse symbolic" run "$DATA/softmax_symbolic.ir" --fuse --dim B=64
has "run --fuse symbolic: one kernel" '^plan: 1 fused kernel, 0 eager ops'
ok "codegen symbolic" codegen "$DATA/softmax_symbolic.ir"
has "codegen symbolic group" '^; ---- group 0: kiln_[0-9a-f]{32} -> f32\[64,1024\] \(5 ops\)$' 
bad "run too few inputs" 1 '@mlp takes 2 inputs, got 1 --input' run "$DATA/mlp.ir" --input "$TMP/x.npy"
npy "$TMP/v4.npy" "(4,)" "$ONE$TWO$HALF$MINUS_ONE"
bad "run wrong input type" 1 'v4.npy holds f32\[4\], but input 0 of @affine is f32\[2,2\]' \
  run "$DATA/affine.ir" --input "$TMP/v4.npy"
bad "run missing npy" 1 'nothere.npy' run "$DATA/affine.ir" --input "$TMP/nothere.npy"
printf 'not an npy file' >"$TMP/junk.npy"
bad "run corrupt npy" 1 'load_npy' run "$DATA/affine.ir" --input "$TMP/junk.npy"
bad "run on a graph that fails verify" 1 'verify:' run "$DATA/bad_type.ir"

# codegen: the LLVM IR of each fused group; run --fuse: the same numbers through the kernels
ok "codegen" codegen "$DATA/softmax.ir" --target=cpu
has "codegen group" '^; ---- group 0: kiln_[0-9a-f]{32} -> f32\[64,128\] \(5 ops\)$'
has "codegen define" '^define void @kiln_[0-9a-f]{32}\(ptr'
has "codegen inline exp" 'call float @llvm\.rint\.f32'
has "codegen reductions interleave" 'llvm\.loop\.interleave\.count'
has "codegen prefetches the next row" 'call void @llvm\.prefetch'
# cost: softmax is one group reading x and writing y once (2 x 64 x 128 f32), 5 ops an element.
ok "cost" cost "$DATA/softmax.ir" --device H100
has "cost device" '^cost on H100 \(3350 GB/s; TF32 off\): 1 kernels, 1 launches$'
has "cost total" '^total +0\.066 +0\.000 +1 '
has "cost flops" '^@softmax: 0\.000 GB moved, 0\.000 GFLOP, 1 launches'
bad "cost of an unknown device" 1 "no peaks for a device named 'V100' \(known: A100, H100, H200\)" cost "$DATA/softmax.ir" --device V100
printf 'graph @mm(%%0: f32[2,3], %%1: f32[3,4]) -> (f32[2,4]) {\n  %%2 = matmul %%0, %%1 : f32[2,4]\n  return %%2\n}\n' >"$TMP/mm.ir"
ok "codegen of a graph without groups" codegen "$TMP/mm.ir"
has "codegen no groups" 'no fused groups'
# --target=cuda: CUDA C from the same groups (string building, in every build); --ptx through
# NVRTC, which needs no GPU.
ok "codegen cuda" codegen "$DATA/softmax.ir" --target=cuda
has "codegen cuda group" '^// ---- group 0: kiln_[0-9a-f]{32} -> f32\[64,128\] \(5 ops\)$'
has "codegen cuda entry" '^extern "C" __global__ __launch_bounds__\(256\) void kiln_[0-9a-f]{32}\(const Args a\)'
has "codegen cuda block reduction" '__shfl_xor_sync'
has "codegen cuda launch" '^// launch on 132 multiprocessors: 64 rows x 128 columns, a block per row, 1 part, 64 blocks of 256 threads$'
bad "codegen cuda bad arch" 1 "--arch 'sm_x' is not an architecture like sm_90" codegen "$DATA/softmax.ir" --target=cuda --ptx --arch sm_x
bad "codegen ptx for the cpu" 1 "--ptx is for --target=cuda" codegen "$DATA/softmax.ir" --ptx
bad "codegen unknown target" 1 "target 'tpu' is not built in \\(known: cpu, cuda\\)" codegen "$DATA/softmax.ir" --target=tpu
if [[ $HAVE_CUDA == ON ]]; then
  ok "codegen ptx" codegen "$DATA/softmax.ir" --target=cuda --ptx --arch sm_90
  has "codegen ptx target" '^\.target sm_90$'
  has "codegen ptx entry" '^\.visible \.entry kiln_[0-9a-f]{32}\('
  # Each op rounds (--fmad=false): x * y - x is a rounded multiply, then a subtraction.
  printf 'graph @ms(%%0: f32[64], %%1: f32[64]) -> (f32[64]) {\n  %%2 = mul %%0, %%1 : f32[64]\n  %%3 = sub %%2, %%0 : f32[64]\n  return %%3\n}\n' >"$TMP/ms.ir"
  ok "codegen ptx of a multiply-subtract" codegen "$TMP/ms.ir" --target=cuda --ptx
  has "codegen ptx rounds the product" 'mul\.rn\.f32'
  if grep -q 'fma\.rn\.f32' "$TMP/out"; then fail "codegen ptx contracted x * y - x into an fma"; else passed=$((passed + 1)); fi
else
  bad "codegen ptx without CUDA" 1 "built without CUDA" codegen "$DATA/softmax.ir" --target=cuda --ptx
fi
export KILN_CACHE_DIR="$TMP/kernels"
KILN_LOG=cache "$KILN_IR" run "$DATA/softmax.ir" --fuse --seed 1 >"$TMP/out" 2>"$TMP/err"
has "run --fuse" '^plan: 1 fused kernel, 0 eager ops'
cp "$TMP/out" "$TMP/fused_out"
if grep -q 'compiled in' "$TMP/err"; then passed=$((passed + 1)); else fail "first process compiles"; fi
"$KILN_IR" run "$DATA/softmax.ir" --seed 1 >"$TMP/out" 2>"$TMP/err"
# The summaries (6 digits) agree op by op and fused, within the kernels' rounding (1e-5).
same_numbers() {
  local num='-?[0-9][0-9.]*(e[-+]?[0-9]+)?'
  paste <(grep '^output' "$1" | sed 's/.*  min //' | grep -oE -- "$num") \
        <(grep '^output' "$2" | sed 's/.*  min //' | grep -oE -- "$num") |
    awk '{ d = $1 - $2; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2; if (d > 1e-5 * m + 1e-12) bad = 1; n++ }
         END { exit (bad || n < 8) }'
}
if same_numbers "$TMP/out" "$TMP/fused_out"; then
  passed=$((passed + 1))
else
  fail "fused and unfused runs differ"
fi
# A second process starts warm from the disk cache; a damaged entry is recompiled, not trusted.
KILN_LOG=cache "$KILN_IR" run "$DATA/softmax.ir" --fuse --seed 1 >"$TMP/out" 2>"$TMP/err"
if grep -q 'loaded from the disk cache' "$TMP/err"; then passed=$((passed + 1)); else fail "second process starts warm"; fi
entry="$(ls "$KILN_CACHE_DIR"/*.kobj | head -1)"
size="$(stat -c %s "$entry")"
byte="$(od -An -tu1 -j $((size - 10)) -N1 "$entry" | tr -d ' ')"  # flipped: 255 - b != b
printf "\\x$(printf %02x $((255 - byte)))" | dd of="$entry" bs=1 seek=$((size - 10)) conv=notrunc status=none
KILN_LOG=cache "$KILN_IR" run "$DATA/softmax.ir" --fuse --seed 1 >"$TMP/out" 2>"$TMP/err"
if grep -q 'checksum mismatch' "$TMP/err" && grep -q 'compiled in' "$TMP/err"; then
  passed=$((passed + 1))
else
  fail "a corrupted entry is recompiled"
fi
has "corrupted entry, same result" "$(grep '^output 0' "$TMP/fused_out" | cut -c1-40 | sed 's/[][()+.*]/\\&/g')"
truncate -s 40 "$entry"
KILN_LOG=cache "$KILN_IR" run "$DATA/softmax.ir" --fuse --seed 1 >"$TMP/out" 2>"$TMP/err"
if grep -q 'truncated' "$TMP/err" && grep -q 'compiled in' "$TMP/err"; then
  passed=$((passed + 1))
else
  fail "a truncated entry is recompiled"
fi
unset KILN_CACHE_DIR

# bad files and flags
bad "missing file" 1 "cannot read '$TMP/nothere.ir'" dump "$TMP/nothere.ir"
bad "a directory" 1 "it is a directory" dump "$TMP"
head -c 256 /dev/urandom >"$TMP/garbage.ir"
printf '\x01' | cat - "$TMP/garbage.ir" >"$TMP/garbage2.ir"
bad "binary garbage" 1 'garbage2.ir:1:1: unexpected byte 0x01' dump "$TMP/garbage2.ir"
printf 'graph @g(%%0: f32[2]) -> (f32[2]) {\n  return %%0\n' >"$TMP/truncated.ir"
bad "truncated file" 1 'truncated.ir:3:1: expected' verify "$TMP/truncated.ir"
bad "no command" 2 'subcommand is required'
bad "unknown command" 2 "unknown command 'frob'" frob "$DATA/mlp.ir"
bad "missing file argument" 2 'file is required' dump
bad "unknown flag" 2 '--frob' dump "$DATA/mlp.ir" --frob
bad "bad --repeat" 2 'repeat' run "$DATA/mlp.ir" --repeat 0
bad "bad --seed" 2 'seed' run "$DATA/mlp.ir" --seed -1
ok help --help && has help 'Subcommands:'

# The traced demo model (the digits CNN forward, tests/jit/golden) and a traced training step:
# every command works on what the tracer writes.
GOLDEN="$DATA/../jit/golden"
for model in digits_forward mlp_train_step; do
  ok "$model dump" dump "$GOLDEN/$model.ir" && has "$model dump" "^graph @"
  ok "$model verify" verify "$GOLDEN/$model.ir" && has "$model verify" "ok"
  ok "$model opt" opt "$GOLDEN/$model.ir" --passes=canonicalize,fold,cse,dce --print-after-all
  has "$model opt" "after dce"
  ok "$model dot" dot "$GOLDEN/$model.ir" && has "$model dot" "digraph"
  ok "$model run" run "$GOLDEN/$model.ir" --seed 3 --repeat 2 && has "$model run" "per call"
  KILN_CACHE_DIR="$TMP/kernels" ok "$model run --fuse" run "$GOLDEN/$model.ir" --fuse --seed 3 && has "$model run --fuse" "fused kernel"
  ok "$model codegen" codegen "$GOLDEN/$model.ir" && has "$model codegen" "define void @kiln_"
done

# Saved modules (jit::save; the format's compat files): every verb reads them, inspect shows
# the metadata, run uses the module's parameters and named inputs, extract writes safetensors.
MODULE="$DATA/../compat/v1_forward.kiln"
for verb in dump verify dot codegen; do ok "module $verb" "$verb" "$MODULE"; done
ok "module opt" opt "$MODULE" && has "module opt" 'graph @forward\(%0: f32\[B,1,12,12\]\)'
ok "module inspect" inspect "$MODULE"
has "inspect versions" '^saved module: format 1, written by kiln [0-9.]+$'
has "inspect signature" '^  input  input0: f32\[B,1,12,12\]$'
has "inspect dynamic dims" '^dynamic dims: B$'
has "inspect parameters" '^  conv.weight +f32\[4,1,3,3\] +144 B$'
has "inspect kernels" '^kernels it compiles \(at B=64\): [1-9]'
has "inspect kernel groups" '^  kernel 0: fused '
ok "module inspect --dim" inspect "$MODULE" --dim B=1 && has "inspect at B=1" 'at B=1'
KILN_CACHE_DIR="$TMP/kernels" ok "module run named input" run "$MODULE" --input "input0=$DATA/../compat/v1_forward.in0.npy"
has "module run fuses" '^output 0: f32\[3,3\]'
has "module run kernels" '^plan: [1-9][0-9]* fused kernel'
KILN_CACHE_DIR="$TMP/kernels" ok "module run random input" run "$MODULE" --dim B=2 && has "module run random" '^output 0: f32\[2,3\]'
bad "module run wrong input" 1 'input 0 \(input0\) of @forward is f32\[B,1,12,12\]' run "$MODULE" --input "input0=$TMP/v4.npy"
ok "module extract" extract "$MODULE" -o "$TMP/w.safetensors" && has "module extract" 'wrote .*w.safetensors \([0-9]+ tensors'
if grep -q '"conv.weight"' "$TMP/w.safetensors"; then passed=$((passed + 1)); else fail "extract writes the tensors"; fi
bad "extract of IR text" 1 'holds no tensors' extract "$DATA/mlp.ir" -o "$TMP/x.safetensors"
head -c 100 "$MODULE" >"$TMP/cut.kiln"
bad "truncated module" 1 'cut.kiln: the metadata section claims [0-9]+ bytes but 76 remain' inspect "$TMP/cut.kiln"

# --load: a library's registered ops become known; without it the op is unknown, by name.
bad "a registered op not loaded" 1 "unknown op 'mytools::scale_rows': no op of that name is registered" \
  verify "$DATA/registered.ir"
if [[ -n "$TEST_OPS" ]]; then
  ok "--load verify" --load "$TEST_OPS" verify "$DATA/registered.ir" && has "--load verify" '^ok$'
  ok "--load after the command" dump "$DATA/registered.ir" --load "$TEST_OPS"
  has "dump prints the registered op" '= mytools::scale_rows %0 \{scale=3.0\} : f32\[2,3\]'
  npy "$TMP/ones23.npy" '(2, 3)' "$ONE$ONE$ONE$ONE$ONE$ONE"
  ok "--load run" --load "$TEST_OPS" run "$DATA/registered.ir" --fuse --input "$TMP/ones23.npy"
  has "run of a registered op" '^output 0: f32\[2,3\]'
  has "run's values are exp(3)" '20\.0855'
fi
bad "--load of a missing library" 1 "--load $TMP/none.so: .*cannot open" --load "$TMP/none.so" verify "$DATA/mlp.ir"

echo "kiln_ir_test: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
