#!/usr/bin/env bash
# Installs the Apache Hudi lane: its own Python environment with a Spark that Hudi's released bundles
# support (pyspark 3.5, Scala 2.12) and the bundle jars, fetched with Maven. Everything goes into a
# cache folder outside the checkout, HOODIED_HUDI_HOME (default ~/.cache/hoodied/hudi-lane); a second
# run downloads nothing. Prints one line and exits 1 when something cannot be fetched.
set -euo pipefail

home="${HOODIED_HUDI_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/hoodied/hudi-lane}"
# The Hudi releases the lane runs, one per table version they write: 0.15 -> 6, 1.0 -> 8, 1.1 -> 9.
releases=(0.15.0 1.0.2 1.1.1)
pyspark_version=3.5.7
mkdir -p "$home/jars"

fail() { echo "Apache Hudi lane: $*" >&2; exit 1; }

if [ ! -x "$home/venv/bin/python" ] || ! "$home/venv/bin/python" -c "import pyspark, sys; sys.exit(pyspark.__version__ != '$pyspark_version')" 2>/dev/null; then
  rm -rf "$home/venv"
  python3 -m venv "$home/venv" || fail "cannot create its Python environment in $home/venv"
  "$home/venv/bin/python" -m pip install -q "pyspark==$pyspark_version" \
    || fail "cannot install pyspark $pyspark_version from PyPI"
fi

for release in "${releases[@]}"; do
  jar="hudi-spark3.5-bundle_2.12-$release.jar"
  [ -s "$home/jars/$jar" ] && continue
  command -v mvn >/dev/null || fail "Maven (mvn) is missing: install it (Debian: apt-get install maven)"
  mvn -q -B dependency:copy "-Dartifact=org.apache.hudi:hudi-spark3.5-bundle_2.12:$release" \
    "-DoutputDirectory=$home/jars" >"$home/mvn-$release.log" 2>&1 \
    || fail "cannot fetch org.apache.hudi:hudi-spark3.5-bundle_2.12:$release with Maven (see $home/mvn-$release.log)"
done
echo "$pyspark_version ${releases[*]}" > "$home/READY"
