package network

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"time"
)

// firewallTable is the nftables table that holds Tupper's rules. It is
// Tupper's own, so installing it never disturbs anyone else's rules.
const firewallTable = "tupper"

// firewallRules returns the rule set for host-side interfaces named
// prefix*: a sandbox may answer what the host opened (the engine's calls to
// its agent), and nothing else. Without the input rule a sandbox could reach
// every service the host listens on, since Linux delivers packets for any
// of its own addresses whatever interface they come in on. The forward
// rules keep sandboxes apart even when something (Docker, a VPN) turns IP
// forwarding on, which resets the per-interface forwarding switch.
// Egress policies (a later layer) go before these drops.
func firewallRules(prefix string) string {
	return fmt.Sprintf(`add table inet %[1]s
add chain inet %[1]s input { type filter hook input priority filter; policy accept; }
add chain inet %[1]s forward { type filter hook forward priority filter; policy accept; }
flush chain inet %[1]s input
flush chain inet %[1]s forward
add rule inet %[1]s input iifname "%[2]s*" ct state established,related accept
add rule inet %[1]s input iifname "%[2]s*" drop
add rule inet %[1]s forward iifname "%[2]s*" drop
add rule inet %[1]s forward oifname "%[2]s*" drop
`, firewallTable, prefix)
}

// ensureFirewall installs the rule set, atomically (nft applies a file as
// one transaction), once per pool.
func (p *Pool) ensureFirewall(ctx context.Context) error {
	p.fwMu.Lock()
	defer p.fwMu.Unlock()
	if p.fwDone {
		return nil
	}
	nft, err := exec.LookPath("nft")
	if err != nil {
		return fmt.Errorf("firewall: nft not found (install nftables; scripts/setup.sh does): %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nft, "-f", "-")
	cmd.Stdin = bytes.NewBufferString(firewallRules(p.cfg.IfPrefix))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("firewall: nft: %w: %s", err, bytes.TrimSpace(out))
	}
	p.fwDone = true
	return nil
}
