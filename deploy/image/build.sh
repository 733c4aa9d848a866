#!/usr/bin/env bash
# Build the dms-gateway image with Podman from deploy/image/Containerfile, without a registry:
# its base (debian:bookworm-slim) is bootstrapped from Debian's packages (debootstrap) and
# imported as localhost/dmsgw-base:bookworm once. Needs root (debootstrap, podman) and the
# packages podman, debootstrap and buildah (installed here when missing).
#
#   deploy/image/build.sh [TAG]        (default dmsgw:0.1.0; `make image` runs it)
set -euo pipefail
tag=${1:-dmsgw:0.1.0}
base=localhost/dmsgw-base:bookworm
root=$(cd "$(dirname "$0")/../.." && pwd)

say() { printf 'image: %s\n' "$*"; }

if [ "$(id -u)" != 0 ]; then
    echo "image: building the base needs root (debootstrap); run as root or use Docker" >&2
    exit 1
fi
missing=()
command -v podman >/dev/null || missing+=(podman)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v buildah >/dev/null || missing+=(buildah)  # the test runs the image with it where no OCI runtime can
command -v runc >/dev/null || missing+=(runc)  # the devnet falls back to it where the default runtime is refused
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! podman image exists "$base"; then
    rootfs=$(mktemp -d)
    trap 'rm -rf "$rootfs"' EXIT
    say "bootstrapping Debian bookworm (minbase) into a base image"
    debootstrap --variant=minbase bookworm "$rootfs" >/dev/null
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | podman import --change 'CMD ["/bin/bash"]' - "$base" >/dev/null
fi

say "building $tag from deploy/image/Containerfile"
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
git -C "$root" ls-files -z --cached --others --exclude-standard \
    | (cd "$root" && xargs -0 tar -c --ignore-failed-read 2>/dev/null) | tar -C "$context" -x
# The wheels are built here, where pip is set up to reach the package index; the build then
# installs them without an index. RUN steps use chroot isolation, which needs no OCI runtime.
"${PYTHON:-$root/.venv/bin/python}" -m pip wheel --quiet --wheel-dir "$context/wheels" "$context" >/dev/null
podman build --quiet --isolation chroot --network host --from "$base" \
    --build-arg PIP_INSTALL="--no-index --find-links /src/wheels dms-gateway" \
    -f "$context/deploy/image/Containerfile" -t "$tag" "$context" >/dev/null
say "built $tag ($(podman image inspect --format '{{.Size}}' "$tag" | numfmt --to=iec) bytes)"
