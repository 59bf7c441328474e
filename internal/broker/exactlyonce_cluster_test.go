package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// An exactly-once processor on a cluster, connected to a node that does
// not lead the R3 output stream: its outputs are f(inputs), in order,
// each once.
func TestClusterProcessExactlyOnce(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	leader := eoStreams(ctx, t, c)
	admin := brokertest.Connect(t, c.Node(0))
	node := (leader + 1) % c.N()
	pc := brokertest.Connect(t, c.Node(node))
	c.Eventually(30*time.Second, "the processor's node to know EOOUT", func() error {
		_, err := pc.StreamBySubject(ctx, "eoout.x")
		return err
	})
	const n = 60
	for i := 1; i <= n; i++ {
		subj, data := fmt.Sprintf("eoin.%d", i), []byte(strconv.Itoa(i))
		// A node learns of a stream made through another from an
		// advisory: until then its ingress refuses the subject.
		c.Eventually(30*time.Second, "the input to be stored", func() error {
			_, err := pc.Publish(ctx, subj, data)
			return err
		})
	}
	fn := func(m *client.Msg) ([]client.Out, error) {
		i, _ := strconv.Atoi(string(m.Data))
		outs := make([]client.Out, i%4)
		for k := range outs {
			outs[k] = client.Out{Subject: fmt.Sprintf("eoout.%d.%d", i, k), Data: fmt.Appendf(nil, "%d-%d", i, k)}
		}
		return outs, nil
	}
	var want []string
	for i := 1; i <= n; i++ {
		for k := range i % 4 {
			want = append(want, fmt.Sprintf("eoout.%d.%d %d-%d", i, k, i, k))
		}
	}

	var st client.ProcessStats
	started := time.Now()
	pctx, pcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- pc.ProcessExactlyOnce(pctx, "eoin.>", "eo-cluster", fn, client.OutputSubjects("eoout.>"), client.WithProcessStats(&st))
	}()
	c.Eventually(60*time.Second, "every input processed", func() error {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the processor returned: %v", err)
		default:
		}
		if got := st.Processed.Load(); got != n {
			return fmt.Errorf("%d of %d processed", got, n)
		}
		return nil
	})
	took := time.Since(started)
	pcancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("processor: %v", err)
	}
	sub, err := admin.Subscribe(ctx, "eoout.>", client.WithMaxMessages(len(want)+1))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var got []string
	for range want {
		m, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(semaq.HdrSourceStream) != "EOIN" || m.Header.Get(nats.MsgIdHdr) == "" {
			t.Fatalf("%s: headers %v", m.Subject, m.Header)
		}
		got = append(got, m.Subject+" "+string(m.Data))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("outputs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	info, err := admin.StreamInfo(ctx, "EOOUT")
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Messages != uint64(len(want)) {
		t.Fatalf("EOOUT holds %d messages, want %d", info.State.Messages, len(want))
	}
	t.Logf("processor on n%d, EOOUT led by n%d: %d inputs, %d outputs in %s (%s an input), %d retries",
		node+1, leader+1, n, len(want), took.Round(time.Millisecond), (took / n).Round(time.Microsecond), st.Retries.Load())
}

// The node leading the R3 output stream, the processor's own node, is
// stopped while the processor works, grouping inputs, and started again:
// the processor goes on through the other nodes (it does not return) and
// its outputs are f(inputs), each once.
func TestClusterProcessExactlyOnceLeaderStop(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leader := eoStreams(ctx, t, c)
	other := (leader + 1) % c.N()
	feeder := brokertest.Connect(t, c.Node(other))
	urls := []string{c.Node(leader).ClientURL()}
	for i := range c.N() {
		if i != leader {
			urls = append(urls, c.Node(i).ClientURL())
		}
	}
	pc, err := client.Connect(ctx, strings.Join(urls, ","), client.WithTimeout(5*time.Second),
		client.WithNATSOptions(nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	for _, cl := range []*client.Client{feeder, pc} {
		c.Eventually(30*time.Second, "the node to know the streams", func() error {
			for _, s := range []string{"eoin.x", "eoout.x"} {
				if _, err := cl.StreamBySubject(ctx, s); err != nil {
					return err
				}
			}
			return nil
		})
	}
	const n = 200
	for i := 1; i <= n; i++ {
		if _, err := feeder.Publish(ctx, fmt.Sprintf("eoin.%d", i%8), []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	fn := func(m *client.Msg) ([]client.Out, error) {
		i, _ := strconv.Atoi(string(m.Data))
		outs := make([]client.Out, i%4)
		for k := range outs {
			outs[k] = client.Out{Subject: fmt.Sprintf("eoout.%d.%d", i, k), Data: fmt.Appendf(nil, "%d-%d", i, k)}
		}
		return outs, nil
	}
	var st client.ProcessStats
	pctx, pcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- pc.ProcessExactlyOnce(pctx, "eoin.>", "eo-stop", fn, client.OutputSubjects("eoout.>"),
			client.WithProcessStats(&st), client.ProcessAckWait(2*time.Second),
			// The inputs are stored ahead: up to 8 to a batch, read
			// ahead through a consumer of the processor's node.
			client.GroupInputs(8))
	}()
	defer func() {
		pcancel()
		<-done
	}()
	processed := func(want uint64) func() error {
		return func() error {
			select {
			case err := <-done:
				done <- err
				t.Fatalf("the processor returned: %v", err)
			default:
			}
			if got := st.Processed.Load() + st.Skipped.Load(); got < want {
				return fmt.Errorf("%d of %d", got, want)
			}
			return nil
		}
	}
	c.Eventually(60*time.Second, "a quarter processed", processed(n/4))
	c.Stop(leader)
	t.Logf("stopped n%d, EOOUT's leader and the processor's node, after %d inputs", leader+1, st.Processed.Load())
	c.Restart(leader)
	c.Eventually(2*time.Minute, "every input processed", processed(n))
	t.Logf("processed %d, skipped %d, duplicates %d, retries %d", st.Processed.Load(), st.Skipped.Load(), st.Duplicates.Load(), st.Retries.Load())

	var want []string
	for i := 1; i <= n; i++ {
		for k := range i % 4 {
			want = append(want, fmt.Sprintf("eoout.%d.%d %d-%d", i, k, i, k))
		}
	}
	info, err := feeder.StreamInfo(ctx, "EOOUT")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := feeder.Subscribe(ctx, "eoout.>", client.WithMaxMessages(int(info.State.Messages)))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var got []string
	for range info.State.Messages {
		m, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m.Subject+" "+string(m.Data))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%d outputs, want %d:\n%s", len(got), len(want), strings.Join(head(got, want), "\n"))
	}
}

// head is where got and want part, for a failure message.
func head(got, want []string) []string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return []string{fmt.Sprintf("output %d: %q, want %q", i, got[i], want[i])}
		}
	}
	return []string{fmt.Sprintf("one is a prefix of the other (%d, %d)", len(got), len(want))}
}

// eoStreams makes the R3 input and output streams EOIN and EOOUT through
// node 0 and returns the node leading EOOUT.
func eoStreams(ctx context.Context, t *testing.T, c *brokertest.Cluster) int {
	t.Helper()
	admin := brokertest.Connect(t, c.Node(0))
	for name, subj := range map[string]string{"EOIN": "eoin.>", "EOOUT": "eoout.>"} {
		if _, err := admin.AddStream(ctx, semaq.StreamConfig{Name: name, Subjects: []string{subj}, Replicas: 3}); err != nil {
			t.Fatal(err)
		}
	}
	var leader int
	c.Eventually(30*time.Second, "EOOUT to have a leader", func() error {
		if leader = c.StreamLeader("EOOUT"); leader < 0 {
			return errors.New("no leader")
		}
		return nil
	})
	return leader
}
