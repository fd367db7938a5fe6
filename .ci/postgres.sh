#!/usr/bin/env bash
# Runs a command beside a throwaway PostgreSQL server on loopback:
#
#   .ci/postgres.sh go test ./ledgerfile/store/...
#
# Installs Debian's server when postgres/initdb are missing, makes a cluster
# in a temp dir (as the postgres user when run as root: postgres refuses
# root), starts it on a free 127.0.0.1 port with trust auth, exports
#   RETRYGATE_TEST_PG=postgres://postgres@127.0.0.1:PORT/postgres
#   RETRYGATE_TEST_PGBIN=DIR        (initdb and pg_ctl, for tests that start
#   RETRYGATE_TEST_PGUSER=USER       a server of their own to restart it)
# runs the command, and stops the server and removes the cluster at the end,
# whatever the command's exit status (which is this script's).
set -euo pipefail
if [ $# -eq 0 ]; then
  echo "usage: .ci/postgres.sh COMMAND [ARG...]" >&2
  exit 2
fi

find_bin() {
  local name=$1 d
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return; fi
  for d in /usr/lib/postgresql/*/bin; do
    if [ -x "$d/$name" ]; then echo "$d/$name"; return; fi
  done
  return 1
}

if ! find_bin postgres >/dev/null || ! find_bin initdb >/dev/null; then
  echo "== postgres: installing Debian's server" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql >/dev/null
fi
PG_CTL=$(find_bin pg_ctl)
INITDB=$(find_bin initdb)
PG_ISREADY=$(find_bin pg_isready)
BIN_DIR=$(dirname "$PG_CTL")

dir=$(mktemp -d "${TMPDIR:-/tmp}/retrygate-pg.XXXXXX")
as_user=()
pguser=$(id -un)
if [ "$(id -u)" = 0 ]; then
  pguser=postgres
  id postgres >/dev/null 2>&1 || useradd --system --home-dir "$dir" --shell /usr/sbin/nologin postgres
  chown postgres "$dir"
  as_user=(runuser -u postgres --)
fi
chmod 700 "$dir"

stop() {
  "${as_user[@]}" "$PG_CTL" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap stop EXIT

"${as_user[@]}" "$INITDB" -D "$dir/data" -U postgres --auth=trust --no-sync -E UTF8 --locale=C >"$dir/initdb.log" 2>&1 ||
  { cat "$dir/initdb.log" >&2; exit 1; }

opts() { echo "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c max_connections=200"; }

# A free port: probe one, then start; try another if it was taken.
started=
for _ in 1 2 3 4 5; do
  port=$(( (RANDOM % 20000) + 30000 ))
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
  # fsync off: the cluster is thrown away; a server restart (not a machine
  # crash) keeps every committed row, which is what the tests check.
  if "${as_user[@]}" "$PG_CTL" -D "$dir/data" -w -t 30 -l "$dir/server.log" \
      -o "$(opts)" start >/dev/null; then
    started=1
    break
  fi
done
if [ -z "$started" ]; then
  echo "postgres: failed to start (log: $dir/server.log)" >&2
  cat "$dir/server.log" >&2 || true
  exit 1
fi
"$PG_ISREADY" -q -h 127.0.0.1 -p "$port"

export RETRYGATE_TEST_PG="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
export RETRYGATE_TEST_PGUSER="$pguser"
export RETRYGATE_TEST_PGBIN="$BIN_DIR"
echo "== postgres: $RETRYGATE_TEST_PG ($("$BIN_DIR/postgres" --version))" >&2

set +e
"$@"
rc=$?
set -e
exit $rc
