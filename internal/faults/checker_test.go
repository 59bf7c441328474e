package faults

import (
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/blockcheck"
)

func entries(ids ...string) []Entry {
	out := make([]Entry, len(ids))
	for i, id := range ids {
		out[i] = Entry{Seq: uint64(i + 1), ID: id}
	}
	return out
}

func TestCheck(t *testing.T) {
	t0 := time.Unix(1000, 0)
	good := func() History {
		return History{
			Acked:     []string{"0", "1", "2"},
			Replicas:  map[string][]Entry{"n1": entries("0", "1", "2"), "n2": entries("0", "1", "2"), "n3": entries("0", "1", "2")},
			Delivered: map[string]int{"0": 1, "1": 2, "2": 1},
			Jobs:      []string{"j0"},
			JobDeliveries: []JobDelivery{
				{ID: "j0", Worker: "w1", Asked: t0, Got: t0.Add(time.Millisecond)},
				{ID: "j0", Worker: "w2", Asked: t0.Add(11 * time.Second), Got: t0.Add(11 * time.Second), Acked: true, Settled: t0.Add(12 * time.Second)},
			},
			AckWait: 10 * time.Second,
			Leaders: map[string][]string{"meta": {"n2"}, "queue JOBS": {"n1"}},
		}
	}
	for _, tc := range []struct {
		name  string
		spoil func(*History)
		says  string // "" for no problem
	}{
		{"every promise kept", func(*History) {}, ""},
		{"an unacknowledged publish stored is no problem", func(h *History) {
			for n := range h.Replicas {
				h.Replicas[n] = entries("0", "1", "2", "x")
			}
		}, ""},
		{"lost on a replica", func(h *History) { h.Replicas["n3"] = entries("0", "2") }, "n3: 1 acknowledged publishes lost: [1]"},
		{"stored twice", func(h *History) {
			for n := range h.Replicas {
				h.Replicas[n] = entries("0", "1", "1", "2")
			}
		}, "stored more than once: [1×2]"},
		{"replicas differ", func(h *History) { h.Replicas["n2"] = entries("0", "2", "1") }, `n1 and n2 hold different histories: entry 1 is seq 2 "1" on one, seq 2 "2" on the other`},
		{"a replica behind", func(h *History) { h.Replicas["n3"] = entries("0", "1", "2", "x") }, "n1 and n3 hold different histories: the first is a prefix of the second"},
		{"sequence out of order", func(h *History) { h.Replicas["n1"] = []Entry{{2, "0"}, {1, "1"}, {3, "2"}} }, "n1: sequence 1 after 2"},
		{"consumer skipped", func(h *History) { delete(h.Delivered, "2") }, "consumer: 1 acknowledged publishes never delivered: [2]"},
		{"job lost", func(h *History) { h.JobDeliveries = h.JobDeliveries[:1] }, "queue: 1 acknowledged jobs never done: [j0 [w1 attempt 0"},
		{"a job done by an ack whose answer was lost", func(h *History) {
			h.JobDeliveries[1].Acked, h.JobDeliveries[1].AckUnanswered, h.JobDeliveries[1].Err = false, true, "lease lost"
		}, ""},
		{"a job left in the queue after an unanswered ack", func(h *History) {
			h.JobDeliveries[1].Acked, h.JobDeliveries[1].AckUnanswered, h.QueueLeft = false, true, 1
		}, "queue: 1 acknowledged jobs never done: [j0"},
		{"job leased twice", func(h *History) {
			h.JobDeliveries[1].Asked, h.JobDeliveries[1].Got = t0.Add(5*time.Second), t0.Add(5*time.Second)
		}, "queue: job j0 handed to w2 5s into the lease w1 got"},
		{"a damaged record kept", func(h *History) {
			h.Damage = map[string][]blockcheck.Damage{"n2": {{File: "1.blk", Offset: 40, Reason: "invalid checksum"}}}
		}, "n2 keeps a damaged record after healing: 1.blk at byte 40: invalid checksum"},
		{"split brain", func(h *History) { h.Leaders["meta"] = []string{"n2", "n3"} }, "meta: 2 nodes lead it: [n2 n3]"},
		{"no leader", func(h *History) { h.Leaders["queue JOBS"] = nil }, "queue JOBS: 0 nodes lead it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := good()
			tc.spoil(&h)
			res := Check(h)
			if tc.says == "" {
				if !res.OK() {
					t.Fatalf("problems: %v", res.Problems)
				}
				return
			}
			if !strings.Contains(strings.Join(res.Problems, "\n"), tc.says) {
				t.Fatalf("problems %q, want one saying %q", res.Problems, tc.says)
			}
		})
	}
}

func TestCheckFigures(t *testing.T) {
	t0 := time.Unix(1000, 0)
	res := Check(History{
		Acked:     []string{"0", "1"},
		Replicas:  map[string][]Entry{"n1": entries("0", "1", "u")},
		Delivered: map[string]int{"0": 1, "1": 3},
		Jobs:      []string{"j"},
		JobDeliveries: []JobDelivery{
			{ID: "j", Worker: "w1", Asked: t0, Got: t0, Acked: true, Settled: t0.Add(time.Second)},
			{ID: "j", Worker: "w2", Asked: t0.Add(2 * time.Second), Got: t0.Add(2 * time.Second), Acked: true, Settled: t0.Add(3 * time.Second)},
		},
		AckWait: time.Minute,
	})
	if !res.OK() || res.Acked != 2 || res.Stored["n1"] != 3 || res.UnackedStored != 1 || res.Delivered != 4 ||
		res.Redelivered != 2 || res.JobsAcked != 1 || res.JobsRedeliveredAfterAck != 1 {
		t.Fatalf("figures %+v", res)
	}
	if s := res.String(); !strings.Contains(s, "2 acknowledged publishes; stored: n1 3") || !strings.Contains(s, "no problem") {
		t.Fatalf("report %q", s)
	}
}
