#!/usr/bin/env bash
# Nexmark on Apache Flink beside weir (issue 26), for `make bench-peers`:
#
#   scripts/bench-peers.sh WEIR DATA [bench_peers.py options: --queries q0,q5 --runs 3 --skip-check]
#
# WEIR is the weir binary, DATA the Nexmark JSON-lines file both engines read (made by
# `weir nexmark generate`). PyFlink 2.3 (`apache-flink` from PyPI, about 850 MB with its JVM
# jars and Apache Beam) goes into a virtualenv of weir's own, ${WEIR_PYFLINK_VENV:-
# $HOME/.cache/weir/pyflink}, once: later runs find it there. Flink 2.3 runs on Java 11, 17 or
# 21; PyFlink 2.3 on Python 3.9 to 3.12. q14 calls the Nexmark benchmark's own Java function
# (scripts/peers/flink/udf/), which is compiled into a jar in the virtualenv once: a JDK's
# javac and jar. Flink's Kafka connector (the Kafka arm, `--kafka-broker`) comes from Maven
# Central, once. scripts/bench_peers.py does the work.
set -euo pipefail
weir="${1:?usage: bench-peers.sh WEIR DATA [options]}"
data="${2:?usage: bench-peers.sh WEIR DATA [options]}"
shift 2
venv="${WEIR_PYFLINK_VENV:-$HOME/.cache/weir/pyflink}"
here="$(cd "$(dirname "$0")" && pwd)"

fail() { echo "bench-peers: $*" >&2; exit 1; }

# Flink is a JVM program: PyFlink starts `java` from JAVA_HOME or the PATH.
java_bin="${JAVA_HOME:+$JAVA_HOME/bin/}java"
command -v "$java_bin" >/dev/null 2>&1 \
  || fail "no Java found (JAVA_HOME or PATH): Flink 2.3 needs Java 11, 17 or 21 (apt-get install openjdk-17-jre-headless)"
java_major="$("$java_bin" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')"
case "$java_major" in
  11 | 17 | 21) ;;
  *) fail "Java ${java_major:-of unknown version} found at $(command -v "$java_bin"): Flink 2.3 needs Java 11, 17 or 21" ;;
esac

# A Python that PyFlink 2.3 supports, for the virtualenv.
pick_python() {
  local candidate
  for candidate in python3.12 python3.11 python3.10 python3.9 python3; do
    if command -v "$candidate" >/dev/null 2>&1 \
      && "$candidate" -c 'import sys, venv; sys.exit(not (3, 9) <= sys.version_info[:2] <= (3, 12))' 2>/dev/null; then
      command -v "$candidate"
      return 0
    fi
  done
  return 1
}

if ! "$venv/bin/python" -c 'import pyflink.version as v; assert v.__version__.startswith("2.3")' 2>/dev/null; then
  python="$(pick_python)" \
    || fail "no Python 3.9 to 3.12 with venv found: PyFlink 2.3 needs one (apt-get install python3 python3-venv)"
  echo "installing PyFlink 2.3 (apache-flink, about 850 MB) into $venv with $python" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv" || fail "could not create a virtualenv at $venv with $python"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'apache-flink>=2.3,<2.4' \
    || { rm -rf "$venv"; fail "pip could not install apache-flink 2.3 from PyPI into $venv (see pip's message above)"; }
fi

# The Nexmark benchmark's user-defined functions (q14's count_char), its own Java source in
# scripts/peers/flink/udf/, compiled against PyFlink's jars into a jar beside them, once.
udf_src="$here/peers/flink/udf"
udf_jar="$venv/weir-nexmark-udf.jar"
if [ ! -f "$udf_jar" ] || [ -n "$(find "$udf_src" -name '*.java' -newer "$udf_jar")" ]; then
  command -v javac >/dev/null 2>&1 && command -v jar >/dev/null 2>&1 \
    || fail "no javac and jar found: q14's Nexmark function is compiled with a JDK (apt-get install openjdk-17-jdk-headless)"
  flink_lib="$("$venv/bin/python" -c 'import os, pyflink; print(os.path.join(os.path.dirname(pyflink.__file__), "lib"))')"
  classes="$(mktemp -d)"
  javac --release 11 -nowarn -cp "$flink_lib/*" -d "$classes" $(find "$udf_src" -name '*.java') \
    || fail "could not compile the Nexmark functions in $udf_src (see javac's message above)"
  jar cf "$udf_jar" -C "$classes" . || fail "could not write $udf_jar"
  rm -rf "$classes"
fi

# Flink's Kafka SQL connector for the Kafka arm (`--kafka-broker`), from Maven Central into the
# virtualenv once. 5.0.0-2.2 is the newest release (built against Flink 2.2; no release names
# 2.3 yet); PyFlink 2.3 runs it: `make bench-peers` checks every Kafka query's rows against
# weir's (BENCHMARKS.md).
kafka_connector="org.apache.flink:flink-sql-connector-kafka:5.0.0-2.2"
kafka_jar="$venv/flink-sql-connector-kafka-5.0.0-2.2.jar"
if [ ! -f "$kafka_jar" ]; then
  command -v mvn >/dev/null 2>&1 || fail "no mvn found: Flink's Kafka connector comes from Maven Central (apt-get install maven)"
  mvn -B -q dependency:copy -Dartifact="$kafka_connector" -DoutputDirectory="$venv" >&2 \
    || fail "mvn could not fetch $kafka_connector (see its message above)"
fi

[ -x "$weir" ] || fail "no weir binary at $weir (make build)"
[ -f "$data" ] || fail "no Nexmark file at $data (make nexmark-data)"
exec "$venv/bin/python" "$here/bench_peers.py" bench --weir "$weir" --python "$venv/bin/python" --data "$data" \
  --udf-jar "$udf_jar" --kafka-jar "$kafka_jar" "$@"
