package sched

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// Scripts in the language of script_test.go, one per behaviour of
// docs/queues.md (Scheduling).
var scripts = []struct{ name, script string }{
	// Priority.
	{"priority/lower level first", `
		add 1 prio=5
		add 2 prio=0
		add 3 prio=9
		add 4 prio=2
		worker w
		pick w at=0s max=4 -> 2,4,1,3
	`},
	{"priority/FIFO within tenant and level", `
		add 1 tenant=a
		add 2 tenant=a
		add 3 tenant=a
		worker w
		pick w at=0s max=3 -> 1,2,3
	`},
	{"priority/a late index entry takes its place by sequence", `
		add 3 tenant=a
		add 1 tenant=a
		add 2 tenant=a
		worker w
		pick w at=0s max=3 -> 1,2,3
	`},
	{"priority/equal counters across tenants: sequence decides", `
		add 2 tenant=b
		add 1 tenant=a
		worker w
		pick w at=0s -> 1
	`},
	// Aging: priority p competes with critical after p × aging_step.
	{"aging/prio 3 waits at most 3 steps", `
		config aging=1s
		worker w
		add 1 prio=3 at=0s
		add 2 prio=0 at=2.9s
		pick w at=2.9s -> 2
		add 3 prio=0 at=3s
		pick w at=3s -> 1
		pick w at=3s -> 3
	`},
	{"aging/off: bulk waits behind critical however long", `
		worker w
		add 1 prio=9 at=0s
		add 2 prio=0 at=1000h
		pick w at=1000h -> 2
	`},
	{"aging/never above critical", `
		config aging=1s
		worker w
		add 1 prio=0 tenant=a at=100s
		add 2 prio=9 tenant=b at=0s
		pick w at=100s -> 1
		pick w at=100s -> 2
	`},
	{"aging/partial: one step raises one level", `
		config aging=1s
		worker w
		add 1 prio=5 at=0s
		add 2 prio=4 at=1s
		# at 1s job 1 competes at 4, like job 2, and is older
		pick w at=1s -> 1
	`},
	// VTC fair share.
	{"vtc/smaller counter first", `
		add 1 tenant=a tokens=100
		add 2 tenant=a tokens=100
		add 3 tenant=b tokens=10
		add 4 tenant=b tokens=10
		worker w
		pick w at=0s max=4 -> 1,3,4,2
		counter a -> 200
		counter b -> 20
	`},
	{"vtc/newly backlogged tenant lifted to the smallest backlogged counter", `
		add 1 tenant=a tokens=100
		add 2 tenant=a tokens=100
		add 3 tenant=b tokens=30
		add 4 tenant=b tokens=30
		add 5 tenant=b tokens=30
		worker w
		pick w at=0s -> 1
		pick w at=0s -> 3
		pick w at=0s -> 4
		counter a -> 100
		counter b -> 60
		add 6 tenant=c tokens=5
		counter c -> 60
		pick w at=0s -> 5
		pick w at=0s -> 6
	`},
	{"vtc/with no backlog the lift is the counter served last", `
		add 1 tenant=a tokens=50
		worker w
		pick w at=0s -> 1
		add 2 tenant=b tokens=1
		counter b -> 50
	`},
	{"vtc/the lift never lowers a counter", `
		add 1 tenant=a tokens=500
		add 2 tenant=b tokens=10
		add 3 tenant=b tokens=10
		worker w
		pick w at=0s -> 1
		add 4 tenant=a tokens=10
		counter a -> 500
		pick w at=0s max=3 -> 2,3,4
	`},
	{"vtc/output tokens cost twice at ack", `
		add 1 tenant=a tokens=10
		add 2 tenant=a tokens=10
		add 3 tenant=b tokens=10
		worker w
		pick w at=0s -> 1
		charge a 100
		counter a -> 210
		pick w at=0s -> 3
		pick w at=0s -> 2
	`},
	// Model versions bound by the registry (docs/models.md): a
	// requirement, not an affinity.
	{"version/only a worker announcing the version takes it, however long it waits", `
		config affinity=10s
		worker v1 models=llama versions=v1
		worker v2 models=llama versions=v2
		worker plain models=llama
		add 1 model=llama version=v1
		add 2 model=llama version=v2
		add 3 model=llama
		pick plain at=1h -> 3
		pick v2 at=1h max=3 -> 2
		pick v1 at=1h max=3 -> 1
	`},
	// Affinity.
	{"affinity/non-holder skips while a live holder exists", `
		config affinity=10s
		worker h models=llama
		worker x models=other
		add 1 model=llama
		pick x at=1s -> none
		pick h at=1s -> 1
	`},
	{"affinity/fallback after affinity_wait", `
		config affinity=10s
		worker h models=llama
		worker x
		add 1 model=llama
		pick x at=9.999s -> none
		pick x at=10s -> 1
	`},
	{"affinity/no live holder: any worker", `
		config affinity=10s
		worker h models=llama until=5s
		worker x
		add 1 model=llama
		pick x at=1s -> none
		expire-workers at=6s
		pick x at=6s -> 1
	`},
	{"affinity/a holder with work stays live past its expiry", `
		config affinity=1h
		worker h models=llama until=5s
		add 1 model=llama
		add 2 model=llama
		pick h at=1s -> 1
		expire-workers at=6s
		worker-held h -> 1
		worker x
		pick x at=7s -> none
		forget 1
		worker-held h -> 0
		expire-workers at=8s
		worker-held h -> none
		pick x at=8s -> 2
	`},
	{"affinity/adapter held: its holder only", `
		config affinity=10s
		worker h models=llama adapters=lora1
		worker x models=llama
		add 1 model=llama adapter=lora1
		pick x at=1s -> none
		pick h at=1s -> 1
	`},
	{"affinity/a skipped request does not block the next", `
		config affinity=10s
		worker h models=llama
		worker x models=other
		add 1 model=llama
		add 2 model=other
		pick x at=1s -> 2
		pick h at=1s -> 1
	`},
	{"affinity/negative wait: never falls back", `
		config affinity=-1s
		worker h models=llama
		worker x
		add 1 model=llama
		pick x at=1000h -> none
	`},
	// Token-budget batching.
	{"batch/max", `
		add 1
		add 2
		add 3
		add 4
		worker w
		pick w at=0s max=3 -> 1,2,3
		pick w at=0s max=3 -> 4
		pick w at=0s max=3 -> none
	`},
	{"batch/max_tokens", `
		add 1 tokens=40
		add 2 tokens=40
		add 3 tokens=40
		worker w
		pick w at=0s max=10 tokens=100 -> 1,2
	`},
	{"batch/stops when the budget is reached", `
		add 1 tokens=50
		add 2 tokens=50
		add 3 tokens=0
		worker w
		pick w at=0s max=10 tokens=100 -> 1,2
	`},
	{"batch/an oversize first request alone", `
		add 1 tokens=500
		add 2 tokens=10
		worker w
		pick w at=0s max=10 tokens=100 -> 1
		pick w at=0s max=10 tokens=100 -> 2
	`},
	{"batch/stops at the first that does not fit", `
		add 1 tokens=40
		add 2 tokens=80
		add 3 tokens=10
		worker w
		pick w at=0s max=10 tokens=100 -> 1
		pick w at=0s max=10 tokens=100 -> 2,3
	`},
	{"batch/byte bound", `
		add 1 size=400
		add 2 size=400
		add 3 size=400
		add 4 size=5000
		add 5 size=1
		worker w
		pick w at=0s max=10 bytes=1000 -> 1,2
		pick w at=0s max=10 bytes=1000 -> 3
		pick w at=0s max=10 bytes=1000 -> 4
		pick w at=0s max=10 bytes=1000 -> 5
	`},
	// Expiry, delay and leases.
	{"expiry/an expired request is never handed out; due says expired", `
		add 1 deadline=5s
		add 2
		worker w
		pick w at=5s -> 2
		due at=5s -> expired=1 undelayed=none lapsed=none
		state 1 -> queued
		forget 1
		count -> queued=0 held=1 delayed=0 len=1 tokens-queued=0 tokens-held=1 bytes=1
	`},
	{"expiry/a held request is not expired; given back it is", `
		config ack=1m
		add 1 deadline=5s
		worker w
		pick w at=1s -> 1
		due at=6s -> expired=none undelayed=none lapsed=none
		requeue 1
		due at=6s -> expired=1 undelayed=none lapsed=none
	`},
	{"expiry/a delayed request expires", `
		config ack=1m
		add 1 deadline=5s
		worker w
		pick w at=1s -> 1
		delay 1 until=10s
		due at=5s -> expired=1 undelayed=none lapsed=none
		forget 1
		count -> queued=0 held=0 delayed=0 len=0 tokens-queued=0 tokens-held=0 bytes=0
	`},
	{"lease/lapses after ack_wait", `
		config ack=30s
		add 1
		worker w
		pick w at=0s -> 1
		due at=30s -> expired=none undelayed=none lapsed=none
		due at=31s -> expired=none undelayed=none lapsed=1
		requeue 1
		state 1 -> queued
		worker-held w -> 0
	`},
	{"delay/comes back when it ends", `
		config ack=1m
		add 1 tokens=7
		worker w
		pick w at=0s -> 1
		delay 1 until=10s
		state 1 -> delayed
		count -> queued=0 held=0 delayed=1 len=1 tokens-queued=7 tokens-held=0 bytes=1
		pick w at=5s -> none
		due at=9s -> expired=none undelayed=none lapsed=none
		due at=10s -> expired=none undelayed=1 lapsed=none
		undelay 1
		pick w at=10s -> 1
	`},
	{"delay/none: queued at once", `
		add 1
		worker w
		pick w at=0s -> 1
		delay 1
		state 1 -> queued
		pick w at=0s -> 1
	`},
	// Requeue by sequence.
	{"requeue/back to its place by sequence", `
		add 1 tenant=a
		add 2 tenant=a
		add 3 tenant=a
		worker w
		pick w at=0s max=2 -> 1,2
		requeue 2
		requeue 1
		pick w at=0s max=3 -> 1,2,3
	`},
	{"requeue/ahead of the tenant's later arrivals", `
		add 1 tenant=a
		worker w
		pick w at=0s -> 1
		add 2 tenant=a
		add 3 tenant=a
		requeue 1
		pick w at=0s max=3 -> 1,2,3
	`},
	// Cancel and forget.
	{"forget/a queued request leaves no trace", `
		add 1 tokens=10 bytes=100 id=x
		add 2 tokens=5 bytes=50
		byid x -> 1
		forget 1
		state 1 -> gone
		byid x -> none
		count -> queued=1 held=0 delayed=0 len=1 tokens-queued=5 tokens-held=0 bytes=50
		worker w
		pick w at=0s max=5 -> 2
	`},
	{"forget/a held request frees its lease and its worker", `
		add 1 tokens=10
		worker w until=1s
		pick w at=0s -> 1
		worker-held w -> 1
		forget 1
		worker-held w -> 0
		count -> queued=0 held=0 delayed=0 len=0 tokens-queued=0 tokens-held=0 bytes=0
		expire-workers at=2s
		worker-held w -> none
	`},
	{"add/a sequence held already is refused", `
		add 1 -> true
		add 1 -> false
		count -> queued=1 held=0 delayed=0 len=1 tokens-queued=1 tokens-held=0 bytes=1
	`},
	// Subject filter.
	{"subject/the filter sees only what it matches", `
		add 1 subject=ai.infer.llama
		add 2 subject=ai.infer.mistral
		add 3 subject=ai.embed.x
		worker w
		pick w at=0s subject=ai.infer.mistral -> 2
		pick w at=0s max=5 subject=ai.infer.* -> 1
		pick w at=0s max=5 subject=ai.infer.* -> none
		pick w at=0s max=5 subject=ai.> -> 3
	`},
	{"subject/the filter passes over better requests", `
		add 1 prio=0 subject=a.b
		add 2 prio=9 subject=c.d
		worker w
		pick w at=0s subject=c.d -> 2
		pick w at=0s -> 1
	`},
}

func TestScripts(t *testing.T) {
	for _, tc := range scripts {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			(&runner{t: t}).run(tc.script)
		})
	}
}

func testJob(seq uint64, tenant string, prio int, tokens int64, arrived time.Time) *Job {
	return &Job{Seq: seq, ID: fmt.Sprint(seq), Tenant: tenant, Prio: prio, Tokens: tokens, Arrived: arrived}
}

// A bulk request waiting past its aging steps overtakes fresh critical
// work: the anti-starvation bound is prio × AgingStep.
func TestSchedulerAgingBound(t *testing.T) {
	s := New(Config{AgingStep: time.Second})
	t0 := time.Now()
	s.Add(testJob(1, "t", 8, 1, t0))
	w := s.TouchWorker("w", nil, t0.Add(time.Hour))
	for i := range 8 {
		now := t0.Add(time.Duration(i) * time.Second)
		s.Add(testJob(uint64(100+i), "t", 0, 1, now))
		got := s.Pick(w, now, 1, 0, 0)
		if got[0].Seq == 1 {
			t.Fatalf("bulk request dispatched after %d s, before its bound of 8 s", i)
		}
	}
	now := t0.Add(8 * time.Second)
	s.Add(testJob(200, "t", 0, 1, now))
	if got := s.Pick(w, now, 1, 0, 0); got[0].Seq != 1 {
		t.Fatalf("after 8 aging steps the bulk request still waits (got %d)", got[0].Seq)
	}
}

// The aging bound at every level, against a steady stream of critical
// requests from another tenant: priority p is handed out at p × step, not
// a step later.
func TestAgingBoundEveryLevel(t *testing.T) {
	const step = 100 * time.Millisecond
	for p := 1; p <= 9; p++ {
		t.Run(fmt.Sprint("prio", p), func(t *testing.T) {
			t.Parallel()
			s := New(Config{AgingStep: step})
			s.Add(testJob(1, "bulk", p, 1, t0))
			w := s.TouchWorker("w", nil, t0.Add(time.Hour))
			seq := uint64(1)
			bound := time.Duration(p) * step
			for now := t0; ; now = now.Add(step / 4) {
				seq++
				s.Add(testJob(seq, "critical", 0, 1, now))
				got := s.Pick(w, now, 1, 0, 0)
				if got[0].Seq != 1 {
					if now.Sub(t0) >= bound {
						t.Fatalf("prio %d still waits after %v (bound %v)", p, now.Sub(t0), bound)
					}
					continue
				}
				if now.Sub(t0) < bound {
					t.Fatalf("prio %d handed out after %v, before its bound %v", p, now.Sub(t0), bound)
				}
				return
			}
		})
	}
}

// Two backlogged tenants with different request sizes: the tokens each is
// served stay within the VTC bound of each other at every point.
func TestSchedulerVTCServiceGap(t *testing.T) {
	s := New(Config{})
	now := time.Now()
	seq := uint64(0)
	for range 400 {
		seq++
		s.Add(testJob(seq, "small", 4, 50, now))
		seq++
		s.Add(testJob(seq, "large", 4, 800, now))
	}
	w := s.TouchWorker("w", nil, now.Add(time.Hour))
	served := map[string]float64{}
	const maxReq = 800.0
	for range 300 {
		j := s.Pick(w, now, 1, 0, 0)[0]
		served[j.Tenant] += float64(j.Tokens)
		s.Charge(j.Tenant, 0)
		s.Forget(j)
		// VTC's fairness bound for two backlogged tenants: the service
		// difference stays within 2 × the largest request.
		if gap := math.Abs(served["small"] - served["large"]); gap > 2*maxReq {
			t.Fatalf("service gap %.0f tokens exceeds 2 × max request (served %v)", gap, served)
		}
	}
	// A tenant that joins late is lifted to the others' counters: it does
	// not get a burst of credit for the time it was idle.
	s.Add(testJob(seq+1, "late", 4, 50, now))
	if c := s.Counter("late"); c < math.Min(s.Counter("small"), s.Counter("large")) {
		t.Fatalf("late tenant counter %.0f below the backlogged minimum", c)
	}
}

// Tenants come and go with requests of random sizes: on every dispatch
// the counters of the backlogged tenants stay within 2 × the largest
// request of each other, and a tenant that becomes backlogged starts at
// the smallest backlogged counter or above.
func TestVTCGapRandom(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 1))
			s := New(Config{})
			w := s.TouchWorker("w", nil, t0.Add(time.Hour))
			tenants := []string{"a", "b", "c", "d"}
			const maxReq = 1000
			seq := uint64(0)
			for range 3000 {
				if rng.IntN(2) == 0 {
					tn := tenants[rng.IntN(len(tenants))]
					backlogged, min := false, math.Inf(1)
					s.EachBacklogged(func(t string, c float64) {
						backlogged = backlogged || t == tn
						min = math.Min(min, c)
					})
					seq++
					s.Add(testJob(seq, tn, 4, int64(1+rng.IntN(maxReq)), t0))
					if !backlogged && !math.IsInf(min, 1) && s.Counter(tn) < min {
						t.Fatalf("tenant %s joined at %v, below the backlogged minimum %v", tn, s.Counter(tn), min)
					}
					continue
				}
				js := s.Pick(w, t0, 1, 0, 0)
				for _, j := range js {
					s.Forget(j)
				}
				lo, hi := math.Inf(1), math.Inf(-1)
				s.EachBacklogged(func(_ string, c float64) {
					lo, hi = math.Min(lo, c), math.Max(hi, c)
				})
				if hi-lo > 2*maxReq {
					t.Fatalf("counter gap %v between backlogged tenants exceeds 2 × %d", hi-lo, maxReq)
				}
				checkInvariants(t, s)
			}
		})
	}
}

// A pick with a subject filter or an affinity skip looks at most
// ScanLimit requests into one tenant's list.
func TestScanLimit(t *testing.T) {
	s := New(Config{Match: natsMatch})
	w := s.TouchWorker("w", nil, t0.Add(time.Hour))
	for i := range ScanLimit {
		s.Add(&Job{Seq: uint64(i + 1), Tenant: "a", Subject: "x", Arrived: t0})
	}
	s.Add(&Job{Seq: ScanLimit + 1, Tenant: "a", Subject: "y", Arrived: t0})
	if got := s.PickMatching(w, t0, 1, 0, 0, "y"); len(got) != 0 {
		t.Fatalf("found request %d past the scan limit", got[0].Seq)
	}
	s.Add(&Job{Seq: ScanLimit + 2, Tenant: "b", Subject: "y", Arrived: t0})
	if got := s.PickMatching(w, t0, 1, 0, 0, "y"); len(got) != 1 || got[0].Seq != ScanLimit+2 {
		t.Fatalf("another tenant's matching request not found: %v", got)
	}
	s.Forget(s.BySeq(1))
	if got := s.PickMatching(w, t0, 1, 0, 0, "y"); len(got) != 1 || got[0].Seq != ScanLimit+1 {
		t.Fatalf("request within the scan limit not found: %v", got)
	}
}

// Without a matcher a filter is an exact subject.
func TestNoMatcherExact(t *testing.T) {
	s := New(Config{})
	w := s.TouchWorker("w", nil, t0.Add(time.Hour))
	s.Add(&Job{Seq: 1, Subject: "a.b", Arrived: t0})
	if got := s.PickMatching(w, t0, 1, 0, 0, "a.*"); len(got) != 0 {
		t.Fatal("a wildcard matched without a matcher")
	}
	if got := s.PickMatching(w, t0, 1, 0, 0, "a.b"); len(got) != 1 {
		t.Fatal("the exact subject did not match")
	}
}
