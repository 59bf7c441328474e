//go:build unix

package proctest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// delivery is one job handed to a worker.
type delivery struct {
	worker     string
	deliveries int
	asked      time.Time // when the fetch that handed it out was sent
	acked      bool      // the dispatcher answered the worker's ack with ok
	ackErr     error
}

// jobLog records every delivery of every job, by id.
type jobLog struct {
	mu   sync.Mutex
	jobs map[string][]*delivery
	// failed are the fetches that got an error: when each was sent and
	// when it failed.
	failed [][2]time.Time
}

// fetchMax is how many jobs a worker fetches at once.
const fetchMax = 8

// lostInFlight is how many fetches sent before at failed after it: each
// may have been answered by a dispatcher that died at at, its jobs leased
// to the worker (recorded in the lease store) and its reply lost.
func (l *jobLog) lostInFlight(at time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, f := range l.failed {
		if f[0].Before(at) && f[1].After(at) {
			n++
		}
	}
	return n
}

func (l *jobLog) add(worker string, asked time.Time, j *client.Job) *delivery {
	d := &delivery{worker: worker, deliveries: j.Deliveries, asked: asked}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.jobs[j.ID] = append(l.jobs[j.ID], d)
	return d
}

func (l *jobLog) settle(d *delivery, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d.acked, d.ackErr = err == nil, err
}

// acked is the number of jobs among ids 0..total-1 acked at least once.
func (l *jobLog) acked(total int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for id := range total {
		for _, d := range l.jobs[strconv.Itoa(id)] {
			if d.acked {
				n++
				break
			}
		}
	}
	return n
}

// unacked describes the jobs among ids 0..total-1 not acked yet, at most
// 20: each id with the workers and delivery counts it was handed out with.
func (l *jobLog) unacked(total int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for id := range total {
		ds := l.jobs[strconv.Itoa(id)]
		acked := false
		var who []string
		for _, d := range ds {
			acked = acked || d.acked
			who = append(who, fmt.Sprintf("%s/%d/%v", d.worker, d.deliveries, d.ackErr))
		}
		if !acked {
			out = append(out, fmt.Sprintf("%d%v", id, who))
		}
	}
	return head(out)
}

// firstAfter is when the first fetch sent after at that handed out a job
// was sent; zero if none.
func (l *jobLog) firstAfter(at time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, ds := range l.jobs {
		for _, d := range ds {
			if d.asked.After(at) && (first.IsZero() || d.asked.Before(first)) {
				first = d.asked
			}
		}
	}
	return first
}

// work fetches jobs of queue and acks each, giving an ack again until the
// dispatcher answers it (as `semaq worker` does across a failover), until
// ctx ends.
func work(ctx context.Context, name string, cl *client.Client, queue string, log *jobLog) {
	for ctx.Err() == nil {
		asked := time.Now()
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		jobs, err := cl.Fetch(fctx, queue, client.FetchMax(fetchMax), client.FetchWait(time.Second))
		cancel()
		if err != nil {
			log.mu.Lock()
			log.failed = append(log.failed, [2]time.Time{asked, time.Now()})
			log.mu.Unlock()
			// No dispatcher yet (failover): ask again.
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		for _, j := range jobs {
			d := log.add(name, asked, j)
			log.settle(d, ackUntilHeard(ctx, j))
		}
	}
}

// ackUntilHeard acks j until the dispatcher answers: ok, or a refusal
// such as ErrLeaseLost.
func ackUntilHeard(ctx context.Context, j *client.Job) error {
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := j.Ack(actx)
		cancel()
		var apiErr *semaq.APIError
		if err == nil || errors.As(err, &apiErr) && !errors.Is(err, semaq.ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond): // polling the dispatcher's return
		}
	}
}

// The node dispatching an R3 work queue (its stream's leader) is killed
// with SIGKILL while a stock JetStream client publishes jobs and SDK
// workers on every node take them, and started again: no acknowledged job
// is lost, none is served twice except the jobs a worker on the killed node
// held when it died, served once more with delivery count 2 after their
// lease, and the restarted node catches up.
func TestProcessQueueLeaderKill(t *testing.T) {
	needProcesses(t)
	const total, ackWait = 600, 20 * time.Second
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := c.connect(0).AddQueue(ctx, semaq.QueueConfig{Name: "JOBS", Subjects: []string{"jobs.>"}, Replicas: 3, AckWait: ackWait}); err != nil {
		t.Fatal(err)
	}
	leader := -1
	c.waitWhole(func(st *semaq.ClusterStatus) error {
		for _, q := range st.Queues {
			if q.Queue == "JOBS" && q.Node != "" && q.Node == q.StreamLeader {
				leader = c.index(q.Node)
				return nil
			}
		}
		return fmt.Errorf("JOBS not dispatched yet: %+v", st.Queues)
	})
	p := publish(t, c.allURLs(leader), "jobs", total)
	p.waitAcks(t, 100, 60*time.Second)

	log := &jobLog{jobs: map[string][]*delivery{}}
	// A worker on the dispatching node acks 5 jobs, then holds 3 when
	// its node dies: it dies with it.
	doomed, err := client.Connect(ctx, c.urls[leader], client.WithNATSOptions(nats.NoReconnect()))
	if err != nil {
		t.Fatal(err)
	}
	defer doomed.Close()
	var held []string
	for _, hold := range []bool{false, true} {
		fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
		max := 5
		if hold {
			max = 3
		}
		jobs, err := doomed.Fetch(fctx, "JOBS", client.FetchMax(max), client.FetchWait(5*time.Second))
		fcancel()
		if err != nil || len(jobs) != max {
			t.Fatalf("fetch on %s: %d jobs, %v", c.nodes[leader].name, len(jobs), err)
		}
		for _, j := range jobs {
			d := log.add("doomed", time.Time{}, j)
			if hold {
				held = append(held, j.ID)
				continue
			}
			actx, acancel := context.WithTimeout(ctx, 5*time.Second)
			err := j.Ack(actx)
			acancel()
			if err != nil {
				t.Fatalf("ack of %s on %s: %v", j.ID, c.nodes[leader].name, err)
			}
			log.settle(d, nil)
		}
	}
	// Workers on the two other nodes, which reconnect anywhere.
	wctx, wcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range c.nodes {
		if i == leader {
			continue
		}
		cl := c.connect(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(wctx, c.nodes[i].name, cl, "JOBS", log)
		}()
	}
	defer func() { wcancel(); wg.Wait() }()
	eventually(t, 60*time.Second, "50 jobs acked on the other nodes", func() error {
		if n := log.acked(total); n < 5+50 {
			return fmt.Errorf("%d acked", n)
		}
		return nil
	})

	killed := time.Now()
	c.nodes[leader].kill(t)
	doomed.Close()
	t.Logf("killed %s, dispatching JOBS, holding %v, after %d acknowledged publishes and %d acked jobs",
		c.nodes[leader].name, held, p.count(), log.acked(total))
	// Started again at once, as a supervisor does.
	c.nodes[leader].start(t)
	restarted := time.Now()
	c.nodes[leader].waitStarted(t, readyTimeout)
	t.Logf("%s ready %s after its start", c.nodes[leader].name, time.Since(restarted).Round(time.Millisecond))
	p.waitDone(t, total, 3*time.Minute)
	if back := p.firstAckAfter(killed); !back.IsZero() {
		t.Logf("first acknowledged publish sent after the kill: %s after it", back.Sub(killed).Round(time.Millisecond))
	}
	eventually(t, ackWait+2*time.Minute, "every job acked", func() error {
		if n := log.acked(total); n < total {
			return fmt.Errorf("%d of %d acked; not acked: %v", n, total, log.unacked(total))
		}
		return nil
	})
	if back := log.firstAfter(killed); !back.IsZero() {
		t.Logf("first fetch that got a job sent %s after the kill", back.Sub(killed).Round(time.Millisecond))
	}
	wcancel()
	wg.Wait()

	inFlight := log.lostInFlight(killed)
	if n := checkServedOnce(t, log, total, held, fetchMax*inFlight); n > 0 {
		t.Logf("%d jobs handed out once, with delivery count 2: leased in one of the %d fetches in flight at the kill", n, inFlight)
	}
	c.waitWhole(nil)
	for i, url := range c.urls {
		seen, err := readNode(url, "JOBS", "jobs.>")
		if err != nil {
			t.Fatal(err)
		}
		if len(seen) != 0 {
			t.Fatalf("JOBS through %s still holds %d jobs after every job was acked", c.nodes[i].name, len(seen))
		}
	}
	if seen := readAlone(t, c, leader, "JOBS", "jobs.>"); len(seen) != 0 {
		t.Fatalf("JOBS on %s alone still holds %d jobs after every job was acked", c.nodes[leader].name, len(seen))
	}
}

// checkServedOnce fails the test unless each job was acked exactly once
// and handed out once, except the held ones: handed out again once, with
// delivery count 2, to another worker. At most lost jobs may be handed out
// once with delivery count 2: leased by the dying dispatcher in a fetch
// whose reply was lost with it, and handed out again after that lease.
// It returns how many of those there were.
func checkServedOnce(t *testing.T, log *jobLog, total int, held []string, lost int) int {
	t.Helper()
	relost := 0
	isHeld := map[string]bool{}
	for _, id := range held {
		isHeld[id] = true
	}
	var problems []string
	for id := range total {
		ds := log.jobs[strconv.Itoa(id)]
		acks := 0
		for _, d := range ds {
			if d.acked {
				acks++
			} else if d.ackErr != nil {
				problems = append(problems, fmt.Sprintf("job %d: ack by %s refused: %v", id, d.worker, d.ackErr))
			}
		}
		if acks != 1 {
			problems = append(problems, fmt.Sprintf("job %d acked %d times", id, acks))
		}
		want := []int{1}
		if isHeld[strconv.Itoa(id)] {
			want = []int{1, 2}
		}
		var got []int
		for _, d := range ds {
			got = append(got, d.deliveries)
		}
		if fmt.Sprint(got) == "[2]" && !isHeld[strconv.Itoa(id)] && lost > 0 {
			lost--
			relost++
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			var who []string
			for _, d := range ds {
				who = append(who, fmt.Sprintf("%s (count %d, acked %v)", d.worker, d.deliveries, d.acked))
			}
			problems = append(problems, fmt.Sprintf("job %d handed out as %v, want %v: %v", id, got, want, who))
		}
	}
	if len(log.jobs) != total {
		var extra []string
		for id := range log.jobs {
			if n, err := strconv.Atoi(id); err != nil || n < 0 || n >= total {
				extra = append(extra, id)
			}
		}
		sort.Strings(extra)
		problems = append(problems, fmt.Sprintf("jobs never published handed out: %v", head(extra)))
	}
	if len(problems) > 0 {
		t.Fatalf("%d problems:\n%v", len(problems), head(problems))
	}
	return relost
}
