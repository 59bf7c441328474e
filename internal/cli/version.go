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
		Short: "Print the version of semaq, of Go and of the embedded NATS server",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(e.stdout, versionLine())
			return err
		},
	}
}

// versionLine is what `semaq version` and `semaq --version` print:
// broker.Version (set at link time for releases), the commit the binary
// was built from when the build recorded it, and the Go and nats-server
// versions.
func versionLine() string {
	v := "semaq " + broker.Version
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = ", modified"
				}
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" {
			v += " (commit " + rev + dirty + ")"
		}
	}
	return fmt.Sprintf("%s, %s %s/%s, nats-server %s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH, natsserver.VERSION)
}
