package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

func addQueue(t *testing.T, c *client.Client, cfg semaq.QueueConfig) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cfg.Subjects == nil {
		cfg.Subjects = []string{"infer.>"}
	}
	if _, err := c.AddQueue(ctx, cfg); err != nil {
		t.Fatalf("add queue %s: %v", cfg.Name, err)
	}
}

func pubReq(t *testing.T, c *client.Client, id string, opts ...client.PublishOption) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if id != "" {
		opts = append(opts, client.WithMsgID(id))
	}
	if _, err := c.Publish(ctx, "infer.llama", []byte(`{"prompt":"`+id+`"}`), opts...); err != nil {
		t.Fatalf("publish %s: %v", id, err)
	}
}

func fetch(t *testing.T, c *client.Client, queue string, opts ...client.FetchOption) []*client.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	jobs, err := c.Fetch(ctx, queue, opts...)
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	return jobs
}

// waitQueued waits until the dispatcher has indexed n requests: publishes
// are acked by JetStream before the dispatcher reads them.
func waitQueued(t *testing.T, c *client.Client, queue string, n int) *semaq.QueueInfo {
	t.Helper()
	var qi *semaq.QueueInfo
	waitFor(t, fmt.Sprintf("%d requests queued in %s", n, queue), func() bool {
		var err error
		qi, err = c.QueueInfo(context.Background(), queue)
		return err == nil && qi.Status.Queued+qi.Status.Delayed == n
	})
	return qi
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not synchronising on time
	}
}

func ackAll(t *testing.T, jobs []*client.Job) {
	t.Helper()
	for _, j := range jobs {
		if err := j.Ack(context.Background()); err != nil {
			t.Fatalf("ack %d: %v", j.Seq, err)
		}
	}
}

func TestQueueCriticalOvertakesBulkBacklog(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q"})
	for i := range 50 {
		pubReq(t, c, "bulk-"+strconv.Itoa(i), client.WithPriority(semaq.PriorityBulk))
	}
	pubReq(t, c, "urgent", client.WithPriority(semaq.PriorityCritical))
	waitQueued(t, c, "Q", 51)
	jobs := fetch(t, c, "Q")
	if len(jobs) != 1 || jobs[0].ID != "urgent" {
		t.Fatalf("first fetch got %v, want the critical request", ids(jobs))
	}
	// Then the bulk requests, in the order they came.
	jobs = fetch(t, c, "Q", client.FetchMax(3))
	if got := ids(jobs); fmt.Sprint(got) != "[bulk-0 bulk-1 bulk-2]" {
		t.Fatalf("next fetch got %v, want bulk-0..2 in order", got)
	}
}

func ids(jobs []*client.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func TestQueueExpiredRequestIsNeverFetched(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q"})
	pubReq(t, c, "late", client.WithInferenceTimeout(30*time.Millisecond))
	pubReq(t, c, "fine")
	// It appears on the expired dead-letter subject, with its payload.
	var dl []semaq.DeadLetter
	waitFor(t, "the expired request in the DLQ", func() bool {
		var err error
		dl, err = c.DeadLetters(context.Background(), client.DeadLetterFilter{Stream: "Q", Consumer: "expired"})
		return err == nil && len(dl) == 1
	})
	if dl[0].Subject != "infer.llama" || dl[0].Reason == "" {
		t.Fatalf("dead letter = %+v", dl[0])
	}
	full, err := c.DeadLetter(context.Background(), dl[0].Seq)
	if err != nil || string(full.Data) != `{"prompt":"late"}` {
		t.Fatalf("dead letter payload = %q, %v", full.Data, err)
	}
	jobs := fetch(t, c, "Q", client.FetchMax(10))
	if got := ids(jobs); fmt.Sprint(got) != "[fine]" {
		t.Fatalf("fetch got %v, want only the live request", got)
	}
	qi, _ := c.QueueInfo(context.Background(), "Q")
	if qi.Status.Counters.Expired != 1 {
		t.Fatalf("expired counter = %d, want 1", qi.Status.Counters.Expired)
	}
}

func TestQueueTokenBudgetBatch(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q"})
	for i := range 5 {
		pubReq(t, c, "r"+strconv.Itoa(i), client.WithPromptTokens(60))
	}
	pubReq(t, c, "huge", client.WithPromptTokens(500))
	waitQueued(t, c, "Q", 6)
	if jobs := fetch(t, c, "Q", client.FetchMax(10), client.FetchMaxTokens(100)); len(jobs) != 1 || jobs[0].Tokens != 60 {
		t.Fatalf("max-tokens 100 over 60-token requests returned %d jobs, want 1", len(jobs))
	}
	if jobs := fetch(t, c, "Q", client.FetchMax(10), client.FetchMaxTokens(250)); len(jobs) != 4 {
		t.Fatalf("max-tokens 250 returned %v, want the 4 remaining 60-token requests", ids(jobs))
	}
	// A request larger than the budget is delivered alone.
	if jobs := fetch(t, c, "Q", client.FetchMax(10), client.FetchMaxTokens(100)); len(jobs) != 1 || jobs[0].ID != "huge" {
		t.Fatalf("oversize request: got %v", ids(jobs))
	}
}

func TestQueueTokensEstimatedWhenAbsent(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q"})
	pubReq(t, c, "x") // payload {"prompt":"x"} is 14 bytes
	waitQueued(t, c, "Q", 1)
	jobs := fetch(t, c, "Q")
	if len(jobs) != 1 || !jobs[0].Estimated || jobs[0].Tokens != 4 {
		t.Fatalf("job tokens = %d estimated=%v, want 4 estimated", jobs[0].Tokens, jobs[0].Estimated)
	}
}

func TestQueueCancel(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q"})
	pubReq(t, c, "a")
	pubReq(t, c, "b")
	waitQueued(t, c, "Q", 2)
	ctx := context.Background()

	// Before dispatch: removed.
	res, err := c.Cancel(ctx, "Q", "a")
	if err != nil || res.Result != "removed" {
		t.Fatalf("cancel queued: %+v, %v", res, err)
	}
	if _, err := c.Cancel(ctx, "Q", "a"); !errors.Is(err, semaq.ErrRequestNotFound) {
		t.Fatalf("second cancel: %v, want ErrRequestNotFound", err)
	}
	// Held by a worker: the worker's context is cancelled.
	worker := brokertest.Connect(t, s)
	jobs := fetch(t, worker, "Q", client.FetchMax(5))
	if got := ids(jobs); fmt.Sprint(got) != "[b]" {
		t.Fatalf("fetch after cancel got %v, want [b]", got)
	}
	res, err = c.Cancel(ctx, "Q", "b")
	if err != nil || res.Result != "notified" {
		t.Fatalf("cancel held: %+v, %v", res, err)
	}
	select {
	case <-jobs[0].Context().Done():
		if !errors.Is(context.Cause(jobs[0].Context()), client.ErrJobCancelled) {
			t.Fatalf("cause = %v", context.Cause(jobs[0].Context()))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the worker's job context was not cancelled")
	}
	if err := jobs[0].Ack(ctx); !errors.Is(err, semaq.ErrLeaseLost) {
		t.Fatalf("ack of a cancelled job: %v, want ErrLeaseLost", err)
	}
	if _, err := c.Cancel(ctx, "NOPE", "x"); !errors.Is(err, semaq.ErrQueueNotFound) {
		t.Fatalf("cancel on unknown queue: %v", err)
	}
}

func TestQueueDeadWorkerBatchGoesToAnother(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q", AckWait: 300 * time.Millisecond})
	for i := range 4 {
		pubReq(t, c, "r"+strconv.Itoa(i))
	}
	waitQueued(t, c, "Q", 4)
	dead := brokertest.Connect(t, s)
	if jobs := fetch(t, dead, "Q", client.FetchMax(4)); len(jobs) != 4 {
		t.Fatalf("first worker got %d jobs", len(jobs))
	}
	dead.Close() // dies holding the batch

	alive := brokertest.Connect(t, s)
	var got []*client.Job
	for len(got) < 4 {
		got = append(got, fetch(t, alive, "Q", client.FetchMax(4), client.FetchWait(5*time.Second))...)
	}
	if fmt.Sprint(ids(got)) != "[r0 r1 r2 r3]" {
		t.Fatalf("second worker got %v, want r0..r3 in order", ids(got))
	}
	for _, j := range got {
		if j.Deliveries != 2 {
			t.Fatalf("job %s deliveries = %d, want 2", j.ID, j.Deliveries)
		}
	}
	ackAll(t, got)
	qi := waitQueued(t, c, "Q", 0)
	if qi.Status.Held != 0 || qi.Status.Counters.Redelivered != 4 {
		t.Fatalf("status after acks: %+v", qi.Status)
	}
}

func TestQueueRestartLosesNothingQueued(t *testing.T) {
	dir := t.TempDir()
	onDir := func(cfg *broker.Config) { cfg.DataDir = dir }
	s1 := brokertest.Start(t, onDir)
	c1 := brokertest.Connect(t, s1)
	addQueue(t, c1, semaq.QueueConfig{Name: "Q"})
	for i := range 10 {
		pubReq(t, c1, "r"+strconv.Itoa(i), client.WithTenant("acme"))
	}
	waitQueued(t, c1, "Q", 10)
	// Two done, two held by a worker when the broker stops.
	ackAll(t, fetch(t, c1, "Q", client.FetchMax(2)))
	fetch(t, c1, "Q", client.FetchMax(2))
	c1.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	s2 := brokertest.Start(t, onDir)
	c2 := brokertest.Connect(t, s2)
	// The two held are still their worker's (TestQueueLeasesSurviveRestart).
	waitFor(t, "6 queued and 2 held after the restart", func() bool {
		qi, err := c2.QueueInfo(ctx, "Q")
		return err == nil && qi.Status.Queued == 6 && qi.Status.Held == 2
	})
	jobs := fetch(t, c2, "Q", client.FetchMax(20))
	if got := fmt.Sprint(ids(jobs)); got != "[r4 r5 r6 r7 r8 r9]" {
		t.Fatalf("after restart got %s", got)
	}
	if _, err := c2.Publish(ctx, "infer.llama", []byte("{}")); err != nil {
		t.Fatalf("publish after restart: %v", err)
	}
}

func TestQueueTenantFairShare(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q"})
	// Tenant A floods 40 requests before B's 10 arrive.
	for i := range 40 {
		pubReq(t, c, "A"+strconv.Itoa(i), client.WithTenant("A"), client.WithPromptTokens(100))
	}
	for i := range 10 {
		pubReq(t, c, "B"+strconv.Itoa(i), client.WithTenant("B"), client.WithPromptTokens(100))
	}
	waitQueued(t, c, "Q", 50)
	var order []string
	for range 20 {
		jobs := fetch(t, c, "Q")
		order = append(order, jobs[0].ID[:1])
		ackAll(t, jobs)
	}
	// Equal prompt sizes: B gets every other dispatch until it is served,
	// however deep A's backlog.
	b := 0
	for _, x := range order {
		if x == "B" {
			b++
		}
	}
	if b != 10 {
		t.Fatalf("in the first 20 dispatches B got %d, want 10 (order %v)", b, order)
	}
	// FIFO within a tenant.
	rest := fetch(t, c, "Q", client.FetchMax(30))
	if rest[0].ID != "A10" {
		t.Fatalf("A's next request = %s, want A10", rest[0].ID)
	}
}

func TestQueueOutputTokensCountTowardFairness(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q"})
	for i := range 10 {
		pubReq(t, c, "A"+strconv.Itoa(i), client.WithTenant("A"), client.WithPromptTokens(10))
		pubReq(t, c, "B"+strconv.Itoa(i), client.WithTenant("B"), client.WithPromptTokens(10))
	}
	waitQueued(t, c, "Q", 20)
	ctx := context.Background()
	// A's first answer is long: 500 output tokens cost A 1000 on its
	// counter, so B is served next several times in a row.
	first := fetch(t, c, "Q")
	if err := first[0].Ack(ctx, client.AckOutputTokens(500)); err != nil {
		t.Fatal(err)
	}
	tenantOf := first[0].ID[:1]
	other := map[string]string{"A": "B", "B": "A"}[tenantOf]
	for i := range 5 {
		jobs := fetch(t, c, "Q")
		if jobs[0].ID[:1] != other {
			t.Fatalf("dispatch %d after a 500-token answer went to %s, want %s", i, jobs[0].ID[:1], other)
		}
		ackAll(t, jobs)
	}
}

func TestQueueAffinity(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q", AffinityWait: 400 * time.Millisecond})
	holder := brokertest.Connect(t, s)
	other := brokertest.Connect(t, s)
	withSQL := client.FetchLabels(map[string]string{"model": "llama3", "adapter": "sql-lora"})
	plain := client.FetchLabels(map[string]string{"model": "llama3"})
	// The holder announces itself with a fetch that finds nothing.
	if jobs := fetch(t, holder, "Q", withSQL); len(jobs) != 0 {
		t.Fatalf("empty queue gave %d jobs", len(jobs))
	}
	pubReq(t, c, "needs-sql", client.WithAdapter("sql-lora"))
	pubReq(t, c, "any")
	waitQueued(t, c, "Q", 2)
	// The plain worker skips the adapter request while a holder is live...
	if jobs := fetch(t, other, "Q", client.FetchMax(5), plain); fmt.Sprint(ids(jobs)) != "[any]" {
		t.Fatalf("worker without the adapter got %v, want [any]", ids(jobs))
	}
	// ...and takes it once it has waited the affinity wait.
	jobs := fetch(t, other, "Q", plain, client.FetchWait(5*time.Second))
	if fmt.Sprint(ids(jobs)) != "[needs-sql]" {
		t.Fatalf("after the affinity wait the plain worker got %v", ids(jobs))
	}
	if jobs[0].Waited < 400*time.Millisecond {
		t.Fatalf("fell back after %s, before the affinity wait", jobs[0].Waited)
	}
	// A holder gets its adapter's request at once.
	pubReq(t, c, "needs-sql-2", client.WithAdapter("sql-lora"))
	waitQueued(t, c, "Q", 1)
	if jobs := fetch(t, holder, "Q", withSQL); fmt.Sprint(ids(jobs)) != "[needs-sql-2]" {
		t.Fatalf("holder got %v", ids(jobs))
	}
}

func TestQueueAdmissionControl(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q", MaxMessages: 3, MaxTokens: 1000})
	for i := range 3 {
		pubReq(t, c, "r"+strconv.Itoa(i), client.WithPromptTokens(100))
	}
	waitQueued(t, c, "Q", 3)
	_, err := c.Publish(context.Background(), "infer.llama", []byte("{}"))
	var ae *semaq.APIError
	if !errors.As(err, &ae) || !errors.Is(err, semaq.ErrOverloaded) || ae.Code != 429 || ae.RetryAfterMs < 1000 {
		t.Fatalf("publish to a full queue: %v (%+v), want ErrOverloaded 429 with retry-after", err, ae)
	}
	ackAll(t, fetch(t, c, "Q", client.FetchMax(3)))
	waitQueued(t, c, "Q", 0)
	// The dispatcher forgets a request when it is answered and acks it to
	// JetStream after: the stream's own MaxMsgs backstop would refuse the
	// next publish until the acks are in.
	js := internalJS(t, s)
	waitFor(t, "the acks to empty the stream", func() bool { msgs, _ := streamMsgs(t, js, "Q"); return msgs == 0 })
	// Token limit: one 900-token request fits, a second does not.
	pubReq(t, c, "big", client.WithPromptTokens(900))
	waitQueued(t, c, "Q", 1)
	if _, err := c.Publish(context.Background(), "infer.llama", []byte("{}"), client.WithPromptTokens(200)); !errors.Is(err, semaq.ErrOverloaded) {
		t.Fatalf("publish over the token limit: %v", err)
	}
	qi, _ := c.QueueInfo(context.Background(), "Q")
	if qi.Status.Counters.Refused != 2 || qi.Status.TokensQueued != 900 {
		t.Fatalf("status = %+v", qi.Status)
	}
}

func TestQueueNakDelayTermAndMaxDeliver(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q", MaxDeliver: 2})
	ctx := context.Background()
	pubReq(t, c, "retry")
	pubReq(t, c, "poison")
	waitQueued(t, c, "Q", 2)
	jobs := fetch(t, c, "Q", client.FetchMax(2))
	if err := jobs[0].Nak(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := jobs[1].Term(ctx, "cannot parse"); err != nil {
		t.Fatal(err)
	}
	// The delayed request is not handed out before its delay.
	if got := fetch(t, c, "Q"); len(got) != 0 {
		t.Fatalf("fetch during the nak delay got %v", ids(got))
	}
	again := fetch(t, c, "Q", client.FetchWait(5*time.Second))
	if len(again) != 1 || again[0].ID != "retry" || again[0].Deliveries != 2 {
		t.Fatalf("after the delay got %v", ids(again))
	}
	// Its second nak reaches max deliver: dead-lettered.
	if err := again[0].Nak(ctx, 0); err != nil {
		t.Fatal(err)
	}
	var dl []semaq.DeadLetter
	waitFor(t, "two dead letters", func() bool {
		dl, _ = c.DeadLetters(ctx, client.DeadLetterFilter{Stream: "Q"})
		return len(dl) == 2
	})
	reasons := map[string]bool{}
	for _, d := range dl {
		reasons[d.Reason] = true
	}
	if !reasons["terminated: cannot parse"] || !reasons[semaq.DLQReasonMaxDeliveries] {
		t.Fatalf("dead-letter reasons = %v", reasons)
	}
	waitQueued(t, c, "Q", 0)
}

func TestQueueInProgressExtendsLease(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q", AckWait: time.Second})
	pubReq(t, c, "slow")
	waitQueued(t, c, "Q", 1)
	jobs := fetch(t, c, "Q")
	ctx := context.Background()
	other := brokertest.Connect(t, s)
	// Keep it past two ack waits, extending every 250 ms; nobody else gets it.
	for range 9 {
		if err := jobs[0].InProgress(ctx); err != nil {
			t.Fatalf("in progress: %v", err)
		}
		if got := fetch(t, other, "Q", client.FetchWait(250*time.Millisecond)); len(got) != 0 {
			t.Fatalf("another worker got the extended job %v", ids(got))
		}
	}
	if err := jobs[0].Ack(ctx, client.AckOutputTokens(7)); err != nil {
		t.Fatal(err)
	}
}

func TestQueueBadRequests(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	for _, tc := range []struct {
		cfg  semaq.QueueConfig
		want string
	}{
		{semaq.QueueConfig{Name: "bad name", Subjects: []string{"a.>"}}, "queue name"},
		{semaq.QueueConfig{Name: "Q"}, "needs at least one subject"},
		{semaq.QueueConfig{Name: "Q", Subjects: []string{"a.>"}, MaxTokens: -2}, "max tokens"},
		{semaq.QueueConfig{Name: "Q", Subjects: []string{"a.>"}, MaxBytes: -2}, "max bytes"},
		{semaq.QueueConfig{Name: "Q", Subjects: []string{"a.>"}, AckWait: time.Millisecond}, "under 100ms"},
	} {
		_, err := c.AddQueue(ctx, tc.cfg)
		if !errors.Is(err, semaq.ErrBadQueue) && !errors.Is(err, semaq.ErrBadRequest) || !contains(err, tc.want) {
			t.Errorf("AddQueue(%+v) = %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
	addQueue(t, c, semaq.QueueConfig{Name: "Q"})
	if _, err := c.AddQueue(ctx, semaq.QueueConfig{Name: "Q", Subjects: []string{"other.>"}}); !errors.Is(err, semaq.ErrStreamExists) {
		t.Errorf("duplicate queue: %v", err)
	}
	if _, err := c.Fetch(ctx, "NOPE"); !errors.Is(err, semaq.ErrQueueNotFound) {
		t.Errorf("fetch from unknown queue: %v", err)
	}
	if _, err := c.Fetch(ctx, "Q", client.FetchMax(0)); !errors.Is(err, semaq.ErrBadRequest) {
		t.Errorf("fetch max 0: %v", err)
	}
	// A raw fetch request with bad JSON gets an error end of batch.
	m, err := c.Conn().Request(fmt.Sprintf(semaq.APIQueueFetchT, "Q"), []byte(`{"worker":"w","max":-3}`), 5*time.Second)
	if err != nil || m.Header.Get(semaq.HdrQueueStatus) != "400" || !contains(errors.New(string(m.Data)), "max -3 is negative") {
		t.Errorf("bad raw fetch: %v %v %s", err, m.Header, m.Data)
	}
	if _, err := c.QueueInfo(ctx, "NOPE"); !errors.Is(err, semaq.ErrQueueNotFound) {
		t.Errorf("info of unknown queue: %v", err)
	}
	if err := c.DeleteQueue(ctx, "Q"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := c.Publish(ctx, "infer.x", []byte("{}")); !errors.Is(err, semaq.ErrNoStream) {
		t.Errorf("publish after delete: %v", err)
	}
}

func contains(err error, s string) bool {
	return err != nil && strings.Contains(err.Error(), s)
}

func TestQueueStatusSignals(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q"})
	pubReq(t, c, "a", client.WithTenant("acme"), client.WithModel("llama3"), client.WithPromptTokens(10), client.WithPriority(semaq.PriorityHigh))
	pubReq(t, c, "b", client.WithTenant("beta"), client.WithModel("gemma2"), client.WithPromptTokens(30))
	qi := waitQueued(t, c, "Q", 2)
	st := qi.Status
	if st.TokensQueued != 40 || len(st.ByTenant) != 2 || len(st.ByModel) != 2 || len(st.ByPriority) != 2 {
		t.Fatalf("status groups = %+v", st)
	}
	if st.RecommendedWorkers < 1 {
		t.Fatalf("a backlog with no workers recommends %d workers", st.RecommendedWorkers)
	}
	if st.ByPriority[0].Key != "2" || st.ByPriority[0].Tokens != 10 {
		t.Fatalf("by priority = %+v", st.ByPriority)
	}
}

func TestQueueParkedFetchOfDeadWorkerGetsNothing(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addQueue(t, c, semaq.QueueConfig{Name: "Q"}) // ack wait 30 s
	dead := brokertest.Connect(t, s)
	parked := make(chan struct{})
	go func() {
		defer close(parked)
		_, _ = dead.Fetch(context.Background(), "Q", client.FetchWait(30*time.Second))
	}()
	waitFor(t, "the fetch to park", func() bool {
		qi, err := c.QueueInfo(context.Background(), "Q")
		return err == nil && qi.Status.Workers == 1
	})
	before := s.NATSServer().NumClients()
	dead.Close() // dies while its fetch waits
	<-parked
	waitFor(t, "the server to drop the dead connection", func() bool { return s.NATSServer().NumClients() < before })
	pubReq(t, c, "r1")
	waitQueued(t, c, "Q", 1)
	// Still queued, not leased to the dead worker for an ack wait.
	if jobs := fetch(t, c, "Q"); len(jobs) != 1 || jobs[0].ID != "r1" || jobs[0].Deliveries != 1 {
		t.Fatalf("live worker got %v", ids(jobs))
	}
}
