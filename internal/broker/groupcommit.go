package broker

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/semaq"
)

// Group commit: how a stream with durability "fsync" makes an ack mean "on
// disk" without paying one fsync per message.
//
// JetStream runs without sync_always, so it writes each message into its
// current block file (the write reaches the OS before JetStream acks) and
// fsyncs only on its timer. The ingress gives such messages a reply subject
// of its own; JetStream's PubAck comes back to the ingress, which holds it in
// the stream's committer. The committer loops: take every held ack, fsync the
// stream's block files once, release the acks to their publishers. While one
// fsync runs, the next batch gathers, so a lone publisher waits for one fsync
// and a busy stream shares each fsync among everything that arrived during
// the previous one. No timer, no window: the batch is bounded by
// maxCommitBatch and by the fsync's own duration.
//
// The block files are JetStream's file store layout:
// <data>/jetstream/<account>/streams/<stream>/msgs/<n>.blk, numbered upwards.
// TestGroupCommitFindsBlockFiles guards that assumption.

// maxCommitBatch bounds the acks released by one fsync, so one huge batch
// cannot delay the next publishers without limit.
const maxCommitBatch = 8192

// Durability modes of a stream.
const (
	DurabilityFsync    = "fsync"
	DurabilityInterval = "interval"
	DurabilityMemory   = "memory"
)

// heldAck is a JetStream PubAck waiting for the fsync that covers it.
type heldAck struct {
	reply string // the publisher's reply subject
	data  []byte // the PubAck, forwarded unchanged
}

// committer group-commits the acks of one stream.
type committer struct {
	stream string
	dir    string // the stream's msgs directory
	nc     *nats.Conn
	log    *slog.Logger
	sync   func(*os.File) error // fault-injection point; (*os.File).Sync

	mu    sync.Mutex
	queue []heldAck

	wake chan struct{}
	stop chan struct{}
	done chan struct{}

	// Owned by the loop goroutine.
	cur     int // number of the newest block file known
	curFile *os.File

	stats commitStats
}

// commitStats are the committer's counters and histograms.
type commitStats struct {
	mu        sync.Mutex
	batches   uint64
	acks      uint64
	failures  uint64
	sizes     *histogram // acks per batch
	latencies *histogram // fsync duration, µs
}

func newCommitter(stream, dir string, nc *nats.Conn, log *slog.Logger, syncFn func(*os.File) error) *committer {
	if syncFn == nil {
		syncFn = (*os.File).Sync
	}
	c := &committer{
		stream: stream, dir: dir, nc: nc, log: log, sync: syncFn,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		stats: commitStats{sizes: newHistogram(1, maxCommitBatch), latencies: newHistogram(1, 60_000_000)},
	}
	c.cur = newestBlock(dir)
	go c.loop()
	return c
}

// hold queues an ack until the next fsync.
func (c *committer) hold(a heldAck) {
	c.mu.Lock()
	c.queue = append(c.queue, a)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// close commits what is held and stops the loop.
func (c *committer) close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
}

func (c *committer) loop() {
	defer close(c.done)
	defer func() {
		if c.curFile != nil {
			c.curFile.Close()
		}
	}()
	var batch []heldAck
	for {
		select {
		case <-c.wake:
		case <-c.stop:
			c.mu.Lock()
			rest := len(c.queue)
			c.mu.Unlock()
			if rest == 0 {
				return
			}
		}
		for {
			c.mu.Lock()
			n := min(len(c.queue), maxCommitBatch)
			batch = append(batch[:0], c.queue[:n]...)
			c.queue = append(c.queue[:0], c.queue[n:]...)
			more := len(c.queue) > 0
			c.mu.Unlock()
			if n == 0 {
				break
			}
			c.commit(batch)
			if !more {
				break
			}
		}
	}
}

// commit fsyncs the stream and releases a batch of acks, or fails them all.
func (c *committer) commit(batch []heldAck) {
	start := time.Now()
	err := c.syncStore()
	took := time.Since(start)
	c.stats.record(len(batch), took, err)
	if err != nil {
		c.log.Error("group commit failed", "stream", c.stream, "acks", len(batch), "err", err)
		body := semaq.MarshalError(semaq.NewAPIError(semaq.ErrCommit,
			"stream %s: the message was written but could not be made durable (%v); publish it again with the same Nats-Msg-Id", c.stream, err))
		for _, a := range batch {
			_ = c.nc.Publish(a.reply, body)
		}
		return
	}
	for _, a := range batch {
		_ = c.nc.Publish(a.reply, a.data)
	}
}

// syncStore fsyncs every block file written since the last commit: each
// one JetStream finished since (it may have started several), the current
// one, and the directory when a file is new to this committer.
func (c *committer) syncStore() error {
	newFile := false
	for {
		next := filepath.Join(c.dir, strconv.Itoa(c.cur+1)+".blk")
		if _, err := os.Stat(next); err != nil {
			break
		}
		// Block cur is complete: make sure it is on disk before moving on.
		if err := c.syncCurrent(); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if c.curFile != nil {
			c.curFile.Close()
			c.curFile = nil
		}
		c.cur++
		newFile = true
	}
	if c.curFile == nil {
		newFile = true
	}
	if err := c.syncCurrent(); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if _, derr := os.Stat(c.dir); derr != nil {
			return fmt.Errorf("stream store not found: %w", derr)
		}
		return errors.New("no block file to sync although JetStream acknowledged a write")
	}
	if newFile {
		d, err := os.Open(c.dir)
		if err != nil {
			return err
		}
		defer d.Close()
		if err := c.sync(d); err != nil {
			return fmt.Errorf("fsync %s: %w", c.dir, err)
		}
	}
	return nil
}

// syncCurrent fsyncs block file c.cur, opening it if needed. A block that
// no longer exists (JetStream removed it after its messages expired or were
// purged) reports os.ErrNotExist.
func (c *committer) syncCurrent() error {
	if c.curFile == nil {
		f, err := os.Open(filepath.Join(c.dir, strconv.Itoa(c.cur)+".blk"))
		if err != nil {
			return err
		}
		c.curFile = f
	}
	if err := c.sync(c.curFile); err != nil {
		return fmt.Errorf("fsync %s: %w", c.curFile.Name(), err)
	}
	return nil
}

// newestBlock returns the highest block number in dir, or 1.
func newestBlock(dir string) int {
	best := 1
	ents, err := os.ReadDir(dir)
	if err != nil {
		return best
	}
	for _, e := range ents {
		n, ok := strings.CutSuffix(e.Name(), ".blk")
		if !ok {
			continue
		}
		if i, err := strconv.Atoi(n); err == nil && i > best {
			best = i
		}
	}
	return best
}

func (s *commitStats) record(n int, took time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches++
	if err != nil {
		s.failures++
		return
	}
	s.acks += uint64(n)
	s.sizes.record(int64(n))
	s.latencies.record(took.Microseconds())
}

func (s *commitStats) snapshot() *semaq.CommitStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &semaq.CommitStats{
		Batches: s.batches, Acks: s.acks, Failures: s.failures,
		BatchSize:     s.sizes.summary(),
		CommitLatency: s.latencies.summary(),
	}
}

// ackStream reads the stream name of a successful JetStream PubAck without
// decoding it all: this runs once per durable message. Stream names SemaQ
// accepts hold no quotes or escapes, so the first "stream":"..." is it. Any
// error reply, or anything unexpected, reports false.
func ackStream(b []byte) (string, bool) {
	if bytes.Contains(b, []byte(`"error"`)) {
		return "", false
	}
	const key = `"stream":"`
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return "", false
	}
	rest := b[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j <= 0 {
		return "", false
	}
	return string(rest[:j]), true
}

// ackRouter receives JetStream's PubAcks for fsync streams on one wildcard
// subscription and hands each to its stream's committer. The publisher's
// reply subject travels in the ack subject itself (prefix + reply), so no
// table of in-flight messages is kept.
type ackRouter struct {
	prefix     string
	committers atomic.Pointer[map[string]*committer]
	nc         *nats.Conn

	// sent counts messages given this router's reply subject, routed the
	// acks received; shutdown waits for them to meet.
	sent, routed atomic.Uint64
}

// route handles one PubAck.
func (r *ackRouter) route(m *nats.Msg) {
	defer r.routed.Add(1)
	reply := strings.TrimPrefix(m.Subject, r.prefix)
	stream, ok := ackStream(m.Data)
	if !ok {
		// Errors need no fsync: nothing was stored.
		_ = r.nc.Publish(reply, m.Data)
		return
	}
	c := (*r.committers.Load())[stream]
	if c == nil {
		// The stream stopped being fsync between publish and ack: the
		// write is at JetStream's own durability.
		_ = r.nc.Publish(reply, m.Data)
		return
	}
	c.hold(heldAck{reply: reply, data: m.Data})
}
