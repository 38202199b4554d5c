#!/usr/bin/env bash
# A real Slurm on this machine for `attnlab sweep --slurm`: installs Debian's
# slurm-wlm and munge, starts munged, slurmctld and slurmd as a one-node
# cluster on localhost (as root; no cgroups, no accounting), submits the array
# script that `attnlab sweep --slurm` prints for a small grid with sbatch --wait,
# and checks that every cell ran and the summary holds them all. Not part of
# CI (it starts system daemons); run it by hand after scripts/setup.sh:
#
#   scripts/slurm_check.sh [build/attnlab]
#
# Leaves the daemons running when it ends (stop them: pkill slurmd slurmctld munged).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
attnlab="$(realpath "${1:-$repo_root/build/attnlab}")"
[[ -x "$attnlab" ]] || { echo "slurm_check.sh: $attnlab is not an executable (run scripts/setup.sh)" >&2; exit 2; }
[[ $EUID -eq 0 ]] || { echo "slurm_check.sh: run it as root (it installs packages and starts daemons)" >&2; exit 2; }

missing=()
for pkg in slurm-wlm munge; do
  [[ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)" == "install ok installed" ]] || missing+=("$pkg")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
fi

# munge: a key, and the daemon (as its own user, as it insists)
if [[ ! -s /etc/munge/munge.key ]]; then mungekey --create --keyfile=/etc/munge/munge.key; fi
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
mkdir -p /run/munge && chown munge:munge /run/munge
pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
munge -n | unmunge >/dev/null

cpus="$(nproc)"
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=attnlab-check
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
NodeName=localhost CPUs=$cpus State=UNKNOWN
PartitionName=check Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 60); do
  sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)' && break
  sleep 1
done
sinfo -h -o %T | grep -qE '^(idle|mixed|allocated)' || { echo "slurm_check.sh: the node never became idle:" >&2; sinfo >&2; exit 1; }

work="$(mktemp -d /tmp/attnlab_slurm_XXXXXX)"
cd "$work"
cat > grid.toml <<'TOML'
[run]
name = "slurm_grid"
out_dir = "runs"
[task]
name = "copy"
vocab = 12
min_len = 2
max_len = 4
[model]
width = 16
heads = 2
layers = 1
ffn = 32
[train]
steps = 60
batch = 8
eval_batches = 1
[sweep]
"model.heads" = [1, 2]
"run.seed" = [0, 1, 2]
TOML
"$attnlab" sweep grid.toml --slurm --cells-per-task 2 > job.sh
sbatch --wait --output="$work/slurm-%A_%a.out" job.sh || true  # a task whose summary saw others unfinished exits 1
"$attnlab" sweep grid.toml --summarize | tail -1
ok="$(grep -c '^cell,.*,ok,' runs/slurm_grid/summary.csv || true)"
if [[ "$ok" != 6 ]]; then
  echo "slurm_check.sh: FAILED: $ok of 6 cells ok in $work/runs/slurm_grid/summary.csv; task logs in $work" >&2
  exit 1
fi
echo "slurm_check.sh: passed: the array of 3 tasks ran all 6 cells under Slurm $(sinfo -V | cut -d' ' -f2) ($work)"
