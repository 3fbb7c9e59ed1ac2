#!/usr/bin/env bash
# coverage.sh — source coverage reached by each fuzz target's corpus (llvm-cov line and region
# counts for the files it exercises).
#
#   tests/fuzz/coverage.sh BUILD_DIR [TARGET...]
#
# Builds coverage-instrumented copies of the targets (clang -fprofile-instr-generate
# -fcoverage-mapping, no sanitizers) in BUILD_DIR/fuzz/coverage/, replays each target's seeds,
# regression inputs and grown corpus (BUILD_DIR/fuzz/corpus/<name>) once, and prints an
# llvm-cov report restricted to the files that target is about.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${1:?usage: coverage.sh BUILD_DIR [TARGET...]}"
shift
out="$build/fuzz/coverage"
mkdir -p "$out"
llvm_profdata="$(command -v llvm-profdata || command -v llvm-profdata-14)"
llvm_cov="$(command -v llvm-cov || command -v llvm-cov-14)"

declare -A FILES=(
    [safetensors]="src/model/safetensors.c"
    [config]="src/model/config.c src/util/json.c src/graph/rope.c src/arch/decoder.c"
    [manifest]="src/export/manifest.c src/export/save.c src/util/fs.c"
    [recipe]="src/export/export_config.c"
    [index]="src/model/checkpoint.c"
)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(safetensors config manifest recipe index)

mapfile -t sources < <(find "$root/src" -name '*.c' | sort)
for name in "${targets[@]}"; do
    bin="$out/cov_$name"
    clang -O1 -g -fprofile-instr-generate -fcoverage-mapping -fsanitize=fuzzer \
        -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -I"$root/include" -I"$root/src" \
        "$here/fuzz_$name.c" "${sources[@]}" -lcjson -lpthread -lm -o "$bin"
    dirs=("$here/seeds/$name")
    [ -d "$here/regress/$name" ] && dirs+=("$here/regress/$name")
    [ -d "$build/fuzz/corpus/$name" ] && dirs+=("$build/fuzz/corpus/$name")
    rm -f "$out/$name".profraw*
    LLVM_PROFILE_FILE="$out/$name.profraw" "$bin" -runs=0 "${dirs[@]}" > "$out/$name.log" 2>&1
    "$llvm_profdata" merge -sparse "$out/$name.profraw" -o "$out/$name.profdata"
    files=()
    for f in ${FILES[$name]}; do files+=("$root/$f"); done
    echo "== $name: $(grep -o 'INITED.*' "$out/$name.log" | head -1 | cut -c1-80)"
    "$llvm_cov" report "$bin" -instr-profile="$out/$name.profdata" "${files[@]}" \
        | sed "s|$root/||"
    # Per function: the files also hold code the input never drives (the export side of
    # manifest.c and save.c, file I/O of json.c), listed apart as "not reached".
    "$llvm_cov" report -show-functions "$bin" -instr-profile="$out/$name.profdata" "${files[@]}" \
        | awk '/^Name/ && !h {print; h=1} /^[A-Za-z_][A-Za-z0-9_.]*:?[A-Za-z0-9_]* +[0-9]/ {
                   if ($7 == "0.00%") miss = miss " " $1; else print }
               END {print "not reached:" miss}'
done
