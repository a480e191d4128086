#!/usr/bin/env bash
# Installs the Debian packages the harness needs (debootstrap for node images, libfaketime for
# clock skew, iptables for partitions, chromium for the report test) and checks Java for Spark.
set -euo pipefail
missing=()
for pkg in "$@"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages ${missing[*]}; run as root or install them" >&2
    exit 2
  fi
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! java -version >/dev/null 2>&1; then
  echo "setup: Java 17+ is required by Spark (PySpark 4); install openjdk-17-jre-headless" >&2
  exit 2
fi
