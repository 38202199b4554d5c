# Sourced by the benchmark drivers that time a whole process with
# `/usr/bin/time -v -o FILE COMMAND`.
#
# time_v_read FILE: prints "WALL_SECONDS PEAK_RSS_KB" from that report (its
# "Elapsed (wall clock) time" as h:mm:ss or m:ss, and "Maximum resident set size").
time_v_read() {
  awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, t, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + t[i]; wall = s}
              /Maximum resident set size/ {peak = $2}
              END {print wall, peak}' "$1"
}
