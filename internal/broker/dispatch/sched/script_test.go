package sched

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The scheduler is tested with small scripts, one command a line, in the
// manner of etcd raft's datadriven tests. Times are offsets from a fixed
// start (t0). Commands:
//
//	config aging=<dur> affinity=<dur> ack=<dur>   before the first add
//	add <seq> [tenant= prio= tokens= size= bytes= at= model= version= adapter= subject= deadline= id=]
//	worker <id> [models=a,b] [adapters=x] [versions=v1] [until=<dur>]
//	pick <worker> at=<dur> [max=] [tokens=] [bytes=] [subject=] -> <seq,...|none>
//	forget <seq> | requeue <seq> | undelay <seq> | delay <seq> until=<dur>
//	charge <tenant> <output tokens>
//	due at=<dur> -> expired=<seqs> undelayed=<seqs> lapsed=<seqs>
//	expire-workers at=<dur>
//	counter <tenant> -> <value>
//	byid <id> -> <seq|none>
//	worker-held <id> -> <n|none>
//	count -> queued=<n> held=<n> delayed=<n> len=<n> tokens-queued=<n> tokens-held=<n> bytes=<n>
//	state <seq> -> queued|delayed|held|gone
//
// After every command the test checks the scheduler's own bookkeeping
// against a recount (checkInvariants).

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// natsMatch is NATS subject matching for the subject filter: "*" is one
// token, ">" the rest.
func natsMatch(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || tok != "*" && tok != s[i] {
			return false
		}
	}
	return len(p) == len(s)
}

type runner struct {
	t    *testing.T
	cfg  Config
	s    *Scheduler
	jobs map[uint64]*Job
	line int
}

func (r *runner) sched() *Scheduler {
	if r.s == nil {
		r.s = New(r.cfg)
	}
	return r.s
}

func (r *runner) fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("line %d: "+format, append([]any{r.line}, args...)...)
}

func (r *runner) dur(v string) time.Duration {
	r.t.Helper()
	d, err := time.ParseDuration(v)
	if err != nil {
		r.fatalf("bad duration %q", v)
	}
	return d
}

func (r *runner) num(v string) int64 {
	r.t.Helper()
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		r.fatalf("bad number %q", v)
	}
	return n
}

func (r *runner) job(v string) *Job {
	r.t.Helper()
	j := r.jobs[uint64(r.num(v))]
	if j == nil {
		r.fatalf("no job %s", v)
	}
	return j
}

// args splits "k=v" words; a word without "=" is positional.
func args(words []string) (pos []string, kv map[string]string) {
	kv = map[string]string{}
	for _, w := range words {
		if k, v, ok := strings.Cut(w, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, w)
		}
	}
	return pos, kv
}

func seqs(js []*Job) string {
	if len(js) == 0 {
		return "none"
	}
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = strconv.FormatUint(j.Seq, 10)
	}
	return strings.Join(out, ",")
}

func sortedSeqs(js []*Job) string {
	js = slices.Clone(js)
	slices.SortFunc(js, func(a, b *Job) int { return int(a.Seq) - int(b.Seq) })
	return seqs(js)
}

func (r *runner) run(script string) {
	r.jobs = map[uint64]*Job{}
	r.cfg.Match = natsMatch
	for n, line := range strings.Split(script, "\n") {
		r.line = n + 1
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cmd, want, hasWant := strings.Cut(line, "->")
		want = strings.TrimSpace(want)
		words := strings.Fields(cmd)
		pos, kv := args(words[1:])
		got := ""
		switch words[0] {
		case "config":
			if r.s != nil {
				r.fatalf("config after the scheduler started")
			}
			if v, ok := kv["aging"]; ok {
				r.cfg.AgingStep = r.dur(v)
			}
			if v, ok := kv["affinity"]; ok {
				r.cfg.AffinityWait = r.dur(v)
			}
			if v, ok := kv["ack"]; ok {
				r.cfg.AckWait = r.dur(v)
			}
		case "add":
			j := &Job{Seq: uint64(r.num(pos[0])), Tenant: kv["tenant"], Model: kv["model"], Version: kv["version"], Adapter: kv["adapter"],
				Subject: kv["subject"], ID: kv["id"], Prio: 4, Tokens: 1, Size: 1, Bytes: 1, Arrived: t0}
			if v, ok := kv["prio"]; ok {
				j.Prio = int(r.num(v))
			}
			if v, ok := kv["tokens"]; ok {
				j.Tokens = r.num(v)
			}
			if v, ok := kv["size"]; ok {
				j.Size = int(r.num(v))
			}
			if v, ok := kv["bytes"]; ok {
				j.Bytes = r.num(v)
			}
			if v, ok := kv["at"]; ok {
				j.Arrived = t0.Add(r.dur(v))
			}
			if v, ok := kv["deadline"]; ok {
				j.Deadline = t0.Add(r.dur(v))
			}
			got = strconv.FormatBool(r.sched().Add(j))
			if got == "true" {
				r.jobs[j.Seq] = j
			}
		case "worker":
			labels := map[string]string{"model": kv["models"], "adapter": kv["adapters"], "version": kv["versions"]}
			until := time.Hour
			if v, ok := kv["until"]; ok {
				until = r.dur(v)
			}
			r.sched().TouchWorker(pos[0], labels, t0.Add(until))
		case "pick":
			w := r.sched().Worker(pos[0])
			if w == nil {
				r.fatalf("no worker %s", pos[0])
			}
			max, maxTokens, maxBytes := 1, int64(0), 0
			if v, ok := kv["max"]; ok {
				max = int(r.num(v))
			}
			if v, ok := kv["tokens"]; ok {
				maxTokens = r.num(v)
			}
			if v, ok := kv["bytes"]; ok {
				maxBytes = int(r.num(v))
			}
			now := t0.Add(r.dur(kv["at"]))
			var js []*Job
			if f, ok := kv["subject"]; ok {
				js = r.s.PickMatching(w, now, max, maxTokens, maxBytes, f)
			} else {
				js = r.s.Pick(w, now, max, maxTokens, maxBytes)
			}
			for _, j := range js {
				if j.State != JobHeld || j.Worker != w.ID || !j.LeaseUntil.Equal(now.Add(r.cfg.AckWait)) {
					r.fatalf("picked job %d: state %d worker %q lease until %v", j.Seq, j.State, j.Worker, j.LeaseUntil)
				}
			}
			got = seqs(js)
		case "forget":
			r.s.Forget(r.job(pos[0]))
		case "requeue":
			r.s.Requeue(r.job(pos[0]))
		case "undelay":
			r.s.Undelay(r.job(pos[0]))
		case "delay":
			until := time.Time{}
			if v, ok := kv["until"]; ok {
				until = t0.Add(r.dur(v))
			}
			r.s.Delay(r.job(pos[0]), until)
		case "charge":
			r.s.Charge(pos[0], r.num(pos[1]))
		case "due":
			e, u, l := r.s.Due(t0.Add(r.dur(kv["at"])))
			got = fmt.Sprintf("expired=%s undelayed=%s lapsed=%s", sortedSeqs(e), sortedSeqs(u), sortedSeqs(l))
		case "expire-workers":
			r.s.ExpireWorkers(t0.Add(r.dur(kv["at"])))
		case "byid":
			got = "none"
			if j := r.sched().ByID(pos[0]); j != nil {
				got = strconv.FormatUint(j.Seq, 10)
			}
		case "worker-held":
			w := r.sched().Worker(pos[0])
			got = "none"
			if w != nil {
				got = strconv.Itoa(w.Held)
			}
		case "counter":
			got = strconv.FormatFloat(r.s.Counter(pos[0]), 'f', -1, 64)
		case "count":
			s := r.sched()
			got = fmt.Sprintf("queued=%d held=%d delayed=%d len=%d tokens-queued=%d tokens-held=%d bytes=%d",
				s.Queued(), s.Held(), s.Delayed(), s.Len(), s.TokensQueued(), s.TokensHeld(), s.Bytes())
		case "state":
			got = [...]string{"queued", "delayed", "held", "gone"}[r.job(pos[0]).State]
		default:
			r.fatalf("unknown command %q", words[0])
		}
		if hasWant && got != want {
			r.fatalf("%s\n got: %s\nwant: %s", strings.TrimSpace(cmd), got, want)
		}
		if r.s != nil {
			checkInvariants(r.t, r.s)
		}
	}
}

// checkInvariants recounts what the scheduler keeps in running totals.
func checkInvariants(t *testing.T, s *Scheduler) {
	t.Helper()
	queued, tokensQueued, tokensHeld, bytes := 0, int64(0), int64(0), int64(0)
	backlog := map[string]int{}
	tenantTokens := map[string]int64{}
	var sum, sq float64
	for lvl := range s.levels {
		for tenant, tl := range s.levels[lvl].tenants {
			if tl.jobs.Len() == 0 {
				t.Fatalf("empty tenant list %q at level %d", tenant, lvl)
			}
			prev := uint64(0)
			for e := tl.jobs.Front(); e != nil; e = e.Next() {
				j := e.Value.(*Job)
				if j.State != JobQueued || j.Tenant != tenant || j.Prio != lvl || j.Seq <= prev {
					t.Fatalf("job %d out of place in list %q/%d (state %d, after %d)", j.Seq, tenant, lvl, j.State, prev)
				}
				prev = j.Seq
				queued++
				backlog[tenant]++
				tokensQueued += j.Tokens
				tenantTokens[tenant] += j.Tokens
				sum += float64(j.Tokens)
				sq += float64(j.Tokens) * float64(j.Tokens)
			}
		}
	}
	for _, j := range s.delayed {
		tokensQueued += j.Tokens
		tenantTokens[j.Tenant] += j.Tokens
	}
	maps.DeleteFunc(tenantTokens, func(_ string, n int64) bool { return n == 0 })
	if !maps.Equal(tenantTokens, s.tenantTokens) {
		t.Fatalf("tokens queued by tenant %v, recounted %v", s.tenantTokens, tenantTokens)
	}
	for _, j := range s.held {
		tokensHeld += j.Tokens
	}
	for _, j := range s.bySeq {
		bytes += j.Bytes
	}
	if queued != s.queued || queued+len(s.delayed)+len(s.held) != len(s.bySeq) {
		t.Fatalf("counts: %d in lists, queued %d, %d delayed, %d held, %d indexed", queued, s.queued, len(s.delayed), len(s.held), len(s.bySeq))
	}
	if tokensQueued != s.tokensQueued || tokensHeld != s.tokensHeld || bytes != s.bytes {
		t.Fatalf("totals: tokens queued %d/%d held %d/%d bytes %d/%d", tokensQueued, s.tokensQueued, tokensHeld, s.tokensHeld, bytes, s.bytes)
	}
	if sum != s.promptSum || sq != s.promptSq {
		t.Fatalf("prompt moments %v,%v, recounted %v,%v", s.promptSum, s.promptSq, sum, sq)
	}
	if !maps.Equal(backlog, s.backlog) {
		t.Fatalf("backlog %v, recounted %v", s.backlog, backlog)
	}
	for i, j := range s.deadlines {
		if j.deadlineIdx != i || j.State == JobGone {
			t.Fatalf("deadline heap: job %d at %d has index %d state %d", j.Seq, i, j.deadlineIdx, j.State)
		}
	}
}
