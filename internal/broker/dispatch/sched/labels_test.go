package sched

import (
	"testing"
	"time"
)

func TestLabelPlacement(t *testing.T) {
	t0 := time.Unix(1000, 0)
	hbm := map[string]string{"hardware.gpu.memory": "hbm2"}
	a100 := map[string]string{"gpu": "a100"}
	type want struct {
		worker string
		at     time.Duration
		seqs   []uint64
	}
	for _, c := range []struct {
		name    string
		jobs    []*Job
		workers map[string]map[string]string
		picks   []want
	}{
		{"require: only a worker with every label",
			[]*Job{{Seq: 1, Require: hbm}, {Seq: 2}},
			map[string]map[string]string{"plain": nil, "hbm": {"hardware.gpu.memory": "hbm2", "gpu": "h100"}},
			[]want{{"plain", 0, []uint64{2}}, {"plain", time.Hour, nil}, {"hbm", 0, []uint64{1}}}},
		{"require: a different value is no match",
			[]*Job{{Seq: 1, Require: hbm}},
			map[string]map[string]string{"gddr": {"hardware.gpu.memory": "gddr6"}},
			[]want{{"gddr", time.Hour, nil}}},
		{"prefer: a worker without waits while one with is live",
			[]*Job{{Seq: 1, Prefer: a100}, {Seq: 2}},
			map[string]map[string]string{"h100": {"gpu": "h100"}, "a100": {"gpu": "a100"}},
			[]want{{"h100", 0, []uint64{2}}, {"a100", 0, []uint64{1}}}},
		{"prefer: falls back after the affinity wait",
			[]*Job{{Seq: 1, Prefer: a100}},
			map[string]map[string]string{"h100": {"gpu": "h100"}, "a100": {"gpu": "a100"}},
			[]want{{"h100", 0, nil}, {"h100", 2 * time.Second, []uint64{1}}}},
		{"prefer: nobody has it, anyone takes it",
			[]*Job{{Seq: 1, Prefer: a100}},
			map[string]map[string]string{"h100": {"gpu": "h100"}},
			[]want{{"h100", 0, []uint64{1}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := New(Config{AffinityWait: time.Second, AckWait: time.Hour})
			for _, j := range c.jobs {
				j.Arrived = t0
				s.Add(j)
			}
			for id, l := range c.workers {
				s.TouchWorker(id, l, t0.Add(24*time.Hour))
			}
			for _, p := range c.picks {
				got := s.Pick(s.Worker(p.worker), t0.Add(p.at), 10, 0, 0)
				var seqs []uint64
				for _, j := range got {
					seqs = append(seqs, j.Seq)
				}
				if len(seqs) != len(p.seqs) || len(seqs) > 0 && seqs[0] != p.seqs[0] {
					t.Fatalf("%s at +%s picked %v, want %v", p.worker, p.at, seqs, p.seqs)
				}
			}
		})
	}
}

func TestCapHook(t *testing.T) {
	held := 0
	s := New(Config{AckWait: time.Hour,
		Capped: func(j *Job) bool { return held >= 2 },
		Picked: func(j *Job) {
			if j.Class != "" {
				held++
			}
		}})
	for i := uint64(1); i <= 4; i++ {
		s.Add(&Job{Seq: i, Class: "c"})
	}
	s.Add(&Job{Seq: 5})
	w := s.TouchWorker("w", nil, time.Unix(1e9, 0))
	got := s.Pick(w, time.Unix(0, 0), 10, 0, 0)
	if len(got) != 3 || got[2].Seq != 5 {
		t.Fatalf("picked %d jobs (%v); want 2 of the class and the one outside it", len(got), got)
	}
}
