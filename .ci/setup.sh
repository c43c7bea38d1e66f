#!/usr/bin/env bash
# Set up mmina from nothing, idempotently: a virtual environment in .venv, the package with
# its test dependencies, and a Chromium for Playwright. Safe to run again at any time.
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

if have_chromium; then
  exit 0
fi
# Debian/Ubuntu: the distribution's Chromium (Playwright cannot download where only
# package registries are reachable). Elsewhere: Playwright's own build.
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if command -v apt-get >/dev/null 2>&1 && { [ -z "$SUDO" ] || command -v sudo >/dev/null 2>&1; }; then
  $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null || true
fi
have_chromium || .venv/bin/python -m playwright install chromium
have_chromium || { echo "Error: could not install Chromium; set MMINA_CHROMIUM to a Chromium executable" >&2; exit 1; }
