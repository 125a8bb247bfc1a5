#!/usr/bin/env bash
# Builds a local Redis image from this machine's redis-server (images cannot be
# pulled here): a tarball of /usr/bin/redis-server, the libraries `ldd` lists
# and an empty /tmp, given to `docker import`. Usage: scripts/redis_image.sh [tag]
# (default redlock-redis:local); use it with REDLOCK_REDIS_IMAGE=<tag>.
set -euo pipefail
tag=${1:-redlock-redis:local}
server=$(command -v redis-server) || {
  echo "cannot build the image: install redis-server (apt-get install redis-server)" >&2
  exit 1
}
command -v docker >/dev/null || { echo "cannot build the image: install docker.io" >&2; exit 1; }
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
name=$server
server=$(readlink -f "$server") # Debian's is a link to redis-check-rdb, which acts by its name
mkdir -p "$root/usr/bin" "$root/tmp"
chmod 1777 "$root/tmp"
cp "$server" "$root/usr/bin/redis-server"
# every library the binary loads, and the loader itself, at the same paths
for lib in $(ldd "$server" | grep -oE '/[^ ]+'); do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
tar -C "$root" -c . | docker import - "$tag" >/dev/null
echo "built $tag from $name ($(du -sh "$root" | cut -f1))"
