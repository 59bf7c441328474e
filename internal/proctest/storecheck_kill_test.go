//go:build unix

package proctest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/blockcheck"
	"github.com/semaq/semaq/internal/faults"
	"github.com/semaq/semaq/semaq"
)

// A follower of an R3 stream, stopped cleanly, gets a flipped bit in its
// first block and its second block cut short (neither is the last). With
// store_check: refuse it does not start, naming the first file; with
// repair it moves the replica aside, serves, is caught up, and then each
// node read alone holds every acknowledged publish exactly once, as the
// fault checker reads replicas. A follower, so the stream keeps its leader
// and nothing but the defence is tested.
func TestProcessStoreCheckRepairsADamagedReplica(t *testing.T) {
	needProcesses(t)
	fc := startFaultCluster(t, 3, "")
	c := fc.cluster
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin := c.connect(0)
	// max_bytes this small makes nats-server write 32 KB blocks
	// (dynBlkSize); 850 records of about 110 bytes fill three, and the
	// 900 published in all stay under it (none is discarded).
	if _, err := admin.AddStream(ctx, semaq.StreamConfig{Name: "FD", Subjects: []string{"fd.>"}, Replicas: 3, MaxBytes: 127_000}); err != nil {
		t.Fatal(err)
	}
	var acked []string
	publishIDs := func(prefix string, n int) {
		t.Helper()
		nc, err := nats.Connect(c.allURLs(0), nats.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			id := fmt.Sprintf("%s%d", prefix, i)
			pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := js.Publish(pctx, "fd."+id, []byte(id), jetstream.WithMsgID(id))
			pcancel()
			if err != nil {
				t.Fatalf("publishing %s: %v", id, err)
			}
			acked = append(acked, id)
		}
	}
	publishIDs("a", 850)
	c.waitWhole(nil)

	victim := (c.streamLeader("FD") + 1) % len(c.nodes)
	p := fc.nodes[victim]
	p.stop(t, time.Minute)
	rep, err := blockcheck.Verify(fc.data[victim], "FD")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Blocks < 3 || len(rep.Damage) != 0 {
		t.Fatalf("%s's replica of FD: %d blocks, damage %v; want 3 or more blocks, undamaged", p.name, rep.Blocks, rep.Damage)
	}
	t.Logf("%s (a follower) stopped: %d blocks, %d records", p.name, rep.Blocks, rep.Records)
	msgs := filepath.Dir(rep.Last)
	flipped, cut := filepath.Join(msgs, "1.blk"), filepath.Join(msgs, "2.blk")
	b, err := os.ReadFile(flipped)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x08
	if err := os.WriteFile(flipped, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(cut); err != nil {
		t.Fatal(err)
	} else if err := os.Truncate(cut, fi.Size()/2); err != nil {
		t.Fatal(err)
	}

	// refuse: the node exits, naming the first damaged file.
	setStoreCheck(t, p, "refuse")
	p.start(t)
	select {
	case <-p.ready:
		t.Fatalf("%s served with a damaged replica and store_check: refuse", p.name)
	case <-p.done:
	case <-time.After(readyTimeout):
		t.Fatalf("%s neither served nor exited after %s:\n%s", p.name, readyTimeout, p.tail(40))
	}
	if code := p.cmd.ProcessState.ExitCode(); code == 0 {
		t.Fatalf("%s refused with exit code 0", p.name)
	}
	refusal := regexp.MustCompile(`store check: damaged record: stream FD \(account \$G\), file ` + regexp.QuoteMeta(flipped) +
		` at byte \d+: .*start this node with store_check: repair`)
	if !refusal.MatchString(p.tail(20)) {
		t.Fatalf("%s's refusal does not name %s and the repair:\n%s", p.name, flipped, p.tail(20))
	}

	// repair: it serves, is a current follower, and is caught up whole.
	setStoreCheck(t, p, "repair")
	p.start(t)
	p.waitStarted(t, readyTimeout)
	if s := p.grep(`damaged replica moved aside`); !strings.Contains(s, "stream=FD") {
		t.Fatalf("%s does not log the repair:\n%s", p.name, s)
	}
	q, _ := filepath.Glob(filepath.Join(fc.data[victim], "quarantine", "*", "jetstream", "$G", "streams", "FD", "msgs", "2.blk"))
	if len(q) != 1 {
		t.Fatalf("the damaged replica is not in %s's quarantine: %v", p.name, q)
	}
	// Published after the repair, so the leader's view of the follower
	// is of entries it stored since its start, not before its stop.
	publishIDs("b", 50)
	c.waitWhole(func(st *semaq.ClusterStatus) error {
		for _, s := range st.Streams {
			if s.Stream != "FD" {
				continue
			}
			for _, f := range s.Followers {
				if f.Name == p.name && f.Current && f.Lag == 0 {
					return nil
				}
			}
			return fmt.Errorf("FD: %s is no current follower: leader %s, followers %+v", p.name, s.Leader, s.Followers)
		}
		return errors.New("FD not listed")
	})

	si, err := fc.streamInfo("FD")
	if err != nil {
		t.Fatal(err)
	}
	h := faults.History{Acked: acked, Replicas: map[string][]faults.Entry{}}
	for i, n := range c.nodes {
		entries, err := fc.readReplica(i, "FD", si.State.FirstSeq, si.State.LastSeq)
		if err != nil {
			t.Fatalf("reading %s's copy of FD: %v", n.name, err)
		}
		h.Replicas[n.name] = entries
	}
	res := faults.Check(h)
	t.Logf("%s", res)
	if !res.OK() {
		t.Fatal("the repaired replica, or another, does not hold every acknowledged publish exactly once")
	}
}

// setStoreCheck sets store_check in the config file p starts with (its
// --config), as an operator would before starting it again.
func setStoreCheck(t *testing.T, p *proc, mode string) {
	t.Helper()
	conf := ""
	for i, a := range p.args {
		if a == "--config" && i+1 < len(p.args) {
			conf = p.args[i+1]
		}
	}
	if conf == "" {
		t.Fatalf("%s starts with no --config", p.name)
	}
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if !strings.HasPrefix(l, "store_check:") {
			lines = append(lines, l)
		}
	}
	lines = append(lines, "store_check: "+mode)
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// repairOnRefusal applies the operator action to a node whose start
// exited because its store check refused a damaged replica
// (store_check: refuse, the harness's setting): it starts it again with
// store_check: repair, counting it, and returns true. The corruptible
// minority keeps a majority of intact replicas, which repair needs.
func (fc *faultCluster) repairOnRefusal(p *proc) bool {
	refusal := ""
	for _, l := range strings.Split(p.tail(20), "\n") {
		if strings.Contains(l, "store check: damaged record: stream ") {
			refusal = l
		}
	}
	if refusal == "" {
		return false
	}
	fc.storeRepairs++
	fc.t.Logf("       %s refused to start (started again with store_check: repair): %s", p.name, refusal)
	setStoreCheck(fc.t, p, "repair")
	p.start(fc.t)
	return true
}

// refuseAgain sets a node that started with store_check: repair back to
// refuse once it serves (it has read its config by then).
func (fc *faultCluster) refuseAgain(p *proc) {
	if fc.storeRepairs > 0 {
		setStoreCheck(fc.t, p, "refuse")
	}
}
