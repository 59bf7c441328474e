package dispatch

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/jstest"
)

// TestLeaseTable: a lease record is dropped once no job's latest lease is
// in it, with a job's extension record when the job is done; a table
// opened later finds the records left, adopts those of the jobs the
// consumer delivers, and at catch-up drops the records that name no job
// and keeps the leases of jobs done until they end, answering a repeated
// ack.
func TestLeaseTable(t *testing.T) {
	ns := jstest.Server(t)
	nc, js := jstest.Connect(t, ns)
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "Q", Subjects: []string{"q.>"},
		Retention: jetstream.WorkQueuePolicy})
	if err != nil {
		t.Fatal(err)
	}
	info := st.CachedInfo()
	log := slog.New(slog.DiscardHandler)

	// dropped returns the keys of the purge markers nc sent since it was
	// last called: a marker sent after them on nc ends the wait.
	obs, _ := jstest.Connect(t, ns)
	seen := make(chan *nats.Msg, 64)
	for _, subj := range []string{"$KV." + LeaseBucket("Q") + ".>", "test.sync"} {
		if _, err := obs.ChanSubscribe(subj, seen); err != nil {
			t.Fatal(err)
		}
	}
	if err := obs.Flush(); err != nil {
		t.Fatal(err)
	}
	dropped := func() []string {
		t.Helper()
		if err := nc.Publish("test.sync", nil); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for {
			select {
			case m := <-seen:
				if m.Subject == "test.sync" {
					return keys
				}
				if m.Header.Get("KV-Operation") == "PURGE" {
					keys = append(keys, m.Subject[len("$KV."+LeaseBucket("Q")+"."):])
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no sync marker")
			}
		}
	}
	expect := func(what string, want ...string) {
		t.Helper()
		if got := dropped(); !slices.Equal(got, want) {
			t.Fatalf("%s: dropped %q, want %q", what, got, want)
		}
	}

	lt := newLeaseTable(log)
	if err := lt.open(ctx, js, nc, info, 100); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	lease := func(seq uint64, secret string) shipJob {
		return shipJob{seq: seq, rec: leaseRecord{Sum: leaseSum(secret), Worker: "w", Deliveries: 1,
			Fetched: now.UnixMilli(), Until: now.Add(time.Minute).UnixMilli()}}
	}
	ships := []*shipment{
		{key: "b1", jobs: []shipJob{lease(1, "L1"), lease(2, "L2")}},
		{key: "b2", jobs: []shipJob{lease(3, "L3")}},
		{key: "b5", jobs: []shipJob{lease(6, "L6")}},
	}
	for _, sh := range ships {
		for _, sj := range sh.jobs {
			lt.moved(sj.seq, sh.key)
		}
	}
	for i, err := range lt.write(ships).wait(ctx) {
		if err != nil {
			t.Fatalf("record %s: %v", ships[i].key, err)
		}
	}
	lt.done(1)
	expect("job 1 done, job 2's lease still in b1")
	lt.moved(2, "b3") // handed out again
	expect("job 2 leased again", "b1")
	lt.extend(2)
	if err := lt.put(ctx, 2, lease(2, "L2b").rec); err != nil {
		t.Fatal(err)
	}
	lt.done(2)
	expect("job 2 done", "b3", "s2")
	// The purges are sent, not awaited: one more, acknowledged, from the
	// same connection is stored after them, so the next dispatcher reads
	// the bucket without them.
	kv, err := js.KeyValue(ctx, LeaseBucket("Q"))
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, "sync"); err != nil {
		t.Fatal(err)
	}
	expect("the marker", "sync")

	// A dispatcher starting later: job 3 is delivered again, held; job 6
	// is not (acked by the one before, its answer maybe lost).
	lt2 := newLeaseTable(log)
	if err := lt2.open(ctx, js, nc, info, 100); err != nil {
		t.Fatal(err)
	}
	if !lt2.restoredLease(6, "L6") || lt2.restoredLease(6, "L3") {
		t.Fatal("job 6's restored lease not recognised, or another one is")
	}
	rec, ok := lt2.takeRestored(3)
	if !ok || rec.key != "b2" || !sumMatches(rec.Sum, "L3") {
		t.Fatalf("job 3 restored as %+v, %v", rec, ok)
	}
	if _, ok := lt2.takeRestored(3); ok {
		t.Fatal("job 3 restored twice")
	}
	lt2.adopt(3, rec)
	stale := lt2.caughtUp()
	if !slices.Equal(stale, []string{"b5"}) || lt2.heldRestored != 1 {
		t.Fatalf("caught up: stale %q, held %d; want [b5], 1", stale, lt2.heldRestored)
	}
	if again := lt2.caughtUp(); again != nil {
		t.Fatalf("caught up again: stale %q", again)
	}
	if lt2.restoredLease(6, "L6") || !lt2.finishedAck(6, "L6") || lt2.finishedAck(6, "L3") {
		t.Fatal("after catch-up, job 6 is not done under its own lease only")
	}
	lt2.dropStale(stale)
	expect("stale records", "b5")
	lt2.finish(3, rec.Sum, now.Add(time.Minute).UnixMilli())
	lt2.done(3)
	expect("job 3 done", "b2")
	if !lt2.finishedAck(3, "L3") {
		t.Fatal("job 3's ack not remembered")
	}
	lt2.pruneFinished(now.Add(2 * time.Minute))
	if lt2.finishedAck(3, "L3") || lt2.finishedAck(6, "L6") {
		t.Fatal("finished leases kept past their end")
	}
}
