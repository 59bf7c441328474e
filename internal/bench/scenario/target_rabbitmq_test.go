package scenario

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/semaq/semaq/internal/bench"
)

func TestRabbitMQTargetNames(t *testing.T) {
	sc, err := LoadScenario("finetune")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		targets []string
		want    string // "" when valid
	}{
		{"classic", []string{TargetRabbitMQ}, ""},
		{"quorum", []string{TargetRabbitMQQuorum}, ""},
		{"both and semaq", []string{bench.TargetSemaq, TargetRabbitMQ, TargetRabbitMQQuorum}, ""},
		{"all", ScenarioTargets, ""},
		{"underscore", []string{"rabbitmq_quorum"}, `"rabbitmq_quorum" is not a target (want semaq, jetstream, rabbitmq, rabbitmq-quorum)`},
		{"queue type alone", []string{"quorum"}, `"quorum" is not a target`},
		{"case", []string{"RabbitMQ-Quorum"}, `"RabbitMQ-Quorum" is not a target`},
		{"quorum twice", []string{TargetRabbitMQQuorum, bench.TargetSemaq, TargetRabbitMQQuorum}, `"rabbitmq-quorum" is given twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ScenarioConfig{Scenario: sc, Targets: tc.targets}
			err := cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Errorf("Validate(%v) = %v, want nil", tc.targets, err)
				}
				return
			}
			if !errors.Is(err, bench.ErrBadConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate(%v) = %v, want ErrBadConfig naming %q", tc.targets, err, tc.want)
			}
		})
	}
	for _, name := range []string{TargetRabbitMQ, TargetRabbitMQQuorum} {
		if !isRabbitMQ(name) {
			t.Errorf("isRabbitMQ(%q) = false", name)
		}
	}
	for _, name := range []string{bench.TargetSemaq, bench.TargetJetStream, "rabbitmq-classic", ""} {
		if isRabbitMQ(name) {
			t.Errorf("isRabbitMQ(%q) = true", name)
		}
	}
}

// openSystem picks the queue type by target name; an unreachable server
// is ErrUnreachable with the target's own hint.
func TestRabbitMQOpenSystemUnreachable(t *testing.T) {
	for _, name := range []string{TargetRabbitMQ, TargetRabbitMQQuorum} {
		t.Run(name, func(t *testing.T) {
			sys, err := openSystem(nil, name, "amqp://guest:secret@127.0.0.1:1/")
			if sys != nil || !errors.Is(err, ErrUnreachable) {
				t.Fatalf("openSystem = %v, %v; want ErrUnreachable", sys, err)
			}
			if msg := err.Error(); !strings.Contains(msg, "leave "+name+" out of --targets") || strings.Contains(msg, "secret") {
				t.Errorf("error %q: want the target's hint, no password", msg)
			}
		})
	}
}

// The declare arguments of the stage queues, checked without a server:
// what RabbitMQ is asked for is what the target says it measures.
func TestRabbitMQStageQueues(t *testing.T) {
	classic, quorum := newRabbitSystemAt(DefaultRabbitMQURL, false), newRabbitSystemAt(DefaultRabbitMQURL, true)
	for _, tc := range []struct {
		sys      *rabbitSystem
		target   string
		wantType any // x-queue-type, nil when absent
	}{
		{classic, TargetRabbitMQ, nil},
		{quorum, TargetRabbitMQQuorum, amqp.QueueTypeQuorum},
	} {
		t.Run(tc.target, func(t *testing.T) {
			if got := tc.sys.target(); got != tc.target {
				t.Errorf("target() = %q, want %q", got, tc.target)
			}
			for stage := range 3 {
				d := tc.sys.stageQueue(stage)
				if d.name != tc.sys.queue(stage) {
					t.Errorf("stage %d: declares %q, consumes and deletes %q", stage, d.name, tc.sys.queue(stage))
				}
				// Quorum queues refuse non-durable, exclusive and
				// auto-delete; close deletes the queues of both.
				if !d.durable || d.exclusive || d.autoDelete {
					t.Errorf("stage %d: durable %v, exclusive %v, auto-delete %v; want durable only", stage, d.durable, d.exclusive, d.autoDelete)
				}
				if got := d.args[amqp.QueueTypeArg]; got != tc.wantType {
					t.Errorf("stage %d: %s = %v, want %v", stage, amqp.QueueTypeArg, got, tc.wantType)
				}
				if tc.wantType == nil && d.args != nil {
					t.Errorf("stage %d: classic queue declared with arguments %v", stage, d.args)
				}
				if err := d.args.Validate(); err != nil {
					t.Errorf("stage %d: arguments %v: %v", stage, d.args, err)
				}
			}
		})
	}
	// The two targets in one run, and two systems of one target made at
	// once (rounds, runs sharing a server), never share a queue: RabbitMQ
	// refuses to redeclare a queue with another type, and one system's
	// close would delete the other's.
	again := newRabbitSystemAt(DefaultRabbitMQURL, true)
	seen := map[string]string{}
	for _, s := range []*rabbitSystem{classic, quorum, again} {
		for stage := range 3 {
			q := s.queue(stage)
			if prev, ok := seen[q]; ok {
				t.Errorf("queue %q of %s (%s) already belongs to %s", q, s.target(), s.prefix, prev)
			}
			seen[q] = s.prefix
		}
	}
	if !strings.Contains(quorum.prefix, "quorum") || !strings.Contains(classic.prefix, "classic") {
		t.Errorf("prefixes %q, %q do not say the queue type", classic.prefix, quorum.prefix)
	}
}

func TestRabbitMQDescribe(t *testing.T) {
	durable, transient := baseScenario(), baseScenario()
	durable.Durable, transient.Durable = true, false
	for _, tc := range []struct {
		quorum   bool
		sc       *Scenario
		want     []string
		dontWant []string
	}{
		{false, durable, []string{"rabbitmq at amqp://guest:xxxxx@", "classic durable queues", "once consumed and acked if that comes first"}, []string{"quorum", "guest:guest"}},
		{false, transient, []string{"classic durable queues", "transient messages"}, []string{"quorum"}},
		{true, durable, []string{"rabbitmq-quorum at amqp://guest:xxxxx@", "quorum queues", "written and fsynced before its confirm"}, []string{"classic", "not durable", "guest:guest"}},
		{true, transient, []string{"quorum queues", "written and fsynced before its confirm", "the scenario is not durable", "still fsyncs"}, []string{"classic"}},
	} {
		s := newRabbitSystemAt(DefaultRabbitMQURL, tc.quorum)
		s.sc = tc.sc
		got := s.describe()
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("quorum %v, durable %v: %q lacks %q", tc.quorum, tc.sc.Durable, got, w)
			}
		}
		for _, w := range tc.dontWant {
			if strings.Contains(got, w) {
				t.Errorf("quorum %v, durable %v: %q says %q", tc.quorum, tc.sc.Durable, got, w)
			}
		}
	}
}

// SemaQ gets a ratio against each RabbitMQ target; a RabbitMQ target gets
// none against the other.
func TestRabbitMQRatios(t *testing.T) {
	mk := func(target string, msgs float64) ScenarioResult {
		return ScenarioResult{Result: bench.Result{Target: target, ThroughputMsgsPerS: msgs}}
	}
	rep := &ScenarioReport{Config: ScenarioSetup{Spec: *baseScenario()}, Results: []ScenarioResult{
		mk(bench.TargetSemaq, 600), mk(TargetRabbitMQ, 1000), mk(TargetRabbitMQQuorum, 400),
	}}
	rep.finish()
	s := rep.Result(bench.TargetSemaq)
	if s.RatioVsRabbitMQ == nil || *s.RatioVsRabbitMQ != 0.6 || s.RatioVsRabbitMQQuorum == nil || *s.RatioVsRabbitMQQuorum != 1.5 {
		t.Errorf("semaq: vs rabbitmq %v, vs rabbitmq-quorum %v; want 0.6, 1.5", deref64(s.RatioVsRabbitMQ), deref64(s.RatioVsRabbitMQQuorum))
	}
	for _, name := range []string{TargetRabbitMQ, TargetRabbitMQQuorum} {
		if r := rep.Result(name); r.RatioVsRabbitMQ != nil || r.RatioVsRabbitMQQuorum != nil {
			t.Errorf("%s: ratios %v, %v against a RabbitMQ target", name, deref64(r.RatioVsRabbitMQ), deref64(r.RatioVsRabbitMQQuorum))
		}
	}
	// The goal stays on the classic baseline it was set on.
	if g := rep.Goals; g == nil || g.VsRabbitMQ == nil || *g.VsRabbitMQ != 0.6 {
		t.Errorf("goals %+v: want the rabbitmq ratio 0.6", g)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"semaq vs rabbitmq ", "semaq vs rabbitmq-quorum", "1.500×"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if strings.Contains(table.String(), "rabbitmq vs rabbitmq-quorum") || strings.Contains(table.String(), "rabbitmq-quorum vs rabbitmq") {
		t.Errorf("table compares the RabbitMQ targets with each other:\n%s", table.String())
	}
}

func deref64(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// rabbitMQTestURL is the server of the tests that need one: $SEMAQ_TEST_RABBITMQ_URL,
// else the default. The tests skip, saying so, when none answers there.
func rabbitMQTestURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("SEMAQ_TEST_RABBITMQ_URL")
	if u == "" {
		u = DefaultRabbitMQURL
	}
	conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(time.Second)})
	if err != nil {
		t.Skipf("no RabbitMQ at %s (%v): set SEMAQ_TEST_RABBITMQ_URL or start one to run this test", redactURL(u), err)
	}
	_ = conn.Close()
	return u
}

// Against a real server: each target declares its queue type (a passive
// declare with the other type is refused), and close deletes the queues.
func TestRabbitMQServerQueues(t *testing.T) {
	u := rabbitMQTestURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sc := baseScenario()
	sc.Hops = 2
	conn, err := amqp.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, quorum := range []bool{false, true} {
		sys, err := newRabbitSystem(u, quorum)
		if err != nil {
			t.Fatal(err)
		}
		if err := sys.setup(ctx, sc); err != nil {
			sys.close()
			t.Fatalf("%s: setup: %v", sys.target(), err)
		}
		for stage := range sc.Hops {
			// Redeclaring with the declared arguments succeeds; with the
			// other queue type RabbitMQ refuses (406), which shows the type
			// the queue was made with.
			d := sys.stageQueue(stage)
			if err := declareOn(conn, d); err != nil {
				t.Errorf("%s: redeclaring %s as declared: %v", sys.target(), d.name, err)
			}
			other := d
			other.args = amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeClassic}
			if !quorum {
				other.args = amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
			}
			var ae *amqp.Error
			if err := declareOn(conn, other); !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
				t.Errorf("%s: redeclaring %s with %v: %v, want PRECONDITION_FAILED", sys.target(), d.name, other.args, err)
			}
		}
		sys.close()
		for stage := range sc.Hops {
			q := sys.queue(stage)
			var ae *amqp.Error
			if err := passiveOn(conn, q); !errors.As(err, &ae) || ae.Code != amqp.NotFound {
				t.Errorf("%s: queue %s after close: %v, want NOT_FOUND", sys.target(), q, err)
			}
		}
	}
}

// declareOn declares d on a channel of its own (a refused declare closes
// the channel).
func declareOn(conn *amqp.Connection, d queueDecl) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	_, err = ch.QueueDeclare(d.name, d.durable, d.autoDelete, d.exclusive, false, d.args)
	return err
}

func passiveOn(conn *amqp.Connection, q string) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
	return err
}

// Against a real server: both RabbitMQ targets in one run, durable and
// not, replies included, every message through.
func TestRabbitMQServerScenario(t *testing.T) {
	u := rabbitMQTestURL(t)
	for _, name := range []string{"finetune", "rag", "agent"} {
		t.Run(name, func(t *testing.T) {
			sc, err := LoadScenario(name)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rep, err := RunScenario(ctx, ScenarioConfig{Scenario: sc, Targets: []string{bench.TargetSemaq, TargetRabbitMQ, TargetRabbitMQQuorum},
				Short: true, DataDir: t.TempDir(), RabbitMQURL: u})
			if err != nil {
				t.Fatal(err)
			}
			for _, target := range []string{TargetRabbitMQ, TargetRabbitMQQuorum} {
				res := rep.Result(target)
				if res == nil || res.Unreachable != "" {
					t.Fatalf("%s: not measured: %+v", target, res)
				}
				if res.ThroughputMsgsPerS <= 0 || res.Completed == 0 || res.Unfinished != 0 || res.Errors != 0 {
					t.Errorf("%s: %.0f msgs/s, %d completed, %d unfinished, %d errors (first: %s)",
						target, res.ThroughputMsgsPerS, res.Completed, res.Unfinished, res.Errors, res.FirstError)
				}
				if !strings.HasPrefix(res.Setup, target+" at ") {
					t.Errorf("%s: setup %q", target, res.Setup)
				}
			}
			s := rep.Result(bench.TargetSemaq)
			if s.RatioVsRabbitMQ == nil || s.RatioVsRabbitMQQuorum == nil {
				t.Errorf("semaq: ratios vs rabbitmq %v, vs rabbitmq-quorum %v", deref64(s.RatioVsRabbitMQ), deref64(s.RatioVsRabbitMQQuorum))
			}
		})
	}
}
