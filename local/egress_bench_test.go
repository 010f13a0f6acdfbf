package local_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/sdk"
)

// refusalProbe times, inside the sandbox, 50 refused lookups of a name
// and 50 refused TCP connects to the gateway (the host, which no sandbox
// reaches), and beside them 50 connects to a closed port of the sandbox's
// own loopback: the floor, refused by gVisor's own stack. It prints the
// three medians in microseconds.
const refusalProbe = `python3 - <<'PY'
import socket, statistics, time
gw = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
def median(f):
    ts = []
    for _ in range(50):
        t = time.perf_counter()
        f()
        ts.append((time.perf_counter() - t) * 1e6)
    return statistics.median(ts)
def lookup():
    try:
        socket.getaddrinfo("refused.example", 80)
        raise SystemExit("the lookup was answered")
    except socket.gaierror:
        pass
def connect(addr):
    def f():
        s = socket.socket()
        s.settimeout(5)
        try:
            s.connect(addr)
            raise SystemExit("connected to %s" % (addr,))
        except socket.timeout:
            raise SystemExit("timed out on %s" % (addr,))
        except OSError:
            pass
        finally:
            s.close()
    return f
print(median(lookup), median(connect((gw, 9))), median(connect(("127.0.0.1", 9))))
PY`

// BenchmarkEgressRefusal reports how long a refused lookup and a refused
// connect take inside a sandbox with no egress (µs, median of 50 each),
// beside a connect refused by the sandbox's own loopback in the same run.
func BenchmarkEgressRefusal(b *testing.B) {
	s := newStack(b, engine.Config{})
	no := false
	sb := s.create(b, sdk.CreateOptions{AllowInternetAccess: &no})
	ctx := context.Background()
	var lookup, connect, local float64
	for b.Loop() {
		res, err := sb.Commands.Run(ctx, refusalProbe)
		if err != nil {
			b.Fatal(err)
		}
		f := strings.Fields(res.Stdout)
		if len(f) != 3 {
			b.Fatalf("probe printed %q", res.Stdout)
		}
		lookup, _ = strconv.ParseFloat(f[0], 64)
		connect, _ = strconv.ParseFloat(f[1], 64)
		local, _ = strconv.ParseFloat(f[2], 64)
	}
	b.ReportMetric(lookup, "µs/refused-lookup")
	b.ReportMetric(connect, "µs/refused-connect")
	b.ReportMetric(local, "µs/loopback-refusal")
}
