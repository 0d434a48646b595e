#!/usr/bin/env bash
# pyiceberg, the independent reader of the Iceberg sink's tables in the tests and benchmarks:
# Apache Iceberg's own Python library (PyPI `pyiceberg` with its SQL catalog and pyarrow), in a
# virtualenv of weir's own (${WEIR_PYICEBERG_VENV:-$HOME/.cache/weir/pyiceberg}), outside the
# clone; a fresh machine needs nothing but python3 and python3-venv (`make test` installs them).
#
#   scripts/pyiceberg.sh install        # create the virtualenv if pyiceberg is missing
#   scripts/pyiceberg.sh read ARGS...   # scripts/iceberg_read.py in it (see that file)
set -euo pipefail
cmd="${1:?usage: pyiceberg.sh install | read ARGS...}"
venv="${WEIR_PYICEBERG_VENV:-$HOME/.cache/weir/pyiceberg}"
here="$(cd "$(dirname "$0")" && pwd)"

install() {
  if "$venv/bin/python" -c 'import pyiceberg, pyarrow, sqlalchemy, psycopg2' 2>/dev/null; then
    return 0
  fi
  command -v python3 >/dev/null || { echo "python3 not found: install it (make test does)" >&2; exit 1; }
  echo "installing pyiceberg (with its SQL catalog and pyarrow) into $venv" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    'pyiceberg[sql-sqlite,sql-postgres,pyarrow]>=0.10,<0.12' >&2 \
    || { rm -rf "$venv"; echo "pip could not install pyiceberg from PyPI into $venv" >&2; exit 1; }
}

case "$cmd" in
  install) install ;;
  read)
    shift
    install
    exec "$venv/bin/python" "$here/iceberg_read.py" "$@"
    ;;
  *) echo "usage: pyiceberg.sh install | read ARGS..." >&2; exit 2 ;;
esac
