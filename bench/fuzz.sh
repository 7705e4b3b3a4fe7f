#!/usr/bin/env bash
# The long run of the decoders' property tests (issue 17 item 4; docs/security.md, "Item 4").
# The unit tests run each property with a few cases from a fixed seed; this runs them with
# many cases, round after round, each round from a new seed (PHALANX_FUZZ_SEED), and
# prints the command that finds a failure again.
#
#   bench/fuzz.sh [--cases N] [--rounds R | --minutes M] [--seed S] [--debug]
#
# --cases: cases per property per round (default 20000); --rounds: rounds (default 1);
# --minutes: start rounds until M minutes have passed (instead of --rounds); --seed: the
# first round's seed (default: the time), round r uses S + r; --debug: the debug build
# (no release build needed; about 10x fewer cases per second).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/phalanx/target}"
export CARGO_INCREMENTAL=0

cases=20000 rounds=1 minutes="" seed="$(date +%s)" profile=(--release)
while [ $# -gt 0 ]; do
  case "$1" in
    --cases) cases="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --minutes) minutes="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --debug) profile=(); shift ;;
    *) echo "usage: $0 [--cases N] [--rounds R | --minutes M] [--seed S] [--debug]" >&2; exit 2 ;;
  esac
done
for v in "$cases" "$rounds" "$seed" ${minutes:+"$minutes"}; do
  [[ "$v" =~ ^[0-9]+$ ]] || { echo "error: $v is not a whole number" >&2; exit 2; }
done

# Every decoder's property tests (docs/security.md lists them), per crate: the filters
# `cargo test` takes after `--`.
suites=(
  "phalanx-statestore|fuzz_tests log_store::replay ledger::tests::random"
  "phalanx-scheduler|fuzz_tests manifest::tests::arbitrary model::quantity"
)

# Built once, before the clock starts.
for suite in "${suites[@]}"; do
  cargo test "${profile[@]}" -p "${suite%%|*}" --lib --no-run
done

start=$SECONDS
round=0
while :; do
  if [ -n "$minutes" ]; then
    [ $((SECONDS - start)) -lt $((minutes * 60)) ] || break
  else
    [ "$round" -lt "$rounds" ] || break
  fi
  run_seed=$((seed + round))
  for suite in "${suites[@]}"; do
    crate="${suite%%|*}" filters="${suite#*|}"
    # shellcheck disable=SC2086 # the filters are separate arguments
    if ! PHALANX_FUZZ_SEED="$run_seed" PROPTEST_CASES="$cases" \
        cargo test -q "${profile[@]}" -p "$crate" --lib -- $filters; then
      echo "fuzz: round $round failed in $crate (seed $run_seed); proptest printed the minimal input above." >&2
      echo "fuzz: reproduce: PHALANX_FUZZ_SEED=$run_seed PROPTEST_CASES=$cases cargo test ${profile[*]} -p $crate --lib -- $filters" >&2
      exit 1
    fi
  done
  round=$((round + 1))
done
echo "fuzz: $round round(s) passed, $cases cases per property, seeds $seed..$((seed + round - 1)), $((SECONDS - start)) s"
