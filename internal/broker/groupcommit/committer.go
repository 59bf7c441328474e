// Package groupcommit makes an ack of a stream with durability "fsync" mean
// "on disk" without paying one fsync per message: a Committer holds the
// stream's JetStream PubAcks, fsyncs its block files once per batch and
// then releases them to their publishers.
package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/semaq"
)

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
//
// All of this is for a single node. On a cluster the node a publisher
// reached may hold no replica of the stream, and a replicated stream's
// durable copy is JetStream's Raft log, so a clustered node makes no
// committer and relies on JetStream's sync_always (broker/durability.go).

// maxCommitBatch bounds the acks released by one fsync, so one huge batch
// cannot delay the next publishers without limit.
const maxCommitBatch = 8192

// heldAck is a JetStream PubAck waiting for the fsync that covers it.
type heldAck struct {
	reply string // the publisher's reply subject
	data  []byte // the PubAck, forwarded unchanged
}

// Config is what a Committer needs.
type Config struct {
	// Stream names the stream, for logs and errors.
	Stream string
	// Dir is the stream's msgs directory, where JetStream keeps its block
	// files.
	Dir string
	// Conn releases the acks to their publishers: the broker's egress
	// connection, since the reply subjects are the publishers'.
	Conn *nats.Conn
	// Deliver, when set, releases the acks in place of Conn: the
	// ingress's, which keeps the acks of a batch's messages to itself.
	Deliver func(reply string, data []byte)
	// Log gets a failed fsync. Nil logs nothing.
	Log *slog.Logger
	// Sync replaces (*os.File).Sync: the fault-injection point of tests.
	// Nil is (*os.File).Sync.
	Sync func(*os.File) error
}

// Committer group-commits the acks of one stream. Hold may be called from
// any goroutine; the fsync and the release run on the Committer's own
// goroutine, which Close stops.
type Committer struct {
	stream string
	dir    string // the stream's msgs directory
	nc     *nats.Conn
	out    func(reply string, data []byte) // Config.Deliver, or a publish on nc
	log    *slog.Logger
	sync   func(*os.File) error // fault-injection point; (*os.File).Sync

	mu    sync.Mutex
	queue []heldAck

	wake      chan struct{}
	stop      chan struct{}
	closeOnce sync.Once
	done      chan struct{}

	// Owned by the loop goroutine.
	cur     int // number of the newest block file known
	curFile *os.File

	stats commitStats
}

// commitStats are the Committer's counters and histograms.
type commitStats struct {
	mu        sync.Mutex
	batches   uint64
	acks      uint64
	failures  uint64
	sizes     *histogram // acks per batch
	latencies *histogram // fsync duration, µs
}

// New starts the committer of one stream: one goroutine, until Close.
func New(cfg Config) *Committer {
	if cfg.Sync == nil {
		cfg.Sync = (*os.File).Sync
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	c := &Committer{
		stream: cfg.Stream, dir: cfg.Dir, nc: cfg.Conn, log: cfg.Log, sync: cfg.Sync,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		stats: commitStats{sizes: newHistogram(1, maxCommitBatch), latencies: newHistogram(1, 60_000_000)},
	}
	c.out = cfg.Deliver
	if c.out == nil {
		c.out = func(reply string, data []byte) { _ = c.nc.Publish(reply, data) }
	}
	c.cur = newestBlock(cfg.Dir)
	go c.loop()
	return c
}

// Hold queues an ack until the next fsync: data, JetStream's PubAck, goes
// unchanged to reply once the fsync that covers it is done.
func (c *Committer) Hold(reply string, data []byte) {
	a := heldAck{reply: reply, data: data}
	c.mu.Lock()
	c.queue = append(c.queue, a)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Close commits what is held, stops the goroutine and waits for it, or
// until ctx is done. Idempotent; no Hold may follow it.
func (c *Committer) Close(ctx context.Context) error {
	c.closeOnce.Do(func() { close(c.stop) })
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("group commit of stream %s: %w", c.stream, ctx.Err())
	}
}

// Stats returns the committer's figures.
func (c *Committer) Stats() *semaq.CommitStats { return c.stats.snapshot() }

func (c *Committer) loop() {
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
func (c *Committer) commit(batch []heldAck) {
	start := time.Now()
	err := c.syncStore()
	took := time.Since(start)
	c.stats.record(len(batch), took, err)
	if err != nil {
		c.log.Error("group commit failed", "stream", c.stream, "acks", len(batch), "err", err)
		body := semaq.MarshalError(semaq.NewAPIError(semaq.ErrCommit,
			"stream %s: the message was written but could not be made durable (%v); publish it again with the same Nats-Msg-Id", c.stream, err))
		for _, a := range batch {
			c.out(a.reply, body)
		}
		return
	}
	for _, a := range batch {
		c.out(a.reply, a.data)
	}
}

// syncStore fsyncs every block file written since the last commit: each
// one JetStream finished since (it may have started several), the current
// one, and the directory when a file is new to this committer. When there
// are several they are fsynced at once: on a journaling filesystem fsyncs
// that run together share one journal commit, where one after the other
// each waited for its own, and a block rollover (every 8 MiB of a stream:
// every 32 messages of 256 KiB) paid three. Only when every fsync has
// succeeded does the committer move past a finished block; after a
// failure the next commit fsyncs the same files again.
func (c *Committer) syncStore() error {
	cur, curFile := c.cur, c.curFile
	var files, opened []*os.File
	defer func() {
		for _, f := range opened {
			if f != curFile {
				f.Close()
			}
		}
	}()
	open := func(n int) (*os.File, error) {
		f, err := os.Open(filepath.Join(c.dir, strconv.Itoa(n)+".blk"))
		if err == nil {
			opened = append(opened, f)
		}
		return f, err
	}
	newFile := false
	for {
		next := filepath.Join(c.dir, strconv.Itoa(cur+1)+".blk")
		if _, err := os.Stat(next); err != nil {
			break
		}
		// Block cur is complete: make sure it is on disk before moving on.
		// One that no longer exists (JetStream removed it after its
		// messages expired or were purged) needs nothing.
		f := curFile
		if f == nil {
			var err error
			if f, err = open(cur); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		if f != nil {
			files = append(files, f)
		}
		cur, curFile = cur+1, nil
		newFile = true
	}
	if curFile == nil {
		newFile = true
		var err error
		if curFile, err = open(cur); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				return err
			}
			if _, derr := os.Stat(c.dir); derr != nil {
				return fmt.Errorf("stream store not found: %w", derr)
			}
			return errors.New("no block file to sync although JetStream acknowledged a write")
		}
	}
	files = append(files, curFile)
	if newFile {
		d, err := os.Open(c.dir)
		if err != nil {
			return err
		}
		opened = append(opened, d)
		files = append(files, d)
	}
	if err := c.syncAll(files); err != nil {
		if curFile != c.curFile {
			curFile = nil // closed by the deferred func; opened again next time
		}
		return err
	}
	// Every file is on disk: forget the finished blocks.
	if c.curFile != nil && c.curFile != curFile {
		c.curFile.Close()
	}
	c.cur, c.curFile = cur, curFile
	return nil
}

// syncAll fsyncs files, at once when there are several, and returns the
// first failure.
func (c *Committer) syncAll(files []*os.File) error {
	if len(files) == 1 {
		return c.syncFile(files[0])
	}
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Go(func() { errs[i] = c.syncFile(f) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *Committer) syncFile(f *os.File) error {
	if err := c.sync(f); err != nil {
		return fmt.Errorf("fsync %s: %w", f.Name(), err)
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
