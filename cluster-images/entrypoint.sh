#!/bin/sh
# Node container start: generate this container's own host key, install the run's public key
# (from SCHEMACHAOS_AUTHORIZED_KEY), then run sshd in the foreground as the main process.
set -eu
if [ ! -f /etc/ssh/ssh_host_ed25519_key ]; then
  ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
fi
mkdir -p /root/.ssh /run/sshd /var/lib/schemasync
chmod 0700 /root/.ssh
if [ -n "${SCHEMACHAOS_AUTHORIZED_KEY:-}" ]; then
  printf '%s\n' "$SCHEMACHAOS_AUTHORIZED_KEY" > /root/.ssh/authorized_keys
  chmod 0600 /root/.ssh/authorized_keys
fi
touch /run/schemachaos-ready
exec /usr/sbin/sshd -D -e
