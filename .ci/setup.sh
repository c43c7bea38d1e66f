#!/usr/bin/env bash
# Set up mmina from nothing, idempotently: a virtual environment in .venv, the package with
# its test dependencies, a Chromium for Playwright and kiwix-serve. Safe to run again at any time.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'

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

# Debian/Ubuntu packages, installed only when missing: Chromium (Playwright cannot download
# where only package registries are reachable) and kiwix-tools (the kiwix-serve behind the
# fixture web's Wikipedia viewer).
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
APT_UPDATED=""
apt_install() {
  command -v apt-get >/dev/null 2>&1 || return 1
  [ -z "$SUDO" ] || command -v sudo >/dev/null 2>&1 || return 1
  if [ -z "$APT_UPDATED" ]; then
    $SUDO apt-get update -qq || true
    APT_UPDATED=1
  fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if ! command -v kiwix-serve >/dev/null 2>&1; then
  apt_install kiwix-tools || echo "Warning: could not install kiwix-tools: the fixture web's kiwix viewer tasks will fail (the Python wiki works)" >&2
fi
if ! command -v npm >/dev/null 2>&1; then
  # npm brings the JavaScript libraries of the real-web clock test (RxJS, lodash; tests/realweb/installs.py)
  apt_install npm || echo "Warning: could not install npm: tests/test_realweb_clock.py will fail" >&2
fi
if [ ! -x /usr/lib/chromium/chromium-headless-shell ] && ! command -v chromium-headless-shell >/dev/null 2>&1; then
  # Chromium's headless shell: what mmina runs when it is there (a step costs less CPU than with
  # the full browser; docs/performance.md). The full browser below stays the fallback.
  apt_install chromium-headless-shell || echo "Warning: could not install chromium-headless-shell: mmina runs the full Chromium (slower)" >&2
fi
if ! have_chromium; then
  # Elsewhere than Debian/Ubuntu: Playwright's own build.
  apt_install chromium || true
  have_chromium || .venv/bin/python -m playwright install chromium
  have_chromium || { echo "Error: could not install Chromium; set MMINA_CHROMIUM to a Chromium executable" >&2; exit 1; }
fi
