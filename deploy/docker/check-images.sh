#!/usr/bin/env bash
# Builds the gateway and CPU worker images from deploy/docker/Dockerfile without a Docker engine,
# and runs them: for machines (like our CI's) where `make images` cannot run.
#
#   sudo deploy/docker/check-images.sh [WORK_DIR]      (about 20 minutes on 2 cores)
#
# - buildah (Debian's package; vfs storage, chroot isolation: no daemon, no overlay mounts) builds
#   the targets `gateway` and `worker-cpu` with the same Dockerfile `make images` uses;
# - the base images are one Debian bookworm root filesystem made by debootstrap (minbase), used for
#   both debian:bookworm and debian:bookworm-slim, since no image registry may be reachable;
# - then, from each image's own root filesystem, as UID 10001 with the root read-only, a tmpfs at
#   /tmp and a host folder at /models: the worker image writes the tiny model with
#   llmserve-make-model, its worker serves it, the gateway image's gateway serves a completion on
#   loopback, both images' HEALTHCHECK commands succeed, and both exit 0 on SIGTERM.
# Not covered: the CUDA image (it needs NVIDIA's package repository), and the container runtime
# itself (network namespaces, the engine's /etc/hosts, HEALTHCHECK scheduling).
set -euo pipefail

work=${1:-/tmp/llmserve-check-images}
repo=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "check-images: run as root (chroot, mounts)" >&2; exit 1; }
for tool in buildah debootstrap; do
  command -v "$tool" >/dev/null || { echo "check-images: apt-get install $tool" >&2; exit 1; }
done
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
mkdir -p "$work"

base=localhost/llmserve-check/debian:bookworm
if ! buildah inspect --type image "$base" >/dev/null 2>&1; then
  echo "check-images: debootstrap bookworm (minbase)"
  rm -rf "$work/rootfs"
  debootstrap --variant=minbase bookworm "$work/rootfs" >"$work/debootstrap.log" 2>&1
  tar -C "$work/rootfs" -cf "$work/rootfs.tar" .
  container=$(buildah from scratch)
  buildah add "$container" "$work/rootfs.tar" / >/dev/null
  buildah commit -q "$container" "$base" >/dev/null
  buildah rm "$container" >/dev/null
  rm -rf "$work/rootfs" "$work/rootfs.tar"
fi

for target in gateway worker-cpu; do
  echo "check-images: building $target (log: $work/build-$target.log)"
  buildah bud --format docker --layers -f "$repo/deploy/docker/Dockerfile" --target "$target" \
    --build-arg DEBIAN_IMAGE="$base" --build-arg RUNTIME_IMAGE="$base" \
    -t "localhost/llmserve-check/$target:latest" "$repo" >"$work/build-$target.log" 2>&1 ||
    { tail -30 "$work/build-$target.log"; exit 1; }
done

gateway=$(buildah from localhost/llmserve-check/gateway:latest)
worker=$(buildah from localhost/llmserve-check/worker-cpu:latest)
cleanup() {
  pkill -f "5906[0-3]" 2>/dev/null || true
  buildah rm "$gateway" "$worker" >/dev/null 2>&1 || true
}
trap cleanup EXIT
models="$work/models"
rm -rf "$models" && mkdir -p "$models" && chown 10001:10001 "$models"

# A private mount namespace: the images' roots read-only, each with /tmp, /proc and /dev.
unshare -m bash -s "$(buildah mount "$worker")" "$(buildah mount "$gateway")" "$models" \
  "$work" <<'INNER'
set -uo pipefail
worker_root=$1 gateway_root=$2 models=$3 work=$4
mount --make-rprivate /
for root in "$worker_root" "$gateway_root"; do
  mount --bind "$root" "$root" && mount -o remount,bind,ro "$root"
  mount -t tmpfs -o size=64m tmpfs "$root/tmp"
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
done
mount --bind "$models" "$worker_root/models"
# As the image's USER and ENV say.
as_image_user() {
  local root=$1
  shift
  exec chroot --userspec=10001:10001 "$root" env -i HOME=/tmp TMPDIR=/tmp \
    PATH=/usr/local/bin:/usr/bin:/bin "$@"
}
fail() { echo "check-images: FAIL: $*"; exit 1; }

(as_image_user "$gateway_root" touch /usr/local/bin/x 2>/dev/null) &&
  fail "the image user can write outside /tmp"
(as_image_user "$worker_root" llmserve-make-model --preset tiny --out /models/tiny) ||
  fail "llmserve-make-model"
(as_image_user "$worker_root" llmserve-worker --model=/models/tiny --host=127.0.0.1 \
  --port=59061 --metrics_port=59062 --threads=1 --kv_cache_memory=64MiB) >"$work/worker.log" 2>&1 &
worker_pid=$!
(as_image_user "$gateway_root" llmserve-gateway --host=127.0.0.1 --grpc_port=59060 \
  --http_port=59063 --workers=127.0.0.1:59061) >"$work/gateway.log" 2>&1 &
gateway_pid=$!
for _ in $(seq 300); do grep -q "gateway: ready" "$work/gateway.log" && break; sleep 0.2; done
grep -q "gateway: ready" "$work/gateway.log" || { cat "$work/worker.log" "$work/gateway.log"; fail "not ready"; }
completion=$(curl -sf http://127.0.0.1:59063/v1/completions -H 'content-type: application/json' \
  -d '{"model": "tiny", "prompt": "Hello", "max_tokens": 5}') || fail "completion"
echo "$completion" | grep -q '"completion_tokens":5' || fail "completion: $completion"
# The HEALTHCHECK commands of the Dockerfile, on this test's ports.
(as_image_user "$gateway_root" bash -c "exec 3<>/dev/tcp/127.0.0.1/59063 && printf 'GET /healthz HTTP/1.0\r\n\r\n' >&3 && head -1 <&3 | grep -q ' 200 '") ||
  fail "the gateway's HEALTHCHECK"
(as_image_user "$worker_root" bash -c "exec 3<>/dev/tcp/127.0.0.1/59061") ||
  fail "the worker's HEALTHCHECK"
kill -TERM "$gateway_pid" "$worker_pid"
wait "$gateway_pid" || fail "the gateway exited $? on SIGTERM"
wait "$worker_pid" || fail "the worker exited $? on SIGTERM"
echo "check-images: the images build, run as UID 10001 on a read-only root, serve a completion," \
  "pass their HEALTHCHECKs and exit 0 on SIGTERM"
INNER
