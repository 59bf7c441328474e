package confluent_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/rest"
)

// The harness: one semaq binary built from this checkout for the whole run,
// a `semaq serve` process per test, and a Confluent client pointed at its
// HTTP port.

var (
	binDir   string // removed by TestMain
	build    sync.Once
	bin      string
	buildErr error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "semaq-confluent-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// semaqBinary builds cmd/semaq from the repository this module sits in
// (../..), once per test run.
func semaqBinary(t *testing.T) string {
	t.Helper()
	build.Do(func() {
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			buildErr = err
			return
		}
		if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !bytes.Contains(b, []byte("module github.com/semaq/semaq\n")) {
			buildErr = fmt.Errorf("%s is not the semaq repository root (go.mod: %v)", root, err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out := filepath.Join(binDir, "semaq")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/semaq/semaq/cmd/semaq")
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build github.com/semaq/semaq/cmd/semaq in %s: %v\n%s", root, err, b)
			return
		}
		bin = out
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bin
}

// server is a `semaq serve` process.
type server struct {
	nats string // nats://127.0.0.1:PORT
	http string // 127.0.0.1:PORT (the ready line says http://127.0.0.1:PORT)

	mu  sync.Mutex
	log strings.Builder
}

var readyLine = regexp.MustCompile(`msg="semaq ready" nats=(\S+) http=(\S+)`)

// startSemaq runs `semaq serve` on free ports with a fresh data directory and
// waits for its ready line. The process is killed when the test ends.
func startSemaq(t *testing.T) *server {
	t.Helper()
	exe := semaqBinary(t)
	data := t.TempDir() // registered first, so removed after the kill below
	cmd := exec.Command(exe, "serve", "--data", data, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s serve: %v", exe, err)
	}
	s := &server{}
	ready := make(chan []string, 1)
	done := make(chan struct{})
	var waitErr error
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.log.WriteString(line + "\n")
			s.mu.Unlock()
			if m := readyLine.FindStringSubmatch(line); m != nil {
				select {
				case ready <- m:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		waitErr = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("semaq serve log:\n%s", s.output())
		}
	})
	select {
	case m := <-ready:
		s.nats, s.http = m[1], strings.TrimPrefix(m[2], "http://")
		return s
	case <-done:
		t.Fatalf("semaq serve exited before ready: %v\n%s", waitErr, s.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("semaq serve not ready after 60s\n%s", s.output())
	}
	return nil
}

func (s *server) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// cli runs a semaq client command against s and returns its stdout.
func (s *server) cli(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args = append(args, "--server", s.nats)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, semaqBinary(t), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("semaq %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// registryClient is Confluent's schema registry client, configured as an
// application would (defaults), pointed at s's HTTP port. Its transport
// records the last exchange so a failure can show what was said.
func (s *server) registryClient(t *testing.T) (schemaregistry.Client, *recorder) {
	t.Helper()
	rec := &recorder{next: http.DefaultTransport}
	conf := schemaregistry.NewConfig("http://" + s.http)
	conf.HTTPClient = &http.Client{Transport: rec, Timeout: 30 * time.Second}
	c, err := schemaregistry.NewClient(conf)
	if err != nil {
		t.Fatalf("schemaregistry.NewClient(%s): %v", conf.SchemaRegistryURL, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, rec
}

// recorder is an http.RoundTripper that keeps the last request and answer.
type recorder struct {
	next http.RoundTripper

	mu   sync.Mutex
	last string
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		reqBody, _ = io.ReadAll(req.Body)
		_ = req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	resp, err := r.next.RoundTrip(req)
	exchange := fmt.Sprintf("%s %s %s", req.Method, req.URL.RequestURI(), reqBody)
	if err != nil {
		exchange += fmt.Sprintf(" -> %v", err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		exchange += fmt.Sprintf(" -> %d %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	r.mu.Lock()
	r.last = exchange
	r.mu.Unlock()
	return resp, err
}

// Last is the last HTTP exchange, for failure messages.
func (r *recorder) Last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// restCode is the Confluent error code err carries, or an explanation of
// why it carries none.
func restCode(err error) (int, string) {
	var re *rest.Error
	if !errors.As(err, &re) {
		return 0, fmt.Sprintf("not a Confluent *rest.Error: %v (%T)", err, err)
	}
	return re.Code, re.Message
}

// wantRestError checks that call failed with Confluent's RestError code.
func wantRestError(t *testing.T, rec *recorder, call string, err error, code int) {
	t.Helper()
	if err == nil {
		t.Errorf("%s succeeded, want Confluent RestError %d\n  last exchange: %s", call, code, rec.Last())
		return
	}
	got, msg := restCode(err)
	if got != code {
		t.Errorf("%s: error code %d (%s), want %d\n  last exchange: %s", call, got, msg, code, rec.Last())
	}
}
