package dispatch

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/semaq/semaq/internal/bench"
	"github.com/semaq/semaq/internal/bench/measure"
)

// The processes mode runs each paced phase's load generators (one process
// per load) and its workers (one process for all of them) as child
// processes of the bench, which keeps the broker: the broker is what is
// measured, so it stays where its lifetime, data directory and CPU figures
// are the bench's own, and a phase costs two or three process starts
// rather than a broker's.

// Bounds of the processes mode's waits on its children.
const (
	// childReadyWait bounds a child's start: exec, runtime, connections.
	childReadyWait = 30 * time.Second
	// childResultSlack is how long past the phase (and the generator's
	// wait for its last acks) a child may take to report.
	childResultSlack = 30 * time.Second
	// childExitWait is how long a child that reported may take to exit
	// once its stdin is closed, before it is killed.
	childExitWait = 5 * time.Second
)

func processCPUOf(role string, pid int, cpu, wall time.Duration, measured bool, placement string) bench.ProcessCPU {
	p := bench.ProcessCPU{Role: role, PID: pid, WallSeconds: round3(wall.Seconds()), Measured: measured, Placement: placement}
	if measured && wall > 0 {
		p.CPUSeconds = round3(cpu.Seconds())
		p.Utilisation = measure.Round2(cpu.Seconds() / wall.Seconds())
	}
	return p
}

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

// child is one running child process.
type child struct {
	role   string
	pid    int
	stdin  io.WriteCloser
	stderr tailWriter
	msgs   chan childMessage // ready, then result
	done   chan struct{}     // closed once the process is reaped
}

// failure is the child's failure as an error: its stderr, or how it ended.
func (c *child) failure(what string) error {
	if s := c.stderr.String(); s != "" {
		return fmt.Errorf("%s %s: %s", c.role, what, strings.ReplaceAll(s, "\n", "; "))
	}
	return fmt.Errorf("%s %s", c.role, what)
}

// startChild starts the bench binary as a child for req. The child is
// killed when ctx ends, and gets SIGKILL where the platform offers it if
// this process dies; its stdin closing stops it anyway.
func startChild(ctx context.Context, exe, role string, req childRequest) (*child, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	c := &child{role: role, msgs: make(chan childMessage, 2), done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal follows the thread that forked the
		// child: this goroutine holds its thread until the child is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(c.done)
		cmd := exec.CommandContext(ctx, exe, ChildCommand)
		cmd.SysProcAttr = childAttr()
		cmd.Stderr = &c.stderr
		cmd.WaitDelay = childExitWait
		stdin, err := cmd.StdinPipe()
		if err != nil {
			started <- err
			return
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			started <- err
			return
		}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		c.pid, c.stdin = cmd.Process.Pid, stdin
		started <- nil
		_, _ = stdin.Write(append(body, '\n'))
		r := bufio.NewReaderSize(stdout, 64<<10)
		for {
			line, err := readLine(r)
			if err != nil {
				break
			}
			var m childMessage
			if json.Unmarshal(line, &m) != nil {
				continue
			}
			select {
			case c.msgs <- m:
			default: // more than ready and result: not ours to keep
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		<-c.done
		return nil, fmt.Errorf("starting %s: %w", role, err)
	}
	return c, nil
}

// next is the child's next message, or an error if it exits first or
// takes longer than wait.
func (c *child) next(ctx context.Context, wait time.Duration, what string) (childMessage, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case m := <-c.msgs:
		return m, nil
	case <-c.done:
		select {
		case m := <-c.msgs: // written just before it exited
			return m, nil
		default:
		}
		return childMessage{}, c.failure("exited before its " + what)
	case <-t.C:
		return childMessage{}, c.failure(fmt.Sprintf("sent no %s within %s", what, wait))
	case <-ctx.Done():
		return childMessage{}, context.Cause(ctx)
	}
}

// procPhase runs one paced phase with the workers and each load in child
// processes.
func (d *dispatchRun) procPhase(ctx context.Context, spec phaseSpec) (*phaseResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("the bench binary to run as children: %w", err)
	}
	pctx, cancel := context.WithCancelCause(ctx)
	var children []*child
	defer func() {
		// Whatever happened, no child outlives the phase: the ones still
		// running after their stdin closed are killed, and all reaped.
		for _, c := range children {
			_ = c.stdin.Close()
		}
		t := time.NewTimer(childExitWait)
		defer t.Stop()
		for _, c := range children {
			select {
			case <-c.done:
			case <-t.C:
				cancel(errors.New("children did not exit"))
			}
		}
		cancel(nil)
		for _, c := range children {
			<-c.done
		}
	}()
	reqs := []childRequest{{Role: roleWorkers, URL: d.srv.ClientURL(), Phase: spec, CPUs: d.childCPUs}}
	roles := []string{"workers"}
	for _, l := range spec.Loads {
		reqs = append(reqs, childRequest{Role: roleLoad, URL: d.srv.ClientURL(), Phase: spec, Load: l, CPUs: d.childCPUs, Nice: d.cfg.Nice})
		roles = append(roles, "generator "+l.Name)
	}
	for i, req := range reqs {
		c, err := startChild(pctx, exe, roles[i], req)
		if err != nil {
			return nil, err
		}
		children = append(children, c)
	}
	placements := make([]string, len(children))
	for i, c := range children {
		m, err := c.next(pctx, childReadyWait, "ready line")
		if err != nil {
			return nil, err
		}
		if !m.Ready {
			return nil, c.failure("sent something other than ready")
		}
		placements[i] = m.Placement
	}
	if d.onChildren != nil {
		pids := make([]int, len(children))
		for i, c := range children {
			pids[i] = c.pid
		}
		d.onChildren(pids)
	}
	cpu0, measured := measure.CPUTime()
	t0 := time.Now()
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, "start\n"); err != nil {
			return nil, c.failure("did not take the start: " + err.Error())
		}
	}
	res := &phaseResult{waits: newWaits()}
	var procs []bench.ProcessCPU
	for i, c := range children {
		m, err := c.next(pctx, spec.Duration+pacedDispatchDrain+childResultSlack, "result")
		if err != nil {
			return nil, err
		}
		r := m.Result
		if r == nil {
			return nil, c.failure("sent no result")
		}
		res.waits.merge(waitsOf(r))
		procs = append(procs, processCPUOf(c.role, c.pid, r.CPU, r.Wall, r.CPUMeasured, placements[i]))
	}
	cpu1, ok := measure.CPUTime()
	res.procs = append([]bench.ProcessCPU{processCPUOf("broker", os.Getpid(), cpu1-cpu0, time.Since(t0), ok && measured, d.brokerPlacement)}, procs...)
	return res, nil
}
