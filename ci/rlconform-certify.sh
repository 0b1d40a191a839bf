#!/usr/bin/env bash
# Certify a postprocess implementation and leave the reports where CI can pick them up.
# Used verbatim by ci/github-actions.yml and ci/gitlab-ci.yml; copy it into your fork.
#
#   RLC_TARGET          adapter name or module:attribute                     (required)
#   RLC_PROFILE         ci | dev | thorough                                   (default ci)
#   RLC_ONLY            clause-id globs, comma-separated                      (default: all)
#   RLC_OUT             folder for rlc-report.json, rlc-junit.xml, rlc-summary.md (default rlc-out)
#   RLC_BASELINE        the fork's committed baseline of inherited breaks, applied when the
#                       file exists                                (default rlconform-baseline.toml)
#   RLC_FAIL_ON         nominal | edge | hardening: the mildest severity that fails the job
#                       (default hardening: every new break)
#   RLC_FRAMEWORK_PATH  the fork's own source tree, imported instead of an installed copy
#                       (e.g. "." for a checkout of a verl / slime / ROLL fork)
#   RLC_WRITE_BASELINE  when set (a path), regenerate the baseline instead: every break this
#                       run observes is written there, for review and commit
#   RLC_EXTRA           further certify flags
#
# Exit code: that of `rlconform certify` (0 pass or declared deviations, 1 a new or stale
# break, 2 setup); with RLC_WRITE_BASELINE, 0 once the file is written.
set -uo pipefail
: "${RLC_TARGET:?set RLC_TARGET to an adapter name or module:attribute}"
out="${RLC_OUT:-rlc-out}"
baseline="${RLC_BASELINE:-rlconform-baseline.toml}"
mkdir -p "$out"
args=(certify "$RLC_TARGET" --profile "${RLC_PROFILE:-ci}" --fail-on "${RLC_FAIL_ON:-hardening}"
      --json "$out/rlc-report.json" --junit "$out/rlc-junit.xml" --markdown "$out/rlc-summary.md")
if [ -n "${RLC_ONLY:-}" ]; then args+=(--only "$RLC_ONLY"); fi
if [ -n "${RLC_FRAMEWORK_PATH:-}" ]; then args+=(--framework-path "$RLC_FRAMEWORK_PATH"); fi
if [ -n "${RLC_WRITE_BASELINE:-}" ]; then
  args+=(--write-baseline "$RLC_WRITE_BASELINE")
elif [ -f "$baseline" ]; then
  args+=(--baseline "$baseline")
fi
# shellcheck disable=SC2206
if [ -n "${RLC_EXTRA:-}" ]; then args+=($RLC_EXTRA); fi
rlconform "${args[@]}"
status=$?
if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$out/rlc-summary.md" ]; then
  cat "$out/rlc-summary.md" >> "$GITHUB_STEP_SUMMARY"
fi
exit "$status"
