//go:build unix

package proctest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// eoProcEnv, set to NATS URLs, makes the test binary an exactly-once
// processor of eoin.> into eoout.> (eoProcessorMain) instead of a test run.
const eoProcEnv = "SEMAQ_EOPROC_URLS"

// eoGroupEnv sets the processor's GroupInputs.
const eoGroupEnv = "SEMAQ_EOPROC_GROUP"

// eoSeedEnv replays a run of TestProcessExactlyOnceKills: the seed it
// printed.
const eoSeedEnv = "SEMAQ_EO_SEED"

// eoProcessorName is the processor's durable consumer.
const eoProcessorName = "eo-proc"

// eoOutputs is the processor's function: input "i" makes i%4 outputs,
// "i-k" on eoout.<i>.<k> — none, one (published alone) or an atomic batch.
func eoOutputs(m *client.Msg) ([]client.Out, error) {
	i, err := strconv.Atoi(string(m.Data))
	if err != nil {
		return nil, client.Term(err)
	}
	outs := make([]client.Out, i%4)
	for k := range outs {
		outs[k] = client.Out{Subject: fmt.Sprintf("eoout.%d.%d", i, k), Data: fmt.Appendf(nil, "%d-%d", i, k)}
	}
	return outs, nil
}

// eoProcessorMain runs the processor until SIGTERM, starting it again
// after an error as a supervisor would (it logs each), and returns the
// exit code.
func eoProcessorMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// The line proc.waitStarted waits for: SIGTERM is handled from now.
	fmt.Printf("msg=\"semaq ready\" nats=%s\n", os.Getenv(eoProcEnv))
	group, _ := strconv.Atoi(os.Getenv(eoGroupEnv))
	for ctx.Err() == nil {
		c, err := client.Connect(ctx, os.Getenv(eoProcEnv), client.WithTimeout(5*time.Second),
			client.WithNATSOptions(nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond)))
		if err != nil {
			fmt.Printf("eoproc: connect: %v\n", err)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		var st client.ProcessStats
		err = c.ProcessExactlyOnce(ctx, "eoin.>", eoProcessorName, eoOutputs, client.OutputSubjects("eoout.>"), client.WithProcessStats(&st),
			// A restarted processor waits this long for the input its
			// killed predecessor held.
			client.ProcessAckWait(time.Second), client.GroupInputs(max(group, 1)))
		fmt.Printf("eoproc: processed %d, skipped %d, duplicates %d, retries %d: %v\n",
			st.Processed.Load(), st.Skipped.Load(), st.Duplicates.Load(), st.Retries.Load(), err)
		c.Close()
		if ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond) // a supervisor's pause before the restart
		}
	}
	return 0
}

// eoProcess is the processor process, connected to urls (the first
// first).
func eoProcess(t *testing.T, dir, urls string, group int) *proc {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{name: "eoproc", bin: bin, args: []string{"-test.run=^$"}, logPath: filepath.Join(dir, "eoproc.log"),
		env: []string{eoProcEnv + "=" + urls, eoGroupEnv + "=" + strconv.Itoa(group)}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("---- eoproc (%s), its last lines:\n%s", p.logPath, p.tail(40))
		}
		p.kill(t)
	})
	return p
}

// feeder publishes inputs "1".."n" on eoin.<i%8> in order, each with a
// message id, trying each again until it is stored.
type feeder struct {
	done chan struct{}
	mu   sync.Mutex
	err  error
	sent int
}

func feed(t *testing.T, ctx context.Context, c *client.Client, n int, pace time.Duration) *feeder {
	f := &feeder{done: make(chan struct{})}
	go func() {
		defer close(f.done)
		for i := 1; i <= n; i++ {
			for {
				// Each attempt bounded: a publish lost with a killed
				// node is sent again, not waited for.
				actx, acancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := c.Publish(actx, fmt.Sprintf("eoin.%d", i%8), []byte(strconv.Itoa(i)), client.WithMsgID(fmt.Sprintf("in-%d", i)))
				acancel()
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					f.mu.Lock()
					f.err = fmt.Errorf("input %d: %w", i, err)
					f.mu.Unlock()
					return
				}
				time.Sleep(50 * time.Millisecond) // a publisher's pause before it tries again
			}
			f.mu.Lock()
			f.sent = i
			f.mu.Unlock()
			time.Sleep(pace) // inputs keep coming while the processor is killed
		}
	}()
	t.Cleanup(func() { <-f.done })
	return f
}

func (f *feeder) wait(t *testing.T) {
	t.Helper()
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		t.Fatalf("feeding inputs: %v", f.err)
	}
}

// eoAcked is the processor's consumer's ack floor, read through url.
func eoAcked(ctx context.Context, url string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nc, err := nats.Connect(url, nats.NoReconnect())
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	cons, err := js.Consumer(ctx, "EOIN", eoProcessorName)
	if err != nil {
		return 0, err
	}
	return cons.CachedInfo().AckFloor.Stream, nil
}

// eoCheck reads EOIN and EOOUT in stream order and fails the test unless
// EOOUT is exactly eoOutputs of each input in turn: no output missing,
// none twice, none out of order.
func eoCheck(t *testing.T, c *client.Client, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	read := func(subject string, count int) []*client.Msg {
		t.Helper()
		sub, err := c.Subscribe(ctx, subject, client.WithMaxMessages(count))
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		var out []*client.Msg
		for range count {
			m, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("reading %s: %v", subject, err)
			}
			out = append(out, m)
		}
		return out
	}
	var want []string
	for _, m := range read("eoin.>", n) {
		outs, _ := eoOutputs(m)
		for _, o := range outs {
			want = append(want, o.Subject+" "+string(o.Data))
		}
	}
	info, err := c.StreamInfo(ctx, "EOOUT")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	ids := map[string]bool{}
	for _, m := range read("eoout.>", int(info.State.Messages)) {
		got = append(got, m.Subject+" "+string(m.Data))
		ids[m.Header.Get(semaq.HdrMsgID)] = true
	}
	if len(got) != len(want) || len(ids) != len(want) {
		t.Errorf("EOOUT holds %d outputs (%d distinct ids), want %d", len(got), len(ids), len(want))
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Fatalf("output %d is %q, want %q (then %v)", i, got[i], want[i], head(got[i:]))
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d inputs, %d outputs: each input's outputs stored once, in order", n, len(got))
}

// The processor is killed with SIGKILL at random points, 20 times, while
// inputs keep coming, and started again each time: its outputs are still
// exactly f(inputs), in order, none twice and none missing.
func TestProcessExactlyOnceKills(t *testing.T) {
	needProcesses(t)
	// One input at a time, and inputs stored ahead committed up to 16 to
	// a batch (client.GroupInputs).
	for _, group := range []int{1, 16} {
		t.Run(fmt.Sprintf("group=%d", group), func(t *testing.T) { testKills(t, group) })
	}
}

func testKills(t *testing.T, group int) {
	const n, cycles = 1000, 20
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(eoSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s: %v", eoSeedEnv, err)
		}
	}
	t.Logf("seed %d (replay with %s=%d)", seed, eoSeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	s := brokertest.Start(t)
	admin := brokertest.Connect(t, s)
	brokertest.AddStream(t, admin, "EOIN", "eoin.>")
	brokertest.AddStream(t, admin, "EOOUT", "eoout.>")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := feed(t, ctx, admin, n, 20*time.Millisecond)
	p := eoProcess(t, t.TempDir(), s.ClientURL(), group)
	start := time.Now()
	for cycle := range cycles {
		p.start(t)
		// The kill point: from before the processor has connected to
		// well into its work.
		time.Sleep(time.Duration(100+rng.IntN(2000)) * time.Millisecond)
		p.kill(t)
		acked, err := eoAcked(ctx, s.ClientURL())
		t.Logf("kill %d: %d inputs acked (%v)", cycle+1, acked, err)
	}
	p.start(t)
	p.waitStarted(t, 30*time.Second)
	f.wait(t)
	eventually(t, 2*time.Minute, "every input acked", func() error {
		acked, err := eoAcked(ctx, s.ClientURL())
		if err == nil && acked != n {
			err = fmt.Errorf("%d of %d acked", acked, n)
		}
		return err
	})
	p.stop(t, 30*time.Second)
	t.Logf("%d kills in %s; the last run: %s", cycles, time.Since(start).Round(time.Millisecond), lastStats(p))
	eoCheck(t, admin, n)
}

// lastStats is the last line the processor process printed of its runs.
func lastStats(p *proc) string {
	lines := strings.Split(p.tail(20), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "eoproc: processed") {
			return lines[i]
		}
	}
	return "(none)"
}

// On a three-node cluster, the node leading the R3 output stream — the
// processor's own node — is killed with SIGKILL and started again while
// the processor works: its outputs are exactly f(inputs).
func TestProcessExactlyOnceOutputLeaderKill(t *testing.T) {
	needProcesses(t)
	const n = 400
	c := startCluster(t, 3)
	admin := c.connect(0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for name, subj := range map[string]string{"EOIN": "eoin.>", "EOOUT": "eoout.>"} {
		if _, err := admin.AddStream(ctx, semaq.StreamConfig{Name: name, Subjects: []string{subj}, Replicas: 3}); err != nil {
			t.Fatal(err)
		}
	}
	leader := c.streamLeader("EOOUT")
	// Every node knows both streams before the feeder and the processor
	// start (a node learns of a stream from an advisory).
	for i := range c.nodes {
		cl := c.connect(i)
		eventually(t, readyTimeout, c.nodes[i].name+" to know the streams", func() error {
			for _, s := range []string{"eoin.x", "eoout.x"} {
				if _, err := cl.StreamBySubject(ctx, s); err != nil {
					return err
				}
			}
			return nil
		})
	}
	other := (leader + 1) % len(c.nodes)
	f := feed(t, ctx, c.connect(other), n, 5*time.Millisecond)
	p := eoProcess(t, t.TempDir(), c.allURLs(leader), 1)
	p.start(t)
	p.waitStarted(t, 30*time.Second)
	eventually(t, readyTimeout, "a quarter of the inputs processed", func() error {
		acked, err := eoAcked(ctx, c.urls[other])
		if err == nil && acked < n/4 {
			err = fmt.Errorf("%d acked", acked)
		}
		return err
	})
	killed := time.Now()
	c.nodes[leader].kill(t)
	acked, err := eoAcked(ctx, c.urls[other])
	t.Logf("killed %s, the leader of EOOUT and the processor's node, with %d inputs acked (%v)", c.nodes[leader].name, acked, err)
	c.nodes[leader].start(t)
	c.nodes[leader].waitStarted(t, readyTimeout)
	f.wait(t)
	eventually(t, 3*time.Minute, "every input acked", func() error {
		acked, err := eoAcked(ctx, c.urls[other])
		if err == nil && acked != n {
			err = fmt.Errorf("%d of %d acked", acked, n)
		}
		return err
	})
	t.Logf("every input acked %s after the kill", time.Since(killed).Round(time.Millisecond))
	p.stop(t, 30*time.Second)
	t.Logf("the processor's runs:\n%s", p.grep(`^eoproc: `))
	eoCheck(t, c.connect(other), n)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("out of time")
	}
}
