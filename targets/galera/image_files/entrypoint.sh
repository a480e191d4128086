#!/bin/sh
# Galera node container start: this container's own host key, the run's public key (from
# SCHEMACHAOS_AUTHORIZED_KEY), the server's socket directory owned by mysql, then sshd in the
# foreground. The target writes the config and starts mariadbd over SSH, so every fault goes
# through the same Remote as on the other backends.
set -eu
if [ ! -f /etc/ssh/ssh_host_ed25519_key ]; then
  ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
fi
mkdir -p /root/.ssh /run/sshd /run/mysqld /var/lib/schemasync
chown mysql:mysql /run/mysqld
chmod 0700 /root/.ssh
if [ -n "${SCHEMACHAOS_AUTHORIZED_KEY:-}" ]; then
  printf '%s\n' "$SCHEMACHAOS_AUTHORIZED_KEY" > /root/.ssh/authorized_keys
  chmod 0600 /root/.ssh/authorized_keys
fi
touch /run/schemachaos-ready
exec /usr/sbin/sshd -D -e
