package broker_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// Hostile tests of the dispatcher: what a user with a stock NATS client
// could do to a default broker (docs/queues.md, "Limits and defaults" and
// "Consumer recovery").

// rawConn is a plain NATS client of s with the public rights.
func rawConn(t *testing.T, s *broker.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// nodeConn is a client of the node's own account, as the front door and
// operators are. A client without credentials reaches the broker through
// its account's imports, which replace its reply subject with the
// server's _R_ mapping back into its own account (docs/security.md); the
// broker's own check of reply subjects is what stands for the node's
// account, and is tested from here.
func nodeConn(t *testing.T, s *broker.Server) *nats.Conn {
	t.Helper()
	nc, err := brokertest.DialOperator(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// internalJS is JetStream with the broker's own rights: what a user could
// do before the permissions close it, and how tests look at storage.
func internalJS(t *testing.T, s *broker.Server) jetstream.JetStream {
	t.Helper()
	nc, err := brokertest.DialOperator(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func streamMsgs(t *testing.T, js jetstream.JetStream, name string) (uint64, uint64) {
	t.Helper()
	st, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return info.State.Msgs, info.State.Bytes
}

func queueStatus(t *testing.T, c *client.Client, q string) semaq.QueueStatus {
	t.Helper()
	qi, err := c.QueueInfo(context.Background(), q)
	if err != nil {
		t.Fatalf("queue info %s: %v", q, err)
	}
	return qi.Status
}

// --- 1. Memory and admission bounds -------------------------------------

func TestQueueDefaultBoundsAreFinite(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q"})
	qi, err := c.QueueInfo(context.Background(), "Q")
	if err != nil {
		t.Fatal(err)
	}
	if qi.Config.MaxBytes != semaq.DefaultQueueMaxBytes || qi.Config.MaxTokens != semaq.DefaultQueueMaxTokens ||
		qi.Config.MaxMessages != semaq.DefaultQueueMaxMessages {
		t.Fatalf("default limits = %d bytes, %d tokens, %d messages", qi.Config.MaxBytes, qi.Config.MaxTokens, qi.Config.MaxMessages)
	}
	st, err := internalJS(t, s).Stream(context.Background(), "Q")
	if err != nil {
		t.Fatal(err)
	}
	jc := st.CachedInfo().Config
	if jc.MaxBytes <= 0 || jc.MaxBytes < semaq.DefaultQueueMaxBytes || jc.Discard != jetstream.DiscardNew || jc.MaxMsgs != semaq.DefaultQueueMaxMessages {
		t.Fatalf("stream backstop: max bytes %d, max msgs %d, discard %v", jc.MaxBytes, jc.MaxMsgs, jc.Discard)
	}
	// A memory queue holds its requests in RAM: its default is smaller.
	addQueue(t, c, semaq.QueueConfig{Name: "M", Subjects: []string{"mem.>"}, Storage: "memory"})
	if qi, _ := c.QueueInfo(context.Background(), "M"); qi == nil || qi.Config.MaxBytes != semaq.DefaultQueueMaxBytesMemory {
		t.Fatalf("memory queue default max bytes: %+v", qi)
	}
}

// TestQueueFloodRefusedAtByteBound floods a queue that has no workers with
// 256 KiB requests from many publishers at once: admission refuses with
// 429 before JetStream's own limit, and what is stored stays within
// max_bytes.
func TestQueueFloodRefusedAtByteBound(t *testing.T) {
	for _, storage := range []string{"file", "memory"} {
		t.Run(storage, func(t *testing.T) {
			s := brokertest.Start(t)
			c := brokertest.Connect(t, s)
			const maxBytes = 3 << 20
			addQueue(t, c, semaq.QueueConfig{Name: "Q", MaxBytes: maxBytes, Storage: storage})
			payload := bytes.Repeat([]byte("x"), 256<<10)
			var (
				wg                 sync.WaitGroup
				ok, refused, other atomic.Int64
				firstOther         atomic.Value
			)
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 6 {
						// The client's default 5 s is short for 48 concurrent
						// 256 KiB publishes on a loaded machine under -race;
						// a slow ack is not what this test is about.
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						_, err := c.Publish(ctx, "infer.x", payload)
						cancel()
						switch {
						case err == nil:
							ok.Add(1)
						case errors.Is(err, semaq.ErrOverloaded):
							refused.Add(1)
						default:
							other.Add(1)
							firstOther.CompareAndSwap(nil, err.Error())
						}
					}
				}()
			}
			wg.Wait()
			if refused.Load() == 0 || other.Load() != 0 {
				t.Fatalf("flood: %d stored, %d refused with 429, %d other errors (%v)", ok.Load(), refused.Load(), other.Load(), firstOther.Load())
			}
			msgs, stored := streamMsgs(t, internalJS(t, s), "Q")
			if int64(msgs) != ok.Load() || stored > maxBytes+maxBytes/8 {
				t.Fatalf("stream holds %d msgs, %d bytes; %d admitted, bound %d", msgs, stored, ok.Load(), maxBytes)
			}
			waitQueued(t, c, "Q", int(ok.Load()))
			if st := queueStatus(t, c, "Q"); st.Bytes > maxBytes {
				t.Fatalf("queue status bytes %d over max_bytes %d", st.Bytes, maxBytes)
			}
		})
	}
}

// TestQueueIndexHoldsNoPayload: the dispatcher keeps the scheduling fields
// of a queued request, not its payload or stored headers; the payload is
// read from the stream when the request is handed out, byte for byte.
func TestQueueIndexHoldsNoPayload(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q"})
	payload := bytes.Repeat([]byte("0123456789abcdef"), 16<<10) // 256 KiB
	big := strings.Repeat("h", 8<<10)
	for i := range 12 {
		if _, err := c.Publish(context.Background(), "infer.x", payload, client.WithMsgID("r"+strconv.Itoa(i)),
			client.WithHeader("X-Big", big)); err != nil {
			t.Fatal(err)
		}
	}
	waitQueued(t, c, "Q", 12)
	jobs, retained := broker.DispatchIndexRetained(s, "Q")
	if jobs != 12 || retained/jobs > 1024 {
		t.Fatalf("index: %d jobs keep %d bytes (%d each); want no payloads or stored headers", jobs, retained, retained/max(jobs, 1))
	}
	got := fetch(t, c, "Q", client.FetchMax(3))
	if len(got) != 3 {
		t.Fatalf("fetched %d jobs, want 3", len(got))
	}
	for i, j := range got {
		if !bytes.Equal(j.Data, payload) || j.Header.Get("X-Big") != big || j.ID != "r"+strconv.Itoa(i) {
			t.Fatalf("job %d: id %q, %d bytes, header %d bytes: not what was stored", i, j.ID, len(j.Data), len(j.Header.Get("X-Big")))
		}
		if j.Header.Get("Nats-Sequence") != "" || j.Header.Get("Nats-Stream") != "" {
			t.Fatalf("job %d carries the direct get's headers: %v", i, j.Header)
		}
	}
	ackAll(t, got)
}

// TestQueueTokenAdmissionRaceBounded: many publishers racing on a token
// limit cannot push the queue past it (admission reserves at the ingress).
func TestQueueTokenAdmissionRaceBounded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tokens  int
		payload int
	}{
		{"declared", 100, 16},
		{"estimated", -1, 400}, // 100 tokens estimated from 400 bytes
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := brokertest.Start(t)
			c := brokertest.Connect(t, s)
			addQueue(t, c, semaq.QueueConfig{Name: "Q", MaxTokens: 1000})
			pubs := make([]*client.Client, 16)
			for i := range pubs {
				pubs[i] = brokertest.Connect(t, s)
			}
			var (
				wg         sync.WaitGroup
				ok, others atomic.Int64
				start      = make(chan struct{})
			)
			for _, pc := range pubs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					var opts []client.PublishOption
					if tc.tokens >= 0 {
						opts = append(opts, client.WithPromptTokens(tc.tokens))
					}
					for range 10 {
						_, err := pc.Publish(context.Background(), "infer.x", make([]byte, tc.payload), opts...)
						switch {
						case err == nil:
							ok.Add(1)
						case !errors.Is(err, semaq.ErrOverloaded):
							others.Add(1)
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			if others.Load() != 0 {
				t.Fatalf("%d publishes failed with something other than ErrOverloaded", others.Load())
			}
			if n := ok.Load(); n > 10 || n == 0 {
				t.Fatalf("%d requests of 100 tokens admitted under a 1000-token limit", n)
			}
			waitQueued(t, c, "Q", int(ok.Load()))
			if st := queueStatus(t, c, "Q"); st.TokensQueued > 1000 {
				t.Fatalf("%d tokens queued under a 1000-token limit", st.TokensQueued)
			}
		})
	}
}

// --- 2. The dispatcher's consumer --------------------------------------

// consumerAttack is what a user does to semaq-dispatch.
type consumerAttack func(t *testing.T, js jetstream.JetStream, c *client.Client)

func deleteDispatchConsumer(t *testing.T, js jetstream.JetStream, _ *client.Client) {
	t.Helper()
	if err := js.DeleteConsumer(context.Background(), "Q", reserved.DispatchConsumer); err != nil {
		t.Fatalf("deleting the dispatch consumer: %v", err)
	}
}

func pauseDispatchConsumer(t *testing.T, js jetstream.JetStream, _ *client.Client) {
	t.Helper()
	if _, err := js.PauseConsumer(context.Background(), "Q", reserved.DispatchConsumer, time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("pausing the dispatch consumer: %v", err)
	}
}

func TestQueueSurvivesDispatchConsumerLoss(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		attack     consumerAttack
		recoveries uint64
	}{
		{"deleted", deleteDispatchConsumer, 1},
		{"paused", pauseDispatchConsumer, 1},
		{"redefined", func(t *testing.T, js jetstream.JetStream, _ *client.Client) {
			// A configuration that would stall it and ship payloads.
			cons, err := js.Consumer(context.Background(), "Q", reserved.DispatchConsumer)
			if err != nil {
				t.Fatal(err)
			}
			cfg := cons.CachedInfo().Config
			cfg.MaxAckPending, cfg.HeadersOnly = 1, false
			if _, err := js.UpdateConsumer(context.Background(), "Q", cfg); err != nil {
				t.Fatal(err)
			}
		}, 1},
		{"deleted again after recovery", func(t *testing.T, js jetstream.JetStream, c *client.Client) {
			deleteDispatchConsumer(t, js, c)
			waitFor(t, "the first recovery", func() bool {
				_, err := js.Consumer(context.Background(), "Q", reserved.DispatchConsumer)
				return queueStatus(t, c, "Q").Counters.ConsumerRecoveries == 1 && err == nil
			})
			deleteDispatchConsumer(t, js, c)
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) { testConsumerLoss(t, tc.attack, tc.recoveries) })
	}
}

func testConsumerLoss(t *testing.T, attack consumerAttack, recoveries uint64) {
	dir := t.TempDir()
	onDir := func(cfg *broker.Config) { cfg.DataDir = dir }
	s1 := brokertest.Start(t, onDir)
	c1 := brokertest.Connect(t, s1)
	js := internalJS(t, s1)
	addQueue(t, c1, semaq.QueueConfig{Name: "Q"})
	for i := range 10 {
		pubReq(t, c1, "r"+strconv.Itoa(i))
	}
	waitQueued(t, c1, "Q", 10)
	held := fetch(t, c1, "Q", client.FetchMax(3)) // r0..r2 with this worker

	attack(t, js, c1)
	for i := 10; i < 15; i++ { // arrivals after the attack are served too
		pubReq(t, c1, "r"+strconv.Itoa(i))
	}
	waitFor(t, "the dispatcher to recreate its consumer", func() bool {
		st := queueStatus(t, c1, "Q")
		if st.Counters.ConsumerRecoveries < recoveries || st.Queued != 12 {
			return false
		}
		info, err := js.Consumer(context.Background(), "Q", reserved.DispatchConsumer)
		return err == nil && !info.CachedInfo().Paused && info.CachedInfo().NumAckPending == 15
	})
	// The held jobs kept their leases: their acks are accepted and remove
	// them from storage.
	ackAll(t, held)
	waitFor(t, "the acked jobs to leave the stream", func() bool {
		n, _ := streamMsgs(t, js, "Q")
		return n == 12
	})
	seen := map[string]bool{}
	for _, j := range held {
		seen[j.ID] = true
	}
	for len(seen) < 15 {
		jobs := fetch(t, c1, "Q", client.FetchMax(4), client.FetchWait(2*time.Second))
		if len(jobs) == 0 {
			t.Fatalf("queue stopped serving with %d of 15 requests seen", len(seen))
		}
		for _, j := range jobs {
			if seen[j.ID] || j.Deliveries != 1 {
				t.Fatalf("%s delivered twice (deliveries %d)", j.ID, j.Deliveries)
			}
			seen[j.ID] = true
		}
		ackAll(t, jobs)
	}
	if extra := fetch(t, c1, "Q", client.FetchWait(100*time.Millisecond)); len(extra) != 0 {
		t.Fatalf("after all 15 were served, fetch got %v again", ids(extra))
	}
	waitFor(t, "every acked job to leave the stream", func() bool {
		n, _ := streamMsgs(t, js, "Q")
		return n == 0
	})

	// A restart does not bring back what was acked.
	c1.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := brokertest.Start(t, onDir)
	c2 := brokertest.Connect(t, s2)
	pubReq(t, c2, "after")
	waitQueued(t, c2, "Q", 1)
	if jobs := fetch(t, c2, "Q", client.FetchMax(20)); len(jobs) != 1 || jobs[0].ID != "after" {
		t.Fatalf("after restart got %v, want only the new request", ids(jobs))
	}
}

// --- 3. Leases ------------------------------------------------------------

// rawFetch fetches with a plain NATS request and returns the job frames.
func rawFetch(t *testing.T, nc *nats.Conn, queue string, max int) []semaq.FrameJob {
	t.Helper()
	body, _ := json.Marshal(semaq.FetchRequest{Worker: "w1", Max: max})
	m, err := nc.Request("$SQ.API.QUEUE.FETCH."+queue, body, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st := m.Header.Get(semaq.HdrQueueStatus); st != "204" {
		t.Fatalf("fetch status %s: %s", st, m.Data)
	}
	jobs, err := semaq.ParseJobFrame(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

func leaseOf(t *testing.T, reply string) (prefix, lease string) {
	t.Helper()
	i := strings.LastIndexByte(reply, '.')
	if i < 0 {
		t.Fatalf("reply %q has no lease", reply)
	}
	return reply[:i+1], reply[i+1:]
}

func TestQueueLeaseIsRandomSecret(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q"})
	for i := range 16 {
		pubReq(t, c, "r"+strconv.Itoa(i))
	}
	waitQueued(t, c, "Q", 16)
	nc := rawConn(t, s)
	var leases []string
	for range 2 { // two batches: leases of one batch and of the next
		for _, j := range rawFetch(t, nc, "Q", 8) {
			_, l := leaseOf(t, j.Reply)
			raw, err := base64.RawURLEncoding.DecodeString(l)
			if err != nil || len(raw)*8 < 96 {
				t.Fatalf("lease %q: %d bits (%v), want at least 96 random bits", l, len(raw)*8, err)
			}
			leases = append(leases, l)
		}
	}
	for i := range leases {
		for k := range i {
			// A counter (nuid) shares a long prefix from one lease to the next.
			n := 0
			for n < len(leases[i]) && n < len(leases[k]) && leases[i][n] == leases[k][n] {
				n++
			}
			if n >= 6 {
				t.Fatalf("leases %q and %q share %d leading characters: predictable", leases[k], leases[i], n)
			}
		}
	}
}

func TestQueueForgedLeaseRefused(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q"})
	pubReq(t, c, "a")
	pubReq(t, c, "b")
	waitQueued(t, c, "Q", 2)
	nc := rawConn(t, s)
	jobs := rawFetch(t, nc, "Q", 2)
	prefixA, leaseA := leaseOf(t, jobs[0].Reply)
	_, leaseB := leaseOf(t, jobs[1].Reply)
	flip := []byte(leaseA)
	flip[len(flip)-1] ^= 1
	for _, forged := range []string{
		string(flip), leaseA[:len(leaseA)-1], leaseA + "A", leaseB, strings.Repeat("A", len(leaseA)),
	} {
		m, err := nc.Request(prefixA+forged, []byte(semaq.JobAck), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep semaq.JobReply
		if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Error == nil || !errors.Is(rep.Error, semaq.ErrLeaseLost) {
			t.Fatalf("ack with forged lease %q: %s", forged, m.Data)
		}
	}
	if st := queueStatus(t, c, "Q"); st.Held != 2 || st.Counters.Acked != 0 {
		t.Fatalf("after forged acks: held %d, acked %d", st.Held, st.Counters.Acked)
	}
	m, err := nc.Request(jobs[0].Reply, []byte(semaq.JobAck), 5*time.Second)
	if err != nil || !bytes.Contains(m.Data, []byte(`"ok":true`)) {
		t.Fatalf("ack with the real lease: %v %s", err, m.Data)
	}
}

// --- 4. Replies to subjects the client chose ---------------------------

var badReplies = []string{
	"$JS.API.STREAM.DELETE.VICTIM",
	"$JS.API.STREAM.PURGE.VICTIM",
	"$SQ.API.QUEUE.DELETE.Q",
	"_SQ_ACK.x",
	"inbox.*",
	"inbox.>",
}

func victimStream(t *testing.T, s *broker.Server) jetstream.JetStream {
	t.Helper()
	js := internalJS(t, s)
	st, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "VICTIM", Subjects: []string{"victim.>"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), "victim.x", []byte("keep me")); err != nil {
		t.Fatal(err)
	}
	_ = st
	return js
}

func assertVictim(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	if n, _ := streamMsgs(t, js, "VICTIM"); n != 1 {
		t.Fatalf("stream VICTIM holds %d messages, want 1", n)
	}
}

func TestQueueFetchReplyToReservedSubjectGetsNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		queued int
		wait   time.Duration
	}{
		{"empty queue", 0, 0},                              // the 408 end of batch
		{"empty queue, waiting", 0, 50 * time.Millisecond}, // the 408 after the wait
		{"with work", 3, 0},                                // a job frame; no job may be leased
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := brokertest.Start(t)
			c := brokertest.Connect(t, s)
			js := victimStream(t, s)
			addQueue(t, c, semaq.QueueConfig{Name: "Q"})
			for i := range tc.queued {
				pubReq(t, c, "r"+strconv.Itoa(i))
			}
			waitQueued(t, c, "Q", tc.queued)
			nc := nodeConn(t, s)
			body, _ := json.Marshal(semaq.FetchRequest{Worker: "w1", Max: 8, Wait: tc.wait})
			for _, r := range badReplies {
				if err := nc.PublishRequest("$SQ.API.QUEUE.FETCH.Q", r, body); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "the bad fetches to be counted", func() bool {
				return queueStatus(t, c, "Q").Counters.BadReplies == uint64(len(badReplies))
			})
			assertVictim(t, js)
			if st := queueStatus(t, c, "Q"); st.Held != 0 || st.Queued != tc.queued {
				t.Fatalf("after bad fetches: held %d, queued %d", st.Held, st.Queued)
			}
			// The queue is still there and serves a good fetch.
			if got := fetch(t, c, "Q", client.FetchMax(8)); len(got) != tc.queued {
				t.Fatalf("good fetch got %d jobs, want %d", len(got), tc.queued)
			}
		})
	}
}

func TestQueueAnswerAndCancelReplyToReservedSubject(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	js := victimStream(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q"})
	pubReq(t, c, "held")
	pubReq(t, c, "queued")
	waitQueued(t, c, "Q", 2)
	nc := nodeConn(t, s)
	jobs := rawFetch(t, nc, "Q", 1)
	cancelBody, _ := json.Marshal(semaq.CancelRequest{ID: "queued"})
	for _, r := range badReplies {
		if err := nc.PublishRequest(jobs[0].Reply, r, []byte(semaq.JobInProgress)); err != nil {
			t.Fatal(err)
		}
		if err := nc.PublishRequest("$SQ.API.QUEUE.CANCEL.Q", r, cancelBody); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the bad answers and cancels to be counted", func() bool {
		return queueStatus(t, c, "Q").Counters.BadReplies == uint64(2*len(badReplies))
	})
	assertVictim(t, js)
	if st := queueStatus(t, c, "Q"); st.Held != 1 || st.Queued != 1 || st.Counters.Cancelled != 0 {
		t.Fatalf("after bad answers and cancels: held %d, queued %d, cancelled %d", st.Held, st.Queued, st.Counters.Cancelled)
	}
	// A good answer and a good cancel are served.
	if m, err := nc.Request(jobs[0].Reply, []byte(semaq.JobAck), 5*time.Second); err != nil || !bytes.Contains(m.Data, []byte(`"ok":true`)) {
		t.Fatalf("ack: %v", err)
	}
	if _, err := c.Cancel(context.Background(), "Q", "queued"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
}

// TestDispatchEgressCannotReachJetStream: even a reply subject a check
// missed could not reach JetStream: client-addressed messages leave by a
// connection without those rights.
func TestDispatchEgressCannotReachJetStream(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	js := victimStream(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q"})
	for _, subj := range []string{"$JS.API.STREAM.DELETE.VICTIM", "$JS.API.STREAM.PURGE.VICTIM", "$SQ.API.QUEUE.DELETE.Q"} {
		if err := broker.DispatchEgressPublish(s, "Q", subj, nil); err != nil {
			t.Fatalf("egress publish: %v", err)
		}
	}
	assertVictim(t, js)
	if _, err := c.QueueInfo(context.Background(), "Q"); err != nil {
		t.Fatalf("queue after egress publishes: %v", err)
	}
}

// TestQueueAcksWhileConsumerLostAreKept: jobs acked after the consumer was
// deleted and before the dispatcher noticed (their acks reach no consumer)
// still leave the stream, are not handed out again, and stay gone after a
// restart.
func TestQueueAcksWhileConsumerLostAreKept(t *testing.T) {
	dir := t.TempDir()
	onDir := func(cfg *broker.Config) { cfg.DataDir = dir }
	s1 := brokertest.Start(t, onDir)
	c1 := brokertest.Connect(t, s1)
	js := internalJS(t, s1)
	addQueue(t, c1, semaq.QueueConfig{Name: "Q"})
	for i := range 6 {
		pubReq(t, c1, "r"+strconv.Itoa(i))
	}
	waitQueued(t, c1, "Q", 6)
	held := fetch(t, c1, "Q", client.FetchMax(4))
	deleteDispatchConsumer(t, js, c1)
	ackAll(t, held) // at once: the dispatcher has most likely not noticed yet
	waitFor(t, "recovery and the acked jobs to leave the stream", func() bool {
		n, _ := streamMsgs(t, js, "Q")
		return queueStatus(t, c1, "Q").Counters.ConsumerRecoveries >= 1 && n == 2
	})
	jobs := fetch(t, c1, "Q", client.FetchMax(10), client.FetchWait(200*time.Millisecond))
	if got := strings.Join(ids(jobs), ","); got != "r4,r5" {
		t.Fatalf("after recovery got %s, want r4,r5", got)
	}
	c1.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := brokertest.Start(t, onDir)
	c2 := brokertest.Connect(t, s2)
	// r4 and r5 were held, not acked: they are still their worker's, who
	// acks them now; what was acked before does not come back.
	waitFor(t, "r4 and r5 held after the restart", func() bool {
		st := queueStatus(t, c2, "Q")
		return st.Held == 2 && st.Queued == 0
	})
	if extra := fetch(t, c2, "Q", client.FetchMax(10)); len(extra) != 0 {
		t.Fatalf("after restart a fetch got %v, want nothing", ids(extra))
	}
	nc, err := nats.Connect(s2.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, j := range jobs {
		if r := answerRaw(t, nc, j.AckSubject(), semaq.JobAck); !r.OK {
			t.Fatalf("ack of %s after the restart: %+v", j.ID, r.Error)
		}
	}
	waitFor(t, "the stream to empty", func() bool {
		n, _ := streamMsgs(t, internalJS(t, s2), "Q")
		return n == 0
	})
}
