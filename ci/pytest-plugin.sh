#!/usr/bin/env bash
# The pytest-plugin route: certify inside the fork's own pytest run (one test item per
# clause, named by clause id, in the same JUnit file as the fork's tests).
#
#   RLC_TARGET (required), RLC_PROFILE (ci), RLC_ONLY (all), RLC_OUT (rlc-out),
#   RLC_BASELINE (rlconform-baseline.toml, applied when the file exists: the same committed
#   baseline rlconform-certify.sh reads and regenerates)
#   Any further arguments are passed to pytest (e.g. the fork's own test paths).
set -uo pipefail
: "${RLC_TARGET:?set RLC_TARGET to an adapter name or module:attribute}"
out="${RLC_OUT:-rlc-out}"
mkdir -p "$out"
args=(-p rlconform --rlc-target "$RLC_TARGET" --rlc-profile "${RLC_PROFILE:-ci}"
      --junitxml "$out/rlc-pytest-junit.xml")
if [ -n "${RLC_ONLY:-}" ]; then args+=(--rlc-only "$RLC_ONLY"); fi
baseline="${RLC_BASELINE:-rlconform-baseline.toml}"
if [ -f "$baseline" ]; then args+=(--rlc-baseline "$baseline"); fi
python -m pytest "${args[@]}" "$@"
