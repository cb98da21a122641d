# Sourced by the scripts that build (the sanitizer and fuzz runners, .ci/run): `locked CMD...`
# runs CMD holding the file LLMSERVE_BUILD_LOCK names with flock(1), or plainly when it is unset,
# so that builds on a machine whose cores other builds share take turns.
locked() {
  if [[ -n "${LLMSERVE_BUILD_LOCK:-}" ]]; then
    flock "$LLMSERVE_BUILD_LOCK" "$@"
  else
    "$@"
  fi
}
