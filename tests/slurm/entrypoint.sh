#!/bin/sh
# fwbench-slurm-entrypoint ROLE: start munged, then the Slurm daemon of ROLE in the foreground, logging to
# stderr (docker logs). ROLE: slurmctld (the controller, also the login node) or slurmd (a compute node);
# anything else is run as a plain command.
# cluster.py copies /etc/slurm/slurm.conf and /etc/munge/munge.key into the container before it starts.
set -eu
role=${1:-slurmd}
case "$role" in
  slurmctld | slurmd) ;;
  *) exec "$@" ;;
esac

for f in /etc/slurm/slurm.conf /etc/munge/munge.key; do
  [ -s "$f" ] || { echo "fwbench-slurm: $f is missing" >&2; exit 1; }
done
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
# A container started again after `docker kill` still has the old daemons' pid files and munged's socket.
rm -f /run/munge/munged.pid /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock \
  /run/slurmctld.pid /run/slurmd.pid
runuser -u munge -- /usr/sbin/munged
i=0
until munge -n > /dev/null 2>&1; do
  i=$((i + 1))
  [ "$i" -lt 50 ] || { echo "fwbench-slurm: munged did not start" >&2; exit 1; }
  sleep 0.1
done

if [ "$role" = slurmctld ]; then
  install -d -m 0755 /var/spool/slurmctld
  exec /usr/sbin/slurmctld -D -i
fi
install -d -m 0755 /var/spool/slurmd
exec /usr/sbin/slurmd -D
