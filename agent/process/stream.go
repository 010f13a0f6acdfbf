package process

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/lightbearco/tupper/errdefs"
	pb "github.com/lightbearco/tupper/proto/process"
)

// defaultKeepalive is the keepalive pace of streams whose client sent no
// Keepalive-Ping-Interval header; the SDKs send 50.
const defaultKeepalive = 50 * time.Second

// keepaliveInterval reads the Keepalive-Ping-Interval header (seconds).
func keepaliveInterval(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval"))
	if err != nil || n <= 0 {
		return defaultKeepalive
	}
	return time.Duration(n) * time.Second
}

func startEvent(pid uint32) *pb.ProcessEvent {
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: pid}}}
}

var keepaliveEvent = &pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}

// follow sends h's events to one stream: data as it comes, a keepalive
// whenever the stream has been idle for interval (so proxies keep idle
// streams open), and after all data the end event. It returns when the end
// is sent, ctx ends, a send fails, or the fan-out dropped sub. It always
// unsubscribes sub; the process keeps running whatever happens here.
func follow(ctx context.Context, h *handle, sub *subscriber, interval time.Duration, send func(*pb.ProcessEvent) error) error {
	defer h.unsubscribe(sub)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case ev := <-sub.ch:
			if err := send(ev); err != nil {
				return err
			}
			tick.Reset(interval)
		case <-h.done:
			// All output reached sub.ch before done was closed.
			for {
				select {
				case ev := <-sub.ch:
					if err := send(ev); err != nil {
						return err
					}
					continue
				default:
				}
				break
			}
			return send(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: h.end}})
		case <-sub.dropped:
			return fmt.Errorf("process %d: this stream fell behind the output for %v and was dropped: %w",
				h.pid, slowSubscriberTimeout, errdefs.ErrResourceExhausted)
		case <-tick.C:
			if err := send(keepaliveEvent); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
