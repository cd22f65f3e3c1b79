#!/usr/bin/env bash
# Install and start a real one-node SLURM cluster on this machine, for tests and CI.
#
# Runs as root and needs no systemd: munged, a private MariaDB, slurmdbd (accounting,
# so that `sacct` answers -- submitit polls it), slurmctld and slurmd are started by
# hand, in that order, and their PIDs are written to $DOTS_SLURM_STATE/pids so that
# scripts/slurm/stop.sh stops exactly them. The node has this machine's CPU count and
# memory; its only partition ($DOTS_SLURM_PARTITION, default "debug") is the default.
#
# Idempotent: when the daemons of a previous start still run and sinfo answers, it
# does nothing. Prints how long the install and the start took.
#
# Environment: DOTS_SLURM_STATE (default /var/tmp/dots-slurm), DOTS_SLURM_PARTITION,
# DOTS_SLURM_DB_PORT (default 3307).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=common.sh
source "$here/common.sh"

PACKAGES=(munge mariadb-server slurmctld slurmd slurmdbd slurm-client)
READY_TIMEOUT_S=60

log() { echo "[slurm] $*"; }

die() {
  echo "error: $*" >&2
  for f in "$LOG_DIR"/*; do
    [[ -f $f ]] || continue
    echo "----- last lines of $f" >&2
    tail -n 15 "$f" >&2
  done
  exit 1
}

# wait_for SECONDS DESCRIPTION COMMAND...: retry COMMAND until it succeeds.
wait_for() {
  local timeout=$1 what=$2
  shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out after ${timeout}s waiting for $what"
    sleep 0.5
  done
}

# launch NAME COMMAND...: start a daemon in the foreground mode of its own, detached
# from this shell, and record its PID. COMMAND must exec the daemon NAME itself.
launch() {
  local name=$1
  shift
  nohup "$@" >"$LOG_DIR/$name.out" 2>&1 </dev/null &
  local pid=$!
  echo "$name $pid" >>"$PID_FILE"
  sleep 0.3
  pid_matches "$name" "$pid" || die "$name exited right after starting (see $LOG_DIR/$name.out)"
  log "started $name (pid $pid)"
}

install_packages() {
  local missing=() pkg
  for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if ((${#missing[@]} == 0)); then
    log "packages already installed"
    return
  fi
  log "installing ${missing[*]}"
  # Keep the packages' maintainer scripts from starting the system services: this
  # script starts its own instances.
  local policy=/usr/sbin/policy-rc.d added_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    added_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$STATE_DIR/apt.log" 2>&1 ||
    { tail -n 30 "$STATE_DIR/apt.log" >&2; exit 1; }
  ((added_policy)) && rm -f "$policy"
  return 0
}

# write_config TEMPLATE DEST MODE: fill the @NAME@ placeholders of TEMPLATE.
write_config() {
  local template=$1 dest=$2 mode=$3
  if [[ -e $dest ]] && ! head -n 1 "$dest" | grep -qF "$CONF_MARKER"; then
    die "$dest exists and was not written by this script; not overwriting a real cluster's config"
  fi
  sed -e "s|@CLUSTER@|$CLUSTER_NAME|g" -e "s|@HOST@|$NODE_NAME|g" \
    -e "s|@STATE@|$STATE_DIR|g" -e "s|@CPUS@|$NODE_CPUS|g" -e "s|@MEM_MB@|$NODE_MEM_MB|g" \
    -e "s|@MEM_PER_CPU@|$((NODE_MEM_MB / NODE_CPUS))|g" -e "s|@PARTITION@|$PARTITION|g" \
    -e "s|@DB_PORT@|$DB_PORT|g" -e "s|@DB_USER@|$DB_USER|g" -e "s|@DB_PASS@|$DB_PASS|g" \
    "$template" >"$dest.tmp"
  chmod "$mode" "$dest.tmp"
  mv "$dest.tmp" "$dest"
}

write_configs() {
  # The node as slurmd itself detects it (CPU count, memory in MB), so that the
  # controller never finds the node smaller than configured and drains it.
  local detected
  detected=$(slurmd -C | head -n 1)
  NODE_NAME=$(hostname -s)
  NODE_CPUS=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$detected")
  NODE_MEM_MB=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$detected")
  [[ -n $NODE_CPUS && -n $NODE_MEM_MB ]] || die "could not read the node from 'slurmd -C': $detected"
  mkdir -p "$SLURM_ETC" "$STATE_DIR/slurmctld" "$STATE_DIR/slurmd"
  write_config "$here/slurm.conf.in" "$SLURM_ETC/slurm.conf" 644
  write_config "$here/slurmdbd.conf.in" "$SLURM_ETC/slurmdbd.conf" 600
  log "node $NODE_NAME: $NODE_CPUS CPUs, $NODE_MEM_MB MB, partition $PARTITION"
}

start_munge() {
  if [[ ! -s /etc/munge/munge.key ]]; then
    mungekey --create --keyfile=/etc/munge/munge.key
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
  install -d -o munge -g munge -m 755 /run/munge
  install -d -o munge -g munge -m 700 /var/lib/munge /var/log/munge
  # setpriv execs munged as the munge user (no intermediate process), so $! is munged.
  launch munged setpriv --reuid=munge --regid=munge --init-groups -- \
    /usr/sbin/munged --foreground --force
  wait_for 20 "munge" bash -c 'munge -n | unmunge'
}

start_mariadb() {
  local datadir=$STATE_DIR/mysql
  install -d -o mysql -g mysql -m 750 "$datadir"
  install -d -o mysql -g mysql -m 755 "$DB_SOCKET_DIR"
  if [[ ! -d $datadir/mysql ]]; then
    mariadb-install-db --no-defaults --user=mysql --datadir="$datadir" \
      --auth-root-authentication-method=socket --skip-test-db >"$LOG_DIR/mariadb-install.log" 2>&1 ||
      die "mariadb-install-db failed (see $LOG_DIR/mariadb-install.log)"
  fi
  launch mariadbd /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$datadir" \
    --socket="$DB_SOCKET" --port="$DB_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
    --pid-file="$DB_SOCKET_DIR/mariadbd.pid" --log-error="$LOG_DIR/mariadb.log" \
    --innodb-buffer-pool-size=128M --innodb-lock-wait-timeout=900 --max-connections=100
  wait_for 60 "mariadb" mariadb-admin --no-defaults --socket="$DB_SOCKET" -u root ping
  mariadb --no-defaults --socket="$DB_SOCKET" -u root <<SQL
CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO '$DB_USER'@'127.0.0.1';
FLUSH PRIVILEGES;
SQL
}

start_slurmdbd() {
  launch slurmdbd /usr/sbin/slurmdbd -D
  wait_for 60 "slurmdbd" sacctmgr -n list cluster
  if ! sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER_NAME"; then
    sacctmgr -i add cluster "$CLUSTER_NAME" >/dev/null
  fi
}

start_slurmctld() {
  launch slurmctld /usr/sbin/slurmctld -D
  wait_for 60 "slurmctld" scontrol ping
}

node_usable() {
  local state
  state=$(sinfo -h -n "$NODE_NAME" -o %T 2>/dev/null) || return 1
  [[ $state == idle || $state == mixed || $state == allocated ]]
}

start_slurmd() {
  launch slurmd /usr/sbin/slurmd -D
  local deadline=$((SECONDS + READY_TIMEOUT_S)) resumed=0
  until node_usable; do
    ((SECONDS < deadline)) || die "node $NODE_NAME not idle after ${READY_TIMEOUT_S}s: $(sinfo -N -l 2>&1 | tail -n 1)"
    # A node left down or drained by an earlier, interrupted run comes back here.
    if ((!resumed)) && sinfo -h -n "$NODE_NAME" -o %T 2>/dev/null | grep -qE 'down|drain'; then
      scontrol update nodename="$NODE_NAME" state=resume 2>/dev/null || true
      resumed=1
    fi
    sleep 0.5
  done
}

main() {
  require_root
  local t0 t_install t_start
  t0=$(date +%s.%N)
  mkdir -p "$STATE_DIR" "$LOG_DIR"
  chmod 755 "$STATE_DIR"

  if all_daemons_alive && sinfo -h >/dev/null 2>&1 && sacct -n -X >/dev/null 2>&1; then
    log "already running (PIDs in $PID_FILE); nothing to do"
    exit 0
  fi
  if [[ -s $PID_FILE ]]; then
    log "a previous start is only partly alive; stopping it first"
    bash "$here/stop.sh"
  fi
  : >"$PID_FILE"

  install_packages
  t_install=$(elapsed_since "$t0")
  t0=$(date +%s.%N)
  write_configs
  start_munge
  start_mariadb
  start_slurmdbd
  start_slurmctld
  start_slurmd
  wait_for 30 "sacct" sacct -n -X
  t_start=$(elapsed_since "$t0")

  sinfo
  log "ready: install ${t_install}s, start ${t_start}s (PIDs in $PID_FILE, logs in $LOG_DIR)"
}

main "$@"
