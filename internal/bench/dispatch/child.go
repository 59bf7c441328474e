package dispatch

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/bench/measure"
)

// A child process of `semaq bench dispatch --processes` is the bench binary
// run again with the hidden command ChildCommand. It talks to its
// parent over its standard streams, one JSON object a line:
//
//	parent → child  childRequest, then "start"
//	child → parent  childMessage{Ready}, then childMessage{Result}
//
// The child stops as soon as its stdin closes (the parent ended or gave
// up) or its connection to the broker closes (it never reconnects), and
// then exits non-zero with the reason on stderr.

// ChildCommand is the hidden command that runs a child process of the
// dispatch benchmark's processes mode (ChildMain).
const ChildCommand = "dispatch-child"

// Roles of the child processes.
const (
	roleWorkers = "workers"
	roleLoad    = "load"
)

// maxChildLine bounds a line read from a child or its parent: a result
// holds at most a few histograms of some 30,000 buckets each.
const maxChildLine = 16 << 20

// childRequest is the first line a child reads.
type childRequest struct {
	Role  string    `json:"role"`
	URL   string    `json:"url"`
	Phase phaseSpec `json:"phase"`
	Load  loadSpec  `json:"load"` // roleLoad
	CPUs  []int     `json:"cpus,omitempty"`
	Nice  int       `json:"nice,omitempty"`
}

// childMessage is a line a child writes.
type childMessage struct {
	Ready     bool         `json:"ready,omitempty"`
	Placement string       `json:"placement,omitempty"` // what was applied of CPUs and Nice
	Result    *childResult `json:"result,omitempty"`
}

// childResult is what a child measured over the phase.
type childResult struct {
	CPU         time.Duration               `json:"cpu"` // user + system
	CPUMeasured bool                        `json:"cpu_measured"`
	Wall        time.Duration               `json:"wall"`
	Failed      int64                       `json:"failed,omitempty"` // publishes refused
	Broker      map[string][]measure.Bucket `json:"broker,omitempty"`
	E2E         map[string][]measure.Bucket `json:"e2e,omitempty"`
	Turnaround  map[string][]measure.Bucket `json:"turnaround,omitempty"`
}

var (
	errParentGone = errors.New("stdin closed: the parent ended")
	errBrokerLost = errors.New("connection to the broker closed")
)

// ChildMain runs one child process of the dispatch benchmark on its
// standard streams and returns its exit code.
func ChildMain(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	if err := runChild(ctx, stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", ChildCommand, err)
		return 1
	}
	return 0
}

func runChild(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	in := bufio.NewReaderSize(stdin, 64<<10)
	line, err := readLine(in)
	if err != nil {
		return fmt.Errorf("reading the request: %w", err)
	}
	var req childRequest
	if err := json.Unmarshal(line, &req); err != nil {
		return fmt.Errorf("bad request: %w", err)
	}
	if req.Role != roleWorkers && req.Role != roleLoad {
		return fmt.Errorf("bad request: role %q is neither %s nor %s", req.Role, roleWorkers, roleLoad)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	start := make(chan struct{})
	go func() {
		// "start", then nothing until the parent closes stdin.
		if l, err := readLine(in); err == nil && strings.TrimSpace(string(l)) == "start" {
			close(start)
			_, _ = io.Copy(io.Discard, in)
		}
		cancel(errParentGone)
	}()
	placement := placementNote(req.CPUs, req.Nice, place(req.CPUs, req.Nice))
	lost := nats.ClosedHandler(func(*nats.Conn) { cancel(errBrokerLost) })
	var run func(context.Context) (*childResult, error)
	switch req.Role {
	case roleWorkers:
		var clients []*client.Client
		defer func() {
			for _, c := range clients {
				c.Close()
			}
		}()
		for i := range req.Phase.Workers {
			c, err := client.Connect(ctx, req.URL, client.WithName("bench-worker-"+strconv.Itoa(i)),
				client.WithNATSOptions(nats.NoReconnect(), lost))
			if err != nil {
				return fmt.Errorf("worker %d: %w", i, err)
			}
			clients = append(clients, c)
		}
		run = func(rctx context.Context) (*childResult, error) {
			w := newWaits()
			serve(rctx, clients, req.Phase, w)
			return &childResult{Broker: bucketsOf(w.broker), E2E: bucketsOf(w.e2e), Turnaround: bucketsOf(w.turnaround)}, nil
		}
	case roleLoad:
		nc, err := nats.Connect(req.URL, nats.Name("bench-load-"+req.Load.Name), nats.NoReconnect(), lost)
		if err != nil {
			return fmt.Errorf("load %s: %w", req.Load.Name, err)
		}
		defer nc.Close()
		run = func(rctx context.Context) (*childResult, error) {
			failed, err := generate(rctx, nc, req.Phase.Subject, textPayload(req.Phase.Size), []loadSpec{req.Load})
			return &childResult{Failed: failed}, err
		}
	}
	out := json.NewEncoder(stdout)
	if err := out.Encode(childMessage{Ready: true, Placement: placement}); err != nil {
		return err
	}
	select {
	case <-start:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	cpu0, measured := measure.CPUTime()
	t0 := time.Now()
	rctx, rcancel := context.WithTimeout(ctx, req.Phase.Duration)
	res, err := run(rctx)
	rcancel()
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	res.Wall = time.Since(t0)
	if cpu1, ok := measure.CPUTime(); ok && measured {
		res.CPU, res.CPUMeasured = cpu1-cpu0, true
	}
	return out.Encode(childMessage{Result: res})
}

// readLine reads one line of at most maxChildLine bytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, isPrefix, err := r.ReadLine()
		if err != nil {
			return nil, err
		}
		line = append(line, part...)
		if len(line) > maxChildLine {
			return nil, fmt.Errorf("line over %d bytes", maxChildLine)
		}
		if !isPrefix {
			return line, nil
		}
	}
}

func bucketsOf(by map[string]*measure.Histogram) map[string][]measure.Bucket {
	out := make(map[string][]measure.Bucket, len(by))
	for k, h := range by {
		out[k] = h.Buckets()
	}
	return out
}

func waitsOf(res *childResult) *waits {
	w := newWaits()
	for k, bs := range res.Broker {
		w.broker[k] = measure.FromBuckets(bs)
	}
	for k, bs := range res.E2E {
		w.e2e[k] = measure.FromBuckets(bs)
	}
	for k, bs := range res.Turnaround {
		w.turnaround[k] = measure.FromBuckets(bs)
	}
	return w
}

// placementNote says what of cpus and nice was applied.
func placementNote(cpus []int, nice int, err error) string {
	var parts []string
	if len(cpus) > 0 {
		parts = append(parts, "cpu "+joinInts(cpus))
	}
	if nice != 0 {
		parts = append(parts, "nice "+strconv.Itoa(nice))
	}
	switch {
	case len(parts) == 0:
		return ""
	case err != nil:
		return "not applied (" + strings.Join(parts, ", ") + "): " + err.Error()
	}
	return strings.Join(parts, ", ")
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// tailWriter keeps the last bytes written to it: a child's stderr, for the
// error that reports its failure.
type tailWriter struct {
	mu  sync.Mutex
	buf []byte
}

const stderrTail = 2048

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > stderrTail {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-stderrTail:]...)
	}
	t.mu.Unlock()
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
