# Sourced by the benchmark drivers: wait until other people's jobs leave the
# CPUs alone. QUIET_BUSY (percent, default 10) and QUIET_WAIT (seconds, default
# 300) tune it.
quiet_busy=${QUIET_BUSY:-10}
quiet_wait=${QUIET_WAIT:-300}

# "busy total": CPU ticks of all CPUs since boot, from /proc/stat.
cpu_ticks() {
  local c total=0
  read -r -a c < /proc/stat
  for i in 1 2 3 4 5 6 7 8; do total=$((total + c[i])); done
  echo "$((total - c[4] - c[5])) $total"
}

# Percent of all CPUs busy over the next second.
cpu_busy() {
  local busy0 total0 busy1 total1
  read -r busy0 total0 < <(cpu_ticks)
  sleep 1
  read -r busy1 total1 < <(cpu_ticks)
  echo $((100 * (busy1 - busy0) / (total1 - total0 > 0 ? total1 - total0 : 1)))
}

wait_for_quiet() {
  local waited=0
  while [ "$(cpu_busy)" -gt "$quiet_busy" ] && [ "$waited" -lt "$quiet_wait" ]; do
    waited=$((waited + 1))
  done
  [ "$waited" -eq 0 ] || echo "  waited ${waited}s for the CPUs to quieten" >&2
}

