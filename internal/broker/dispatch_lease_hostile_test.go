package broker_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// A stream a user named like a queue's lease store is neither taken over
// nor redefined: adding the queue fails, naming it.
func TestQueueLeaseStoreNameTaken(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "KV_SQ_LEASES_Q", Subjects: []string{"mine.>"}}); err != nil {
		t.Fatal(err)
	}
	_, err := c.AddQueue(ctx, semaq.QueueConfig{Name: "Q", Subjects: []string{"infer.>"}})
	if err == nil || !strings.Contains(err.Error(), "KV_SQ_LEASES_Q exists and is not a lease store") {
		t.Fatalf("adding queue Q next to a stream KV_SQ_LEASES_Q: %v, want a refusal naming it", err)
	}
	info, err := c.StreamInfo(ctx, "KV_SQ_LEASES_Q")
	if err != nil || len(info.Config.Subjects) != 1 || info.Config.Subjects[0] != "mine.>" {
		t.Fatalf("the user's stream after the refusal: %+v, %v", info, err)
	}
	if _, err := c.Publish(ctx, "mine.x", []byte("still mine")); err != nil {
		t.Fatalf("publishing to the user's stream: %v", err)
	}
}

// The lease store says who holds what, never a lease's secret, and a
// client cannot write it: a forged record does not let it answer a job it
// was not given.
func TestQueueLeaseStoreHoldsNoSecretAndRefusesForgery(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q"})
	pubReq(t, c, "r0")
	waitQueued(t, c, "Q", 1)
	jobs := fetch(t, c, "Q")
	if len(jobs) != 1 {
		t.Fatalf("fetch got %d jobs", len(jobs))
	}
	_, lease := leaseOf(t, jobs[0].AckSubject())
	js := internalJS(t, s)
	kv, err := js.KeyValue(context.Background(), "SQ_LEASES_Q")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(context.Background())
	if err != nil || len(keys) != 1 {
		t.Fatalf("lease store keys %v, %v; want the fetch's record", keys, err)
	}
	e, err := kv.Get(context.Background(), keys[0])
	if err != nil {
		t.Fatalf("the lease record of the held job: %v", err)
	}
	if !strings.Contains(string(e.Value()), `"s":1`) || strings.Contains(string(e.Value()), lease) {
		t.Fatalf("the lease record names job 1 without its secret? %s", e.Value())
	}

	// A client forges a record with a later delivery of job 1 under a lease
	// of its own choosing.
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const forged = "AAAAAAAAAAAAAAAAAAAAAA"
	sum := sha256.Sum256([]byte(forged))
	_ = nc.Publish("$KV.SQ_LEASES_Q.bforged", []byte(`{"w":"mallory","f":0,"u":99999999999999,"j":[{"s":1,"d":99,"h":"`+
		base64.RawURLEncoding.EncodeToString(sum[:])+`"}]}`))
	_ = nc.Flush()
	// Not even a dispatcher that reads the store afresh takes it.
	if err := broker.RestartDispatcher(s, "Q"); err != nil {
		t.Fatal(err)
	}
	if r := answerRaw(t, nc, "$SQ.QA.Q.1."+forged, semaq.JobAck); !leaseLost(r) {
		t.Fatalf("ack under a forged lease: %+v, want lease lost", r)
	}
	if keys, _ := kv.Keys(context.Background()); len(keys) != 1 {
		t.Fatalf("lease store keys after a client's publish: %v", keys)
	}
	// Until its consumer has delivered job 1 again, the new dispatcher
	// answers the holder "ask again" (ErrUnavailable), as a worker expects.
	waitFor(t, "the restarted dispatcher to hold job 1 again", func() bool {
		return queueStatus(t, c, "Q").Held == 1
	})
	if err := jobs[0].Ack(context.Background(), client.AckOutputTokens(1)); err != nil {
		t.Fatalf("the holder's ack: %v", err)
	}
	waitFor(t, "the record of the acked job to go", func() bool {
		keys, err := kv.Keys(context.Background())
		return errors.Is(err, jetstream.ErrNoKeysFound) || err == nil && len(keys) == 0
	})
}

// The subjects other nodes reach a dispatcher on are the broker's own: a
// client can neither reserve a queue's capacity with forged admission
// checks nor read its status there.
func TestQueueRemoteSubjectsClosed(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q", MaxTokens: 1000})
	pubReq(t, c, "first", client.WithPromptTokens(10))
	waitQueued(t, c, "Q", 1)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for range 3 { // each would reserve 985 of the 1000 tokens
		if m, err := nc.Request("_SQ_Q.adm.Q", []byte(`{"t":985,"b":0}`), 200*time.Millisecond); err == nil {
			t.Fatalf("a client's admission check was answered: %q", m.Data)
		}
	}
	if m, err := nc.Request("_SQ_Q.info.Q", nil, 200*time.Millisecond); err == nil {
		t.Fatalf("a client's status request was answered: %q", m.Data)
	}
	// Nothing was reserved: a request that fits is admitted.
	pubReq(t, c, "second", client.WithPromptTokens(10))
}

// TestQueueMadeUpLeaseFlood: answers under made-up leases, for a job a
// worker holds and for jobs that do not exist, are each refused or, past
// the dispatcher's 16 lease store reads at once, left unanswered and
// counted; none does a job, and the worker's own answers go on being heard.
func TestQueueMadeUpLeaseFlood(t *testing.T) {
	const flood = 2000
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q", AckWait: time.Minute})
	pubReq(t, c, "r0")
	pubReq(t, c, "r1")
	waitQueued(t, c, "Q", 2)
	held := fetch(t, c, "Q", client.FetchWorker("honest"))
	if len(held) != 1 {
		t.Fatalf("fetch got %v", ids(held))
	}
	prefix, _ := leaseOf(t, held[0].AckSubject()) // $SQ.QA.Q.<seq>.
	seq := strings.TrimSuffix(strings.TrimPrefix(prefix, semaq.QueueAckPrefix+"Q."), ".")

	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	inbox := nats.NewInbox()
	replies := make(chan *nats.Msg, flood)
	sub, err := nc.ChanSubscribe(inbox, replies)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	verbs := []string{semaq.JobAck, semaq.JobNak, semaq.JobTerm, semaq.JobInProgress}
	for i := range flood {
		target := seq
		if i%2 == 1 {
			target = strconv.Itoa(1_000_000 + i) // no such job
		}
		sum := sha256.Sum256([]byte("made up " + strconv.Itoa(i)))
		lease := base64.RawURLEncoding.EncodeToString(sum[:16]) // a lease's length: checked against the store
		if err := nc.PublishRequest(semaq.QueueAckPrefix+"Q."+target+"."+lease, inbox, []byte(verbs[i%len(verbs)])); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The honest worker is heard during the flood.
	if err := held[0].InProgress(context.Background()); err != nil {
		t.Fatalf("the worker's in-progress during the flood: %v", err)
	}
	var refused, other int
	waitFor(t, "every made-up answer to be refused or counted unanswered", func() bool {
		for {
			select {
			case m := <-replies:
				var r semaq.JobReply
				if json.Unmarshal(m.Data, &r) == nil && r.Error != nil && errors.Is(r.Error, semaq.ErrLeaseLost) {
					refused++
				} else {
					other++
					t.Errorf("a made-up answer on %s was answered %s", m.Subject, m.Data)
				}
				continue
			default:
			}
			break
		}
		qi, err := c.QueueInfo(context.Background(), "Q")
		return err == nil && refused+other+int(qi.Status.Counters.LeaseChecksUnanswered) == flood
	})
	if err := held[0].Ack(context.Background()); err != nil {
		t.Fatalf("the worker's ack after the flood: %v", err)
	}
	rest := fetch(t, c, "Q", client.FetchWorker("honest"))
	if fmt.Sprint(ids(rest)) != "[r1]" {
		t.Fatalf("after the flood a fetch got %v, want r1", ids(rest))
	}
	ackAll(t, rest)
	qi, err := c.QueueInfo(context.Background(), "Q")
	if err != nil || qi.Status.Counters.Acked != 2 || qi.Status.Held != 0 || qi.Status.Queued != 0 {
		t.Fatalf("after the flood: %+v, %v; want 2 acked, nothing held or queued", qi, err)
	}
	t.Logf("%d made-up answers: %d refused, %d left unanswered past the bound", flood, refused, qi.Status.Counters.LeaseChecksUnanswered)
}

// TestQueueMarkerWithoutAckRemovesNothing: a purge marker in a job's lease
// record that names no ack (what a dispatcher whose consumer lagged once
// wrote for requests it had not indexed) does not make a dispatcher drop
// the job: the request is still in the stream, so the job is handed out
// and done, not removed unseen.
func TestQueueMarkerWithoutAckRemovesNothing(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q"})
	pubReq(t, c, "r0")
	waitQueued(t, c, "Q", 1)
	js := internalJS(t, s)
	marker := &nats.Msg{Subject: "$KV.SQ_LEASES_Q.s1", Header: nats.Header{}}
	marker.Header.Set("KV-Operation", "PURGE")
	marker.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	if _, err := js.PublishMsg(context.Background(), marker); err != nil {
		t.Fatal(err)
	}
	got := fetch(t, c, "Q", client.FetchWait(5*time.Second))
	if fmt.Sprint(ids(got)) != "[r0]" {
		t.Fatalf("with a marker naming no ack in its record, a fetch got %v, want r0", ids(got))
	}
	ackAll(t, got)
	if st := queueStatus(t, c, "Q"); st.Counters.Acked != 1 || st.Queued != 0 || st.Held != 0 {
		t.Fatalf("after the ack: %+v", st)
	}
}
