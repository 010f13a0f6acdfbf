package cli

import (
	"os"
	"strconv"
)

// daemonOOMScoreAdj is the daemon's oom_score_adj: should the host run out
// of memory, its kernel ends sandboxes (which their backends give a
// higher score, see backend/gvisor) and almost anything else before the
// daemon that runs them. Not -1000: a daemon that leaks must not hold the
// host hostage.
const daemonOOMScoreAdj = -900

// shieldDaemon lowers this process's oom_score_adj to daemonOOMScoreAdj.
// Lowering it needs CAP_SYS_RESOURCE: without it (a daemon in a
// container, or not root) the daemon stays as it was, and says so.
func shieldDaemon() error {
	return os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(daemonOOMScoreAdj)), 0)
}
