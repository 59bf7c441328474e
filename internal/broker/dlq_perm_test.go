package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// Only the broker writes dead letters: a public client can neither write
// into SQ_DLQ nor forge the advisories that make the broker write there.
func TestDLQIsWrittenByTheBrokerOnly(t *testing.T) {
	t.Parallel()
	s, c := startDLQ(t)
	addStream(t, c, semaq.StreamConfig{Name: "A", Subjects: []string{"a.>"}})
	publish(t, c, "a.x", "secret")
	publish(t, c, "a.y", "real")
	nc, err := nats.Connect(s.ClientURL(), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	if _, err := nc.Request(semaq.DLQSubject("A", "C"), []byte("fake"), time.Second); err == nil {
		t.Error("a public client wrote into the dead-letter queue")
	}
	forged := advisory("term", "A", "C", 1, "forged")
	if err := nc.Publish(forged.Subject, forged.Data); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// A real termination after the forged one: once its dead letter is
	// there, the forged advisory would have been handled too.
	cons := consumer(t, c, "A", "C", 0)
	if err := mustNext(t, cons).Ack(); err != nil {
		t.Fatal(err)
	}
	term(t, cons, "real")
	dls := waitDeadLetters(t, c, client.DeadLetterFilter{}, 1, nil)
	if dls[0].StreamSeq != 2 || dls[0].Reason != "terminated: real" {
		t.Fatalf("dead letter = %+v", dls[0])
	}
	if _, err := c.DeadLetter(context.Background(), dls[0].Seq); err != nil {
		t.Fatal(err)
	}
}
