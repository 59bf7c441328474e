package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// Session chains beside the same stream without them (docs/provenance.md,
// Performance): 1 KiB messages published through the ingress by a stock
// JetStream client, a window of 256 unacknowledged, each message naming
// one of `sessions` sessions in turn. ns/op is per message, so the ratio
// of two sub-benchmarks of a run is their throughput ratio. "jetstream" is
// the same publisher into the raw JetStream stream of the rig: the floor
// every SemaQ figure here is also a ratio to.
func BenchmarkSessionChains(b *testing.B) {
	r := startTestRig(b)
	ctx := context.Background()
	c, err := client.Connect(ctx, r.Broker.ClientURL(), client.WithName("semaq-bench-chains"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	for _, sc := range []semaq.StreamConfig{
		{Name: "CH_PLAIN", Subjects: []string{"chplain.>"}},
		{Name: "CH_PROV", Subjects: []string{"chprov.>"}, Provenance: semaq.ProvenanceSession},
		{Name: "CH_SIGNED", Subjects: []string{"chsigned.>"}, Provenance: semaq.ProvenanceSigned},
		{Name: "CH_ORDER", Subjects: []string{"chorder.>"}, SessionOrder: semaq.SessionOrderStrictSeq},
	} {
		if _, err := c.AddStream(ctx, sc); err != nil {
			b.Fatal(err)
		}
	}
	data := generatedBody(1024)
	rawT := Targets[TargetJetStream]
	for _, sessions := range []int{64, 1} {
		for _, target := range []struct{ name, subject string }{
			{"jetstream", rawT.subject}, {"plain", "chplain.x"}, {"provenance", "chprov.x"}, {"signed", "chsigned.x"}, {"order", "chorder.x"},
		} {
			b.Run(fmt.Sprintf("%s/sessions=%d", target.name, sessions), func(b *testing.B) {
				var nc *nats.Conn
				var err error
				if target.name == "jetstream" {
					nc, err = rawT.Dial(r, "semaq-bench-chains-raw")
				} else {
					nc, err = nats.Connect(r.Broker.ClientURL(), nats.Name("semaq-bench-chains-pub"))
				}
				if err != nil {
					b.Fatal(err)
				}
				defer nc.Close()
				benchmarkSessions(b, nc, target.subject, data, sessions, target.name == "order")
			})
		}
	}
}

func benchmarkSessions(b *testing.B, nc *nats.Conn, subject string, data []byte, sessions int, ordered bool) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(256))
	if err != nil {
		b.Fatal(err)
	}
	var failed error
	names := make([]string, sessions)
	for i := range names {
		names[i] = fmt.Sprintf("s-%d-%d", time.Now().UnixNano(), i)
	}
	seqs := make([]uint64, sessions)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		s := n % sessions
		n++
		m := nats.NewMsg(subject)
		m.Data = data
		m.Header.Set(semaq.HdrSession, names[s])
		if ordered {
			seqs[s]++
			m.Header.Set(semaq.HdrSeq, fmt.Sprint(seqs[s]))
		}
		for {
			f, err := js.PublishMsgAsync(m)
			if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				continue
			}
			if err != nil {
				b.Fatal(err)
			}
			go func() {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					failed = err
				}
			}()
			break
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(DrainTimeout):
		b.Fatalf("%d messages unacknowledged", js.PublishAsyncPending())
	}
	if failed != nil {
		b.Fatal(failed)
	}
}
