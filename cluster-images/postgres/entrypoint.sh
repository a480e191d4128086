#!/bin/sh
# PostgreSQL node container start: this container's own host key, the run's public key (from
# SCHEMACHAOS_AUTHORIZED_KEY), the socket directory, then sshd in the foreground. The target
# initialises, configures and starts the server itself, so every role (primary, standby) and
# every fault goes through the same Remote as on the other backends.
set -eu
if [ ! -f /etc/ssh/ssh_host_ed25519_key ]; then
  ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
fi
mkdir -p /root/.ssh /run/sshd /run/postgresql /var/lib/schemasync
chown postgres:postgres /run/postgresql
chmod 2775 /run/postgresql
chmod 0700 /root/.ssh
if [ -n "${SCHEMACHAOS_AUTHORIZED_KEY:-}" ]; then
  printf '%s\n' "$SCHEMACHAOS_AUTHORIZED_KEY" > /root/.ssh/authorized_keys
  chmod 0600 /root/.ssh/authorized_keys
fi
touch /run/schemachaos-ready
exec /usr/sbin/sshd -D -e
