package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/semaq"
)

func batchMsg(subject, data string, hdr ...string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = []byte(data)
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Add(hdr[i], hdr[i+1])
	}
	return m
}

func TestPublishBatchFast(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "BF", Subjects: []string{"bf.>"}}); err != nil {
		t.Fatal(err)
	}
	msgs := []*nats.Msg{
		batchMsg("bf.a", "one"),
		batchMsg("nowhere.a", "two"),
		batchMsg("bf.b", "three", semaq.HdrPriority, "urgent-ish"),
		batchMsg("bf.c", "four", semaq.HdrMsgID, "m-4"),
		batchMsg("bf.c", "four again", semaq.HdrMsgID, "m-4"),
	}
	ack, err := c.PublishBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if ack.Stored != 3 || ack.Refused != 2 || len(ack.Results) != 5 {
		t.Fatalf("ack %+v", ack)
	}
	r := ack.Results
	if r[0].Stream != "BF" || r[0].Sequence != 1 || r[0].Error != nil {
		t.Fatalf("result 0 %+v", r[0])
	}
	if !errors.Is(r[1].Error, semaq.ErrNoStream) {
		t.Fatalf("result 1 %+v", r[1])
	}
	if !errors.Is(r[2].Error, semaq.ErrEnvelope) {
		t.Fatalf("result 2 %+v", r[2])
	}
	if r[3].Sequence != 2 || r[4].Sequence != 2 || !r[4].Duplicate {
		t.Fatalf("results 3, 4: %+v %+v", r[3], r[4])
	}
	var me *semaq.BatchMsgError
	if err := ack.Err(); !errors.As(err, &me) || me.Index != 1 || me.Refused != 2 {
		t.Fatalf("Err() = %v", err)
	}
}

func TestPublishBatchAtomic(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "BA", Subjects: []string{"ba.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "BB", Subjects: []string{"bb.>"}}); err != nil {
		t.Fatal(err)
	}
	var msgs []*nats.Msg
	for i := range 10 {
		msgs = append(msgs, batchMsg("ba.x", fmt.Sprint(i)))
	}
	ack, err := c.PublishBatch(ctx, msgs, client.Atomic())
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range ack.Results {
		if r.Stream != "BA" || r.Sequence != uint64(i+1) {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	bad := append(msgs[:3:3], batchMsg("ba.y", "bad", semaq.HdrPriority, "nope"), batchMsg("ba.z", "after"))
	ack, err = c.PublishBatch(ctx, bad, client.Atomic())
	if !errors.Is(err, semaq.ErrBatchRefused) || ack == nil || ack.Index == nil || *ack.Index != 3 || ack.Stored != 0 {
		t.Fatalf("atomic with a bad message: %v %+v", err, ack)
	}
	two := []*nats.Msg{batchMsg("ba.x", "a"), batchMsg("bb.x", "b")}
	if _, err := c.PublishBatch(ctx, two, client.Atomic()); !errors.Is(err, semaq.ErrBatchRefused) {
		t.Fatalf("atomic over two streams: %v", err)
	}
	info, err := c.StreamInfo(ctx, "BA")
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Messages != 10 {
		t.Fatalf("BA holds %d messages, want 10", info.State.Messages)
	}
}

func TestStockClientAtomicBatch(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "SB", Subjects: []string{"sb.>"}}); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*nats.Msg
	for i := range 20 {
		msgs = append(msgs, batchMsg("sb.x", fmt.Sprint(i), semaq.HdrModel, "m1"))
	}
	ack, err := jetstreamext.PublishMsgBatch(ctx, js, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if ack.Stream != "SB" || ack.Sequence != 20 || ack.BatchSize != 20 {
		t.Fatalf("batch ack %+v", ack)
	}
	// One bad message refuses the batch: nothing of it is stored.
	bad := append(msgs[:5:5], batchMsg("sb.y", "bad", semaq.HdrPriority, "nope"), batchMsg("sb.z", "after"))
	if _, err := jetstreamext.PublishMsgBatch(ctx, js, bad); err == nil || !strings.Contains(err.Error(), "message 6 on sb.y refused") {
		t.Fatalf("batch with a bad message: %v", err)
	}
	// The batch publisher: add, add, commit.
	bp, err := jetstreamext.NewBatchPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := bp.Add("sb.p", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if ack, err := bp.Commit(ctx, "sb.p", []byte("last")); err != nil || ack.Sequence != 24 || ack.BatchSize != 4 {
		t.Fatalf("batch publisher: %+v %v", ack, err)
	}
	// Every commit is answered, the ones whose acks the ingress samples
	// for its latency metric too.
	for i := range 2 * metrics.DefaultLatencySampleEvery {
		ack, err := jetstreamext.PublishMsgBatch(ctx, js, []*nats.Msg{batchMsg("sb.q", "a"), batchMsg("sb.q", "b")})
		if err != nil || ack.BatchSize != 2 {
			t.Fatalf("batch %d: %+v %v", i, ack, err)
		}
	}
	info, err := c.StreamInfo(ctx, "SB")
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(24 + 4*metrics.DefaultLatencySampleEvery); info.State.Messages != want {
		t.Fatalf("SB holds %d messages, want %d", info.State.Messages, want)
	}
	got, err := js.Stream(ctx, "SB")
	if err != nil {
		t.Fatal(err)
	}
	m, err := got.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(semaq.HdrModel) != "m1" || m.Header.Get(semaq.HdrBatchID) == "" {
		t.Fatalf("stored headers %v", m.Header)
	}
}
