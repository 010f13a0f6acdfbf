#!/bin/sh
# guest-kernel.sh DIR [PACKAGE]
#
# Makes the guest kernel directory of Tupper's Firecracker backend from a
# Debian kernel package, reproducibly: the same package gives the same
# files. DIR gets
#
#   vmlinux      the uncompressed ELF kernel (Firecracker on x86_64 boots
#                no bzImage), cut out of the package's vmlinuz
#   modules/     the modules the guest needs (virtio-mmio, virtio-blk,
#                vsock and its virtio transport, overlayfs, virtio-net) and
#                what they depend on, uncompressed; the backend puts them in
#                the guest's initramfs in dependency order
#   SOURCE       the package, its version, and the files' SHA-256 sums
#
# PACKAGE defaults to the versioned kernel that Debian's
# linux-image-cloud-amd64 (or -arm64) depends on now; name one
# (linux-image-6.1.0-57-cloud-amd64) to pin it. It is fetched with
# apt-get download, so apt's signature checks apply. The cloud kernel has
# ext4 and ACPI built in, which is what a Firecracker of 1.8 or later needs
# to find its virtio devices without CONFIG_VIRTIO_MMIO_CMDLINE_DEVICES,
# which Debian leaves out.
#
# Needs: apt-get, dpkg-deb, grep, and the decompressor of the kernel's
# format (Debian's 6.1 cloud kernel is LZ4: lz4; others gzip, xz, zstd).
set -eu

out=${1:?usage: guest-kernel.sh DIR [PACKAGE]}
pkg=${2:-}
arch=$(dpkg --print-architecture)

if [ -z "$pkg" ]; then
	pkg=$(apt-cache depends "linux-image-cloud-$arch" | sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n 1)
	[ -n "$pkg" ] || { echo "guest-kernel.sh: linux-image-cloud-$arch depends on no versioned kernel; run apt-get update" >&2; exit 1; }
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# As root, apt's download sandbox user could not write to $work.
(cd "$work" && apt-get download -o APT::Sandbox::User=root "$pkg" >/dev/null)
deb=$(ls "$work"/*.deb)
dpkg-deb -x "$deb" "$work/x"
ver=$(ls "$work/x/lib/modules")
moddir="$work/x/lib/modules/$ver"

mkdir -p "$out/modules"
rm -f "$out/modules/"*.ko

# The kernel: a bzImage is a small decompressor followed by the
# compressed ELF kernel. Try each compression's magic at each place it
# occurs until one decompresses into an ELF file.
vmlinuz="$work/x/boot/vmlinuz-$ver"
try() { # magic (grep -P) and decompressor
	for off in $(LC_ALL=C grep -aboP "$1" "$vmlinuz" | cut -d: -f1); do
		tail -c +"$((off + 1))" "$vmlinuz" | $2 >"$work/vmlinux" 2>/dev/null || true
		if [ "$(head -c 4 "$work/vmlinux" | od -An -c | tr -d ' ')" = '177ELF' ]; then
			return 0
		fi
	done
	return 1
}
try '\x02\x21\x4c\x18' 'lz4 -dc' ||
	try '\x28\xb5\x2f\xfd' 'zstd -dcq' ||
	try '\xfd\x37\x7a\x58\x5a\x00' 'xz -dc' ||
	try '\x1f\x8b\x08' 'gzip -dc' ||
	{ echo "guest-kernel.sh: no ELF kernel found in $vmlinuz" >&2; exit 1; }
cp "$work/vmlinux" "$out/vmlinux"

# The modules and, through the depends= of their .modinfo, theirs.
want="virtio virtio_ring virtio_mmio virtio_blk vsock vmw_vsock_virtio_transport_common vmw_vsock_virtio_transport overlay virtio_net"
done=""
while :; do
	set -- $want
	[ $# -gt 0 ] || break
	m=$1
	shift
	want="$*"
	case " $done " in *" $m "*) continue ;; esac
	done="$done $m"
	# Built into the kernel: nothing to load.
	if grep -q "/$m.ko\$" "$moddir/modules.builtin" 2>/dev/null; then
		continue
	fi
	f=$(find "$moddir/kernel" -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" -o -name "$m.ko.gz" | head -n 1)
	[ -n "$f" ] || { echo "guest-kernel.sh: module $m is neither in $pkg nor built in" >&2; exit 1; }
	case "$f" in
	*.ko.xz) xz -dc "$f" >"$out/modules/$m.ko" ;;
	*.ko.zst) zstd -dcq "$f" >"$out/modules/$m.ko" ;;
	*.ko.gz) gzip -dc "$f" >"$out/modules/$m.ko" ;;
	*) cp "$f" "$out/modules/$m.ko" ;;
	esac
	deps=$(LC_ALL=C grep -ao 'depends=[a-z0-9_,-]*' "$out/modules/$m.ko" | head -n 1 | cut -d= -f2 | tr ',-' ' _')
	want="$want $deps"
done

{
	echo "package $pkg"
	echo "version $(dpkg-deb -f "$deb" Version)"
	echo "kernel $ver"
	(cd "$out" && sha256sum vmlinux modules/*.ko)
} >"$out/SOURCE"
echo "guest kernel $ver from $pkg in $out: vmlinux and $(ls "$out/modules" | wc -l) modules"
