package plugin

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/plugin/plugintest"
	"github.com/semaq/semaq/internal/plugin/wire"
)

func TestEnrichRewritesAndEmits(t *testing.T) {
	p := load(t, plugintest.Enrich, Limits{})
	ctx := context.Background()

	res, err := p.Ingress(ctx, &Message{Subject: "jobs.chat", Header: map[string][]string{"Trace": {"t1"}}, Data: []byte(`{"model":"llama3","prompt":"hi"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != IngressRewrite {
		t.Fatalf("action %v, want rewrite", res.Action)
	}
	want := map[string][]string{"Trace": {"t1"}, "X-Payload-Length": {"32"}, "AI-Model": {"llama3"}}
	if fmt.Sprint(res.Header) != fmt.Sprint(want) || string(res.Data) != `{"model":"llama3","prompt":"hi"}` {
		t.Fatalf("rewrite: header %v data %q, want header %v and the payload unchanged", res.Header, res.Data, want)
	}

	// The publisher's own AI-Model stands; a payload that is no JSON gets only its length.
	res, err = p.Ingress(ctx, &Message{Subject: "jobs.chat", Header: map[string][]string{"AI-Model": {"mine"}}, Data: []byte(`{"model":"theirs"}`)})
	if err != nil || res.Header["AI-Model"][0] != "mine" {
		t.Fatalf("publisher's AI-Model: %+v, %v", res, err)
	}
	res, err = p.Ingress(ctx, &Message{Subject: "jobs.chat", Data: []byte("plain text")})
	if err != nil || res.Header["AI-Model"] != nil || res.Header["X-Payload-Length"][0] != "10" {
		t.Fatalf("plain payload: %+v, %v", res, err)
	}

	res, err = p.Ingress(ctx, &Message{Subject: "jobs.chat", Header: map[string][]string{"X-Audit": {"1"}}, Data: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != IngressEmit || len(res.Messages) != 2 {
		t.Fatalf("audit: %v with %d messages, want emit of 2", res.Action, len(res.Messages))
	}
	orig, audit := res.Messages[0], res.Messages[1]
	if orig.Subject != "jobs.chat" || orig.Header["X-Audit"] != nil || audit.Subject != "audit.jobs.chat" ||
		audit.Header["X-Audit-Of"][0] != "jobs.chat" || string(audit.Data) != "x" {
		t.Fatalf("audit messages: %+v", res.Messages)
	}
}

func TestNoopEveryStage(t *testing.T) {
	p := load(t, plugintest.Noop, Limits{})
	ctx := context.Background()
	for _, s := range Stages {
		if !p.Implements(s) {
			t.Errorf("noop does not implement %s", s)
		}
	}
	if res, err := p.Ingress(ctx, &Message{Subject: "a"}); err != nil || res.Action != IngressPass {
		t.Errorf("ingress %+v, %v; want pass", res, err)
	}
	if keep, err := p.Filter(ctx, &Message{Subject: "a"}); err != nil || !keep {
		t.Errorf("filter %v, %v; want keep", keep, err)
	}
	if res, err := p.Tokens(ctx, "s1", "hello"); err != nil || res.Action != TokensPass {
		t.Errorf("tokens %+v, %v; want pass", res, err)
	}
}

// TestSDKStagesDeclared: the SDK exports every stage function, but a plugin implements only the stages it
// registered, and Load holds it to those.
func TestSDKStagesDeclared(t *testing.T) {
	wasm := plugintest.Build(t, plugintest.Redact)
	rt := shared
	_, err := rt.Load(context.Background(), "redact", wasm, []Stage{StageIngress}, Limits{})
	if !errors.Is(err, ErrABI) || !strings.Contains(err.Error(), "does not implement the ingress stage") {
		t.Fatalf("redact loaded for ingress: %v", err)
	}
	p, err := rt.Load(context.Background(), "redact", wasm, []Stage{StageTokens}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Implements(StageIngress) || p.Implements(StageFilter) || !p.Implements(StageTokens) {
		t.Error("redact should implement the tokens stage only")
	}
	ctx := context.Background()
	for _, c := range []struct {
		text string
		want TokensResult
	}{
		{"hello", TokensResult{Action: TokensPass}},
		{"my password is", TokensResult{Action: TokensRewrite, Text: "my [redacted] is"}},
		{"-----BEGIN PRIVATE KEY-----", TokensResult{Action: TokensStop, Reason: "private key in the output"}},
	} {
		res, err := p.Tokens(ctx, "s1", c.text)
		if err != nil || *res != c.want {
			t.Errorf("Tokens(%q) = %+v, %v; want %+v", c.text, res, err, c.want)
		}
	}
}

// TestHostilePluginFailsOnlyItsCall: a trap, an endless loop, running out of memory and every kind of malformed
// output fail the call that met them with their own error, and the next call, on a fresh instance, succeeds.
func TestHostilePluginFailsOnlyItsCall(t *testing.T) {
	p := load(t, plugintest.Hostile, Limits{Timeout: 300 * time.Millisecond, MaxInstances: 1, MemoryPages: 128, FailAfter: 1000})
	ctx := context.Background()
	cases := []struct {
		stage Stage
		cmd   string
		want  error
		says  string
	}{
		{StageIngress, "trap", ErrTrap, "unreachable"},
		{StageIngress, "exit", ErrTrap, "exited with code 0"},
		{StageIngress, "loop", ErrTimeout, "after 300ms"},
		{StageIngress, "oom", ErrMemory, "limit 8 MiB"},
		{StageIngress, "bad-pointer", ErrBadOutput, "outside its"},
		{StageIngress, "bad-length", ErrBadOutput, "more than the 1048576 allowed"},
		{StageIngress, "bad-version", ErrBadOutput, "version 9, want 1"},
		{StageIngress, "bad-action", ErrBadOutput, "unknown ingress action 42"},
		{StageIngress, "too-many", ErrBadOutput, "65 messages, more than the 64 allowed"},
		{StageIngress, "huge-count", ErrBadOutput, "4294967295 messages"},
		{StageIngress, "header-crlf", ErrBadOutput, "header value 1 holds a line break"},
		{StageFilter, "trap", ErrTrap, ""},
		{StageFilter, "loop", ErrTimeout, ""},
		{StageFilter, "bad-bool", ErrBadOutput, "semaq_filter returned 7"},
		{StageTokens, "oom", ErrMemory, ""},
		{StageTokens, "bad-version", ErrBadOutput, "version 9"},
	}
	for _, c := range cases {
		t.Run(string(c.stage)+"/"+c.cmd, func(t *testing.T) {
			before := p.Stats().Failures
			var err error
			switch c.stage {
			case StageIngress:
				_, err = p.Ingress(ctx, &Message{Subject: "a", Data: []byte(c.cmd)})
			case StageFilter:
				_, err = p.Filter(ctx, &Message{Subject: "a", Data: []byte(c.cmd)})
			case StageTokens:
				_, err = p.Tokens(ctx, "s", c.cmd)
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("error %v, want %v saying %q", err, c.want, c.says)
			}
			if got := p.Stats().Failures; got != before+1 {
				t.Errorf("failures %d after one more, want %d", got, before+1)
			}
			res, err := p.Ingress(ctx, &Message{Subject: "a", Data: []byte("rewrite")})
			if err != nil || res.Action != IngressRewrite || string(res.Data) != "rewritten" {
				t.Fatalf("the call after: %+v, %v; want a rewrite from a fresh instance", res, err)
			}
		})
	}
	if st := p.Stats(); st.Consecutive != 0 || st.Disabled {
		t.Errorf("stats after a success: %+v, want no failures in a row", st)
	}
}

// TestFailureHidesPayload: what a crashing plugin printed, which may quote the payload, reaches neither the
// call's error nor the stats.
func TestFailureHidesPayload(t *testing.T) {
	p := load(t, plugintest.Hostile, Limits{})
	_, err := p.Ingress(context.Background(), &Message{Subject: "a", Data: []byte("secret-trap:4111-1111-1111-1111")})
	if !errors.Is(err, ErrTrap) {
		t.Fatalf("error %v, want ErrTrap", err)
	}
	if strings.Contains(err.Error(), "4111") || strings.Contains(p.Stats().LastError, "4111") {
		t.Fatalf("the payload leaked: error %q, stats %q", err, p.Stats().LastError)
	}
}

// TestCallerGivingUpIsNoFailure: a call the caller abandons (its context ends first) is not held against the
// plugin, which a publisher's impatience must not be able to disable.
func TestCallerGivingUpIsNoFailure(t *testing.T) {
	p := load(t, plugintest.Hostile, Limits{Timeout: time.Minute, FailAfter: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := p.Ingress(ctx, &Message{Subject: "a", Data: []byte("loop")})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrTimeout) {
		t.Fatalf("error %v, want the caller's deadline and no ErrTimeout", err)
	}
	if st := p.Stats(); st.Failures != 0 || st.Disabled {
		t.Fatalf("stats %+v: an abandoned call counted as a failure", st)
	}
	if _, err := p.Ingress(context.Background(), &Message{Subject: "a", Data: []byte("pass")}); err != nil {
		t.Fatal(err)
	}
}

// TestDisableAfterConsecutiveFailures: FailAfter failures in a row disable the plugin, the callback fires once
// however many calls race, and calls then fail with ErrDisabled without running.
func TestDisableAfterConsecutiveFailures(t *testing.T) {
	var fired atomic.Int32
	var reason atomic.Value
	p := load(t, plugintest.Hostile, Limits{FailAfter: 3, MaxInstances: 2}, WithOnDisable(func(r string) {
		fired.Add(1)
		reason.Store(r)
	}))
	ctx := context.Background()
	trap := &Message{Subject: "a", Data: []byte("trap")}

	// Two failures, a success, two failures: never three in a row.
	for _, cmd := range []string{"trap", "trap", "pass", "trap", "trap"} {
		p.Ingress(ctx, &Message{Subject: "a", Data: []byte(cmd)})
	}
	if d, _ := p.Disabled(); d {
		t.Fatal("disabled without three failures in a row")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { p.Ingress(ctx, trap) })
	}
	wg.Wait()
	if n := fired.Load(); n != 1 {
		t.Fatalf("OnDisable fired %d times, want once", n)
	}
	d, why := p.Disabled()
	if !d || !strings.Contains(why, "failures in a row") || !strings.Contains(why, "plugin trapped") || reason.Load() != why {
		t.Fatalf("Disabled() = %v, %q; callback got %q", d, why, reason.Load())
	}
	calls := p.Stats().Calls
	if _, err := p.Ingress(ctx, &Message{Subject: "a", Data: []byte("pass")}); !errors.Is(err, ErrDisabled) {
		t.Fatalf("call on a disabled plugin: %v, want ErrDisabled", err)
	}
	if st := p.Stats(); st.Calls != calls || !st.Disabled {
		t.Fatalf("a disabled plugin ran a call: %+v", st)
	}
}

// TestConcurrentCallsShareBoundedInstances: more callers than instances all get their answer, and the plugin
// never holds more instances than MaxInstances.
func TestConcurrentCallsShareBoundedInstances(t *testing.T) {
	const maxInst = 3
	p := load(t, plugintest.Enrich, Limits{MaxInstances: maxInst, Timeout: 10 * time.Second})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			for i := range 20 {
				data := fmt.Sprintf(`{"model":"m%d-%d"}`, g, i)
				res, err := p.Ingress(ctx, &Message{Subject: "a", Data: []byte(data)})
				if err != nil {
					errs <- err
					return
				}
				if got := res.Header["AI-Model"]; len(got) != 1 || got[0] != fmt.Sprintf("m%d-%d", g, i) {
					errs <- fmt.Errorf("call %d/%d got AI-Model %v: another call's answer", g, i, got)
					return
				}
				if n := p.Stats().Instances; n > maxInst {
					errs <- fmt.Errorf("%d instances alive, more than %d", n, maxInst)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := p.Stats(); st.Calls != 16*20 || st.Failures != 0 {
		t.Errorf("stats %+v, want 320 calls and no failure", st)
	}
}

// TestCloseDrains: Close waits for a call in flight, which finishes; calls after it are refused.
func TestCloseDrains(t *testing.T) {
	p := load(t, plugintest.Noop, Limits{})
	ctx := context.Background()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Ingress(ctx, &Message{Subject: "a"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: %v, want ErrClosed", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestSlotSwapUnderLoad: swapping the plugin in a Slot while callers hammer it fails no call; a caller that
// took the old version keeps it until it lets go, and only then is the old one closed.
func TestSlotSwapUnderLoad(t *testing.T) {
	v1 := load(t, plugintest.Noop, Limits{MaxInstances: 2})
	v2 := load(t, plugintest.Enrich, Limits{MaxInstances: 2})
	v3 := load(t, plugintest.Noop, Limits{MaxInstances: 2})
	var slot Slot
	if err := slot.Swap(context.Background(), v1); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var calls atomic.Int64
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				p, release := slot.Get()
				_, err := p.Ingress(ctx, &Message{Subject: "a", Data: []byte("{}")})
				release()
				if err != nil {
					errs <- err
					return
				}
				calls.Add(1)
			}
		})
	}

	held, release := slot.Get() // v1, held across the swap
	swapped := make(chan error, 1)
	go func() { swapped <- slot.Swap(ctx, v2) }()
	for current(&slot) != v2 {
		runtime.Gosched()
	}
	select {
	case err := <-swapped:
		t.Fatalf("Swap returned (%v) while a caller still held the old plugin", err)
	default:
	}
	if _, err := held.Ingress(ctx, &Message{Subject: "a"}); err != nil {
		t.Fatalf("call on the old plugin during the swap: %v", err)
	}
	release()
	if err := <-swapped; err != nil {
		t.Fatal(err)
	}
	if _, err := held.Ingress(ctx, &Message{Subject: "a"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("old plugin after the swap: %v, want ErrClosed", err)
	}
	// Another swap with the callers still running, then stop them.
	if err := slot.Swap(ctx, v3); err != nil {
		t.Fatal(err)
	}
	for calls.Load() < 100 {
		runtime.Gosched()
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a call failed during swaps: %v", err)
	}
	if err := slot.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if current(&slot) != nil {
		t.Fatal("closed slot still holds a plugin")
	}
}

func TestInputTooLargeRefusedBeforeTheCall(t *testing.T) {
	p := load(t, plugintest.Noop, Limits{MemoryPages: 64})
	_, err := p.Ingress(context.Background(), &Message{Subject: "a", Data: make([]byte, 1<<20+1)})
	if !errors.Is(err, ErrInputTooLarge) || !strings.Contains(err.Error(), "more than the 1048576") {
		t.Fatalf("error %v, want ErrInputTooLarge naming the bound", err)
	}
	if st := p.Stats(); st.Calls != 0 || st.Failures != 0 {
		t.Fatalf("stats %+v: a refused input ran or counted", st)
	}
}

// TestMemoryPeak measures the example plugins' memory after a burst of calls of the largest input a default
// plugin takes in practice (a 1 MiB payload), and checks DefaultMemoryPages is at least twice the peak.
func TestMemoryPeak(t *testing.T) {
	var peak uint32
	for _, pkg := range []string{plugintest.Enrich, plugintest.Noop, plugintest.Redact} {
		p := load(t, pkg, Limits{MaxInstances: 1, Timeout: 10 * time.Second})
		data := []byte(`{"model":"m","pad":"` + strings.Repeat("x", wire.MaxOutputBytes-4096) + `"}`)
		start := time.Now()
		for range 20 {
			var err error
			if p.Implements(StageIngress) {
				_, err = p.Ingress(context.Background(), &Message{Subject: "a", Data: data})
			} else {
				_, err = p.Tokens(context.Background(), "s", string(data))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		inst := <-p.idle
		size := inst.mem.Size()
		p.idle <- inst
		t.Logf("%s: %d KiB after 20 calls of %d KiB, %v a call", pkg, size>>10, len(data)>>10, time.Since(start)/20)
		peak = max(peak, size)
	}
	if limit := uint64(DefaultMemoryPages) * 65536; limit < 2*uint64(peak) {
		t.Fatalf("DefaultMemoryPages is %d MiB, less than twice the peak of %d KiB", limit>>20, peak>>10)
	}
}

func current(s *Slot) *Plugin {
	p, release := s.Get()
	release()
	return p
}
