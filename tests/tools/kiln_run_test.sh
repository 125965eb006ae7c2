#!/usr/bin/env bash
# tests/tools/kiln_run_test.sh -- kiln-run starts the ranks with their environment, passes the
# program its arguments, and stops the others when one fails. Usage: kiln_run_test.sh kiln-run
set -uo pipefail
RUN="$1"
failed=0
check() {  # check NAME CONDITION...
  local name="$1"
  shift
  if "$@"; then echo "ok: $name"; else echo "FAIL: $name"; failed=$((failed + 1)); fi
}

out="$("$RUN" -n 3 sh -c 'echo "$RANK/$LOCAL_RANK/$WORLD_SIZE $MASTER_ADDR $1"' arg0 hello | sort)"
check "every rank's environment" [ "$(cut -d' ' -f1 <<<"$out" | tr '\n' ' ')" = "0/0/3 1/1/3 2/2/3 " ]
check "the master address and the program's arguments" [ "$(cut -d' ' -f2- <<<"$out" | sort -u)" = "127.0.0.1 hello" ]
ports="$("$RUN" -n 2 sh -c 'echo $MASTER_PORT' | sort -u | wc -l)"
check "one port for the job" [ "$ports" = 1 ]
out="$("$RUN" -n 2 --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --master-port 29999 sh -c 'echo $RANK/$WORLD_SIZE $MASTER_ADDR:$MASTER_PORT' | sort)"
check "a second machine's ranks" [ "$out" = $'2/4 10.0.0.1:29999\n3/4 10.0.0.1:29999' ]

start=$SECONDS
# exec: the rank is the sleep itself. kiln-run stops its ranks, not their children: a `sleep`
# left behind by a stopped shell held ctest's output pipe, and the test, open for 60 s.
"$RUN" -n 2 sh -c 'if [ "$RANK" = 1 ]; then exit 3; fi; exec sleep 60' 2>"${TMPDIR:-/tmp}/kiln_run_err.$$"
rc=$?
check "a failed rank's status" [ "$rc" = 3 ]
check "the others are stopped, not waited for" [ $((SECONDS - start)) -lt 20 ]
check "it says which rank failed" grep -q 'rank 1 exited with status 3; stopping the others' "${TMPDIR:-/tmp}/kiln_run_err.$$"
rm -f "${TMPDIR:-/tmp}/kiln_run_err.$$"
"$RUN" -n 2 /no/such/program 2>/dev/null
check "a program that does not start" [ $? -ne 0 ]
"$RUN" --nnodes 2 -n 1 true 2>/dev/null
check "several machines need a port" [ $? = 2 ]

echo "kiln_run_test: $failed failed"
[[ $failed -eq 0 ]]
