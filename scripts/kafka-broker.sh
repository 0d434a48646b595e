#!/usr/bin/env bash
# A throwaway Kafka broker for the tests and `weir bench kafka`: Apache Kafka 4.4.0's own
# broker (org.apache.kafka:kafka_2.13 from Maven Central), one JVM in KRaft mode as broker
# and controller at once (no ZooKeeper), its log directory, pid and log in the caller's
# directory, so a restarted broker keeps its topics, committed offsets and transactions.
#
#   scripts/kafka-broker.sh install             # fetch Kafka's JARs into weir's cache if missing
#   scripts/kafka-broker.sh install-background  # the same, in the background
#   scripts/kafka-broker.sh start DIR PORT      # start (or restart) on DIR, wait until it serves
#   scripts/kafka-broker.sh stop DIR            # SIGTERM (a clean shutdown), SIGKILL after 15 s
#   scripts/kafka-broker.sh kill DIR            # SIGKILL at once (a crash)
#   scripts/kafka-broker.sh topic PORT NAME PARTITIONS   # create a topic (replication 1)
#   scripts/kafka-broker.sh produce PORT NAME PARTITIONS FILE  # FILE's lines as records, line i
#                                                             # to partition i % PARTITIONS
#
# Debian packages no Kafka broker; Maven Central has Kafka's JARs. `install` copies them with
# Maven (scripts/kafka/pom.xml: the broker, its runtime dependencies and a log4j binding, 45
# JARs, 43 MB, no test scope) into ${WEIR_KAFKA_ROOT:-$HOME/.cache/weir/kafka-4.4.0}, compiles
# scripts/kafka/WeirKafka.java there (it formats a new log directory inside the broker's JVM,
# and creates topics with the AdminClient, where kafka-topics.sh would need kafka-tools and
# Kafka Connect's dependencies), then starts one broker and creates one topic to record the
# classes they load in class-data-sharing archives, which halve each later start. About 25 s
# from an empty ~/.m2, once; the cache is redone when a file of scripts/kafka/ changes.
# Needs java, javac (17) and mvn, and python3 to pick a free port.
#
# The broker listens on 127.0.0.1:PORT (PLAINTEXT), its controller on another loopback port,
# chosen at the first start and kept in DIR/cluster with the cluster id, so a restart on DIR is
# the same single-node cluster. `start` returns once the new log says "Kafka Server started",
# which KRaft writes after the broker is unfenced and its listener accepts (2-3 s; a bare TCP
# accept could come before the broker serves); after `kill`, about 5 s: the controller,
# restarted with it, waits out the killed broker's session (3 s here, 9 s by default) before it
# registers the new one. `stop` takes under a second, `topic` about one (a JVM of its own).
# Settings for tests: replication 1 for the offsets and transaction-state topics (4 partitions
# each, created at first use), no initial rebalance delay, one partition for auto-created
# topics, timed-out transactions aborted within a second of their timeout. Topics are
# auto-created as Kafka does by default, for the clients that ask: librdkafka's producers do,
# its consumers do not (a job reading a missing topic still finds it missing); the tests create
# theirs with `topic`. The JVM: heap 256-512 MiB, serial GC, C1 only (the fastest start
# measured; about 300 MB resident).
set -euo pipefail
cmd="${1:?usage: kafka-broker.sh install | install-background | start DIR PORT | stop DIR | kill DIR | topic PORT NAME PARTITIONS | produce PORT NAME PARTITIONS FILE}"
version="4.4.0"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${WEIR_KAFKA_ROOT:-$HOME/.cache/weir/kafka-$version}"
# The broker's JVM options (WEIR_KAFKA_JVM_OPTS, split on spaces, replaces them).
read -r -a jvm_opts <<<"${WEIR_KAFKA_JVM_OPTS:--Xms256m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1}"
tool_opts=(-Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1)
sources=("$here/kafka/pom.xml" "$here/kafka/WeirKafka.java" "$here/kafka/log4j2.properties")

# What the cache was made from: scripts/kafka/ and the JVM (the archives are for one JVM).
stamp() {
  { cat "${sources[@]}"; stat -c '%n %s %Y' "$(readlink -f "$(command -v java)")"; } 2>/dev/null | sha256sum | cut -c1-16
}

installed() {
  [ -f "$root/installed" ] && [ "$(cat "$root/installed")" = "$(stamp)" ]
}

install() {
  installed && return 0
  for tool in java javac jar mvn python3; do
    command -v "$tool" >/dev/null || { echo "$tool not found: install a JDK 17, Maven and python3" >&2; exit 1; }
  done
  mkdir -p "$(dirname "$root")"
  # One install at a time: a second `install` waits for the first (see `install-background`).
  # In a subshell that holds the lock, so that no broker started afterwards inherits it.
  (
    flock 9
    installed && exit 0
    echo "fetching Apache Kafka $version into $root (the broker the tests use; once)" >&2
    rm -rf "$root"
    mkdir -p "$root/classes"
    # Maven writes target/ beside the POM: it runs on a copy, outside the clone.
    cp "${sources[@]}" "$root/"
    if ! (cd "$root" && mvn -B -q dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$root/libs" >"$root/mvn.log" 2>&1); then
      # (Maven 3.8 writes colour codes even in batch mode.)
      sed $'s/\e\\[[0-9;]*m//g' "$root/mvn.log" >&2
      echo "mvn could not fetch Kafka's JARs (above)" >&2
      exit 1
    fi
    rm -f "$root/mvn.log"
    rm -rf "$root/target"
    javac -nowarn -cp "$root/libs/*" -d "$root/classes" "$root/WeirKafka.java" >&2
    jar cf "$root/weir-kafka.jar" -C "$root/classes" .
    rm -rf "$root/classes"
    # Class-data sharing wants the same JARs in the same order at every start.
    { echo -n "$root/weir-kafka.jar"; find "$root/libs" -name '*.jar' | LC_ALL=C sort | sed 's/^/:/'; } \
      | tr -d '\n' >"$root/classpath"
    # A broker and a topic command that record the classes they load, dumped as they exit.
    # Optional: without the archives, starts take twice as long.
    train="$(mktemp -d)"
    tport="$(free_port)"
    if launch "$train" "$tport" -XX:ArchiveClassesAtExit="$root/broker.jsa" 9>&-; then
      topic_tool "$tport" weir-train 2 -XX:ArchiveClassesAtExit="$root/topic.jsa" >/dev/null 2>&1 \
        || { echo "could not record the topic command's classes (no matter)" >&2; rm -f "$root/topic.jsa"; }
      # The broker writes its archive as it exits: give it time, and drop a partial one.
      pid="$(cat "$train/pid")"
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 600); do alive "$pid" || break; sleep 0.1; done
      if alive "$pid"; then
        kill_pid "$pid"
        rm -f "$root/broker.jsa"
      fi
    else
      echo "could not record the broker's classes (no matter)" >&2
    fi
    rm -rf "$train"
    stamp >"$root/installed"
  ) 9>"$root.lock"
  installed || { echo "Kafka is still missing after the install" >&2; exit 1; }
}

# A free loopback port, as the kernel hands them out.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# An archive's option, if there is one.
cds() {
  if [ -f "$root/$1.jsa" ]; then echo "-XX:SharedArchiveFile=$root/$1.jsa"; else echo "-Xshare:auto"; fi
}

# Whether process PID runs (a zombie does not).
alive() {
  local state
  state="$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)" || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

# The broker's pid if the one recorded in DIR is still running (and is that broker).
running_pid() {
  local dir="$1" pid
  [ -f "$dir/pid" ] || return 1
  pid="$(cat "$dir/pid")"
  [ -n "$pid" ] && alive "$pid" || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "WeirKafka broker $dir/server.properties" \
    || return 1
  echo "$pid"
}

# SIGKILL, and wait until the process is gone (its ports and log directory free).
kill_pid() {
  kill -KILL "$1" 2>/dev/null || true
  for _ in $(seq 1 100); do
    alive "$1" || return 0
    sleep 0.05
  done
}

stop() {
  local dir="$1" pid
  pid="$(running_pid "$dir")" || { rm -f "$dir/pid"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 150); do
    alive "$pid" || { rm -f "$dir/pid"; return 0; }
    sleep 0.1
  done
  echo "the broker in $dir did not stop within 15 s: killing it" >&2
  kill_pid "$pid"
  rm -f "$dir/pid"
}

# The errors in a broker's log since byte OFFSET, with their causes, to stderr.
errors() {
  tail -c +"$(($2 + 1))" "$1" | grep -E '^\[.*\] (ERROR|FATAL|WARN)|^Caused by|Exception' | head -n 40 >&2 || true
}

# Starts a broker on DIR (absolute) and PORT with extra JVM options, and waits until it
# serves; fails with the end of its log.
launch() {
  local dir="$1" port="$2" id cport offset pid
  shift 2
  # The cluster: its id and controller port are chosen once and kept in DIR.
  if [ ! -f "$dir/cluster" ]; then
    # A Kafka Uuid: 16 random bytes, unpadded URL-safe base64, not starting with '-'.
    id="-"
    while [ "${id#-}" != "$id" ]; do
      id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
    done
    printf 'cluster.id=%s\ncontroller.port=%s\n' "$id" "$(free_port)" >"$dir/cluster"
  fi
  id="$(sed -n 's/^cluster.id=//p' "$dir/cluster")"
  cport="$(sed -n 's/^controller.port=//p' "$dir/cluster")"
  cat >"$dir/server.properties" <<EOF
# Written by scripts/kafka-broker.sh at each start.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
transaction.max.timeout.ms=900000
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
group.initial.rebalance.delay.ms=0
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=3000
num.network.threads=2
num.io.threads=2
background.threads=2
num.recovery.threads.per.data.dir=1
log.cleaner.threads=1
EOF
  # Where this start's log begins: readiness is read from there on.
  touch "$dir/broker.log"
  offset="$(stat -c %s "$dir/broker.log")"
  echo "[$(date '+%F %T')] scripts/kafka-broker.sh: starting on 127.0.0.1:$port" >>"$dir/broker.log"
  nohup java "${jvm_opts[@]}" "$@" -Dlog4j2.configurationFile="$root/log4j2.properties" \
    -cp "$(cat "$root/classpath")" WeirKafka broker "$dir/server.properties" "$id" \
    </dev/null >>"$dir/broker.log" 2>&1 &
  pid=$!
  echo "$pid" >"$dir/pid"
  for _ in $(seq 1 1200); do
    if tail -c +"$((offset + 1))" "$dir/broker.log" | grep -q "Kafka Server started"; then
      return 0
    fi
    if ! alive "$pid"; then
      echo "the Kafka broker on 127.0.0.1:$port exited; its errors (the whole log: $dir/broker.log):" >&2
      errors "$dir/broker.log" "$offset"
      rm -f "$dir/pid"
      return 1
    fi
    sleep 0.05
  done
  echo "the Kafka broker did not start on 127.0.0.1:$port within 60 s; its errors and last lines:" >&2
  errors "$dir/broker.log" "$offset"
  tail -n 20 "$dir/broker.log" >&2
  kill_pid "$pid"
  rm -f "$dir/pid"
  return 1
}

# Creates a topic; extra JVM options after the partitions. The AdminClient's warnings and
# errors go to stderr.
topic_tool() {
  local port="$1" name="$2" partitions="$3"
  shift 3
  java "${tool_opts[@]}" "$@" -Dorg.apache.logging.log4j.level=WARN \
    -cp "$(cat "$root/classpath")" WeirKafka topic "127.0.0.1:$port" "$name" "$partitions" >&2
}

# The producer's heap holds its batches (1 MB per partition), not the file.
produce_tool() {
  local port="$1" name="$2" partitions="$3" file="$4"
  java -Xmx256m -XX:+UseSerialGC -Dorg.apache.logging.log4j.level=WARN \
    -cp "$(cat "$root/classpath")" WeirKafka produce "127.0.0.1:$port" "$name" "$partitions" "$file" >&2
}

case "$cmd" in
  install)
    install
    ;;
  install-background)
    # Starts the install, if one is needed, at low priority and returns: `make test` begins it
    # before compiling weir and waits for it with `install` before the tests run.
    installed && exit 0
    mkdir -p "$(dirname "$root")"
    nohup nice -n 10 "$0" install >"$root.log" 2>&1 </dev/null &
    ;;
  start)
    dir="${2:?missing DIR}"
    port="${3:?missing PORT}"
    install
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    stop "$dir"
    launch "$dir" "$port" "$(cds broker)"
    ;;
  topic)
    port="${2:?missing PORT}"
    name="${3:?missing NAME}"
    partitions="${4:?missing PARTITIONS}"
    install
    topic_tool "$port" "$name" "$partitions" "$(cds topic)"
    ;;
  produce)
    port="${2:?missing PORT}"
    name="${3:?missing NAME}"
    partitions="${4:?missing PARTITIONS}"
    file="${5:?missing FILE}"
    [ -f "$file" ] || { echo "no file $file to produce" >&2; exit 1; }
    install
    produce_tool "$port" "$name" "$partitions" "$file"
    ;;
  stop)
    dir="${2:?missing DIR}"
    [ -d "$dir" ] || exit 0
    stop "$(cd "$dir" && pwd)"
    ;;
  kill)
    dir="${2:?missing DIR}"
    [ -d "$dir" ] || exit 0
    dir="$(cd "$dir" && pwd)"
    if pid="$(running_pid "$dir")"; then
      kill_pid "$pid"
    fi
    rm -f "$dir/pid"
    ;;
  *)
    echo "unknown command: $cmd" >&2; exit 2 ;;
esac
