package faults

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/semaq/semaq/internal/blockcheck"
)

// Entry is one message of a replica's history.
type Entry struct {
	Seq uint64
	ID  string // the message's Nats-Msg-Id (the harness puts the id in the payload too)
}

// JobDelivery is one job a worker got from the work queue.
type JobDelivery struct {
	ID, Worker string
	// Asked is when the fetch that handed it out was sent: the lease the
	// dispatcher gave started after it. Got is when the fetch returned.
	Asked, Got time.Time
	// Acked is true when the dispatcher answered the worker's ack with ok,
	// at Settled.
	Acked   bool
	Settled time.Time
	Err     string // the ack's refusal, when not Acked
	// AckUnanswered is true when an ack went unanswered (timed out)
	// before its refusal: the dispatcher may have taken that one, and
	// refused the next because the job was done.
	AckUnanswered bool
	Attempts      int // the job's delivery count as the dispatcher said
}

// History is what a run saw: the clients' records and every replica's copy
// of the stream, read after healing.
type History struct {
	// Acked are the ids of the acknowledged publishes to the stream.
	Acked []string
	// Replicas is each node's copy of the stream, in sequence order, as
	// that node serves it when it leads.
	Replicas map[string][]Entry
	// Delivered counts the durable consumer's deliveries by id.
	Delivered map[string]int
	// Jobs are the ids of the acknowledged publishes to the work queue, and
	// JobDeliveries every job handed to a worker; AckWait is the queue's
	// lease.
	Jobs          []string
	JobDeliveries []JobDelivery
	AckWait       time.Duration
	// QueueLeft is how many jobs the queue still held at the end: a job
	// whose only ack went unanswered was done only if none is left.
	QueueLeft int
	// Damage is, per node, the damaged records its store still held after
	// a clean stop at the end (blockcheck.Verify).
	Damage map[string][]blockcheck.Damage
	// Leaders are, for each group ("meta", a queue's dispatch), the nodes
	// that claim to lead it after healing.
	Leaders map[string][]string
}

// Result is the checker's verdict: no problem means the run kept every
// promise checked.
type Result struct {
	Problems []string
	// Figures, for the report.
	Acked, JobsAcked, Redelivered, Delivered int
	Stored                                   map[string]int // replica → messages
	UnackedStored                            int            // stored, never acknowledged (a publish whose ack was lost)
	JobsRedeliveredAfterAck                  int
	// JobsUnconfirmed were done by an ack whose answer was lost: gone
	// from the queue, no ack answered ok.
	JobsUnconfirmed int
}

// OK reports whether the run found no problem.
func (r Result) OK() bool { return len(r.Problems) == 0 }

func (r Result) String() string {
	var b strings.Builder
	nodes := make([]string, 0, len(r.Stored))
	for n := range r.Stored {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	fmt.Fprintf(&b, "%d acknowledged publishes; stored:", r.Acked)
	for _, n := range nodes {
		fmt.Fprintf(&b, " %s %d", n, r.Stored[n])
	}
	fmt.Fprintf(&b, "; %d stored without an ack the client saw; %d consumer deliveries (%d redelivered); %d jobs acknowledged and done",
		r.UnackedStored, r.Delivered, r.Redelivered, r.JobsAcked)
	if r.JobsUnconfirmed > 0 {
		fmt.Fprintf(&b, " (%d of them by an ack whose answer was lost)", r.JobsUnconfirmed)
	}
	if r.JobsRedeliveredAfterAck > 0 {
		fmt.Fprintf(&b, "; %d jobs handed out again after an acknowledged ack", r.JobsRedeliveredAfterAck)
	}
	if len(r.Problems) == 0 {
		b.WriteString("; no problem")
	} else {
		fmt.Fprintf(&b, "; %d problems:\n  %s", len(r.Problems), strings.Join(head(r.Problems, 40), "\n  "))
	}
	return b.String()
}

// Check checks h: every acknowledged publish is stored exactly once on
// every replica and the replicas hold one history; the consumer delivered
// every acknowledged publish at least once; every acknowledged job was
// done, and no job was handed out while another worker's lease on it ran;
// every node names the same leader for each group.
func Check(h History) Result {
	res := Result{Acked: len(h.Acked), Stored: map[string]int{}}
	acked := make(map[string]bool, len(h.Acked))
	for _, id := range h.Acked {
		acked[id] = true
	}
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }

	nodes := make([]string, 0, len(h.Replicas))
	for n := range h.Replicas {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	unacked := map[string]bool{}
	for _, n := range nodes {
		entries := h.Replicas[n]
		res.Stored[n] = len(entries)
		seen := make(map[string]int, len(entries))
		var last uint64
		for _, e := range entries {
			if e.Seq <= last {
				add("%s: sequence %d after %d", n, e.Seq, last)
			}
			last = e.Seq
			seen[e.ID]++
			if !acked[e.ID] {
				unacked[e.ID] = true
			}
		}
		var lost, twice []string
		for _, id := range h.Acked {
			switch c := seen[id]; {
			case c == 0:
				lost = append(lost, id)
			case c > 1:
				twice = append(twice, fmt.Sprintf("%s×%d", id, c))
			}
		}
		if len(lost) > 0 {
			add("%s: %d acknowledged publishes lost: %v", n, len(lost), head(lost, 20))
		}
		if len(twice) > 0 {
			add("%s: %d acknowledged publishes stored more than once: %v", n, len(twice), head(twice, 20))
		}
	}
	res.UnackedStored = len(unacked)
	for _, n := range nodes[min(1, len(nodes)):] {
		if d := diverge(h.Replicas[nodes[0]], h.Replicas[n]); d != "" {
			add("%s and %s hold different histories: %s", nodes[0], n, d)
		}
	}

	if h.Delivered != nil {
		var skipped []string
		for _, id := range h.Acked {
			if h.Delivered[id] == 0 {
				skipped = append(skipped, id)
			}
		}
		for _, c := range h.Delivered {
			res.Delivered += c
			res.Redelivered += c - 1
		}
		if len(skipped) > 0 {
			add("consumer: %d acknowledged publishes never delivered: %v", len(skipped), head(skipped, 20))
		}
	}

	problems = append(problems, checkJobs(h, &res)...)

	for n, ds := range h.Damage {
		for _, d := range ds {
			add("%s keeps a damaged record after healing: %s", n, d)
		}
	}

	for g, claim := range h.Leaders {
		if len(claim) != 1 {
			add("%s: %d nodes lead it: %v", g, len(claim), claim)
		}
	}
	sort.Strings(problems)
	res.Problems = problems
	return res
}

// checkJobs checks the work queue's record.
func checkJobs(h History, res *Result) []string {
	var problems []string
	byID := map[string][]JobDelivery{}
	for _, d := range h.JobDeliveries {
		byID[d.ID] = append(byID[d.ID], d)
	}
	var lost []string
	for _, id := range h.Jobs {
		done, unanswered := false, false
		for _, d := range byID[id] {
			done = done || d.Acked
			unanswered = unanswered || d.AckUnanswered
		}
		if !done && unanswered && h.QueueLeft == 0 {
			done = true
			res.JobsUnconfirmed++
		}
		if done {
			res.JobsAcked++
			continue
		}
		var who []string
		for _, d := range byID[id] {
			who = append(who, fmt.Sprintf("%s attempt %d at %s: %s (unanswered %v)", d.Worker, d.Attempts, d.Got.Format("15:04:05.000"), d.Err, d.AckUnanswered))
		}
		lost = append(lost, fmt.Sprintf("%s %v", id, who))
	}
	if len(lost) > 0 {
		problems = append(problems, fmt.Sprintf("queue: %d acknowledged jobs never done: %v", len(lost), head(lost, 20)))
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		ds := byID[id]
		sort.Slice(ds, func(i, j int) bool { return ds[i].Got.Before(ds[j].Got) })
		again := false
		for j, d2 := range ds {
			for _, d1 := range ds[:j] {
				if d1.Acked && !d1.Settled.After(d2.Got) {
					again = true
					continue
				}
				// d1's lease ran until at least d1.Asked+AckWait, unless
				// its ack ended it first.
				if d2.Got.Before(d1.Asked.Add(h.AckWait)) {
					problems = append(problems, fmt.Sprintf("queue: job %s handed to %s %s into the lease %s got (attempts %d then %d)",
						id, d2.Worker, d2.Got.Sub(d1.Asked).Round(time.Millisecond), d1.Worker, d1.Attempts, d2.Attempts))
				}
			}
		}
		if again {
			res.JobsRedeliveredAfterAck++
		}
	}
	return problems
}

// diverge describes where b departs from a; "" when they are equal.
func diverge(a, b []Entry) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("entry %d is seq %d %q on one, seq %d %q on the other", i, a[i].Seq, a[i].ID, b[i].Seq, b[i].ID)
		}
	}
	switch {
	case len(a) < len(b):
		return fmt.Sprintf("the first is a prefix of the second, %d entries shorter", len(b)-len(a))
	case len(a) > len(b):
		return fmt.Sprintf("the second is a prefix of the first, %d entries shorter", len(a)-len(b))
	}
	return ""
}

// head is at most the first n of s.
func head(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("… %d more", len(s)-n))
	}
	return s
}
