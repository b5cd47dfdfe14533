# Sourced by the scripts that fetch a Debian package without root (build-chromium.sh, build-prometheus.sh), after
# they define log and die: the checks and the version look-up they share.

# Dies unless the tools named are on PATH.
need_tools() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found: this script needs a Debian-based machine"
  done
}

# Prints the version apt would install of package $1, fetching the package lists once when apt knows none and
# this is root (a fresh CI machine's lists may be empty); dies when there is none.
candidate_version() {
  local package="$1" version
  candidate() { apt-cache policy "$package" 2>/dev/null | awk '/Candidate:/ {print $2}'; }
  version="$(candidate)"
  if { [ -z "$version" ] || [ "$version" = "(none)" ]; } && [ "$(id -u)" = 0 ]; then
    log "apt knows no $package yet: apt-get update"
    apt-get update -qq >&2 || log "apt-get update failed (see above)"
    version="$(candidate)"
  fi
  if [ -z "$version" ] || [ "$version" = "(none)" ]; then
    die "apt knows no $package package (run 'apt-get update' once, as root, or add Debian's main archive)"
  fi
  echo "$version"
}
