#!/bin/sh
# The official postgres image's contract, the little of it compose.yaml relies on: on first
# start, a cluster owned by $POSTGRES_USER with password auth over TCP and the $POSTGRES_DB
# database; then `postgres` listening on every address. Any other command runs as given.
set -eu
if [ "${1:-}" != "postgres" ]; then exec "$@"; fi
PG=/usr/lib/postgresql/15/bin
DATA=/var/lib/postgresql/data
USER_NAME="${POSTGRES_USER:-postgres}"
mkdir -p "$DATA" /var/run/postgresql
chown postgres "$DATA" /var/run/postgresql
if [ ! -f "$DATA/PG_VERSION" ]; then
  printf '%s\n' "$POSTGRES_PASSWORD" > /tmp/pw && chown postgres /tmp/pw
  su postgres -c "$PG/initdb -D $DATA -U $USER_NAME --pwfile=/tmp/pw --auth-local=trust --auth-host=scram-sha-256"
  rm /tmp/pw
  echo "host all all all scram-sha-256" >> "$DATA/pg_hba.conf"
  su postgres -c "$PG/pg_ctl -D $DATA -w -o '-c listen_addresses=' start"
  su postgres -c "$PG/psql -h /var/run/postgresql -U $USER_NAME -d postgres -c 'CREATE DATABASE ${POSTGRES_DB:-$USER_NAME}'" </dev/null
  su postgres -c "$PG/pg_ctl -D $DATA -w stop"
fi
exec su postgres -c "exec $PG/postgres -D $DATA -c listen_addresses='*'"
