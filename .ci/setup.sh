#!/usr/bin/env bash
# Set up mmina from nothing, idempotently: a virtual environment in .venv, the package with
# its test dependencies, a Chromium for Playwright and kiwix-serve. Safe to run again at any time.
# The system packages install in the background while pip installs the Python ones.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"

# Debian/Ubuntu packages, installed only when missing: Chromium (Playwright cannot download
# where only package registries are reachable), its headless shell (what mmina runs when it is
# there: a step costs less CPU than with the full browser; docs/performance.md), kiwix-tools
# (the kiwix-serve behind the fixture web's Wikipedia viewer) and npm (the JavaScript libraries
# of the real-web tests; tests/realweb/installs.py).
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

can_apt() {
  command -v apt-get >/dev/null 2>&1 && { [ -z "$SUDO" ] || command -v sudo >/dev/null 2>&1; }
}

apt_install() {
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

some_chromium() {
  # Any Chromium mmina would find (mmina.recorder.chromium.find_chromium), looked for without Python.
  local own="${PLAYWRIGHT_BROWSERS_PATH:-$HOME/.cache/ms-playwright}"
  [ -n "${MMINA_CHROMIUM:-}" ] && [ -f "$MMINA_CHROMIUM" ] && return 0
  compgen -G "$own/chromium-*/chrome-linux*/chrome" >/dev/null && return 0
  [ -x /usr/lib/chromium/chromium ] || [ -x /usr/lib/chromium-browser/chromium-browser ] && return 0
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || command -v google-chrome >/dev/null 2>&1
}

system_packages() {
  local wanted=()
  command -v kiwix-serve >/dev/null 2>&1 || wanted+=(kiwix-tools)
  command -v npm >/dev/null 2>&1 || wanted+=(npm)
  [ -x /usr/lib/chromium/chromium-headless-shell ] || command -v chromium-headless-shell >/dev/null 2>&1 \
    || wanted+=(chromium-headless-shell)
  some_chromium || wanted+=(chromium)
  [ "${#wanted[@]}" -gt 0 ] || return 0
  if ! can_apt; then
    echo "Warning: cannot install ${wanted[*]} (no apt-get): see docs/install.md" >&2
    return 0
  fi
  $SUDO apt-get update -qq || true
  apt_install "${wanted[@]}" && return 0
  for package in "${wanted[@]}"; do  # one at a time, to say which one is missing
    apt_install "$package" || case "$package" in
      kiwix-tools) echo "Warning: could not install kiwix-tools: the fixture web's kiwix viewer tasks will fail (the Python wiki works)" >&2 ;;
      npm) echo "Warning: could not install npm: tests/test_realweb_clock.py will fail" >&2 ;;
      chromium-headless-shell) echo "Warning: could not install chromium-headless-shell: mmina runs the full Chromium (slower)" >&2 ;;
      *) echo "Warning: could not install $package" >&2 ;;
    esac
  done
}

system_packages &
SYSTEM=$!

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
wait "$SYSTEM"

have_chromium() {
  .venv/bin/python - <<'PY'
import os, shutil, sys
from playwright.sync_api import sync_playwright
explicit = os.environ.get("MMINA_CHROMIUM")
with sync_playwright() as p:
    own = p.chromium.executable_path
candidates = [explicit, own, "/usr/lib/chromium/chromium", "/usr/lib/chromium-browser/chromium-browser",
              shutil.which("chromium"), shutil.which("chromium-browser"), shutil.which("google-chrome")]
sys.exit(0 if any(c and os.path.isfile(c) for c in candidates) else 1)
PY
}

if ! have_chromium; then
  # Elsewhere than Debian/Ubuntu: Playwright's own build.
  .venv/bin/python -m playwright install chromium
  have_chromium || { echo "Error: could not install Chromium; set MMINA_CHROMIUM to a Chromium executable" >&2; exit 1; }
fi
