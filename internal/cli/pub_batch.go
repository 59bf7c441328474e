package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/batchjson"
	"github.com/semaq/semaq/semaq"
)

// `semaq pub --batch FILE` (docs/batches.md): FILE is NDJSON, one message
// per line in the batchjson form, sent as batches of --batch-size. Batches
// go out as the file is read, so a stream on stdin is published as it
// comes; a line that does not parse stops the run before the batch that
// holds it is sent.

// defaultBatchSize is --batch-size's default.
const defaultBatchSize = 100

// oneMessageFlags are the flags of pub that pub --batch refuses: they
// belong to one message, and a batch's messages carry their own headers.
var oneMessageFlags = []string{"header", "model", "model-version", "adapter", "priority", "tenant", "intent",
	"timeout", "session", "prompt-tokens", "msg-id", "ttl", "json"}

// pubBatch publishes the messages of fl.batch.
func (e *env) pubBatch(cmd *cobra.Command, args []string, fl *pubFlags) error {
	if len(args) > 0 {
		return fmt.Errorf("--batch takes the subjects from the file; drop the argument %q", oneLine(args[0]))
	}
	var other []string
	for _, name := range oneMessageFlags {
		if cmd.Flags().Changed(name) {
			other = append(other, "--"+name)
		}
	}
	if len(other) > 0 {
		return fmt.Errorf("%s: not with --batch; give each message its headers in the file (\"headers\":{...})", strings.Join(other, ", "))
	}
	if fl.batch == "" {
		return errors.New("--batch: want FILE, or - for stdin")
	}
	if fl.batchSize < 1 || fl.batchSize > semaq.MaxBatchMsgs {
		return fmt.Errorf("--batch-size: %d is not between 1 and %d", fl.batchSize, semaq.MaxBatchMsgs)
	}
	name, r := fl.batch, io.Reader(e.stdin)
	if fl.batch == "-" {
		name = "stdin"
	} else {
		f, err := os.Open(fl.batch)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
		b := &batchRun{e: e, c: c, atomic: fl.atomic, retryFor: fl.retryFor}
		err := batchjson.ReadLines(r, semaq.MaxBatchBytes, func(line, _ int, m semaq.BatchMsg) error {
			msg := &nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}
			if msg.Header == nil {
				msg.Header = nats.Header{}
			}
			if headerIn(msg.Header, semaq.HdrMsgID) == "" {
				// Sent again after no answer, the message is stored once.
				msg.Header.Set(semaq.HdrMsgID, nuid.Next())
			}
			b.msgs = append(b.msgs, msg)
			b.lines = append(b.lines, line)
			if len(b.msgs) == fl.batchSize {
				return b.flush(ctx)
			}
			return nil
		})
		if le, ok := errors.AsType[*batchjson.LineError](err); ok {
			return fmt.Errorf("%s line %d: %v; %s", name, le.Line, le.Err, b.sofar())
		}
		if err == nil {
			err = b.flush(ctx)
		}
		if err != nil {
			return err
		}
		if b.refused > 0 {
			return fmt.Errorf("%d of %d messages refused", b.refused, b.stored+b.refused)
		}
		return nil
	})
}

// batchRun is the state of one pub --batch: the batch being filled and
// the counts so far.
type batchRun struct {
	e        *env
	c        *client.Client
	atomic   bool
	retryFor time.Duration

	msgs    []*nats.Msg
	lines   []int // the file line of each of msgs
	n       int   // batches sent
	stored  int
	refused int
}

// flush sends the batch being filled, prints its line, and empties it.
// An error is one the run cannot go past: the batch was not answered.
func (b *batchRun) flush(ctx context.Context) error {
	if len(b.msgs) == 0 {
		return nil
	}
	b.n++
	where := fmt.Sprintf("batch %d (lines %d-%d)", b.n, b.lines[0], b.lines[len(b.lines)-1])
	var opts []client.BatchOption
	if b.atomic {
		opts = append(opts, client.Atomic())
	}
	ack, err := retryPublish(ctx, b.retryFor, func(ctx context.Context) (*semaq.BatchAck, error) {
		return b.c.PublishBatch(ctx, b.msgs, opts...)
	})
	if ack == nil || ack.Results == nil {
		if err == nil {
			err = errors.New("the broker's answer has no results")
		}
		return fmt.Errorf("%s: %w; %s", where, err, b.sofar())
	}
	stored, refused, first := 0, 0, -1
	for i, res := range ack.Results {
		if res.Error != nil {
			refused++
			if first < 0 {
				first = i
			}
		} else {
			stored++
		}
	}
	b.stored += stored
	b.refused += refused
	var line string
	switch {
	case ack.Error != nil:
		i := first
		if ack.Index != nil {
			i = *ack.Index
		}
		line = fmt.Sprintf("%s: refused, nothing stored: line %d: %s", where, b.lines[i], ack.Results[i].Error.Description)
	case refused > 0:
		line = fmt.Sprintf("%s: stored %d, refused %d; first: line %d: %s", where, stored, refused, b.lines[first], ack.Results[first].Error.Description)
	default:
		line = fmt.Sprintf("%s: stored %d", where, stored)
	}
	b.msgs, b.lines = b.msgs[:0], b.lines[:0]
	_, err = fmt.Fprintln(b.e.stdout, line)
	return err
}

// sofar says what was stored before a run stopped.
func (b *batchRun) sofar() string {
	if b.stored+b.refused == 0 {
		return "nothing was sent"
	}
	return fmt.Sprintf("the batches before it were sent: %d stored, %d refused", b.stored, b.refused)
}

// headerIn is the first value of header name in h, in any case.
func headerIn(h nats.Header, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}
