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
