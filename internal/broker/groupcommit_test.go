package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/node"
	"github.com/semaq/semaq/semaq"
)

func addDurable(t *testing.T, c *client.Client, name, subject, durability string) {
	t.Helper()
	if _, err := c.AddStream(context.Background(), semaq.StreamConfig{Name: name, Subjects: []string{subject}, Durability: durability}); err != nil {
		t.Fatal(err)
	}
}

func TestGroupCommitFindsBlockFiles(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addDurable(t, c, "D", "d.>", "fsync")
	ctx := context.Background()
	for i := range 10 {
		if _, err := c.Publish(ctx, "d.x", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	blks, _ := filepath.Glob(filepath.Join(broker.StoreDir(s, "D"), "*.blk"))
	if len(blks) == 0 {
		t.Fatalf("no block files in %s: JetStream's file store layout changed, group commit cannot fsync", broker.StoreDir(s, "D"))
	}
	info, err := c.StreamInfo(ctx, "D")
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Durability != "fsync" || info.Sync != "always" || info.Commit == nil || info.Commit.Acks != 10 || info.Commit.Failures != 0 {
		t.Fatalf("info = %+v, commit %+v", info.Config, info.Commit)
	}
	// The server default decides for streams that name no durability.
	brokertest.AddStream(t, c, "I", "i.>")
	if info, _ := c.StreamInfo(ctx, "I"); info.Config.Durability != "interval" || info.Commit != nil {
		t.Fatalf("default durability on an interval server = %+v", info.Config)
	}
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "M", Subjects: []string{"m.>"}, Storage: "memory", Durability: "fsync"}); !errors.Is(err, semaq.ErrBadStream) {
		t.Fatalf("fsync memory stream: %v", err)
	}
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "B", Subjects: []string{"b.>"}, Durability: "sometimes"}); !errors.Is(err, semaq.ErrBadStream) {
		t.Fatalf("bad durability: %v", err)
	}
}

// syncGate blocks fsyncs until opened, and reports each one that starts.
type syncGate struct {
	entered chan string
	open    chan struct{}
	fail    atomic.Int32 // fail this many fsyncs
	calls   atomic.Int32
}

func newSyncGate() *syncGate {
	return &syncGate{entered: make(chan string, 1024), open: make(chan struct{})}
}

func (g *syncGate) sync(f *os.File) error {
	g.calls.Add(1)
	g.entered <- f.Name()
	<-g.open
	if g.fail.Load() > 0 {
		g.fail.Add(-1)
		return errors.New("injected fsync failure")
	}
	return f.Sync()
}

func TestAckWaitsForFsync(t *testing.T) {
	gate := newSyncGate()
	s := startWithHook(t, gate.sync)
	c := brokertest.Connect(t, s)
	addDurable(t, c, "D", "d.>", "fsync")

	acked := make(chan error, 1)
	go func() {
		_, err := c.Publish(context.Background(), "d.x", []byte("one"))
		acked <- err
	}()
	select {
	case <-gate.entered: // the committer is inside fsync, holding the ack
	case <-time.After(10 * time.Second):
		t.Fatal("no fsync started")
	}
	select {
	case err := <-acked:
		t.Fatalf("publish acknowledged before its fsync finished (err %v)", err)
	default:
	}
	close(gate.open)
	select {
	case err := <-acked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("publish not acknowledged after fsync")
	}
}

func startWithHook(t *testing.T, hook func(*os.File) error) *broker.Server {
	t.Helper()
	return startWithHookHTTP(t, hook, "")
}

func startWithHookHTTP(t *testing.T, hook func(*os.File) error, httpAddr string) *broker.Server {
	t.Helper()
	cfg := broker.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTP = httpAddr
	s, err := node.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	broker.SetSyncHook(s, hook)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s
}

func TestCommitFailureFailsBatchAndRetryDedups(t *testing.T) {
	gate := newSyncGate()
	close(gate.open)
	gate.fail.Store(1)
	s := startWithHook(t, gate.sync)
	c := brokertest.Connect(t, s)
	addDurable(t, c, "D", "d.>", "fsync")
	ctx := context.Background()

	_, err := c.Publish(ctx, "d.x", []byte("payload"), client.WithMsgID("m-1"))
	if !errors.Is(err, semaq.ErrCommit) {
		t.Fatalf("publish during a failing fsync: %v, want ErrCommit", err)
	}
	// The retry with the same id is not stored twice and is durable now.
	ack, err := c.Publish(ctx, "d.x", []byte("payload"), client.WithMsgID("m-1"))
	if err != nil {
		t.Fatal(err)
	}
	if !ack.Duplicate || ack.Sequence != 1 {
		t.Fatalf("retry ack = %+v, want duplicate of seq 1", ack)
	}
	if n := messages(t, c, "D"); n != 1 {
		t.Fatalf("stream has %d messages, want 1", n)
	}
	st := broker.CommitStats(s, "D")
	if st.Failures != 1 || st.Acks != 1 {
		t.Fatalf("commit stats = %+v", st)
	}
}

func TestBadMessageNeverFailsItsBatch(t *testing.T) {
	s := brokertest.Start(t, func(c *broker.Config) { c.Sync = broker.SyncAlways })
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "D", "d.>") // fsync by the server default
	ctx := context.Background()
	var (
		wg       sync.WaitGroup
		good     atomic.Int64
		refused  atomic.Int64
		failures = make(chan error, 400)
	)
	for p := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				bad := i%5 == 0
				opts := []client.PublishOption{client.WithMsgID(fmt.Sprintf("p%d-%d", p, i))}
				if bad {
					opts = append(opts, client.WithHeader("AI-Priority", "urgent"))
				}
				_, err := c.Publish(ctx, "d.x", []byte("x"), opts...)
				switch {
				case bad && errors.Is(err, semaq.ErrEnvelope):
					refused.Add(1)
				case !bad && err == nil:
					good.Add(1)
				default:
					failures <- fmt.Errorf("p%d #%d (bad=%v): %v", p, i, bad, err)
				}
			}
		}()
	}
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Error(err)
	}
	if n := messages(t, c, "D"); n != uint64(good.Load()) || good.Load() != 320 || refused.Load() != 80 {
		t.Fatalf("stored %d, acked %d, refused %d", n, good.Load(), refused.Load())
	}
}

func TestGroupCommitBatchesAndKeepsOrder(t *testing.T) {
	gate := newSyncGate()
	s := startWithHook(t, gate.sync)
	c := brokertest.Connect(t, s)
	addDurable(t, c, "D", "d.>", "fsync")
	js, err := jetstream.New(c.Conn(), jetstream.WithPublishAsyncMaxPending(4000))
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	for i := range n {
		if _, err := js.PublishAsync("d.x", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	// Hold the first fsync until JetStream has acked every message to the
	// ingress: they all wait in the committer, and the next fsync takes
	// them as one batch.
	select {
	case <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no fsync started")
	}
	deadline := time.Now().Add(30 * time.Second)
	for broker.AcksRouted(s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d acks reached the committer", broker.AcksRouted(s), n)
		}
		time.Sleep(time.Millisecond) // polling a condition
	}
	close(gate.open)
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("publishes not acknowledged")
	}
	st := broker.CommitStats(s, "D")
	if st.Acks != n || st.Batches > 3 || st.BatchSize.Max < n/2 {
		t.Fatalf("commit stats = %+v: want %d acks in at most 3 batches", st, n)
	}
	sub, err := c.Subscribe(context.Background(), "d.x", client.WithMaxMessages(n), client.WithPrefetch(500))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i := range n {
		m, err := sub.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Data) != strconv.Itoa(i) {
			t.Fatalf("position %d holds %q", i, m.Data)
		}
	}
}

func TestGroupCommitSyncsEveryNewBlock(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		synced  = map[string]int{}
		release = make(chan struct{})
		first   sync.Once
	)
	s := startWithHook(t, func(f *os.File) error {
		// Hold the first fsync until every message is written, so the
		// next commit finds several new block files at once.
		first.Do(func() { <-release })
		mu.Lock()
		synced[filepath.Base(f.Name())]++
		mu.Unlock()
		return f.Sync()
	})
	c := brokertest.Connect(t, s)
	addDurable(t, c, "D", "d.>", "fsync")
	js, err := jetstream.New(c.Conn(), jetstream.WithPublishAsyncMaxPending(256))
	if err != nil {
		t.Fatal(err)
	}
	// Large messages fill several block files, often more than one
	// between two commits.
	big := make([]byte, 200<<10)
	for range 200 {
		if _, err := js.PublishAsync("d.x", big); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for broker.AcksRouted(s) < 200 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of 200 writes acknowledged by JetStream", broker.AcksRouted(s))
		}
		time.Sleep(time.Millisecond) // polling a condition
	}
	close(release)
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(60 * time.Second):
		t.Fatal("publishes not acknowledged")
	}
	blks, _ := filepath.Glob(filepath.Join(broker.StoreDir(s, "D"), "*.blk"))
	if len(blks) < 3 {
		t.Fatalf("only %d block files; the test needs rollovers", len(blks))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range blks {
		if synced[filepath.Base(b)] == 0 {
			t.Errorf("block %s holds acknowledged messages but was never fsynced", filepath.Base(b))
		}
	}
}

func TestShutdownAfterOversizeDurableMessage(t *testing.T) {
	s := brokertest.Start(t, func(c *broker.Config) { c.MaxPayload = 64 << 10 })
	c := brokertest.Connect(t, s)
	addDurable(t, c, "D", "d.>", "fsync")
	ctx := context.Background()
	// Fits as published, too large once the ingress adds the envelope.
	_, err := c.Publish(ctx, "d.x", make([]byte, 64<<10-30))
	if !errors.Is(err, semaq.ErrTooLarge) {
		t.Fatalf("oversize after stamping: %v", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// TestHTTPCommitFailureIsUnknownOutcome: over HTTP, a publish written but
// not made durable is not reported as failed (a retry without its id would
// store it twice): it is an unknown outcome with the id to retry with, and
// that retry is deduplicated.
func TestHTTPCommitFailureIsUnknownOutcome(t *testing.T) {
	gate := newSyncGate()
	close(gate.open)
	gate.fail.Store(1)
	s := startWithHookHTTP(t, gate.sync, "127.0.0.1:0")
	c := brokertest.Connect(t, s)
	addDurable(t, c, "D", "d.>", "fsync")
	url := "http://" + s.HTTPAddr() + "/api/v1/publish/d.x"
	resp, err := http.Post(url, "application/octet-stream", strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Outcome string `json:"outcome"`
		MsgID   string `json:"msg_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusGatewayTimeout || out.Outcome != "unknown" || out.MsgID == "" {
		t.Fatalf("publish during a failing fsync: %d %+v (%v), want 504, outcome unknown and a msg id", resp.StatusCode, out, err)
	}
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("payload"))
	req.Header.Set(semaq.HdrMsgID, out.MsgID)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("retry with the id: %d", resp.StatusCode)
	}
	if n := messages(t, c, "D"); n != 1 {
		t.Fatalf("stream has %d messages, want 1", n)
	}
}
