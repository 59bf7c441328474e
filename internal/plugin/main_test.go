package plugin

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/semaq/semaq/internal/plugin/plugintest"
)

// shared is the Runtime the tests load Go-built plugins into: its compilation cache (on disk, plugintest.CacheDir)
// compiles each module once, where a Runtime per test would compile it again each time.
var shared *Runtime

func TestMain(m *testing.M) {
	var err error
	if shared, err = NewRuntime(context.Background(), RuntimeConfig{CacheDir: plugintest.CacheDir()}); err != nil {
		panic(err)
	}
	warm()
	code := m.Run()
	shared.Close(context.Background())
	plugintest.Cleanup()
	os.Exit(code)
}

// load builds the plugin at pkg (once per test binary) and loads it; it is closed with the test.
func load(t testing.TB, pkg string, lim Limits, opts ...LoadOption) *Plugin {
	t.Helper()
	wasm := plugintest.Build(t, pkg)
	p, err := shared.Load(context.Background(), "test", wasm, nil, lim, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// warm builds and compiles the test plugins side by side before the tests need them one at a time. A failure
// here is left for the test that needs the plugin to report.
func warm() {
	var wg sync.WaitGroup
	for _, pkg := range []string{plugintest.Enrich, plugintest.Noop, plugintest.Redact, plugintest.Hostile} {
		wg.Go(func() {
			wasm, err := plugintest.Wasm(pkg)
			if err != nil {
				return
			}
			if p, err := shared.Load(context.Background(), "warm", wasm, nil, Limits{}); err == nil {
				p.Close(context.Background())
			}
		})
	}
	wg.Wait()
}
