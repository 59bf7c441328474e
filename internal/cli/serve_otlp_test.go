package cli

import (
	"bytes"
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/telemetry/otlptest"
	"github.com/semaq/semaq/semaq"
)

func TestServeRejectsBadTracingSettings(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"serve", "--otlp-endpoint", "grpc://collector:4317"}, `otlp_endpoint: "grpc://collector:4317": the scheme must be http or https`},
		{[]string{"serve", "--otlp-endpoint", "http://"}, "otlp_endpoint: \"http://\" has no host"},
		{[]string{"serve", "--trace-sample", "1.5"}, "trace_sample: 1.5 is outside 0..1"},
		{[]string{"serve", "--trace-sample", "lots"}, "trace-sample"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(tc.args, strings.NewReader(""), &stdout, &stderr)
		if code == 0 {
			t.Errorf("%v: exit 0", tc.args)
			continue
		}
		if msg := stderr.String(); !strings.Contains(msg, tc.says) {
			t.Errorf("%v: stderr %q does not say %q", tc.args, msg, tc.says)
		}
	}
}

// TestServeExportsTraces runs `semaq serve --otlp-endpoint` against an
// in-process OTLP receiver: a traced publish arrives as an ingress span of
// service semaq, exported at the latest when the server shuts down.
func TestServeExportsTraces(t *testing.T) {
	rcv := otlptest.Start(t)
	srv := startChild(t, "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "", "--otlp-endpoint", rcv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, srv.url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}}); err != nil {
		t.Fatal(err)
	}
	const traceID = "5b8aa5a2d2c872e8321cf37308d69df2"
	if _, err := c.Publish(ctx, "ai.x", []byte("hi"), client.WithModel("llama3"),
		client.WithTraceParent("00-"+traceID+"-051581bf3cb55c13-01")); err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := srv.wait(t); code != 0 {
		t.Fatalf("exit %d\n%s", code, srv.output())
	}
	spans := rcv.WaitFor(t, 10*time.Second, func(sp []otlptest.Span) bool {
		return len(otlptest.Named(otlptest.Trace(sp, traceID), "ingress")) == 1
	})
	ing := otlptest.Named(otlptest.Trace(spans, traceID), "ingress")[0]
	if ing.Service != "semaq" || ing.ParentID != "051581bf3cb55c13" || ing.Attrs["gen_ai.request.model"] != "llama3" {
		t.Errorf("ingress span %+v", ing)
	}
}
