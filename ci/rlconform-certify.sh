#!/usr/bin/env bash
# Certify a postprocess implementation and leave the reports where CI can pick them up.
# Used verbatim by ci/github-actions.yml and ci/gitlab-ci.yml; copy it into your fork.
#
#   RLC_TARGET   adapter name or module:attribute            (required)
#   RLC_PROFILE  ci | dev | thorough                          (default ci)
#   RLC_ONLY     clause-id globs, comma-separated             (default: all)
#   RLC_OUT      folder for rlc-report.json, rlc-junit.xml, rlc-summary.md (default rlc-out)
#   RLC_EXTRA    extra certify flags, e.g. "--framework-path ../slime"
#
# Exit code: that of `rlconform certify` (0 pass or declared deviations, 1 fail, 2 setup).
set -uo pipefail
: "${RLC_TARGET:?set RLC_TARGET to an adapter name or module:attribute}"
out="${RLC_OUT:-rlc-out}"
mkdir -p "$out"
args=(certify "$RLC_TARGET" --profile "${RLC_PROFILE:-ci}"
      --json "$out/rlc-report.json" --junit "$out/rlc-junit.xml" --markdown "$out/rlc-summary.md")
if [ -n "${RLC_ONLY:-}" ]; then args+=(--only "$RLC_ONLY"); fi
# shellcheck disable=SC2206
if [ -n "${RLC_EXTRA:-}" ]; then args+=($RLC_EXTRA); fi
rlconform "${args[@]}"
status=$?
if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$out/rlc-summary.md" ]; then
  cat "$out/rlc-summary.md" >> "$GITHUB_STEP_SUMMARY"
fi
exit "$status"
