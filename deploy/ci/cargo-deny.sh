#!/usr/bin/env bash
# Supply-chain check (issue 17, item 6): `cargo deny check` against deny.toml at the
# workspace root. Installs the pinned cargo-deny once, under the phalanx cache, and runs
# the checks this machine can run.
#
#   deploy/ci/cargo-deny.sh              bans licenses sources (the default, offline)
#   deploy/ci/cargo-deny.sh advisories   all four, with the RustSec advisories (fetched
#                                        from github.com)
#   deploy/ci/cargo-deny.sh --install-only   install, check nothing (.ci/run does this in
#                                        the background, beside the Go tools)
#
# Any other arguments are passed, offline, to `cargo deny check` as the list of checks.
set -euo pipefail
cd "$(dirname "$0")/../.."

# Pinned: a new cargo-deny can change what a deny.toml means (it renamed and removed keys
# before); move the pin on purpose, with deny.toml.
version=0.20.2
cache="${PHALANX_CACHE:-$HOME/.cache/phalanx}"
root="$cache/tools/cargo-deny"
bin="$root/bin/cargo-deny"

if [ ! -x "$bin" ] || ! "$bin" --version 2>/dev/null | grep -qx "cargo-deny $version"; then
  # Measured cold on a busy 2-core machine: about 24 minutes (docs/security.md).
  echo "installing cargo-deny $version into $root (once; cold, 10-25 minutes on 2 cores)" >&2
  # Its own target directory: building cargo-deny in the workspace's would add hundreds of
  # artefacts there and, with other features unified, could rebuild the workspace's crates.
  CARGO_TARGET_DIR="$cache/tools/cargo-deny-build" \
    cargo install --locked --version "$version" --root "$root" cargo-deny
  # The build tree is only needed to build; the binary is what stays.
  rm -rf "$cache/tools/cargo-deny-build"
fi

if [ "${1:-}" = --install-only ]; then
  exit 0
fi

# `--frozen`: the lock file as committed and no network: crates come from cargo's cache.
# The build steps fill it only with the crates of this platform, and cargo-deny reads the
# metadata of every platform's (windows-sys, android_system_properties, ...), so a fresh
# machine failed here ("failed to download windows-sys", 2026-12-02) until this fetch of
# the whole lock file, from the registry (a few seconds; nothing once cached).
cargo fetch --locked --quiet
# The advisory database is a git repository on github.com,
# which the CI machine cannot reach (deny.toml, [advisories]), so it is left out unless
# asked for, and then the network is allowed to fetch it.
network=--frozen
if [ $# -eq 0 ]; then
  set -- bans licenses sources
elif [ "$1" = advisories ]; then
  network=--locked
  set -- advisories bans licenses sources
fi
exec "$bin" "$network" check "$@"
