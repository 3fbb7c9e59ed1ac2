#!/usr/bin/env bash
# run.sh — runs ferry's libFuzzer targets for a bounded time and fails on any crash, leak,
# sanitizer report, broken invariant or timeout.
#
#   tests/fuzz/run.sh BUILD_DIR SECONDS [TARGET...]     (targets default to every fuzz_* built)
#
# Each target starts from its committed seeds (tests/fuzz/seeds/<name>), the inputs that once
# made it fail (tests/fuzz/regress/<name>, kept as regression tests) and the corpus it grew
# in earlier runs (BUILD_DIR/fuzz/corpus/<name>, kept between runs), with json.dict + its own
# dictionary. Crash inputs land in BUILD_DIR/fuzz/artifacts/<name>/, logs in
# BUILD_DIR/fuzz/logs/<name>.log. FUZZ_JOBS targets run at once (default 2: one per core of a
# small CI machine). A summary line per target gives executions, coverage and corpus size.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?usage: run.sh BUILD_DIR SECONDS [TARGET...]}"
seconds="${2:?usage: run.sh BUILD_DIR SECONDS [TARGET...]}"
shift 2
jobs="${FUZZ_JOBS:-2}"
work="$build/fuzz"
mkdir -p "$work/corpus" "$work/artifacts" "$work/logs" "$work/dicts"

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for bin in "$build"/fuzz_*; do
        [ -x "$bin" ] && targets+=("$(basename "$bin")")
    done
fi
if [ ${#targets[@]} -eq 0 ]; then
    echo "run.sh: no fuzz_* targets in $build (configure with -DFERRY_FUZZ=ON)" >&2
    exit 2
fi

# The manifest and index targets rewrite a file in a scratch directory for every input; on a disk
# filesystem (ext4 flushes a truncated-and-rewritten file on close) that is 10x slower than in
# memory, so they work under /dev/shm when it is there.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
    export TMPDIR=/dev/shm
fi

# Leaks are failures (libFuzzer checks them after each input that malloc'ed more than it freed);
# every sanitizer report aborts the run.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"

run_one() {
    local target="$1" name="${1#fuzz_}"
    local corpus="$work/corpus/$name" artifacts="$work/artifacts/$name/" log="$work/logs/$name.log"
    local dict="$work/dicts/$name.dict"
    mkdir -p "$corpus" "$artifacts"
    cat "$here/json.dict" "$here/$name.dict" > "$dict" 2>/dev/null || cp "$here/json.dict" "$dict"
    # -timeout: one input taking over 10 s is a hang; -rss_limit_mb / -malloc_limit_mb: an
    # allocation sized by what a file claims (rather than what it holds) shows up as a crash.
    local regress=()
    [ -d "$here/regress/$name" ] && regress=("$here/regress/$name")
    "$build/$target" "$corpus" "$here/seeds/$name" "${regress[@]}" \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=256 \
        -max_len=16384 -dict="$dict" -artifact_prefix="$artifacts" -print_final_stats=1 \
        -reload=0 > "$log" 2>&1
    local rc=$?
    local execs cov ft units
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+')
    ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+')
    units=$(find "$corpus" -type f | wc -l)
    if [ $rc -eq 0 ]; then
        echo "fuzz $name: ok, ${seconds}s, ${execs:-?} executions, cov ${cov:-?} edges," \
             "ft ${ft:-?} features, corpus $units inputs"
    else
        echo "fuzz $name: FAILED (exit $rc) after ${execs:-?} executions; log $log," \
             "inputs in $artifacts"
        grep -E "ERROR|WARNING|SUMMARY|invariant|runtime error|Test unit written" "$log" | head -20
    fi
    return $rc
}

status=0
pids=()
names=()
for target in "${targets[@]}"; do
    if [ ! -x "$build/$target" ]; then
        echo "run.sh: $build/$target is not built" >&2
        status=1
        continue
    fi
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
        wait -n || status=1
    done
    run_one "$target" &
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do
    wait -n || status=1
done
wait || status=1
exit $status
