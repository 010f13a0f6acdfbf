package network

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// A host's own firewall may drop what sandboxes send through it: Docker
// sets the iptables FORWARD policy to DROP, ufw drops forwarded traffic by
// default, firewalld filters it by zone, and an administrator may have set
// the FORWARD policy to DROP by hand. Every base chain hooked at forward
// sees each packet, and a drop in any of them is final, so Tupper's own
// table cannot let sandboxes' traffic through by itself. Tupper adds the
// narrowest accept for its interfaces in the place each of these firewalls
// gives its users, marked so that it can find and remove it again:
//
//   - Docker: the DOCKER-USER chain (iptables-nft or iptables-legacy,
//     whichever Docker used), which Docker keeps at the top of FORWARD and
//     never flushes;
//   - ufw: a route rule, `ufw route allow in on tp+`;
//   - firewalld: a zone of Tupper's own, "tupper", holding the pools'
//     subnets as sources, with target ACCEPT, as Docker's zone "docker";
//   - a FORWARD chain whose policy is DROP and that neither of the above
//     owns: the top of FORWARD.
//
// The accept lets a sandbox's packets out, and the replies back in; what a
// sandbox may reach is still decided by Tupper's own table, which refuses
// the host's networks (containers, VMs and pods on its bridges among them).

// hostFirewallComment marks the iptables rules Tupper adds.
const hostFirewallComment = "tupper"

// firewalldZone is the firewalld zone of Tupper's own.
const firewalldZone = "tupper"

// hostFirewallTimeout bounds each command run on a host firewall.
const hostFirewallTimeout = 20 * time.Second

// xtables is one iptables front end and family.
type xtables struct {
	bin    string // e.g. "iptables-nft"
	v6     bool
	legacy bool
}

var xtablesFlavours = []xtables{
	{bin: "iptables-nft"}, {bin: "ip6tables-nft", v6: true},
	{bin: "iptables-legacy", legacy: true}, {bin: "ip6tables-legacy", v6: true, legacy: true},
}

// flavour names x for people: "iptables-nft" or "iptables-legacy", with
// "(IPv6)" for ip6tables.
func (x xtables) flavour() string {
	s := "iptables-nft"
	if x.legacy {
		s = "iptables-legacy"
	}
	if x.v6 {
		s += ", IPv6"
	}
	return s
}

// loaded reports whether the kernel holds x's filter table in this
// network namespace; tables lists nft's tables. Nothing is created to
// find out: iptables-legacy would load its table just by being asked.
func (x xtables) loaded(tables string) bool {
	if x.legacy {
		name := "/proc/net/ip_tables_names"
		if x.v6 {
			name = "/proc/net/ip6_tables_names"
		}
		b, err := os.ReadFile(name)
		return err == nil && slices.Contains(strings.Fields(string(b)), "filter")
	}
	family := "ip"
	if x.v6 {
		family = "ip6"
	}
	return slices.Contains(strings.Split(tables, "\n"), "table "+family+" filter")
}

// acceptRules are the two rules of Tupper's accept in an iptables chain,
// for interfaces named prefix*: a sandbox's packets, and what answers them.
func acceptRules(prefix string) [][]string {
	c := []string{"-m", "comment", "--comment", hostFirewallComment, "-j", "ACCEPT"}
	return [][]string{
		append([]string{"-i", prefix + "+"}, c...),
		append([]string{"-o", prefix + "+", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED"}, c...),
	}
}

// hostFirewallPlan is what one firewall needs: its report, and the
// commands that check, add and remove Tupper's accept.
type hostFirewallPlan struct {
	HostFirewall
	check [][]string // all succeed when the accept is in place
	// checkRules, when set, tells instead of check from the rules
	// nftables holds.
	checkRules func(ctx context.Context) bool
	add        [][]string
}

// planHostFirewalls finds the host's firewalls that filter forwarded
// traffic and what each needs for sandboxes of interfaces prefixes* and
// addresses subnets to pass. It changes nothing.
func planHostFirewalls(ctx context.Context, prefixes []string, subnets []netip.Prefix) []hostFirewallPlan {
	tables, _ := commandOutput(ctx, "nft", "list", "tables")
	var plans []hostFirewallPlan
	ufwSeen := false
	for _, x := range xtablesFlavours {
		if _, err := exec.LookPath(x.bin); err != nil || !x.loaded(tables) {
			continue
		}
		dump, err := commandOutput(ctx, x.bin, "-w", "5", "-t", "filter", "-S")
		if err != nil {
			plans = append(plans, hostFirewallPlan{HostFirewall: HostFirewall{Name: x.flavour(), Err: err.Error()}})
			continue
		}
		lines := strings.Split(dump, "\n")
		docker := slices.Contains(lines, "-N DOCKER-USER")
		ufw := slices.Contains(lines, "-N ufw-user-forward") || slices.Contains(lines, "-N ufw6-user-forward")
		drop := slices.Contains(lines, "-P FORWARD DROP")
		if !ufw && !x.v6 && slices.Contains(lines, "-P INPUT DROP") {
			// A sandbox's lookups and proxied connections reach the
			// daemon on 127.0.0.1 through the input hook.
			plans = append(plans, planXtables(x, x.flavour()+" INPUT policy DROP", "INPUT", [][]string{loopbackRule}))
		}
		var name, chain string
		switch {
		case docker:
			name, chain = "Docker ("+x.flavour()+")", "DOCKER-USER"
		case ufw:
			if !ufwSeen {
				ufwSeen = true
				plans = append(plans, planUFW(prefixes, lines))
			}
			continue
		case drop:
			name, chain = x.flavour()+" FORWARD policy DROP", "FORWARD"
		default:
			continue
		}
		var rules [][]string
		for _, pre := range prefixes {
			rules = append(rules, acceptRules(pre)...)
		}
		plans = append(plans, planXtables(x, name, chain, rules))
	}
	if slices.Contains(strings.Split(tables, "\n"), "table inet firewalld") {
		plans = append(plans, planFirewalld(subnets))
	}
	return plans
}

// loopbackRule accepts what a sandbox sends to the daemon's resolver and
// egress proxy, which Tupper's table DNATs to 127.0.0.1 (and refuses
// when it did not). It names no prefix: tp+ is the only one the daemon
// uses, and the rule is there for its sandboxes.
var loopbackRule = []string{"-i", DefaultIfPrefix + "+", "-d", "127.0.0.1", "-m", "comment", "--comment", hostFirewallComment, "-j", "ACCEPT"}

// planXtables plans rules at the top of chain of x's filter table.
func planXtables(x xtables, name, chain string, rules [][]string) hostFirewallPlan {
	p := hostFirewallPlan{HostFirewall: HostFirewall{Name: name, Place: chain}}
	for _, r := range rules {
		p.check = append(p.check, slices.Concat([]string{x.bin, "-w", "5", "-C", chain}, r))
		add := slices.Concat([]string{x.bin, "-w", "5", "-I", chain, "1"}, r)
		p.add = append(p.add, add)
		p.Commands = append(p.Commands, shellLine(add))
	}
	return p
}

// planUFW plans ufw's rules: a route rule for sandboxes' traffic, and,
// since ufw drops incoming connections by default, a rule for their
// lookups and proxied connections, which reach the daemon on 127.0.0.1
// (Tupper's table DNATs them there, and refuses the rest). ufw writes
// them into ufw-user-forward and ufw-user-input, where dump (iptables -S
// of the filter table) shows whether they are there.
func planUFW(prefixes []string, dump []string) hostFirewallPlan {
	p := hostFirewallPlan{HostFirewall: HostFirewall{Name: "ufw", Place: "ufw rules", InPlace: true}}
	for _, pre := range prefixes {
		for _, r := range []struct {
			add  []string
			line string
		}{
			{[]string{"ufw", "route", "allow", "in", "on", pre + "+", "comment", hostFirewallComment}, "-A ufw-user-forward -i " + pre + "+ -j ACCEPT"},
			{[]string{"ufw", "allow", "in", "on", pre + "+", "to", "127.0.0.1", "comment", hostFirewallComment}, "-A ufw-user-input -d 127.0.0.1/32 -i " + pre + "+ -j ACCEPT"},
		} {
			p.add = append(p.add, r.add)
			p.Commands = append(p.Commands, shellLine(r.add))
			if !slices.Contains(dump, r.line) {
				p.InPlace = false
			}
		}
	}
	return p
}

// planFirewalld plans firewalld's zone "tupper": subnets as its sources,
// target ACCEPT, made permanent so that it outlives firewalld's reloads.
func planFirewalld(subnets []netip.Prefix) hostFirewallPlan {
	p := hostFirewallPlan{HostFirewall: HostFirewall{Name: "firewalld", Place: "zone " + firewalldZone}}
	fc := func(args ...string) []string { return append([]string{"firewall-cmd", "-q"}, args...) }
	p.add = append(p.add,
		fc("--permanent", "--new-zone="+firewalldZone),
		fc("--permanent", "--zone="+firewalldZone, "--set-target=ACCEPT"))
	for _, s := range subnets {
		p.add = append(p.add, fc("--permanent", "--zone="+firewalldZone, "--add-source="+s.String()))
	}
	// What firewalld made of the zone, read from its table: asking
	// firewall-cmd takes a quarter of a second, nft a few milliseconds.
	p.checkRules = func(ctx context.Context) bool {
		rules, err := commandOutput(ctx, "nft", "list", "table", "inet", "firewalld")
		if err != nil {
			return false
		}
		for _, s := range subnets {
			family := "ip"
			if s.Addr().Is6() {
				family = "ip6"
			}
			if !strings.Contains(rules, family+" saddr "+s.Masked().String()+" goto filter_FWD_"+firewalldZone+"\n") {
				return false
			}
		}
		return true
	}
	p.add = append(p.add, fc("--reload"))
	for _, c := range p.add {
		p.Commands = append(p.Commands, shellLine(c))
	}
	return p
}

// inPlace works out p.InPlace from its checks, unless its plan knew.
func (p *hostFirewallPlan) inPlace(ctx context.Context) {
	if p.checkRules != nil {
		p.InPlace = p.Err == "" && p.checkRules(ctx)
		return
	}
	if p.Err != "" || len(p.check) == 0 {
		return
	}
	p.InPlace = true
	for _, c := range p.check {
		if _, err := commandOutput(ctx, c[0], c[1:]...); err != nil {
			p.InPlace = false
			return
		}
	}
}

// InspectHostFirewalls reports the host's firewalls that filter forwarded
// traffic and whether Tupper's accept for sandboxes of interfaces
// prefixes* and addresses subnets is in each. It changes nothing.
func InspectHostFirewalls(ctx context.Context, prefixes []string, subnets []netip.Prefix) []HostFirewall {
	var out []HostFirewall
	for _, p := range planHostFirewalls(ctx, prefixes, subnets) {
		p.inPlace(ctx)
		out = append(out, p.HostFirewall)
	}
	return out
}

// admitSandboxes adds Tupper's accept to each of the host's firewalls
// that lacks it, and reports them all. It is idempotent, and holds the
// host-wide firewall lock so that daemons do not add it twice.
func admitSandboxes(ctx context.Context, prefixes []string, subnets []netip.Prefix) ([]HostFirewall, error) {
	unlock, err := lockFile(ctx, firewallLock)
	if err != nil {
		return nil, fmt.Errorf("host firewall: %w", err)
	}
	defer unlock()
	var out []HostFirewall
	var errs []error
	for _, p := range planHostFirewalls(ctx, prefixes, subnets) {
		p.inPlace(ctx)
		if !p.InPlace && p.Err == "" {
			for _, c := range p.add {
				if _, err := commandOutput(ctx, c[0], c[1:]...); err != nil {
					p.Err = err.Error()
					errs = append(errs, fmt.Errorf("host firewall %s: %w", p.Name, err))
					break
				}
			}
			if p.Err == "" {
				p.InPlace = true
			}
		}
		out = append(out, p.HostFirewall)
	}
	return out, errors.Join(errs...)
}

// removeHostFirewallAccepts removes every accept Tupper added to the
// host's firewalls, whichever prefixes and subnets it was for, and
// returns what it removed. The caller holds the firewall lock.
func removeHostFirewallAccepts(ctx context.Context) ([]string, error) {
	tables, _ := commandOutput(ctx, "nft", "list", "tables")
	var removed []string
	var errs []error
	for _, x := range xtablesFlavours {
		if _, err := exec.LookPath(x.bin); err != nil || !x.loaded(tables) {
			continue
		}
		dump, err := commandOutput(ctx, x.bin, "-w", "5", "-t", "filter", "-S")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, line := range strings.Split(dump, "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || f[0] != "-A" || !strings.Contains(line, "--comment "+hostFirewallComment+" ") {
				continue
			}
			if strings.HasPrefix(f[1], "ufw") {
				continue // ufw's own, removed through ufw below
			}
			f[0] = "-D"
			if _, err := commandOutput(ctx, x.bin, append([]string{"-w", "5"}, f...)...); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, x.bin+" "+strings.Join(f, " "))
		}
		if strings.Contains(dump, "-N ufw-user-forward") {
			r, err := removeUFWRules(ctx)
			removed = append(removed, r...)
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	if slices.Contains(strings.Split(tables, "\n"), "table inet firewalld") {
		if _, err := commandOutput(ctx, "firewall-cmd", "-q", "--permanent", "--info-zone="+firewalldZone); err == nil {
			for _, c := range [][]string{
				{"firewall-cmd", "-q", "--permanent", "--delete-zone=" + firewalldZone},
				{"firewall-cmd", "-q", "--reload"},
			} {
				if _, err := commandOutput(ctx, c[0], c[1:]...); err != nil {
					errs = append(errs, err)
					break
				}
			}
			removed = append(removed, "firewalld zone "+firewalldZone)
		}
	}
	return removed, errors.Join(errs...)
}

// removeUFWRules deletes the ufw rules that carry Tupper's comment: a
// rule the administrator added by hand is theirs to keep. ufw keeps
// comments in its rules files only, and `ufw show added` lists them.
func removeUFWRules(ctx context.Context) ([]string, error) {
	out, err := commandOutput(ctx, "ufw", "show", "added")
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, line := range strings.Split(out, "\n") {
		rule, ok := strings.CutSuffix(strings.TrimSpace(line), " comment '"+hostFirewallComment+"'")
		if !ok || !strings.HasPrefix(rule, "ufw ") {
			continue
		}
		args := strings.Fields(rule)[1:] // e.g. route allow in on tp+
		if args[0] == "route" {
			args = slices.Concat([]string{"route", "delete"}, args[1:])
		} else {
			args = append([]string{"delete"}, args...)
		}
		if _, err := commandOutput(ctx, "ufw", args...); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "ufw "+strings.Join(args, " "))
	}
	return removed, errors.Join(errs...)
}

// commandOutput runs name with args, bounded by hostFirewallTimeout, and
// returns its standard output; its error says what it printed on failure.
func commandOutput(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, hostFirewallTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", shellLine(append([]string{name}, args...)), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return string(out), nil
}

// shellLine writes argv as a shell command line. Tupper's arguments need
// quotes only where they hold a space.
func shellLine(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if strings.ContainsAny(a, " '\"") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}
