package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/blockcheck"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// A replica of an R3 stream written by nats-server, with a bit flipped in
// a block that is not the last: refuse names the file and moves nothing;
// repair moves the replica and its Raft groups' logs aside, keeping their
// term and vote, and the node started again is caught up whole.
func TestStoreCheckRepairsAReplica(t *testing.T) {
	c := brokertest.StartCluster(t, 3)
	cl := brokertest.Connect(t, c.Node(0))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// max_bytes this small makes nats-server write 32 KB blocks
	// (dynBlkSize), so the stream has several.
	if _, err := cl.AddStream(ctx, semaq.StreamConfig{Name: "FD", Subjects: []string{"fd.>"}, Replicas: 3, MaxBytes: 120_000}); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, "FD", jetstream.ConsumerConfig{Durable: "FD_C", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	const n = 600 // about 90 bytes a record: three 32 KB blocks
	body := bytes.Repeat([]byte("x"), 60)
	for i := range n {
		if _, err := js.Publish(ctx, fmt.Sprintf("fd.%d", i), body, jetstream.WithMsgID(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	// Every replica has every message before one is stopped.
	waitReplicasCurrent(t, js, "FD")

	const victim = 2
	cfg := c.Node(victim).Config()
	c.Stop(victim)
	rep, err := blockcheck.Verify(cfg.DataDir, "FD")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Blocks < 2 || rep.Records != n || len(rep.Damage) != 0 {
		t.Fatalf("the stopped replica: %d blocks, %d records, damage %v; want 2 or more blocks and %d records", rep.Blocks, rep.Records, rep.Damage, n)
	}
	first := filepath.Join(filepath.Dir(rep.Last), "1.blk")
	b, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x04
	if err := os.WriteFile(first, b, 0o600); err != nil {
		t.Fatal(err)
	}
	streamDir := filepath.Join(cfg.DataDir, "jetstream", "$G", "streams", "FD")
	groups, err := blockcheck.RaftGroups(cfg.DataDir, blockcheck.Replica{Account: "$G", Stream: "FD", Dir: streamDir})
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 || groups[0].Type == groups[1].Type {
		t.Fatalf("Raft groups of FD: %+v; want the stream's and its consumer's", groups)
	}

	var log bytes.Buffer
	cfg.StoreCheck = blockcheck.ModeRefuse
	err = broker.CheckStore(cfg, slog.New(slog.NewTextHandler(&log, nil)))
	if !errors.Is(err, blockcheck.ErrDamaged) || !strings.Contains(err.Error(), "stream FD (account $G), file "+first+" at byte ") ||
		!strings.Contains(err.Error(), "store_check: repair") {
		t.Fatalf("refuse: %v", err)
	}
	if _, err := os.Stat(filepath.Join(streamDir, "msgs", "1.blk")); err != nil {
		t.Fatalf("refuse moved the replica: %v", err)
	}

	cfg.StoreCheck = blockcheck.ModeRepair
	if err := broker.CheckStore(cfg, slog.New(slog.NewTextHandler(&log, nil))); err != nil {
		t.Fatalf("repair: %v\n%s", err, log.String())
	}
	if _, err := os.Stat(streamDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the damaged replica is still in place: %v", err)
	}
	quarantined, _ := filepath.Glob(filepath.Join(cfg.DataDir, "quarantine", "*", "jetstream", "$G", "streams", "FD", "msgs", "1.blk"))
	if len(quarantined) != 1 {
		t.Fatalf("the damaged block is not in the quarantine: %v\n%s", quarantined, log.String())
	}
	q := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(quarantined[0]))))))
	for _, g := range groups {
		if _, err := os.Stat(filepath.Join(g.Dir, "tav.idx")); err != nil {
			t.Fatalf("group %s lost its term and vote: %v", g.Dir, err)
		}
		if _, err := os.Stat(filepath.Join(g.Dir, "msgs")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("group %s kept its log: %v", g.Dir, err)
		}
		if _, err := os.Stat(filepath.Join(q, "jetstream", "$SYS", "_js_", filepath.Base(g.Dir), "msgs")); err != nil {
			t.Fatalf("group %s's log is not in the quarantine: %v", g.Dir, err)
		}
	}
	if !strings.Contains(log.String(), `msg="store check: damaged replica moved aside`) {
		t.Fatalf("the move is not logged:\n%s", log.String())
	}

	// Started again (store_check at its default, refuse), the node is
	// caught up whole from the other replicas.
	s := c.Restart(victim)
	waitLocalMsgs(t, s, "FD", n)
	waitReplicasCurrent(t, js, "FD")
	c.Stop(victim)
	if rep, err = blockcheck.Verify(cfg.DataDir, "FD"); err != nil {
		t.Fatal(err)
	}
	if rep.Records != n || len(rep.Damage) != 0 {
		t.Fatalf("the repaired replica holds %d records, damage %v; want %d", rep.Records, rep.Damage, n)
	}
}

// waitReplicasCurrent waits until stream has a leader and two followers,
// both current with no lag.
func waitReplicasCurrent(t *testing.T, js jetstream.JetStream, stream string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s, err := js.Stream(ctx, stream)
			if err != nil {
				return err
			}
			ci := s.CachedInfo().Cluster
			if ci == nil || ci.Leader == "" || len(ci.Replicas) != 2 {
				return fmt.Errorf("cluster %+v", ci)
			}
			for _, r := range ci.Replicas {
				if !r.Current || r.Offline || r.Lag != 0 {
					return fmt.Errorf("replica %+v", *r)
				}
			}
			return nil
		}()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's replicas not current after a minute: %v", stream, err)
		}
		time.Sleep(100 * time.Millisecond) // polling a condition
	}
}

// waitLocalMsgs waits until node s's own replica of stream holds n
// messages, as its JetStream reports it (not the leader).
func waitLocalMsgs(t *testing.T, s *broker.Server, stream string, n uint64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var got uint64
	for {
		jsz, err := s.NATSServer().Jsz(&server.JSzOptions{Accounts: true, Streams: true})
		if err == nil {
			for _, a := range jsz.AccountDetails {
				for _, st := range a.Streams {
					if st.Name == stream {
						got = st.State.Msgs
					}
				}
			}
		}
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's replica on %s holds %d messages after a minute, want %d (err %v)", stream, s.Config().Name, got, n, err)
		}
		time.Sleep(100 * time.Millisecond) // polling a condition
	}
}
