//go:build unix

package proctest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/blockcheck"
	"github.com/semaq/semaq/internal/broker/clusterstatus"
	"github.com/semaq/semaq/internal/faults"
	"github.com/semaq/semaq/internal/wallclock"
	"github.com/semaq/semaq/semaq"
)

// The fault harness's settings (docs/faults.md). SEMAQ_FAULT_TESTS=1 runs
// TestFaults for SEMAQ_FAULT_DURATION (default 5m) on SEMAQ_FAULT_NODES
// nodes (3 or 5) with --sync SEMAQ_FAULT_SYNC (default: the node's
// default) from SEMAQ_FAULT_SEED (default: the time), keeping the nodes'
// logs and data under SEMAQ_FAULT_DIR if set.
const (
	faultEnv         = "SEMAQ_FAULT_TESTS"
	faultSeedEnv     = "SEMAQ_FAULT_SEED"
	faultDurationEnv = "SEMAQ_FAULT_DURATION"
	faultNodesEnv    = "SEMAQ_FAULT_NODES"
	faultSyncEnv     = "SEMAQ_FAULT_SYNC"
	faultDirEnv      = "SEMAQ_FAULT_DIR" // keep the nodes' logs and data there
)

// faultSettings are one run's.
type faultSettings struct {
	seed     uint64
	duration time.Duration
	nodes    int
	sync     string
}

func faultSettingsFromEnv(t *testing.T) faultSettings {
	t.Helper()
	if os.Getenv(faultEnv) != "1" {
		if os.Getenv("SEMAQ_PROCESS_TESTS") == "1" {
			// The process tests' short run: 20 s of seed 1 (a 15 s pause
			// of the node dispatching the queue, then a deleted index).
			return faultSettings{seed: 1, duration: 20 * time.Second, nodes: 3, sync: os.Getenv(faultSyncEnv)}
		}
		t.Skipf("runs semaq processes under faults for minutes: run with %s=1 (%s, %s, %s, %s; docs/faults.md), "+
			"or SEMAQ_PROCESS_TESTS=1 for 20 s of seed 1",
			faultEnv, faultSeedEnv, faultDurationEnv, faultNodesEnv, faultSyncEnv)
	}
	s := faultSettings{seed: uint64(time.Now().UnixNano() % 1_000_000), duration: 5 * time.Minute, nodes: 3, sync: os.Getenv(faultSyncEnv)}
	var err error
	if v := os.Getenv(faultSeedEnv); v != "" {
		if s.seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s: %v", faultSeedEnv, err)
		}
	}
	if v := os.Getenv(faultDurationEnv); v != "" {
		if s.duration, err = time.ParseDuration(v); err != nil {
			t.Fatalf("%s: %v", faultDurationEnv, err)
		}
	}
	if v := os.Getenv(faultNodesEnv); v != "" {
		if s.nodes, err = strconv.Atoi(v); err != nil || (s.nodes != 3 && s.nodes != 5) {
			t.Fatalf("%s: %q, want 3 or 5", faultNodesEnv, v)
		}
	}
	return s
}

// faultCluster is a cluster whose routes all pass through the proxy.
type faultCluster struct {
	*cluster
	proxy *faults.Proxy
	data  []string // each node's --data
	clock []string // each node's clock offset file (wallclock.FileEnv)
	// startFailures counts the starts that exited before the node served;
	// storeRepairs those that refused a damaged store and were started
	// again with store_check: repair (repairOnRefusal).
	startFailures, storeRepairs int
}

// startFaultCluster starts n nodes whose routes go through proxy: each
// node advertises its front and lists the fronts as its routes.
func startFaultCluster(t *testing.T, n int, sync string) *faultCluster {
	t.Helper()
	bin := semaqBinary(t)
	proxy := faults.NewProxy()
	t.Cleanup(proxy.Close) // after the nodes are killed (cleanups run last first)
	fc := &faultCluster{cluster: &cluster{t: t}, proxy: proxy}
	c := fc.cluster
	dir := t.TempDir()
	if keep := os.Getenv(faultDirEnv); keep != "" {
		// Kept after the run: the nodes' logs and stores, for a post-mortem.
		dir = filepath.Join(keep, fmt.Sprintf("faults-%d", time.Now().Unix()))
		t.Logf("nodes' logs and data under %s", dir)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range c.nodes {
				t.Logf("---- %s (%s), SemaQ's warnings and errors, then the last lines:\n%s\n----\n%s",
					p.name, p.logPath, p.grep(`level=(WARN|ERROR) msg="[^A-Z]`), p.tail(60))
			}
		}
		for _, p := range c.nodes {
			if p.running() {
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
			}
			p.kill(t)
		}
	})
	ports, err := freePorts(3 * n)
	if err != nil {
		t.Fatal(err)
	}
	fronts := make([]string, n)
	for i := range n {
		if fronts[i], err = proxy.Front(faults.NodeName(i), fmt.Sprintf("127.0.0.1:%d", ports[2*n+i])); err != nil {
			t.Fatal(err)
		}
	}
	routes := make([]string, n)
	for i, f := range fronts {
		routes[i] = "nats://" + f
	}
	c.nodes, c.urls, fc.data, fc.clock = make([]*proc, n), make([]string, n), make([]string, n), make([]string, n)
	for i := range n {
		name := faults.NodeName(i)
		fc.data[i] = filepath.Join(dir, name)
		fc.clock[i] = filepath.Join(dir, name+".clock")
		conf := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(conf, []byte("cluster_advertise: "+fronts[i]+"\nstore_check: refuse\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c.urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", ports[i])
		args := []string{"serve", "--config", conf,
			"--data", fc.data[i],
			"--listen", fmt.Sprintf("127.0.0.1:%d", ports[i]),
			"--http", fmt.Sprintf("127.0.0.1:%d", ports[n+i]),
			"--node", name,
			"--cluster-name", "faults",
			"--cluster-listen", fmt.Sprintf("127.0.0.1:%d", ports[2*n+i]),
			"--routes", strings.Join(routes, ","),
		}
		if sync != "" {
			args = append(args, "--sync", sync)
		}
		c.nodes[i] = &proc{name: name, bin: bin, args: args, logPath: filepath.Join(dir, name+".log"),
			env: []string{wallclock.FileEnv + "=" + fc.clock[i]}}
	}
	for _, p := range c.nodes {
		p.start(t)
	}
	for _, p := range c.nodes {
		p.waitStarted(t, readyTimeout)
	}
	c.waitWhole(nil)
	return fc
}

// recoverTimeout bounds the wait for the cluster to be whole after a
// fault is healed: a node may have to catch up a stream from scratch.
const recoverTimeout = 3 * time.Minute

// faultAckWait is the work queue's lease and the consumer's ack wait.
const faultAckWait = 10 * time.Second

// A cluster of real nodes, their routes through the harness's proxy, runs a
// seeded schedule of faults (kills, pauses, partitions, delays, coordinated
// crashes, file faults on a minority) while stock clients publish with
// message ids to a replicated stream and a work queue, a durable consumer
// reads the stream and workers take the jobs. After healing, every
// replica's history is read (each node made the stream's leader in turn)
// and checked (faults.Check): no acknowledged publish lost or doubled on
// any replica, one history, no delivery skipped, no job lost or leased
// twice at once, one meta leader and one dispatcher per queue. The seed
// is printed: SEMAQ_FAULT_SEED replays the schedule.
func TestFaults(t *testing.T) {
	set := faultSettingsFromEnv(t)
	t.Logf("fault run: seed %d, %d nodes, %s of faults, --sync %q (replay: %s=1 %s=%d %s=%d %s=%s)",
		set.seed, set.nodes, set.duration, set.sync, faultEnv, faultSeedEnv, set.seed, faultNodesEnv, set.nodes, faultDurationEnv, set.duration)
	fc := startFaultCluster(t, set.nodes, set.sync)
	c := fc.cluster
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	setup, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	admin := c.connect(0)
	if _, err := admin.AddStream(setup, semaq.StreamConfig{Name: "FA", Subjects: []string{"fa.>"}, Replicas: set.nodes}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AddQueue(setup, semaq.QueueConfig{Name: "JOBS", Subjects: []string{"jobs.>"}, Replicas: 3, AckWait: faultAckWait}); err != nil {
		t.Fatal(err)
	}
	cons := newConsumerLog(t, c.allURLs(0))
	c.waitWhole(nil)

	const many = 1 << 30 // until finished
	pubs := publish(t, c.allURLs(0), "fa", many)
	jobPub := publish(t, c.allURLs(set.nodes-1), "jobs", many)
	jobs := &jobRecord{}
	wctx, wcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range c.nodes {
		cl := c.connect(i)
		wg.Add(2)
		go func() {
			defer wg.Done()
			faultWorker(wctx, c.nodes[i].name, cl, jobs)
		}()
		go func() {
			defer wg.Done()
			cons.run(wctx)
		}()
	}
	defer func() { wcancel(); wg.Wait() }()
	pubs.waitAcks(t, 50, time.Minute)

	sched := faults.NewSchedule(set.seed, set.nodes)
	minority := make([]string, 0, len(sched.Minority()))
	for _, i := range sched.Minority() {
		minority = append(minority, c.nodes[i].name)
	}
	t.Logf("file faults on %v only", minority)
	counts := map[string]int{}
	start := time.Now()
	for time.Since(start) < set.duration {
		st := sched.Next()
		t.Logf("%6s %s (%d acknowledged publishes, %d jobs)", time.Since(start).Round(time.Second), st, pubs.count(), jobPub.count())
		label := fc.apply(st)
		counts[label]++
		if st.Clock != nil {
			counts["clock"]++
		}
		if err := fc.waitRecovered(recoverTimeout); err != nil {
			t.Fatalf("seed %d, step %s: the cluster is not whole %s after healing: %v", set.seed, st, recoverTimeout, err)
		}
		time.Sleep(st.Gap) // the quiet between faults is part of the schedule
	}
	faultTime := time.Since(start)
	t.Logf("faults done after %s: %v; %d starts exited before the node served; %d refused a damaged store and were repaired",
		faultTime.Round(time.Second), counts, fc.startFailures, fc.storeRepairs)

	pubs.finish()
	jobPub.finish()
	acked := ids(pubs.count())
	jobIDs := ids(jobPub.count())
	// Waited for, not asserted: the checker says what is missing.
	waitFor(t, recoverTimeout, "the consumer to deliver every acknowledged publish", func() error {
		if n := cons.missing(acked); n > 0 {
			return fmt.Errorf("%d of %d not delivered", n, len(acked))
		}
		return nil
	})
	waitFor(t, faultAckWait+recoverTimeout, "every acknowledged job done", func() error {
		if n := jobs.undone(jobIDs); n > 0 {
			return fmt.Errorf("%d of %d not done", n, len(jobIDs))
		}
		return nil
	})
	wcancel()
	wg.Wait()
	c.waitWhole(nil)

	h := faults.History{
		Acked:         acked,
		Replicas:      map[string][]faults.Entry{},
		Delivered:     cons.snapshot(),
		Jobs:          jobIDs,
		JobDeliveries: jobs.snapshot(),
		AckWait:       faultAckWait,
		Leaders:       fc.leaders(t),
	}
	si, err := fc.streamInfo("FA")
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range c.nodes {
		entries, err := fc.readReplica(i, "FA", si.State.FirstSeq, si.State.LastSeq)
		if err != nil {
			t.Fatalf("seed %d: reading %s's copy of FA: %v", set.seed, p.name, err)
		}
		h.Replicas[p.name] = entries
	}
	if jsi, err := fc.streamInfo("JOBS"); err != nil {
		t.Fatal(err)
	} else {
		h.QueueLeft = int(jsi.State.Msgs)
	}
	// Every node stopped cleanly, then each store's blocks read offline.
	h.Damage = map[string][]blockcheck.Damage{}
	for i, p := range c.nodes {
		p.stop(t, time.Minute)
		rep, err := blockcheck.Verify(fc.data[i], "FA")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s's store of FA after a clean stop: %d blocks, %d records whose checksums hold, %d damaged", p.name, rep.Blocks, rep.Records, len(rep.Damage))
		h.Damage[p.name] = rep.Damage
	}
	res := faults.Check(h)
	t.Logf("seed %d, %d nodes, %s of faults %v: %s", set.seed, set.nodes, faultTime.Round(time.Second), counts, res)
	if !res.OK() {
		t.Fatalf("seed %d failed the check (replay: %s=1 %s=%d %s=%d %s=%s)", set.seed,
			faultEnv, faultSeedEnv, set.seed, faultNodesEnv, set.nodes, faultDurationEnv, set.duration)
	}
}

// waitFor polls cond until it returns nil or timeout passes, and logs
// its last error then.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("waited %s for %s: %v", timeout, what, err)
			return
		}
		time.Sleep(100 * time.Millisecond) // polling a condition
	}
}

// ids are "0".."n-1": the publisher's acknowledged ids, in order.
func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

func (fc *faultCluster) names(idx []int) []string {
	out := make([]string, len(idx))
	for i, k := range idx {
		out[i] = fc.nodes[k].name
	}
	return out
}

// apply runs step st: applies the fault, holds it, heals it. It returns
// the label the run's counts use.
func (fc *faultCluster) apply(st faults.Step) string {
	t := fc.t
	if st.Clock != nil {
		// Jumped as the fault starts, set right as it heals (the node
		// reads its file every wallclock.Poll, through restarts too).
		fc.setClock(st.Clock.Node, st.Clock.By)
		defer fc.setClock(st.Clock.Node, 0)
	}
	switch st.Kind {
	case faults.Kill, faults.KillAll:
		nodes := st.Nodes
		if st.Kind == faults.KillAll {
			nodes = make([]int, len(fc.nodes))
			for i := range nodes {
				nodes[i] = i
			}
		}
		for _, i := range nodes {
			fc.nodes[i].kill(t)
		}
		time.Sleep(st.For) // down for the step's time
		fc.startAll(nodes)
	case faults.Pause:
		for _, i := range st.Nodes {
			_ = fc.nodes[i].cmd.Process.Signal(syscall.SIGSTOP)
		}
		time.Sleep(st.For)
		for _, i := range st.Nodes {
			_ = fc.nodes[i].cmd.Process.Signal(syscall.SIGCONT)
		}
	case faults.Partition:
		groups := make([][]string, len(st.Groups))
		for g, idx := range st.Groups {
			groups[g] = fc.names(idx)
		}
		fc.proxy.Partition(groups...)
		time.Sleep(st.For)
		fc.proxy.Heal()
	case faults.Delay:
		for _, i := range st.Nodes {
			for k, other := range fc.nodes {
				if k != i {
					fc.proxy.Delay(fc.nodes[i].name, other.name, st.Latency)
					fc.proxy.Delay(other.name, fc.nodes[i].name, st.Latency)
				}
			}
		}
		time.Sleep(st.For)
		fc.proxy.Heal()
	case faults.File:
		i := st.Nodes[0]
		fc.nodes[i].kill(t)
		did, err := faults.Corrupt(fc.data[i], "FA", st.File, st.FileSeed)
		switch {
		case errors.Is(err, faults.ErrNoFile):
			t.Logf("       %s: %v", fc.nodes[i].name, err)
		case err != nil:
			t.Fatal(err)
		default:
			t.Logf("       %s: %s", fc.nodes[i].name, did)
		}
		time.Sleep(st.For)
		fc.startAll([]int{i})
		if err != nil {
			return string(st.File) + " (no file)"
		}
		return string(st.File)
	}
	return string(st.Kind)
}

// setClock sets node i's wall clock offset: its file, replaced whole.
func (fc *faultCluster) setClock(i int, by time.Duration) {
	tmp := fc.clock[i] + ".tmp"
	if err := os.WriteFile(tmp, []byte(by.String()), 0o600); err != nil {
		fc.t.Fatal(err)
	}
	if err := os.Rename(tmp, fc.clock[i]); err != nil {
		fc.t.Fatal(err)
	}
}

// startAll starts the nodes idx again and waits until each serves. A node
// that exits before it serves is started again, as a supervisor would, up
// to maxStarts times; each such exit is logged and counted (startFailures).
func (fc *faultCluster) startAll(idx []int) {
	for _, i := range idx {
		fc.nodes[i].start(fc.t)
	}
	for _, i := range idx {
		p := fc.nodes[i]
		for attempt := 1; ; attempt++ {
			select {
			case <-p.ready:
				fc.refuseAgain(p)
			case <-p.done:
				if fc.repairOnRefusal(p) {
					continue
				}
				fc.startFailures++
				if attempt == maxStarts {
					fc.t.Fatalf("%s exited before it was ready %d times:\n%s", p.name, attempt, p.tail(40))
				}
				fc.t.Logf("       %s exited before it was ready (started again): %s", p.name, lastLine(p.tail(3)))
				p.start(fc.t)
				continue
			case <-time.After(recoverTimeout):
				fc.t.Fatalf("%s not ready after %s:\n%s", p.name, recoverTimeout, p.tail(40))
			}
			break
		}
	}
}

// maxStarts bounds the starts of a node that exits before it serves.
const maxStarts = 5

// lastLine is the last line of s.
func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndex(s, "\n")+1:]
}

// waitRecovered waits until the cluster is whole (whole) or timeout
// passes.
func (fc *faultCluster) waitRecovered(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := fc.status(ctx)
		cancel()
		if err == nil {
			if err = whole(st, len(fc.nodes)); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond) // polling a condition
	}
}

// leaders are, from the cluster status, the leader of the meta group,
// of each stream and of each queue's dispatch; a group the status warns two
// nodes lead (clusterstatus.SplitBrainWarning) has them both.
func (fc *faultCluster) leaders(t *testing.T) map[string][]string {
	t.Helper()
	st := fc.waitWhole(nil)
	out := map[string][]string{"meta": {st.MetaLeader}}
	for _, s := range st.Streams {
		out["stream "+s.Stream] = []string{s.Leader}
	}
	for _, q := range st.Queues {
		out["queue "+q.Queue] = []string{q.Node}
	}
	for _, w := range st.Warnings {
		if g, nodes, ok := strings.Cut(strings.TrimPrefix(w, clusterstatus.SplitBrainWarning), " is led by "); ok && strings.HasPrefix(w, clusterstatus.SplitBrainWarning) {
			_, list, _ := strings.Cut(nodes, ": ")
			out[g] = strings.Split(list, ", ")
		}
	}
	return out
}

// streamInfo is the part of $JS.API.STREAM.INFO the harness reads.
type streamInfo struct {
	State struct {
		FirstSeq uint64 `json:"first_seq"`
		LastSeq  uint64 `json:"last_seq"`
		Msgs     uint64 `json:"messages"`
	} `json:"state"`
	Error *struct {
		Description string `json:"description"`
	} `json:"error"`
}

// streamInfo is stream's info from its leader.
func (fc *faultCluster) streamInfo(stream string) (streamInfo, error) {
	var si streamInfo
	nc, err := nats.Connect(fc.allURLs(0))
	if err != nil {
		return si, err
	}
	defer nc.Close()
	if err := jsRequest(nc, "$JS.API.STREAM.INFO."+stream, struct{}{}, &si); err != nil {
		return si, err
	}
	if si.Error != nil {
		return si, errors.New(si.Error.Description)
	}
	return si, nil
}

func jsRequest(nc *nats.Conn, subject string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	m, err := nc.Request(subject, body, 5*time.Second)
	if err != nil {
		return fmt.Errorf("%s: %w", subject, err)
	}
	return json.Unmarshal(m.Data, resp)
}

// readReplica reads node i's own copy of stream: every other node is
// killed, so node i is the only replica left to answer a direct get, and
// started again after. first and last are the stream's sequences as its
// leader reported them; the node's own messages past last are read too.
func (fc *faultCluster) readReplica(i int, stream string, first, last uint64) ([]faults.Entry, error) {
	var others []int
	for k, p := range fc.nodes {
		if k != i {
			p.kill(fc.t)
			others = append(others, k)
		}
	}
	defer func() {
		fc.startAll(others)
		if err := fc.waitRecovered(recoverTimeout); err != nil {
			fc.t.Fatalf("the cluster is not whole again after reading %s alone: %v", fc.nodes[i].name, err)
		}
	}()
	nc, err := nats.Connect(fc.urls[i], nats.MaxReconnects(-1))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	// A follower answers direct gets once a check (every 2 s in NATS)
	// finds it caught up: until then nothing answers.
	deadline := time.Now().Add(time.Minute)
	for {
		_, _, err := directGetSeq(nc, stream, first)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // polling a condition
	}
	entries, err := readAll(nc, stream, first, last)
	if err != nil {
		return nil, err
	}
	for seq := last + 1; ; seq++ {
		e, ok, err := directGetSeq(nc, stream, seq)
		if err != nil {
			return nil, err
		}
		if !ok {
			return entries, nil
		}
		entries = append(entries, e)
	}
}

// directGetSeq is message seq of stream by direct get; false when the
// stream holds no message there.
func directGetSeq(nc *nats.Conn, stream string, seq uint64) (faults.Entry, bool, error) {
	body, _ := json.Marshal(map[string]uint64{"seq": seq})
	m, err := nc.Request("$JS.API.DIRECT.GET."+stream, body, 5*time.Second)
	if err != nil {
		return faults.Entry{}, false, fmt.Errorf("direct get %d of %s: %w", seq, stream, err)
	}
	switch st := m.Header.Get("Status"); st {
	case "":
	case "404":
		return faults.Entry{}, false, nil
	default:
		return faults.Entry{}, false, fmt.Errorf("direct get %d of %s: status %s %s", seq, stream, st, m.Header.Get("Description"))
	}
	got, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil || got != seq {
		return faults.Entry{}, false, fmt.Errorf("direct get %d of %s: sequence %q", seq, stream, m.Header.Get(jetstream.SequenceHeader))
	}
	return faults.Entry{Seq: seq, ID: string(m.Data)}, true, nil
}

// readAll reads the messages first..last of stream by direct get, eight
// requests at a time.
func readAll(nc *nats.Conn, stream string, first, last uint64) ([]faults.Entry, error) {
	if last < first || first == 0 {
		return nil, nil
	}
	n := last - first + 1
	got := make([]*faults.Entry, n)
	errs := make(chan error, 8)
	var next uint64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				e, ok, err := directGetSeq(nc, stream, first+i)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					got[i] = &e
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	out := make([]faults.Entry, 0, n)
	for _, e := range got {
		if e != nil {
			out = append(out, *e)
		}
	}
	return out, nil
}
