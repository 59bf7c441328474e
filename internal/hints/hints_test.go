package hints_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/hints"
	"github.com/semaq/semaq/semaq"
)

func TestParse(t *testing.T) {
	h := map[string][]string{
		"ai-class": {"hbm2-inference"}, "Ai-Require": {"hardware.gpu.memory=hbm2, zone=a"},
		"AI-Prefer": {"gpu=a100"}, "ai-latency-sla": {"200ms"}, "AI-WORKLOAD": {"rag"},
	}
	dh, err := hints.Parse(h, true)
	if err != nil {
		t.Fatal(err)
	}
	if dh.Class != "hbm2-inference" || dh.Require["hardware.gpu.memory"] != "hbm2" || dh.Require["zone"] != "a" ||
		dh.Prefer["gpu"] != "a100" || dh.LatencySLA != 200*time.Millisecond || dh.Workload != "rag" || dh.PriorityGiven {
		t.Fatalf("hints = %+v", dh)
	}
	for _, k := range []string{semaq.HdrClass, semaq.HdrRequire, semaq.HdrPrefer, semaq.HdrLatencySLA, semaq.HdrWorkload} {
		if len(h[k]) != 1 {
			t.Errorf("%s not rewritten to its canonical spelling: %v", k, h)
		}
	}
	for _, bad := range []map[string][]string{
		{"AI-Latency-SLA": {"fast"}},
		{"AI-Latency-SLA": {"0"}},
		{"AI-Latency-SLA": {"2h"}},
		{"AI-Require": {"gpu"}},
		{"AI-Require": {"gpu=a100,gpu=h100"}},
		{"AI-Prefer": {"g pu=x"}},
		{"AI-Class": {"a.b"}},
		{"AI-Workload": {"r a g"}},
		{"AI-Class": {"a"}, "ai-class": {"b"}},
		{"AI-Require": {strings.Repeat("k=v,", 20) + "z=1"}},
	} {
		if _, err := hints.Parse(bad, true); !errors.Is(err, semaq.ErrBadEnvelope) {
			t.Errorf("%v: err = %v, want a bad envelope", bad, err)
		}
	}
	dh, _ = hints.Parse(map[string][]string{"ai-priority": {"3"}, "AI-Latency-SLA": {"150"}}, false)
	if !dh.PriorityGiven || dh.LatencySLA != 150*time.Millisecond {
		t.Errorf("hints = %+v", dh)
	}
}

func TestWorkloadPriority(t *testing.T) {
	w := hints.DefaultWorkloads()
	for _, c := range []struct {
		workload string
		sla      time.Duration
		want     semaq.Priority
	}{
		{"rl", 10 * time.Millisecond, 0},       // 9000
		{"rl", 50 * time.Millisecond, 1},       // 1800
		{"agent", 100 * time.Millisecond, 2},   // 700
		{"rag", 200 * time.Millisecond, 3},     // 250
		{"rag", 500 * time.Millisecond, 4},     // 100
		{"", time.Second, 5},                   // 50
		{"agent", 2 * time.Second, 6},          // 35
		{"finetune", 2 * time.Second, 7},       // 15
		{"finetune", 5 * time.Second, 8},       // 6
		{"finetune", time.Minute, 9},           // 0.5
		{"rl", time.Millisecond, 0},            // max(1, 10) ms
		{"finetune", 10 * time.Millisecond, 0}, // 3000
	} {
		got, score, err := w.Priority(c.workload, c.sla)
		if err != nil || got != c.want {
			t.Errorf("%s %s: priority %v (score %.1f), err %v; want %v", c.workload, c.sla, got, score, err, c.want)
		}
	}
	if _, _, err := w.Priority("batch", time.Second); err == nil || !strings.Contains(err.Error(), "agent, default, finetune, rag, rl") {
		t.Errorf("unknown workload: err = %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("hbm2", "gpu=a100,hardware.gpu.memory=hbm2", "zone=a", "200ms", "rag")
	f.Add("", "=", ",,", "99999999999", "")
	f.Add("x", "a=b=c", "k=\x00", "-1s", "rl")
	f.Fuzz(func(t *testing.T, class, require, prefer, sla, workload string) {
		h := map[string][]string{}
		for k, v := range map[string]string{"ai-class": class, "ai-require": require, "ai-prefer": prefer, "ai-latency-sla": sla, "ai-workload": workload} {
			if v != "" {
				h[k] = []string{v}
			}
		}
		dh, err := hints.Parse(h, true)
		if err != nil {
			if !errors.Is(err, semaq.ErrBadEnvelope) {
				t.Fatalf("error %v is not a bad envelope", err)
			}
			return
		}
		if dh.LatencySLA != 0 && (dh.LatencySLA < hints.MinLatencySLA || dh.LatencySLA > hints.MaxLatencySLA) {
			t.Fatalf("SLA %s accepted", dh.LatencySLA)
		}
		for _, set := range []map[string]string{dh.Require, dh.Prefer} {
			if len(set) > semaq.MaxLabels {
				t.Fatalf("%d labels accepted", len(set))
			}
			if set != nil {
				again, err := semaq.ParseLabels(semaq.FormatLabels(set))
				if err != nil || len(again) != len(set) {
					t.Fatalf("labels %v do not read back: %v", set, err)
				}
			}
		}
		if dh.LatencySLA != 0 {
			p, _, err := hints.DefaultWorkloads().Priority("", dh.LatencySLA)
			if err != nil || p > semaq.PriorityLowest {
				t.Fatalf("priority %v, %v", p, err)
			}
		}
	})
}

// The ingress reads the hints of every message: most carry none.
func BenchmarkParse(b *testing.B) {
	h := map[string][]string{"AI-Model": {"llama3"}, "AI-Tenant": {"acme"}, "AI-Priority": {"2"},
		"Nats-Msg-Id": {"req-1"}, "AI-Received": {"2026-01-01T00:00:00Z"}, "traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := hints.Parse(h, true); err != nil {
			b.Fatal(err)
		}
	}
}
