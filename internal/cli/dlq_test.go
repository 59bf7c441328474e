package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// runDLQ runs `semaq dlq ARGS --server url`.
func runDLQ(t *testing.T, url string, args ...string) result {
	t.Helper()
	return runSemaq(t, url, "", append([]string{"dlq"}, args...)...)
}

func mustDLQ(t *testing.T, url string, args ...string) string {
	t.Helper()
	r := runDLQ(t, url, args...)
	if r.code != 0 {
		t.Fatalf("semaq dlq %s: exit %d, stderr: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

func mustFailDLQ(t *testing.T, url string, code int, want string, args ...string) result {
	t.Helper()
	r := runDLQ(t, url, args...)
	if r.code != code {
		t.Fatalf("semaq dlq %s: exit %d, want %d; stdout %q, stderr %q", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, want) || !strings.HasPrefix(lastLine(r.stderr), "semaq: ") {
		t.Fatalf("semaq dlq %s: stderr %q, want a semaq: line containing %q", strings.Join(args, " "), r.stderr, want)
	}
	return r
}

// terminate terminates the next n messages of stream with a new durable.
func terminate(t *testing.T, c *client.Client, stream, durable string, n int, reason string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: durable, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	for got := 0; got < n; {
		b, err := cons.Fetch(n-got, jetstream.FetchContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			got++
			if err := m.TermWithReason(reason); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Error(); err != nil {
			t.Fatal(err)
		}
	}
}

// waitDLQ polls until the queue holds n dead letters.
func waitDLQ(t *testing.T, c *client.Client, n int) []semaq.DeadLetter {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		dls, err := c.DeadLetters(context.Background(), client.DeadLetterFilter{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(dls) == n {
			return dls
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d dead letters after 10s, want %d", len(dls), n)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

func TestDLQCommands(t *testing.T) {
	t.Parallel()
	srv, url := startWithStream(t)
	ctx := context.Background()
	c := brokertest.Connect(t, srv)
	if out := mustDLQ(t, url, "ls"); strings.TrimSpace(out) != "No dead letters." {
		t.Errorf("dlq ls of an empty queue = %q", out)
	}
	if out := mustDLQ(t, url, "ls", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("dlq ls --json of an empty queue = %q", out)
	}
	mustSemaq(t, url, "", "pub", "ai.x", "hello", "--model", "m1", "--header", "X-Order=42")
	mustSemaq(t, url, "", "pub", "ai.y", "world")
	terminate(t, c, "AI", "worker", 2, "bad json")
	dls := waitDLQ(t, c, 2)
	first, second := dls[0].Seq, dls[1].Seq

	out := mustDLQ(t, url, "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("dlq ls: want a header and 2 rows:\n%s", out)
	}
	for _, col := range []string{"SEQ", "STREAM", "CONSUMER", "SUBJECT", "DELIVERIES", "SIZE", "DEAD-LETTERED", "REASON"} {
		if !strings.Contains(lines[0], col) {
			t.Errorf("dlq ls header %q lacks %s", lines[0], col)
		}
	}
	if f := strings.Fields(lines[1]); len(f) < 9 || f[0] != fmt.Sprint(first) || f[1] != "AI" || f[2] != "worker" || f[3] != "ai.x" ||
		f[4] != "1" || !strings.HasSuffix(lines[1], "terminated: bad json") {
		t.Errorf("dlq ls row = %q", lines[1])
	}

	var listed []semaq.DeadLetter
	if err := json.Unmarshal([]byte(mustDLQ(t, url, "ls", "--json", "--consumer", "worker")), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 2 || listed[0].Subject != "ai.x" || listed[0].Size != 5 || listed[0].Data != nil || listed[1].Subject != "ai.y" {
		t.Errorf("dlq ls --json = %+v", listed)
	}
	out = mustDLQ(t, url, "ls", "--limit", "1")
	if !strings.Contains(out, fmt.Sprintf("semaq dlq ls --after %d", first)) || strings.Contains(out, "ai.y") {
		t.Errorf("dlq ls --limit 1 = %q", out)
	}
	if out := mustDLQ(t, url, "ls", "--after", fmt.Sprint(first)); strings.Contains(out, "ai.x") || !strings.Contains(out, "ai.y") {
		t.Errorf("dlq ls --after = %q", out)
	}
	if out := mustDLQ(t, url, "ls", "--stream", "OTHER"); !strings.Contains(out, "No dead letters.") {
		t.Errorf("dlq ls --stream OTHER = %q", out)
	}

	out = mustDLQ(t, url, "show", fmt.Sprint(first))
	for _, want := range []string{fmt.Sprintf("Dead letter %d", first), "Reason:", "terminated: bad json", "Stream:", "AI seq 1",
		"Subject:", "ai.x", "Consumer:", "worker", "Deliveries:", "Headers:", "AI-Model: m1", "X-Order: 42", "Payload (5 B):\nhello\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("dlq show lacks %q:\n%s", want, out)
		}
	}
	var shown semaq.DeadLetter
	if err := json.Unmarshal([]byte(mustDLQ(t, url, "show", fmt.Sprint(first), "--json")), &shown); err != nil {
		t.Fatal(err)
	}
	if string(shown.Data) != "hello" || shown.Headers["AI-Model"][0] != "m1" || shown.Reason != "terminated: bad json" {
		t.Errorf("dlq show --json = %+v", shown)
	}
	mustFailDLQ(t, url, 1, "dead letter 999 not found", "show", "999")
	mustFailDLQ(t, url, 1, "want a sequence number", "show", "abc")

	sub, err := c.Subscribe(ctx, "ai.x", client.WithDeliver(client.DeliverNew))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	out = mustDLQ(t, url, "replay", fmt.Sprint(first))
	if want := fmt.Sprintf("Replayed dead letter %d to ai.x: stream AI seq 3\n", first); out != want {
		t.Errorf("dlq replay = %q, want %q", out, want)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := sub.Next(rctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "hello" || m.Header.Get("AI-Model") != "m1" || m.Header.Get("X-Order") != "42" {
		t.Errorf("replayed message %q, headers %v", m.Data, m.Header)
	}
	mustFailDLQ(t, url, 1, "not found", "show", fmt.Sprint(first))
	mustFailDLQ(t, url, 1, "not found", "replay", fmt.Sprint(first))

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"replay"}, "name a dead letter SEQ"},
		{[]string{"replay", "1", "--all", "--stream", "AI"}, "not both"},
		{[]string{"replay", "--all"}, "--all needs --stream"},
		{[]string{"replay", "0"}, "want a sequence number"},
		{[]string{"purge"}, "name what to purge"},
		{[]string{"purge", "--all", "--stream", "AI"}, "--all removes every dead letter"},
		{[]string{"ls", "--limit", "0"}, "--limit 0"},
		{[]string{"rm"}, "arg"},
	} {
		mustFailDLQ(t, unreachableURL, 1, tc.want, tc.args...)
	}

	// A replay-all that cannot send everything exits 1 and names what it left.
	mustSemaq(t, url, "", "stream", "add", "WQ", "--subjects", "wq.>", "--retention", "workqueue")
	mustSemaq(t, url, "", "pub", "wq.job", "lost")
	terminate(t, c, "WQ", "w", 1, "boom")
	lost := waitDLQ(t, c, 2)[1]
	if out := mustDLQ(t, url, "ls", "--stream", "WQ"); !strings.Contains(out, "terminated: boom (payload lost)") || !strings.Contains(out, " - ") {
		t.Errorf("dlq ls of a lost payload = %q", out)
	}
	if out := mustDLQ(t, url, "show", fmt.Sprint(lost.Seq)); !strings.Contains(out, "Payload lost:") || !strings.Contains(out, "was no longer in stream WQ") {
		t.Errorf("dlq show of a lost payload = %q", out)
	}
	r := mustFailDLQ(t, url, 1, "1 dead letters of stream WQ could not be replayed", "replay", "--stream", "WQ", "--all")
	if !strings.Contains(r.stdout, fmt.Sprintf("Skipped dead letter %d: dead letter %d has no payload", lost.Seq, lost.Seq)) || !strings.Contains(r.stdout, "0 replayed, 1 skipped") {
		t.Errorf("dlq replay --all with a lost payload: stdout %q", r.stdout)
	}
	out = mustDLQ(t, url, "replay", "--stream", "AI", "--all")
	if !strings.Contains(out, fmt.Sprintf("Replayed dead letter %d to ai.y: stream AI seq 4", second)) || !strings.Contains(out, "1 replayed, 0 skipped") {
		t.Errorf("dlq replay --stream AI --all = %q", out)
	}

	if out := mustDLQ(t, url, "rm", fmt.Sprint(lost.Seq)); out != fmt.Sprintf("Dead letter %d removed\n", lost.Seq) {
		t.Errorf("dlq rm = %q", out)
	}
	mustFailDLQ(t, url, 1, "not found", "rm", fmt.Sprint(lost.Seq))
	mustSemaq(t, url, "", "pub", "ai.z", "z")
	terminate(t, c, "AI", "again", 3, "")
	waitDLQ(t, c, 3)
	if out := mustDLQ(t, url, "purge", "--stream", "AI", "--consumer", "nobody"); out != "Purged 0 dead letters\n" {
		t.Errorf("dlq purge of nothing = %q", out)
	}
	if out := mustDLQ(t, url, "purge", "--all"); out != "Purged 3 dead letters\n" {
		t.Errorf("dlq purge --all = %q", out)
	}
	if out := mustDLQ(t, url, "ls"); !strings.Contains(out, "No dead letters.") {
		t.Errorf("dlq ls after purge = %q", out)
	}
}

// Replaying a dead letter whose deadline passed says so; --extend-deadline
// gives it a new one.
func TestDLQReplayDeadline(t *testing.T) {
	t.Parallel()
	srv, url := startWithStream(t)
	c := brokertest.Connect(t, srv)
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	for range 2 {
		mustSemaq(t, url, "", "pub", "ai.x", "late", "--header", "AI-Deadline="+past)
	}
	terminate(t, c, "AI", "worker", 2, "")
	dls := waitDLQ(t, c, 2)

	out := mustDLQ(t, url, "replay", fmt.Sprint(dls[0].Seq))
	if !strings.Contains(out, "its deadline "+past+" passed 1m") || !strings.Contains(out, "--extend-deadline D") {
		t.Errorf("replay of an expired dead letter = %q, want it to say the deadline %s passed", out, past)
	}
	mustFailDLQ(t, url, 1, "--extend-deadline -1s", "replay", fmt.Sprint(dls[1].Seq), "--extend-deadline", "-1s")
	before := time.Now()
	out = mustDLQ(t, url, "replay", fmt.Sprint(dls[1].Seq), "--extend-deadline", "1h", "--json")
	var res semaq.DLQReplayResponse
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Replayed) != 1 {
		t.Fatalf("replay --extend-deadline --json = %q (%v)", out, err)
	}
	if r := res.Replayed[0]; r.DeadlinePassed || r.Deadline.Before(before.Add(time.Hour)) || r.Deadline.After(time.Now().Add(time.Hour)) {
		t.Errorf("replay --extend-deadline 1h = %+v, want a deadline an hour from now", r)
	}
}
