#!/usr/bin/env bash
# Builds the JVM Spark sink: the native library (cargo, jvm/native) and the jar (javac against the
# jars the installed pyspark ships; no Maven, nothing downloaded), then installs the jar where
# affinity.spark.configure(builder) finds it: <venv>/share/affinity/affinity-spark.jar.
# Usage: scripts/build-jvm.sh [python]   (default: .venv/bin/python, else python3)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-.venv/bin/python}
[[ -x $python ]] || python=python3
command -v javac >/dev/null || { echo "build-jvm: javac (JDK 17) is required" >&2; exit 1; }
command -v jar >/dev/null || { echo "build-jvm: jar (JDK 17) is required" >&2; exit 1; }
jars=$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))') ||
  { echo "build-jvm: pyspark is not installed for $python" >&2; exit 1; }
prefix=$("$python" -c 'import sys; print(sys.prefix)')
# Where configure() looks (python/affinity/spark/configure.py: JAR_NAME, JAR_DIR).
dest="$prefix/share/affinity"
build=target/jvm
echo "build-jvm: native library (cargo build --release -p affinity-jvm)"
cargo build --release -q -p affinity-jvm
rm -rf "$build" && mkdir -p "$build/classes/affinity/spark/native"
echo "build-jvm: classes (javac --release 17 against $jars)"
javac --release 17 -Xlint:all -Xlint:-serial -Xlint:-processing -Xlint:-path -Werror \
  -cp "$jars/*" -d "$build/classes" jvm/src/affinity/spark/*.java
cp -r jvm/resources/META-INF "$build/classes/"
cp target/release/libaffinity_jvm.so "$build/classes/affinity/spark/native/"
jar --create --file "$build/affinity-spark.jar" -C "$build/classes" .
mkdir -p "$dest"
cp "$build/affinity-spark.jar" "$dest/affinity-spark.jar.tmp"
mv "$dest/affinity-spark.jar.tmp" "$dest/affinity-spark.jar"
echo "build-jvm: installed $dest/affinity-spark.jar"
