//go:build unix

package proctest

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// pubTimeout is how long the publisher waits for one ack before it sends
// the message again with the same Nats-Msg-Id.
const pubTimeout = 250 * time.Millisecond

// publisher is a stock nats.go JetStream publisher that knows every node:
// it publishes ids 0, 1, 2… on subject prefix.<id> with the id as payload
// and Nats-Msg-Id, each until acknowledged, the next only after.
// ack is when a message's last publish was sent and when its ack came.
type ack struct{ sent, at time.Time }

type publisher struct {
	mu    sync.Mutex
	acked []ack         // acked[i]: id i's acknowledgement
	stop  chan struct{} // closed by halt: give up the message in flight
	end   chan struct{} // closed by finish: stop after the message in flight
	done  chan struct{}
}

// publish starts a publisher on urls that stops after total messages or
// when stopped.
func publish(t *testing.T, urls, prefix string, total int) *publisher {
	t.Helper()
	nc, err := nats.Connect(urls, nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	p := &publisher{stop: make(chan struct{}), end: make(chan struct{}), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-p.stop
		cancel()
	}()
	go func() {
		defer close(p.done)
		defer nc.Close()
		for i := 0; i < total; i++ {
			select {
			case <-p.end:
				return
			default:
			}
			id := strconv.Itoa(i)
			var sent time.Time
			for {
				// A retry carries the same Nats-Msg-Id: a message stored
				// whose ack was lost is not stored again.
				sent = time.Now()
				pctx, pcancel := context.WithTimeout(ctx, pubTimeout)
				_, err := js.Publish(pctx, prefix+"."+id, []byte(id), jetstream.WithMsgID(id))
				pcancel()
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					return // stopped: id i is not acknowledged
				}
				if pctx.Err() == nil {
					// Refused or no responders (the ingress of a node
					// that just started): not a wait for an ack.
					select {
					case <-ctx.Done():
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			}
			p.mu.Lock()
			p.acked = append(p.acked, ack{sent: sent, at: time.Now()})
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.halt)
	return p
}

// halt stops the publisher and waits for it.
func (p *publisher) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

// finish stops the publisher once the message in flight is acknowledged,
// and waits for it: then every message it published is acknowledged.
func (p *publisher) finish() {
	close(p.end)
	<-p.done
}

// count is the number of messages acknowledged so far.
func (p *publisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

// waitAcks waits until n messages are acknowledged.
func (p *publisher) waitAcks(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("%d acknowledged publishes", n), func() error {
		select {
		case <-p.done:
			if c := p.count(); c < n {
				return fmt.Errorf("publisher ended after %d", c)
			}
		default:
		}
		if c := p.count(); c < n {
			return fmt.Errorf("%d acknowledged", c)
		}
		return nil
	})
}

// waitDone waits for the publisher to publish all its messages.
func (p *publisher) waitDone(t *testing.T, total int, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("publisher not done after %s: %d of %d acknowledged", timeout, p.count(), total)
	}
	if c := p.count(); c != total {
		t.Fatalf("publisher ended after %d of %d", c, total)
	}
}

// firstAckAfter is when the first publish sent after at was acknowledged;
// zero if none was yet. (An ack that arrives after at for a publish sent
// before may have left the node before at.)
func (p *publisher) firstAckAfter(at time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.acked {
		if a.sent.After(at) {
			return a.at
		}
	}
	return time.Time{}
}

// longestGap is the longest time without an acknowledgement from `from`
// to the last one.
func (p *publisher) longestGap(from time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	gap, last := time.Duration(0), from
	for _, a := range p.acked {
		if a.at.After(last) {
			gap, last = max(gap, a.at.Sub(last)), a.at
		}
	}
	return gap
}

// directGet is JetStream's direct get request ($JS.API.DIRECT.GET): the
// first message at or after Seq on a subject matching NextBySubj.
type directGet struct {
	Seq        uint64 `json:"seq"`
	NextBySubj string `json:"next_by_subj"`
}

// readNode reads every message of stream by direct gets through node url,
// and returns how often each payload is stored. Every replica of a stream
// with direct gets answers them once it is caught up, and NATS picks one of
// a queue group's members at random, not the local one: with every node
// running this reads the stream, not that node's copy (readAlone does).
func readNode(url, stream, subjects string) (map[string]int, error) {
	nc, err := nats.Connect(url, nats.NoReconnect())
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	seen := map[string]int{}
	for seq := uint64(1); ; {
		body, _ := json.Marshal(directGet{Seq: seq, NextBySubj: subjects})
		m, err := nc.Request("$JS.API.DIRECT.GET."+stream, body, 5*time.Second)
		if err != nil {
			return nil, fmt.Errorf("direct get %d of %s on %s: %w", seq, stream, url, err)
		}
		switch st := m.Header.Get("Status"); st {
		case "":
		case "404":
			return seen, nil
		default:
			return nil, fmt.Errorf("direct get %d of %s on %s: status %s %s", seq, stream, url, st, m.Header.Get("Description"))
		}
		got, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil || got < seq {
			return nil, fmt.Errorf("direct get %d of %s on %s: sequence %q", seq, stream, url, m.Header.Get(jetstream.SequenceHeader))
		}
		seen[string(m.Data)]++
		seq = got + 1
	}
}

// readAlone kills every node but i and reads stream through node i, the
// only replica left to answer a direct get: its own copy. The cluster
// stays without a majority; the test ends after.
func readAlone(t *testing.T, c *cluster, i int, stream, subjects string) map[string]int {
	t.Helper()
	for k, p := range c.nodes {
		if k != i {
			p.kill(t)
		}
	}
	// A follower answers direct gets once a check (every 2 s in NATS)
	// finds it caught up: until then nothing answers.
	var seen map[string]int
	eventually(t, 30*time.Second, c.nodes[i].name+" alone to answer direct gets", func() (err error) {
		seen, err = readNode(c.urls[i], stream, subjects)
		return err
	})
	return seen
}

// checkExactlyOnce fails the test unless seen holds ids 0..total-1 exactly
// once and nothing else.
func checkExactlyOnce(t *testing.T, seen map[string]int, total int, where string) {
	t.Helper()
	var missing, twice []string
	for id := range total {
		switch n := seen[strconv.Itoa(id)]; {
		case n == 0:
			missing = append(missing, strconv.Itoa(id))
		case n > 1:
			twice = append(twice, fmt.Sprintf("%d×%d", id, n))
		}
	}
	if len(missing) > 0 || len(twice) > 0 || len(seen) != total {
		t.Fatalf("%s: %d distinct messages of %d acknowledged; missing %v; stored more than once %v",
			where, len(seen), total, head(missing), head(twice))
	}
}

// checkStream reads stream through every node (checkExactlyOnce), then
// node i's own copy alone (readAlone).
func checkStream(t *testing.T, c *cluster, i int, stream, subjects string, total int) {
	t.Helper()
	for k, url := range c.urls {
		seen, err := readNode(url, stream, subjects)
		if err != nil {
			t.Fatal(err)
		}
		checkExactlyOnce(t, seen, total, stream+" through "+c.nodes[k].name)
	}
	checkExactlyOnce(t, readAlone(t, c, i, stream, subjects), total, stream+" on "+c.nodes[i].name+" alone")
}

// head is at most the first 20 of s.
func head(s []string) []string {
	if len(s) > 20 {
		return append(s[:20:20], fmt.Sprintf("… %d more", len(s)-20))
	}
	return s
}
