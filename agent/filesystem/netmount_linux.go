package filesystem

import "golang.org/x/sys/unix"

// isNetworkMount reports whether path lies on a filesystem whose changes can
// come from elsewhere (NFS, SMB/CIFS, FUSE), where inotify sees only local
// writes. 9p and gofer mounts are not on the list: gVisor serves the
// sandbox's own root that way, and its writes come from inside the sandbox.
func isNetworkMount(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, err
	}
	switch uint32(st.Type) {
	case unix.NFS_SUPER_MAGIC, unix.SMB_SUPER_MAGIC, unix.SMB2_SUPER_MAGIC, unix.CIFS_SUPER_MAGIC, unix.FUSE_SUPER_MAGIC:
		return true, nil
	}
	return false, nil
}
