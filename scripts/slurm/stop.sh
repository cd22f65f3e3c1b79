#!/usr/bin/env bash
# Stop the one-node SLURM cluster that scripts/slurm/start.sh started.
#
# Cancels the jobs still queued or running, then stops the daemons recorded in
# $DOTS_SLURM_STATE/pids in reverse start order, each by its PID (SIGTERM, then
# SIGKILL after a grace period). A PID that is no longer the recorded daemon is left
# alone. With --purge, also deletes the state directory (job history, database).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=common.sh
source "$here/common.sh"

GRACE_S=15

log() { echo "[slurm] $*"; }

cancel_jobs() {
  command -v squeue >/dev/null || return 0
  local jobs
  jobs=$(timeout 10 squeue -h -o %A 2>/dev/null) || return 0
  [[ -n $jobs ]] || return 0
  log "cancelling jobs: $(echo $jobs)"
  # shellcheck disable=SC2086
  timeout 10 scancel $jobs 2>/dev/null || true
  local deadline=$((SECONDS + 15))
  while [[ -n $(timeout 10 squeue -h -o %A 2>/dev/null) ]] && ((SECONDS < deadline)); do
    sleep 0.5
  done
}

# stop_daemon NAME PID: SIGTERM, wait, then SIGKILL.
stop_daemon() {
  local name=$1 pid=$2
  if ! pid_matches "$name" "$pid"; then
    log "$name (pid $pid) is not running"
    return
  fi
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + GRACE_S))
  while pid_matches "$name" "$pid" && ((SECONDS < deadline)); do
    sleep 0.2
  done
  if pid_matches "$name" "$pid"; then
    log "$name (pid $pid) ignored SIGTERM for ${GRACE_S}s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  log "stopped $name (pid $pid)"
}

main() {
  require_root
  local purge=0
  [[ ${1:-} == --purge ]] && purge=1

  if [[ -s $PID_FILE ]]; then
    if all_daemons_alive; then cancel_jobs; fi
    local lines=() i name pid
    mapfile -t lines <"$PID_FILE"
    for ((i = ${#lines[@]} - 1; i >= 0; i--)); do
      read -r name pid <<<"${lines[i]}"
      stop_daemon "$name" "$pid"
    done
    rm -f "$PID_FILE"
  else
    log "no PID file at $PID_FILE; nothing to stop"
  fi

  if ((purge)); then
    rm -rf "$STATE_DIR"
    log "removed $STATE_DIR"
  fi
}

main "$@"
