package jsutil_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/jsutil"
)

// GetMsg reads a message by sequence, the next on a subject and the last
// on one, with its stored headers; a message that is not there is
// jetstream.ErrMsgNotFound, another refusal JetStream's own error.
func TestGetMsg(t *testing.T) {
	js := operatorJS(t)
	nc := js.Conn()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "G", Subjects: []string{"g.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct{ subj, data string }{{"g.a", "1"}, {"g.b", "2"}, {"g.a", "3"}} {
		m := nats.NewMsg(p.subj)
		m.Data = []byte(p.data)
		m.Header.Set("K", p.data)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		q    jsutil.MsgQuery
		want string
	}{
		{jsutil.MsgQuery{Seq: 2}, "2"},
		{jsutil.MsgQuery{Seq: 2, NextBySubj: "g.a"}, "3"},
		{jsutil.MsgQuery{LastBySubj: "g.a"}, "3"},
		{jsutil.MsgQuery{Seq: 1, NextBySubj: ">"}, "1"},
	} {
		m, err := jsutil.GetMsg(ctx, nc, "G", c.q)
		if err != nil || string(m.Data) != c.want || m.Header.Get("K") != c.want || m.Time.IsZero() {
			t.Fatalf("%+v: %+v, %v; want %s", c.q, m, err, c.want)
		}
	}
	for _, q := range []jsutil.MsgQuery{{Seq: 9}, {Seq: 4, NextBySubj: ">"}, {LastBySubj: "g.zzz"}} {
		if _, err := jsutil.GetMsg(ctx, nc, "G", q); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatalf("%+v: %v, want not found", q, err)
		}
	}
	var ae *jetstream.APIError
	if _, err := jsutil.GetMsg(ctx, nc, "NOPE", jsutil.MsgQuery{Seq: 1}); !errors.As(err, &ae) || ae.ErrorCode != jetstream.JSErrCodeStreamNotFound {
		t.Fatalf("a stream that does not exist: %v", err)
	}
}
