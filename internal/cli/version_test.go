package cli

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/semaq/semaq/internal/broker"
)

func TestFormatVersion(t *testing.T) {
	t.Parallel()
	rest := ", " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ", nats-server " + natsserver.VERSION
	vcs := func(kv ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "-compiler", Value: "gc"}}}
		for i := 0; i < len(kv); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return bi
	}
	const rev = "51f6695aa6c2e3d1f0b4f5a7e9c1d3b5a7f9e1c3"
	for _, c := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"a release build", vcs("vcs", "git", "vcs.revision", rev, "vcs.time", "2026-12-07T00:27:53Z", "vcs.modified", "false"),
			"semaq 0.1.0 (commit 51f6695, 2026-12-07T00:27:53Z)"},
		{"a modified tree", vcs("vcs", "git", "vcs.revision", rev, "vcs.time", "2026-12-07T00:27:53Z", "vcs.modified", "true"),
			"semaq 0.1.0 (commit 51f6695, modified, 2026-12-07T00:27:53Z)"},
		{"no commit time", vcs("vcs.revision", rev), "semaq 0.1.0 (commit 51f6695)"},
		{"a short revision", vcs("vcs.revision", "abc"), "semaq 0.1.0 (commit abc)"},
		{"go run, go test: no vcs", vcs(), "semaq 0.1.0 (commit unknown)"},
		{"no build information", nil, "semaq 0.1.0 (commit unknown)"},
		{"a time without a commit", vcs("vcs.time", "2026-12-07T00:27:53Z", "vcs.modified", "true"), "semaq 0.1.0 (commit unknown)"},
	} {
		if got := formatVersion("0.1.0", c.bi); got != c.want+rest {
			t.Errorf("%s: %q, want %q", c.name, got, c.want+rest)
		}
	}
}

// TestVersionNamesTheBuild: `semaq version` in this test binary names the
// commit the binary records, or says it records none (go test records no
// vcs settings today).
func TestVersionNamesTheBuild(t *testing.T) {
	t.Parallel()
	var out, errb strings.Builder
	if code := Main([]string{"version"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	want := "semaq " + broker.Version + " (commit unknown), "
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 7 {
				want = "semaq " + broker.Version + " (commit " + s.Value[:7]
			}
		}
	}
	if !strings.HasPrefix(out.String(), want) {
		t.Errorf("semaq version = %q, want it to start with %q", out.String(), want)
	}
}
