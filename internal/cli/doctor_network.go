package cli

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/network"
)

// networkFindings says, for each firewall of the host's that filters
// forwarded traffic, whether Tupper's accept for sandboxes is there and,
// if not, the commands that add it; then the state of IPv4 forwarding and
// what stopped daemons left behind.
func networkFindings(ctx context.Context) []backend.Finding {
	var out []backend.Finding
	fws := network.InspectHostFirewalls(ctx, []string{network.DefaultIfPrefix}, []netip.Prefix{network.DefaultSubnet})
	for _, fw := range fws {
		f := backend.Finding{What: "firewall", Optional: true, OK: fw.InPlace}
		switch {
		case fw.Err != "":
			f.Detail = fmt.Sprintf("%s: cannot be read: %s", fw.Name, fw.Err)
		case fw.InPlace:
			f.Detail = fmt.Sprintf("%s: Tupper's accept for sandboxes is in %s", fw.Name, fw.Place)
		default:
			f.Detail = fmt.Sprintf("%s drops sandboxes' traffic: no accept for them in %s (tupper serve adds it unless --host-firewall=off)", fw.Name, fw.Place)
			f.Fix = strings.Join(fw.Commands, "; ")
		}
		out = append(out, f)
	}
	if len(fws) == 0 {
		out = append(out, backend.Finding{What: "firewall", OK: true, Optional: true,
			Detail: "no firewall of the host's (Docker, ufw, firewalld, a FORWARD policy of DROP) filters forwarded traffic"})
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err == nil {
		out = append(out, backend.Finding{What: "ip_forward", OK: true, Optional: true,
			Detail: "net.ipv4.ip_forward = " + strings.TrimSpace(string(b)) + " (Tupper turns it on for sandboxes' egress, and back off when its last daemon stops, unless another program relies on it)"})
	}
	left, inUse, err := network.HostLeftovers(ctx)
	switch {
	case err != nil:
		out = append(out, backend.Finding{What: "leftovers", Optional: true, Detail: err.Error()})
	case inUse:
		out = append(out, backend.Finding{What: "leftovers", OK: true, Optional: true, Detail: "none: a Tupper process uses the host's network now"})
	case len(left) > 0:
		f := backend.Finding{What: "leftovers", Optional: true,
			Detail: "no Tupper process holds the host's network, and these are left: " + strings.Join(left, "; "),
			Fix:    "tupper cleanup (or tupper doctor --fix)"}
		if slices.ContainsFunc(left, func(s string) bool { return strings.HasSuffix(s, "sandbox interfaces") }) {
			f.Fix = "sandboxes outlived their daemon: tupper serve takes them back; once none is left, tupper cleanup (or tupper doctor --fix) removes the rest"
		}
		out = append(out, f)
	default:
		out = append(out, backend.Finding{What: "leftovers", OK: true, Optional: true, Detail: "none"})
	}
	return out
}

// printCleanup prints what a host cleanup did.
func printCleanup(g *globals, rep *network.CleanupReport) {
	if rep.Skipped != "" {
		fmt.Fprintf(g.stdout, "  nothing removed: %s\n", rep.Skipped)
		return
	}
	if len(rep.Removed)+len(rep.Kept) == 0 {
		fmt.Fprintf(g.stdout, "  nothing to remove: the host's network is as Tupper found it\n")
	}
	for _, r := range rep.Removed {
		fmt.Fprintf(g.stdout, "  removed %s\n", r)
	}
	for _, k := range rep.Kept {
		fmt.Fprintf(g.stdout, "  kept    %s\n", k)
	}
}
