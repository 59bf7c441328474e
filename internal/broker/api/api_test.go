package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/semaq"
)

// serve runs h on subject on a fresh in-process NATS server and returns a
// client connection to ask it.
func serve(t *testing.T, subject string, h nats.MsgHandler) *nats.Conn {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := nc.Subscribe(subject, api.CheckedReply(log, h)); err != nil {
		t.Fatal(err)
	}
	return nc
}

type echoReq struct {
	Text string `json:"text"`
}

func TestOpDecodesRunsAndMapsErrors(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	nc := serve(t, "$SQ.API.ECHO.*", api.NamedOp(log, "echo", func(_ context.Context, name string, req *echoReq) (any, error) {
		switch req.Text {
		case "fail":
			return nil, semaq.NewAPIError(semaq.ErrBadRequest, "echo %s: told to fail", name)
		case "js":
			return nil, jetstream.ErrStreamNotFound
		}
		return map[string]string{"name": name, "text": req.Text}, nil
	}, nil))

	cases := []struct {
		body, want string
	}{
		{`{"text":"hi"}`, `{"name":"x","text":"hi"}`},
		{``, `{"name":"x","text":""}`}, // an empty body is the zero request
		{`{"text":"fail"}`, "echo x: told to fail"},
		{`{"text":"js"}`, "echo: not found"},
		{`{"text":"a","text":"b"}`, "echo: request is not valid"},
		{`{"Text":"a"}`, "echo: request is not valid"},
		{`{"other":1}`, "echo: request is not valid"},
		{`not json`, "echo: request is not valid"},
	}
	for _, tc := range cases {
		m, err := nc.Request("$SQ.API.ECHO.x", []byte(tc.body), 5*time.Second)
		if err != nil {
			t.Fatalf("%q: %v", tc.body, err)
		}
		if !strings.Contains(string(m.Data), tc.want) {
			t.Errorf("%q: reply %s, want it to contain %q", tc.body, m.Data, tc.want)
		}
	}
}

func TestCheckedReplyRefusesBrokerSubjects(t *testing.T) {
	ran := make(chan string, 4)
	nc := serve(t, "$SQ.API.PING", func(m *nats.Msg) {
		ran <- m.Reply
		_ = m.Respond([]byte("pong"))
	})
	// A request whose reply names a JetStream API subject is dropped
	// before the handler runs.
	if err := nc.PublishRequest("$SQ.API.PING", "$JS.API.STREAM.DELETE.X", nil); err != nil {
		t.Fatal(err)
	}
	// An ordinary one, after it on the same connection, is served: when it
	// is answered the first was already seen and dropped.
	if _, err := nc.Request("$SQ.API.PING", nil, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := <-ran; strings.HasPrefix(got, "$JS.") {
		t.Fatalf("handler ran for reply %s", got)
	}
	if len(ran) != 0 {
		t.Fatalf("handler ran %d more times", len(ran))
	}
}

func TestJSError(t *testing.T) {
	cases := []struct {
		err  error
		code error
		desc string
	}{
		{jetstream.ErrStreamNotFound, semaq.ErrStreamNotFound, "stream X: not found"},
		{jetstream.ErrInvalidStreamName, semaq.ErrBadStream, "stream X: invalid name"},
		{&jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use"}, semaq.ErrBadStream, "stream X: stream name already in use"},
		{&jetstream.APIError{Code: 500, ErrorCode: 10074, Description: "replicas > 1 not supported in non-clustered mode"}, semaq.ErrBadStream, "stream X: replicas > 1"},
		{context.DeadlineExceeded, semaq.ErrUnavailable, "stream X: JetStream did not answer in time"},
		{fmt.Errorf("wrapped: %w", nats.ErrTimeout), semaq.ErrUnavailable, "did not answer in time"},
		{errors.New("disk on fire"), semaq.ErrUnavailable, "stream X: disk on fire"},
		{semaq.NewAPIError(semaq.ErrQueueNotFound, "queue Q not found"), semaq.ErrQueueNotFound, "queue Q not found"},
	}
	for _, tc := range cases {
		got := api.JSError(tc.err, "stream %s", "X")
		if !errors.Is(got, tc.code) || !strings.Contains(got.Description, tc.desc) {
			t.Errorf("JSError(%v) = %+v, want code %v and %q", tc.err, got, tc.code, tc.desc)
		}
	}
}

func TestHandlersMergeRefusesTwoOwners(t *testing.T) {
	h := api.Handlers{"$SQ.API.A": func(*nats.Msg) {}}
	h.Merge(api.Handlers{"$SQ.API.B": func(*nats.Msg) {}})
	if len(h) != 2 {
		t.Fatalf("merged %d handlers, want 2", len(h))
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a subject served by two subsystems was merged")
		}
	}()
	h.Merge(api.Handlers{"$SQ.API.A": func(*nats.Msg) {}})
}
