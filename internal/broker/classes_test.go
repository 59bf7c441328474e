package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// Required labels place a request on a worker announcing them; preferred
// labels on one if one is live; a class adds its labels to its requests.
func TestClassPlacement(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.AddClass(ctx, semaq.QueueClass{Name: "hbm2-inference", Require: map[string]string{"hardware.gpu.memory": "hbm2"}}, false); err != nil {
		t.Fatal(err)
	}
	addQueue(t, c, semaq.QueueConfig{Name: "Q", AffinityWait: time.Hour})
	pubReq(t, c, "needs-hbm2", client.WithHeader(semaq.HdrRequire, "hardware.gpu.memory=hbm2"))
	pubReq(t, c, "in-class", client.WithHeader(semaq.HdrClass, "hbm2-inference"))
	pubReq(t, c, "likes-a100", client.WithHeader("ai-prefer", "gpu=a100"))
	pubReq(t, c, "anything")
	waitQueued(t, c, "Q", 4)

	plain := client.FetchLabels(map[string]string{"gpu": "t4"})
	a100 := client.FetchLabels(map[string]string{"gpu": "a100"})
	hbm := client.FetchLabels(map[string]string{"gpu": "h100", "hardware.gpu.memory": "hbm2"})
	// The a100 worker must have fetched once to be known live.
	if got := ids(fetch(t, c, "Q", client.FetchWorker("a100"), a100, client.FetchMax(1))); fmt.Sprint(got) != "[likes-a100]" {
		t.Fatalf("a100 worker got %v, want the request preferring it", got)
	}
	pubReq(t, c, "likes-a100-2", client.WithHeader(semaq.HdrPrefer, "gpu=a100"))
	waitQueued(t, c, "Q", 4)
	if got := ids(fetch(t, c, "Q", client.FetchWorker("t4"), plain, client.FetchMax(10))); fmt.Sprint(got) != "[anything]" {
		t.Fatalf("a t4 worker got %v; want only the request with no requirement (the a100 one waits for its live a100)", got)
	}
	got := ids(fetch(t, c, "Q", client.FetchWorker("hbm"), hbm, client.FetchMax(10)))
	if fmt.Sprint(got) != "[needs-hbm2 in-class]" {
		t.Fatalf("an hbm2 worker got %v, want the two needing hbm2", got)
	}
	qi, err := c.QueueInfo(ctx, "Q")
	if err != nil {
		t.Fatal(err)
	}
	if len(qi.Status.Classes) != 1 || qi.Status.Classes[0].Class != "hbm2-inference" || qi.Status.Classes[0].Held != 1 {
		t.Fatalf("queue status classes %+v, want hbm2-inference with 1 held", qi.Status.Classes)
	}
}

// A latency SLA orders a backlog when no priority is given: the tighter
// SLA (and the more urgent workload) first; an explicit AI-Priority wins.
func TestSLAPriorityOrder(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q", AgingStep: -1})
	sla := func(workload, d string) client.PublishOption {
		return client.WithHeaders(map[string][]string{semaq.HdrWorkload: {workload}, "ai-latency-sla": {d}})
	}
	pubReq(t, c, "finetune-10s", sla("finetune", "10s")) // 3: 9
	pubReq(t, c, "rag-2s", sla("rag", "2s"))             // 25: 6
	pubReq(t, c, "no-sla")                               // normal: 4
	pubReq(t, c, "rag-200ms", sla("rag", "200ms"))       // 250: 3
	pubReq(t, c, "rl-20ms", sla("rl", "20"))             // 4500: 0
	pubReq(t, c, "agent-100ms", sla("agent", "100ms"))   // 700: 2
	pubReq(t, c, "rl-20ms-but-bulk", sla("rl", "20ms"), client.WithPriority(semaq.PriorityBulk))
	waitQueued(t, c, "Q", 7)
	got := ids(fetch(t, c, "Q", client.FetchMax(7)))
	want := "[rl-20ms agent-100ms rag-200ms no-sla rag-2s rl-20ms-but-bulk finetune-10s]"
	if fmt.Sprint(got) != want {
		t.Fatalf("served %v\nwant   %s", got, want)
	}
}

// Bad hints are refused at the ingress, naming the header and the value.
func TestClassHintsRefused(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, bad := range []struct {
		h    map[string][]string
		want string
		is   error
	}{
		{map[string][]string{"AI-Latency-SLA": {"soon"}}, `"soon" is not a duration`, semaq.ErrEnvelope},
		{map[string][]string{"AI-Latency-SLA": {"0ms"}}, "outside 1ms to 1h0m0s", semaq.ErrEnvelope},
		{map[string][]string{"AI-Workload": {"batch"}, "AI-Latency-SLA": {"1s"}}, `workload "batch" is not one of agent, default, finetune, rag, rl`, semaq.ErrEnvelope},
		{map[string][]string{"AI-Workload": {"batch"}}, `workload "batch"`, semaq.ErrEnvelope},
		{map[string][]string{"AI-Require": {"gpu"}}, `"gpu" is not key=value`, semaq.ErrEnvelope},
		{map[string][]string{"AI-Class": {"nope"}}, "class nope is not defined", semaq.ErrClassNotFound},
	} {
		_, err := c.Publish(ctx, "infer.x", []byte(`{}`), client.WithHeaders(bad.h))
		if !errors.Is(err, bad.is) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v; want %v naming %q", bad.h, err, bad.is, bad.want)
		}
	}
	qi, err := c.QueueInfo(ctx, "Q")
	if err != nil || qi.Status.Queued != 0 {
		t.Fatalf("queue after refusals: %+v, %v; want nothing stored", qi, err)
	}
}

// On one node a capped class hands out no more than its cap, shows what it
// holds in the queue's status, the class list and the metrics, and serves
// the rest as leases end.
func TestClassCapOneNode(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.AddClass(ctx, semaq.QueueClass{Name: "small", MaxConcurrency: 2}, false); err != nil {
		t.Fatal(err)
	}
	addQueue(t, c, semaq.QueueConfig{Name: "Q", Class: "small"})
	for i := range 3 {
		pubReq(t, c, fmt.Sprint("r", i))
	}
	waitQueued(t, c, "Q", 3)
	held := fetch(t, c, "Q", client.FetchMax(3))
	if len(held) != 2 {
		t.Fatalf("fetched %v; the class's cap is 2", ids(held))
	}
	if more := fetch(t, c, "Q", client.FetchWorker("other"), client.FetchMax(3)); len(more) != 0 {
		t.Fatalf("another worker fetched %v with the class's slots all held", ids(more))
	}
	qi, err := c.QueueInfo(ctx, "Q")
	if err != nil {
		t.Fatal(err)
	}
	if want := (semaq.ClassStat{Class: "small", Queued: 1, Held: 2, ClusterHeld: 2, Max: 2}); len(qi.Status.Classes) != 1 || qi.Status.Classes[0] != want {
		t.Fatalf("status classes %+v, want %+v", qi.Status.Classes, want)
	}
	if got := gaugeOf(t, s, "semaq_class_leases", "class", "small"); got != 2 {
		t.Fatalf("semaq_class_leases{class=small} = %v, want 2", got)
	}
	if got := gaugeOf(t, s, "semaq_class_max_concurrency", "class", "small"); got != 2 {
		t.Fatalf("semaq_class_max_concurrency{class=small} = %v, want 2", got)
	}
	ackAll(t, held[:1])
	if got := ids(fetch(t, c, "Q", client.FetchWorker("other"), client.FetchMax(3), client.FetchWait(5*time.Second))); fmt.Sprint(got) != "[r2]" {
		t.Fatalf("after an ack another worker fetched %v, want [r2]", got)
	}
	list, err := c.Classes(ctx)
	if err != nil || len(list) != 1 || list[0].Held != 2 {
		t.Fatalf("classes %+v (%v), want small holding 2", list, err)
	}
}

// gaugeOf reads the gauge name{label=value} of s's metrics (-1 when absent).
func gaugeOf(t *testing.T, s *broker.Server, name, label, value string) float64 {
	t.Helper()
	mfs, err := s.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}
