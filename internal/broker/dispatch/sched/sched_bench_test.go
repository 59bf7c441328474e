package sched

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkPick is one dispatch in steady state: a queue of 10,000
// requests from 16 tenants at 3 priorities and 8 models; each iteration
// picks one, forgets it (acked) and adds a new one.
func BenchmarkPick(b *testing.B) {
	s := New(Config{AgingStep: time.Second, AffinityWait: time.Second, AckWait: time.Minute})
	w := s.TouchWorker("w", map[string]string{"model": "m3"}, t0.Add(time.Hour))
	seq := uint64(0)
	add := func() {
		seq++
		s.Add(&Job{Seq: seq, Tenant: fmt.Sprint("t", seq%16), Prio: int(seq % 3 * 4), Tokens: int64(seq % 1000),
			Model: fmt.Sprint("m", seq%8), Arrived: t0})
	}
	for range 10000 {
		add()
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, j := range s.Pick(w, t0, 1, 0, 0) {
			s.Forget(j)
		}
		add()
	}
}
