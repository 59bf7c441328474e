package broker

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/semaq/semaq/semaq"
)

func FuzzFetchRequest(f *testing.F) {
	for _, s := range []string{
		`{"worker":"w1","max":4,"max_tokens":4096,"wait":1000000000,"labels":{"model":"llama3","adapter":"a,b"}}`,
		`{"worker":"w"}`, `{}`, `{"worker":"x y"}`, `{"worker":"w","max":-1}`, `{"worker":"w","wait":-5}`,
		`{"worker":"w","max":99999}`, `{"worker":"w"} trailing`, `null`, `[]`, `{"worker":"w","labels":{"":"v"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := parseFetch(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		// Whatever parses is within the documented bounds.
		if req.Max < 1 || req.Max > semaq.MaxFetchBatch || req.MaxTokens < 0 || req.Wait < 0 || req.Wait > semaq.MaxFetchWait {
			t.Fatalf("accepted out-of-bounds request %+v", req)
		}
		if semaq.CheckConsumerName(req.Worker) != nil {
			t.Fatalf("accepted bad worker %q", req.Worker)
		}
	})
}

func testJob(seq uint64, tenant string, prio int, tokens int64, arrived time.Time) *qjob {
	return &qjob{seq: seq, id: fmt.Sprint(seq), tenant: tenant, prio: prio, tokens: tokens, arrived: arrived, deadlineIdx: -1}
}

// A bulk request waiting past its aging steps overtakes fresh critical
// work: the anti-starvation bound is prio × AgingStep.
func TestSchedulerAgingBound(t *testing.T) {
	cfg := semaq.QueueConfig{Name: "Q", AgingStep: time.Second}.WithDefaults()
	s := newScheduler(cfg)
	t0 := time.Now()
	s.add(testJob(1, "t", 8, 1, t0))
	w := s.touchWorker("w", nil, t0.Add(time.Hour))
	for i := range 8 {
		now := t0.Add(time.Duration(i) * time.Second)
		s.add(testJob(uint64(100+i), "t", 0, 1, now))
		got := s.pick(w, now, 1, 0, 0)
		if got[0].seq == 1 {
			t.Fatalf("bulk request dispatched after %d s, before its bound of 8 s", i)
		}
	}
	now := t0.Add(8 * time.Second)
	s.add(testJob(200, "t", 0, 1, now))
	if got := s.pick(w, now, 1, 0, 0); got[0].seq != 1 {
		t.Fatalf("after 8 aging steps the bulk request still waits (got %d)", got[0].seq)
	}
}

// Two backlogged tenants with different request sizes: the tokens each is
// served stay within the VTC bound of each other at every point.
func TestSchedulerVTCServiceGap(t *testing.T) {
	cfg := semaq.QueueConfig{Name: "Q"}.WithDefaults()
	s := newScheduler(cfg)
	now := time.Now()
	seq := uint64(0)
	for range 400 {
		seq++
		s.add(testJob(seq, "small", 4, 50, now))
		seq++
		s.add(testJob(seq, "large", 4, 800, now))
	}
	w := s.touchWorker("w", nil, now.Add(time.Hour))
	served := map[string]float64{}
	const maxReq = 800.0
	for range 300 {
		j := s.pick(w, now, 1, 0, 0)[0]
		served[j.tenant] += float64(j.tokens)
		s.charge(j.tenant, 0)
		s.forget(j)
		// VTC's fairness bound for two backlogged tenants: the service
		// difference stays within 2 × the largest request.
		if gap := math.Abs(served["small"] - served["large"]); gap > 2*maxReq {
			t.Fatalf("service gap %.0f tokens exceeds 2 × max request (served %v)", gap, served)
		}
	}
	// A tenant that joins late is lifted to the others' counters: it does
	// not get a burst of credit for the time it was idle.
	s.add(testJob(seq+1, "late", 4, 50, now))
	if c := s.counter["late"]; c < math.Min(s.counter["small"], s.counter["large"]) {
		t.Fatalf("late tenant counter %.0f below the backlogged minimum", c)
	}
}

func TestAdaptiveThreshold(t *testing.T) {
	s := newScheduler(semaq.QueueConfig{Name: "Q"}.WithDefaults())
	var st queueStats
	if thr := st.adaptiveThreshold(10*time.Second, s); thr != 0 {
		t.Fatalf("no service seen: threshold %d, want 0 (off)", thr)
	}
	st.tokenRate = 1000
	calm := st.adaptiveThreshold(10*time.Second, s)
	if calm != 10000 {
		t.Fatalf("steady service: threshold %d, want rate × wait = 10000", calm)
	}
	// Varied prompts and service times tighten it.
	st.promptCV, st.svcSeen, st.svcMean, st.svcVar = 1.5, true, 1, 1
	if thr := st.adaptiveThreshold(10*time.Second, s); thr >= calm || thr != 4000 {
		t.Fatalf("with CVs 1.5 × 1: threshold %d, want 10000/(1+1.5) = 4000", thr)
	}
	if thr := st.adaptiveThreshold(0, s); thr != 0 {
		t.Fatalf("max wait unset: threshold %d", thr)
	}
}
