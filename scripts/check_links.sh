#!/usr/bin/env bash
# scripts/check_links.sh BUILD_DIR -- the layer order at link time, beside check_includes.sh's
# order by #include: no object of a layer may need a symbol that only a higher layer defines.
# An include check cannot see a function declared in a low layer's header and defined in a
# high layer's file (the rnn op's definition once was: the runtime's op table linked nn's).
# Layers, lowest first: runtime autograd ir codegen jit cuda distributed nn (tools link the
# library and are not part of it). An object's layer is its source folder: CMakeFiles/<target>.dir/
# <folder>/..., or a unity batch unity/kiln_<folder>_... (cmake/unity.cmake). The objects are
# the kiln library's, as the Ninja build in BUILD_DIR links them; a folder tree of objects laid
# out the same way (CMakeFiles/kiln.dir/<folder>/*.o, without Ninja) is read too, which the
# planted test uses. Strong definitions only (weak ones, inline functions and templates, are
# emitted wherever used). Also refused: a symbol of namespace kiln that an object needs and no
# object defines (a stand-in missing from a build without CUDA: the shared library would link,
# and its users would not). Exits 1 naming each object, symbol and the layer that defines it.
set -euo pipefail
build="${1:?usage: scripts/check_links.sh BUILD_DIR}"
layers=(runtime autograd ir codegen jit cuda distributed nn)
declare -A rank
for i in "${!layers[@]}"; do rank[${layers[$i]}]=$i; done

if [[ -f "$build/build.ninja" ]]; then
  inputs="$(ninja -C "$build" -t inputs kiln)" || {
    echo "check_links: 'ninja -t inputs' failed (it needs Ninja 1.11 or later)" >&2
    exit 2
  }
  mapfile -t objects < <(grep '\.o$' <<<"$inputs" | sed "s#^#$build/#")
else  # (the planted test's tree; a real build folder may hold objects of files since renamed)
  mapfile -t objects < <(find "$build/CMakeFiles" -path '*/kiln*.dir/*' -name '*.o' | sort)
fi
((${#objects[@]})) || { echo "check_links: no objects of the kiln library under $build" >&2; exit 2; }

layer_of() {  # an object's layer, from its path
  local rel="${1#*/CMakeFiles/*.dir/}"
  if [[ "$rel" == unity/kiln_* ]]; then rel="${rel#unity/kiln_}"; echo "${rel%%_*}"; else echo "${rel%%/*}"; fi
}

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# defined.tsv: symbol, layer rank, object; needed.tsv: symbol, layer rank, object.
for o in "${objects[@]}"; do
  l="$(layer_of "$o")"
  [[ -n "${rank[$l]:-}" ]] || { echo "check_links: $o is in no layer ($l)" >&2; exit 2; }
  nm -P --defined-only -g "$o" | awk -v r="${rank[$l]}" -v o="$o" '$2 ~ /^[TDBRGS]$/ {print $1 "\t" r "\t" o}' >>"$tmp/defined.tsv"
  nm -P -u "$o" | awk -v r="${rank[$l]}" -v o="$o" '{print $1 "\t" r "\t" o}' >>"$tmp/needed.tsv"
done
# For each symbol, the lowest layer that defines it; a need is bad when that is above the
# needing object's layer.
sort -t$'\t' -k1,1 -k2,2n "$tmp/defined.tsv" | awk -F'\t' '$1 != last {print; last = $1}' >"$tmp/lowest.tsv"
bad="$(awk -F'\t' 'FILENAME == ARGV[1] {low[$1] = $2; where[$1] = $3; next}
                   ($1 in low) && low[$1] > $2 {print $3 "\t" $1 "\t" low[$1] "\t" where[$1]}' \
       "$tmp/lowest.tsv" "$tmp/needed.tsv" | sort -u)"
# kiln's own symbols (_ZN4kiln...) that an object needs and none defines, weakly or not.
nm -P --defined-only -g "${objects[@]}" 2>/dev/null | awk '{print $1}' | sort -u >"$tmp/all_defined.txt"
missing="$(cut -f1 "$tmp/needed.tsv" | { grep '^_ZN4kiln' || true; } | sort -u | comm -23 - "$tmp/all_defined.txt")"
if [[ -n "$bad" || -n "$missing" ]]; then
  [[ -z "$bad" ]] || while IFS=$'\t' read -r obj sym r def; do
    echo "check_links: $(layer_of "$obj") needs $(c++filt "$sym"), defined only in ${layers[$r]} ($obj -> $def)"
  done <<<"$bad"
  [[ -z "$missing" ]] || while read -r sym; do
    echo "check_links: $(c++filt "$sym") is needed and no object of the library defines it"
  done <<<"$missing"
  exit 1
fi
echo "check_links: ok (${#objects[@]} objects in ${#layers[@]} layers)"
