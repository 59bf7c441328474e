package dispatch

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/jstest"
)

// TestLeaseTable: each job's lease is one record of its own, written only
// over the revision the writer knows, so a second writer that has not seen
// the latest is refused and reads what the record says; a done job's record
// becomes a purge marker naming the lease it was acked under; a table
// opened later restores the held jobs, knows their revisions, and at
// catch-up drops the records (an earlier version's included) that name no
// job in the index, keeping the leases of jobs done until they end.
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

	lt := newLeaseTable(log)
	if err := lt.open(ctx, js, nc, info, 100); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	lease := func(seq uint64, secret string) shipJob {
		return shipJob{seq: seq, rev: lt.rev[seq], rec: leaseRecord{Sum: leaseSum(secret), Worker: "w", Deliveries: 1,
			Fetched: now.UnixMilli(), Until: now.Add(time.Minute).UnixMilli()}}
	}
	ships := []*shipment{{jobs: []shipJob{lease(1, "L1"), lease(2, "L2")}}, {jobs: []shipJob{lease(3, "L3")}}}
	for i, w := range lt.write(ships).wait(ctx) {
		if w.err != nil || w.rev == 0 {
			t.Fatalf("record %d: rev %d, %v", i, w.rev, w.err)
		}
		lt.leased(uint64(i+1), w.rev)
	}

	// A second writer that knows no record of job 1 is refused, and reads
	// the first's lease.
	w := lt.write([]*shipment{{jobs: []shipJob{{seq: 1, rec: lease(1, "X").rec}}}}).wait(ctx)
	if !moved(w[0].err) {
		t.Fatalf("a write over a record it did not know: %v, want refused as moved", w[0].err)
	}
	got, err := lt.read(ctx, 1)
	if err != nil || got.rec == nil || !sumMatches(got.rec.Sum, "L1") || got.rev != lt.rev[1] || got.gone {
		t.Fatalf("job 1's record read as %+v (%v); want lease L1 at revision %d", got, err, lt.rev[1])
	}
	// An extension over the known revision is taken; over an older one,
	// refused.
	old := lt.rev[2]
	ext := lease(2, "L2").rec
	ext.Until += 1000
	rev, err := lt.put(ctx, 2, ext, old)
	if err != nil || rev <= old {
		t.Fatalf("extension: rev %d, %v", rev, err)
	}
	lt.leased(2, rev)
	if _, err := lt.put(ctx, 2, ext, old); !moved(err) {
		t.Fatalf("extension over a stale revision: %v, want refused as moved", err)
	}
	// Job 1 acked: its record becomes a marker naming the lease.
	lt.done(1, leaseSum("L1"))
	if _, ok := lt.rev[1]; ok {
		t.Fatal("job 1's revision kept after it is done")
	}
	var marker *leaseTaken
	waitFor(t, "job 1's marker", func() bool {
		marker, err = lt.read(ctx, 1)
		return err == nil && marker.gone
	})
	if !sumMatches(marker.done, "L1") || marker.rec != nil {
		t.Fatalf("job 1's marker read as %+v", marker)
	}
	if got, err := lt.read(ctx, 9); err != nil || got.rev != 0 || got.gone || got.rec != nil {
		t.Fatalf("a job without a record read as %+v, %v", got, err)
	}
	// A record of an earlier version (one fetch's jobs under b<id>).
	body := []byte(`{"w":"w","f":1,"u":` + strconv.FormatInt(now.Add(time.Minute).UnixMilli(), 10) +
		`,"j":[{"s":6,"d":1,"h":"` + leaseSum("L6") + `"},{"s":7,"d":1,"h":"` + leaseSum("L7") + `"}]}`)
	if _, err := js.Publish(ctx, "$KV."+LeaseBucket("Q")+".b5", body); err != nil {
		t.Fatal(err)
	}

	// A dispatcher starting later: jobs 2 and 6 are delivered again,
	// held; 3 and 7 are not (acked by the one before, their answers maybe
	// lost).
	lt2 := newLeaseTable(log)
	started := *info
	started.State.FirstSeq = 5 // requests 1 to 4 have left the stream for good
	if err := lt2.open(ctx, js, nc, &started, 100); err != nil {
		t.Fatal(err)
	}
	if lt2.rev[2] != lt.rev[2] || lt2.rev[3] != lt.rev[3] {
		t.Fatalf("revisions read back %v, want those written %v", lt2.rev, lt.rev)
	}
	if !lt2.restoredLease(3, "L3") || lt2.restoredLease(3, "L2") {
		t.Fatal("job 3's restored lease not recognised, or another one is")
	}
	for _, c := range []struct {
		seq    uint64
		secret string
		key    string
	}{{2, "L2", "s2"}, {6, "L6", "b5"}} {
		rec, ok := lt2.takeRestored(c.seq)
		if !ok || rec.key != c.key || !sumMatches(rec.Sum, c.secret) {
			t.Fatalf("job %d restored as %+v, %v", c.seq, rec, ok)
		}
		lt2.adopt(c.seq, rec)
	}
	if _, ok := lt2.takeRestored(2); ok {
		t.Fatal("job 2 restored twice")
	}
	indexed := func(seq uint64) bool { return seq == 2 || seq == 6 }
	stale := lt2.caughtUp(indexed, time.Minute)
	slices.Sort(stale)
	if !slices.Equal(stale, []string{"s3"}) || lt2.heldRestored != 2 {
		t.Fatalf("caught up: stale %q, held %d; want [s3] (7 may still be in the stream), 2", stale, lt2.heldRestored)
	}
	if again := lt2.caughtUp(indexed, time.Minute); again != nil {
		t.Fatalf("caught up again: stale %q", again)
	}
	if lt2.restoredLease(3, "L3") || !lt2.finishedAck(3, "L3") || !lt2.finishedAck(7, "L7") || lt2.finishedAck(3, "L2") {
		t.Fatal("after catch-up, jobs 3 and 7 are not done under their own leases only")
	}
	// Job 7, past the stream's first sequence, delivered after the
	// catch-up (the consumer's replica lagged): held under its lease.
	if rec, ok := lt2.takeRestored(7); !ok || !sumMatches(rec.Sum, "L7") || lt2.finishedAck(7, "L7") {
		t.Fatalf("job 7 delivered late: restored %+v, %v; want held under L7, no longer done", rec, ok)
	}
	if _, ok := lt2.takeRestored(3); ok {
		t.Fatal("job 3, below the stream's first sequence, restored late")
	}
	// Job 6 leased again under its own record: the earlier version's
	// record goes once no job needs it.
	w = lt2.write([]*shipment{{jobs: []shipJob{{seq: 6, rev: lt2.rev[6], rec: lease(6, "L6b").rec}}}}).wait(ctx)
	if w[0].err != nil {
		t.Fatal(w[0].err)
	}
	lt2.leased(6, w[0].rev)
	if _, ok := lt2.refs["b5"]; ok {
		t.Fatal("the earlier version's record kept after its last job moved")
	}
	lt2.pruneFinished(now.Add(2 * time.Minute))
	if lt2.finishedAck(3, "L3") {
		t.Fatal("finished leases kept past their end")
	}
}

// waitFor polls cond until it holds, for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
