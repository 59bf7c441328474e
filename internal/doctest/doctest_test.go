package doctest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	cmdTimeout   = 60 * time.Second // one command, readiness waits included
	streamMaxSec = "5"              // curl -N runs at most this long (an SSE stream does not end by itself)
	curlMaxTime  = 28               // curl's exit status when --max-time passes
)

// TestDocs runs the ```sh blocks of README.md and docs/*.md in order, one bash session per file (variables and
// `export PATH=...` carry over between blocks, as in a terminal), in a temporary working directory, against a
// broker of its own on free loopback ports. The markers a block may carry are described in parse.go.
//
// What the test changes in a command, and nothing else:
//   - `go build -o bin/semaq ./cmd/semaq` becomes `test -x bin/semaq`: the test built the binary there once;
//   - `GOOS=wasip1 GOARCH=wasm go build ... -o NAME ./examples/plugins/P` builds from the repository's root
//     (`go build -C`) into the working directory;
//   - `semaq serve` gets `--listen` and `--http` with the test's ports (data in the working directory);
//   - `localhost:8080`, `127.0.0.1:8080`, `localhost:4222` and `127.0.0.1:4222` name the test's ports
//     (SEMAQ_URL and SEMAQ_HTTP point there too);
//   - a command that starts with `curl` also prints its HTTP status, and a status of 400 or more fails it like a
//     non-zero exit; with -N (a stream) it gets `--max-time 5`, and ending by that timeout counts as success.
//
// A file whose blocks never run `semaq serve &` gets one started before its first block. After a background
// `semaq serve` the test waits for /healthz, after a background `semaq worker --model M` for M in /v1/models.
func TestDocs(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: builds semaq and runs every doc example against a real broker; runs without -short")
	}
	root, bin := setUp(t)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append([]string{filepath.Join(root, "README.md")}, docs...)

	for _, path := range docs {
		name, _ := filepath.Rel(root, path)
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := Parse(f)
		f.Close()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		runnable := false
		for _, b := range blocks {
			if b.Skip == "" {
				runnable = true
			} else {
				t.Logf("%s:%d: skipped: %s", name, b.Line, b.Skip)
			}
		}
		if !runnable {
			continue
		}
		t.Run(name, func(t *testing.T) { runDoc(t, name, bin, blocks, false) })
	}
}

// TestReadmeTourAsPasted runs README.md's blocks as a new user pastes them: nothing waits for a background
// `semaq serve` or `semaq worker` (the CLI waits for a broker that is starting, the OpenAI door for a model being
// announced). Three times, in fresh directories on fresh ports; SEMAQ_TOUR_RUNS asks for more.
func TestReadmeTourAsPasted(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: builds semaq and runs the README's tour against a real broker; runs without -short")
	}
	runs := 3
	if v := os.Getenv("SEMAQ_TOUR_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SEMAQ_TOUR_RUNS=%q: want a number of runs, 1 or more", v)
		}
		runs = n
	}
	root, bin := setUp(t)
	f, err := os.Open(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := Parse(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	for i := range runs {
		t.Run(fmt.Sprintf("run%d", i+1), func(t *testing.T) { runDoc(t, "README.md", bin, blocks, true) })
	}
}

// setUp checks the tools the examples need and builds semaq: the repository's root and the binary.
func setUp(t *testing.T) (root, bin string) {
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the doc examples need %s: %v (Debian: apt-get install %s)", tool, err, tool)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found from %s: %v", root, err)
	}
	repoRoot = root
	bin = filepath.Join(t.TempDir(), "semaq")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "./cmd/semaq")...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/semaq: %v\n%s", err, out)
	}
	return root, bin
}

// session is one bash process that runs a file's commands, read from its stdin.
type session struct {
	t                  *testing.T
	name               string
	dir, outDir        string
	natsPort, httpPort int
	bash               *exec.Cmd
	stdin              io.WriteCloser
	done               chan [3]int // command number, exit status, $! (the last background job)
	n                  int
	pasted             bool // no waits after background commands: the next one runs at once
}

func runDoc(t *testing.T, name, bin string, blocks []Block, pasted bool) {
	s := &session{t: t, name: name, dir: t.TempDir(), outDir: t.TempDir(), done: make(chan [3]int, 1), pasted: pasted}
	s.natsPort, s.httpPort = freePorts(t)
	if err := os.Mkdir(filepath.Join(s.dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(s.dir, "bin", "semaq")); err != nil {
		t.Fatal(err)
	}
	s.start()

	serves := false
	for _, b := range blocks {
		for _, c := range b.Cmds {
			serves = serves || (b.Skip == "" && c.Background && serveRE.MatchString(c.Text))
		}
	}
	if !serves {
		s.exec(Cmd{Text: "semaq serve &", Background: true}, "(started by the test)")
	}
	for _, b := range blocks {
		if b.Skip != "" {
			continue
		}
		for _, c := range b.Cmds {
			if !s.exec(c, fmt.Sprintf("%s:%d", name, c.Line)) {
				return // the session is stuck; the failure is reported
			}
		}
	}
}

func freePorts(t *testing.T) (nats, http int) {
	var ports [2]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close() // both held until both are picked, so they differ
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports[0], ports[1]
}

func (s *session) start() {
	t := s.t
	bash := exec.Command("bash", "--noprofile", "--norc")
	bash.Dir = s.dir
	bash.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // background jobs stay in its group
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SEMAQ_") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	bash.Env = append(env,
		"PATH="+filepath.Join(s.dir, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"),
		fmt.Sprintf("SEMAQ_URL=nats://127.0.0.1:%d", s.natsPort),
		fmt.Sprintf("SEMAQ_HTTP=http://127.0.0.1:%d", s.httpPort),
	)
	bash.Stderr = os.Stderr // commands' own output goes to files; this is bash complaining
	stdin, err := bash.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := bash.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := bash.Start(); err != nil {
		t.Fatal(err)
	}
	s.bash, s.stdin = bash, stdin
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var n, rc, pid int
			if _, err := fmt.Sscanf(sc.Text(), "__doctest_done %d %d %d", &n, &rc, &pid); err == nil {
				s.done <- [3]int{n, rc, pid}
			}
		}
	}()
	t.Cleanup(s.stop)
}

// stop ends the background jobs (SIGTERM: the broker drains) and bash, then kills whatever is left.
func (s *session) stop() {
	exited := make(chan error, 1)
	go func() { exited <- s.bash.Wait() }()
	_, _ = io.WriteString(s.stdin, "kill $(jobs -p) 2>/dev/null; wait; exit 0\n")
	s.stdin.Close()
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		s.t.Errorf("%s: background commands did not stop within 20s of SIGTERM; killing them", s.name)
		_ = syscall.Kill(-s.bash.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}

var (
	serveRE     = regexp.MustCompile(`\bsemaq serve\b`)
	workerRE    = regexp.MustCompile(`\bsemaq worker\b`)
	modelFlagRE = regexp.MustCompile(`--model[ =](\S+)`)
	streamRE    = regexp.MustCompile(`\s-[a-zA-Z]*N\b|\s--no-buffer\b`)
	httpCodeRE  = regexp.MustCompile(`\[doctest http (\d{3})\]`)
	pluginRE    = regexp.MustCompile(`^GOOS=wasip1 GOARCH=wasm go build (.*)-o (\S+) (\./examples/plugins/\S+)$`)
)

// repoRoot is the repository's root, where plugin examples build from.
var repoRoot string

// rewrite makes a command talk to the test's broker (see TestDocs). stream reports a curl given --max-time.
func (s *session) rewrite(text string) (out string, isCurl, stream bool) {
	nats, http := fmt.Sprintf("127.0.0.1:%d", s.natsPort), fmt.Sprintf("127.0.0.1:%d", s.httpPort)
	text = strings.NewReplacer(
		"localhost:8080", http, "127.0.0.1:8080", http,
		"localhost:4222", nats, "127.0.0.1:4222", nats,
		"go build -o bin/semaq ./cmd/semaq", "test -x bin/semaq",
	).Replace(text)
	text = serveRE.ReplaceAllString(text, "semaq serve --listen "+nats+" --http "+http)
	text = pluginRE.ReplaceAllString(text, "GOOS=wasip1 GOARCH=wasm go build -C '"+repoRoot+"' ${1}-o \"$$PWD/${2}\" ${3}")
	if rest, ok := strings.CutPrefix(text, "curl "); ok {
		isCurl = true
		flags := `-w '\n[doctest http %{http_code}]\n' `
		if streamRE.MatchString(" " + rest) {
			stream = true
			flags += "--max-time " + streamMaxSec + " "
		}
		text = "curl " + flags + rest
	}
	return text, isCurl, stream
}

// exec runs one command and checks its status and output; false means the session cannot go on.
func (s *session) exec(c Cmd, where string) bool {
	t := s.t
	text, isCurl, stream := s.rewrite(c.Text)
	s.n++
	outFile := filepath.Join(s.outDir, strconv.Itoa(s.n)+".out")
	// The command's stdin is /dev/null so it cannot eat the script; its output goes to a file of its own.
	script := fmt.Sprintf("{ %s\n} </dev/null >'%s' 2>&1\nprintf '\\n__doctest_done %d %%d %%d\\n' $? \"${!:-0}\"\n", text, outFile, s.n)
	if _, err := io.WriteString(s.stdin, script); err != nil {
		t.Errorf("%s: writing to bash: %v", where, err)
		return false
	}
	var rc, pid int
	select {
	case d := <-s.done:
		if d[0] != s.n {
			t.Errorf("%s: bash answered for command %d, want %d", where, d[0], s.n)
			return false
		}
		rc, pid = d[1], d[2]
	case <-time.After(cmdTimeout):
		out, _ := os.ReadFile(outFile)
		t.Errorf("%s: still running after %v: %s\noutput:\n%s", where, cmdTimeout, c.Text, clip(out))
		_ = syscall.Kill(-s.bash.Process.Pid, syscall.SIGKILL)
		return false
	}
	if c.Background && !s.pasted {
		s.awaitReady(c, where, outFile, pid)
	}
	out, err := os.ReadFile(outFile)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return true
	}
	if isCurl {
		if stream && rc == curlMaxTime {
			rc = 0 // the stream was open until --max-time: that is how it ends here
		}
		for _, m := range httpCodeRE.FindAllSubmatch(out, -1) {
			if code, _ := strconv.Atoi(string(m[1])); code >= 400 && rc == 0 {
				rc = 22 // curl --fail's status: an HTTP error is a failed command
			}
		}
	}
	switch {
	case c.Exit == AnyFailure && rc == 0:
		t.Errorf("%s: want a failure, got exit 0: %s\noutput:\n%s", where, c.Text, clip(out))
	case c.Exit != AnyFailure && rc != c.Exit:
		t.Errorf("%s: exit %d, want %d: %s\noutput:\n%s", where, rc, c.Exit, c.Text, clip(out))
	}
	for _, w := range c.Want {
		if !strings.Contains(string(out), w) {
			t.Errorf("%s: output does not contain %q: %s\noutput:\n%s", where, w, c.Text, clip(out))
		}
	}
	return true
}

// awaitReady waits for what a background command serves: the broker's /healthz, a worker's models.
func (s *session) awaitReady(c Cmd, where, outFile string, pid int) {
	base := fmt.Sprintf("http://127.0.0.1:%d", s.httpPort)
	var ready func() error
	switch {
	case serveRE.MatchString(c.Text):
		ready = func() error { return getOK(base + "/healthz") }
	case workerRE.MatchString(c.Text):
		var models []string
		for _, m := range modelFlagRE.FindAllStringSubmatch(c.Text, -1) {
			models = append(models, m[1])
		}
		ready = func() error { return hasModels(base+"/v1/models", models) }
	default:
		return
	}
	deadline := time.Now().Add(cmdTimeout)
	for {
		err := ready()
		if err == nil {
			return
		}
		if exited(pid) {
			out, _ := os.ReadFile(outFile)
			s.t.Errorf("%s: exited before it was ready (%v): %s\noutput:\n%s", where, err, c.Text, clip(out))
			return
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(outFile)
			s.t.Errorf("%s: not ready after %v (%v): %s\noutput:\n%s", where, cmdTimeout, err, c.Text, clip(out))
			return
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, not waiting for a guess
	}
}

// exited reports whether process pid has ended: gone, or a zombie bash has not reaped yet.
func exited(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false // no procfs: wait for the deadline
	}
	_, after, _ := strings.Cut(string(stat), ") ")
	return strings.HasPrefix(after, "Z")
}

var client = &http.Client{Timeout: 2 * time.Second}

func getOK(url string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func hasModels(url string, want []string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return fmt.Errorf("GET %s: %s: %w", url, resp.Status, err)
	}
	have := map[string]bool{}
	for _, m := range list.Data {
		have[m.ID] = true
	}
	for _, m := range want {
		if !have[m] {
			return errors.New("model " + m + " not listed yet")
		}
	}
	return nil
}

func clip(b []byte) string {
	const max = 4000
	if len(b) > max {
		return string(b[:max]) + "\n... (" + strconv.Itoa(len(b)-max) + " more bytes)"
	}
	return string(b)
}
