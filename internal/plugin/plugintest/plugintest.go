// Package plugintest builds plugins for tests: each package once per test binary, with the go tool the tests run
// under, into a temporary directory that Cleanup removes (call it from TestMain). A test that needs a plugin gets
// its bytes from Build; without a go tool on PATH it is skipped, saying so.
//
// Compiling a Go-built module to machine code takes seconds (tens under -race), so tests give their plugin
// Runtime CacheDir: the compiled code is kept on disk and shared by every test binary and run.
package plugintest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Example plugins of the repository, as Build takes them.
const (
	Enrich  = "examples/plugins/enrich"
	Noop    = "examples/plugins/noop"
	Redact  = "examples/plugins/redact"
	Hostile = "internal/plugin/testdata/hostile"
)

type build struct {
	once sync.Once
	wasm []byte
	err  error
}

var (
	mu     sync.Mutex
	builds = map[string]*build{}
	dir    string
)

// Build returns the module built from the package at pkg, a path from the repository's root.
func Build(t testing.TB, pkg string) []byte {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("building plugin %s needs the go tool, which is not on PATH: %v", pkg, err)
	}
	wasm, err := Wasm(pkg)
	if err != nil {
		t.Fatal(err)
	}
	return wasm
}

// Wasm is Build for code without a testing.TB, such as a TestMain warming the compilation cache.
func Wasm(pkg string) ([]byte, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return nil, err
	}
	mu.Lock()
	b := builds[pkg]
	if b == nil {
		b = &build{}
		builds[pkg] = b
	}
	mu.Unlock()
	b.once.Do(func() { b.wasm, b.err = compile(goTool, pkg) })
	return b.wasm, b.err
}

// CacheDir is where tests keep wazero's compiled code between runs ("" if there is no place for it: they then
// compile in memory).
func CacheDir() string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	d := filepath.Join(base, "semaq", "plugin-test-cache")
	if os.MkdirAll(d, 0o700) != nil {
		return ""
	}
	return d
}

func compile(goTool, pkg string) ([]byte, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	mu.Lock()
	if dir == "" {
		dir, err = os.MkdirTemp("", "semaq-plugins-")
	}
	out := filepath.Join(dir, strings.ReplaceAll(pkg, "/", "_")+".wasm")
	mu.Unlock()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(goTool, "build", "-buildmode=c-shared", "-o", out, "./"+pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared ./%s: %v\n%s", pkg, err, msg)
	}
	return os.ReadFile(out)
}

// moduleRoot finds the repository's root from the test's working directory, its package's.
func moduleRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod above the test's directory")
		}
		d = parent
	}
}

// Cleanup removes what Build wrote. Call it from TestMain after m.Run.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		_ = os.RemoveAll(dir)
		dir = ""
	}
}
