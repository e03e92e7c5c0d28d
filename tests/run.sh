#!/usr/bin/env bash
# Installs everything the test suite needs and runs all of it: lint, layer contract, tests.
# Works on a fresh Debian/Ubuntu machine: system packages come from apt-get when missing,
# Python packages go into ./.venv. Extra arguments are passed to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v python3 >/dev/null || need_apt+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
command -v redis-server >/dev/null || need_apt+=(redis-server)
[ -f /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || need_apt+=(faketime)
command -v java >/dev/null || need_apt+=(openjdk-17-jre-headless)
# ZooKeeper lock tests: Debian's ZooKeeper server and a Curator client compiled with javac
command -v javac >/dev/null || need_apt+=(openjdk-17-jdk-headless)
[ -d /usr/share/zookeeper ] || need_apt+=(zookeeper)
[ -f /usr/share/java/curator-recipes.jar ] || need_apt+=(libcurator-recipes-java)
command -v promtool >/dev/null || need_apt+=(prometheus)
# the status page test: a headless browser (Debian: chromium; an installed chromium-browser serves too)
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || need_apt+=(chromium)
# npm: Azurite (below) and, where helm is missing, the chart tests' tools
command -v npm >/dev/null || need_apt+=(npm)
# the Apache Hudi lane fetches Hudi's released bundle jars with Maven (tests/hudi/setup.sh)
command -v mvn >/dev/null || need_apt+=(maven)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need_apt[@]}"
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]' --config-settings editable_mode=strict
# Azurite, the Azure Blob server of the object-storage tests (3.35: the last release for Node 20),
# kept inside .venv so that it stays out of git.
if [ ! -x .venv/azurite/node_modules/.bin/azurite-blob ]; then
  npm install --prefix .venv/azurite --no-audit --no-fund --silent azurite@3.35.0
fi

echo "== ruff"
.venv/bin/ruff check hoodie planners executors service tests bench
echo "== import layers"
.venv/bin/lint-imports
echo "== types"
.venv/bin/mypy -p hoodied.hoodie -p hoodied.planners -p hoodied.executors -p hoodied.service -p tests
.venv/bin/mypy bench
echo "== docs"  # the site: a broken link, anchor or page left out of the navigation fails the build
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir site
echo "== Apache Hudi lane"  # its own Python environment and Hudi's jars, cached outside the checkout
if ! bash tests/hudi/setup.sh; then
  # CI must run the lane; elsewhere its tests are skipped with the line setup.sh printed
  if [ "${CI:-}" = true ]; then exit 1; fi
fi
echo "== pytest"
exec .venv/bin/pytest "$@"
