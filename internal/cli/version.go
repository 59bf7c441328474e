package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/spf13/cobra"

	"github.com/semaq/semaq/internal/broker"
)

func newVersionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the release and commit of semaq, and the versions of Go and of the embedded NATS server",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(e.stdout, versionLine())
			return err
		},
	}
}

// versionLine is what `semaq version` and `semaq --version` print.
func versionLine() string {
	bi, _ := debug.ReadBuildInfo()
	return formatVersion(broker.Version, bi)
}

// formatVersion is the version line of release built as bi says (nil: no
// build information): the release (CHANGELOG.md), the commit the binary
// was built from, whether its tree had uncommitted changes, the commit's
// time, then the Go and nats-server versions:
//
//	semaq 0.1.0 (commit 51f6695, 2026-12-07T00:27:53Z), go1.26.8 linux/amd64, nats-server 2.15.2
//
// `go build` in a git checkout records the commit; `go run`, `go test`
// and builds outside one do not, and the line says "commit unknown".
func formatVersion(release string, bi *debug.BuildInfo) string {
	var rev, at string
	var modified bool
	if bi != nil {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	build := "commit unknown"
	if rev != "" {
		if len(rev) > 7 {
			rev = rev[:7] // as git abbreviates it
		}
		build = "commit " + rev
		if modified {
			build += ", modified"
		}
		if at != "" {
			build += ", " + at
		}
	}
	return fmt.Sprintf("semaq %s (%s), %s %s/%s, nats-server %s",
		release, build, runtime.Version(), runtime.GOOS, runtime.GOARCH, natsserver.VERSION)
}
