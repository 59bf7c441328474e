// Package cli implements the semaq command: the broker (serve), the client
// commands that talk to a broker over NATS (pub, sub, stream), and the
// benchmarks (bench).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/cli/clienv"
	"github.com/semaq/semaq/internal/cli/modelcmd"
	"github.com/semaq/semaq/internal/cmdusage"
)

// Main runs the command line and returns the process exit code. Errors are
// printed as one line on stderr.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, args, stdin, stdout, stderr)
}

// exitInterrupted is the exit code of a command SIGINT or SIGTERM ended,
// the shells' convention (128 + SIGINT).
const exitInterrupted = 130

// services drain and exit 0 on SIGINT or SIGTERM, as a service manager
// expects of a clean stop; every other command exits exitInterrupted.
var services = map[string]bool{"serve": true, "worker": true}

// run is Main with its context: ctx's end is the interrupt.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(stdin, stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if ctx.Err() != nil && cmd != nil && !services[cmd.Name()] {
		if ee, ok := errors.AsType[*exitError](err); ok && ee.msg == "" {
			return ee.code // a program semaq ran (semaq-bench) has said so
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintf(stderr, "semaq: %s\n", oneLine(err.Error()))
		}
		fmt.Fprintln(stderr, "semaq: interrupted")
		return exitInterrupted
	}
	if err != nil {
		if ue, ok := errors.AsType[*cmdusage.Error](err); ok {
			ue.Write(stderr, "semaq")
			if ee, ok := errors.AsType[*exitError](ue.Err); ok {
				return ee.code
			}
			return 1
		}
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.msg != "" {
				fmt.Fprintf(stderr, "semaq: %s\n", oneLine(ee.msg))
			}
			return ee.code
		}
		fmt.Fprintf(stderr, "semaq: %s\n", oneLine(err.Error()))
		return 1
	}
	return 0
}

// exitError ends a command with a given exit code.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func oneLine(s string) string { return cmdusage.OneLine(s) }

// env is what every command shares: its streams and the client flags.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	server string
	// TLS of the connection to --server: --tls-ca, --tls-cert, --tls-key.
	tlsCA, tlsCert, tlsKey string
	// key authenticates with a broker started with --auth: --key or
	// $SEMAQ_KEY.
	key string
	// nkeySeed and user authenticate without a key (user.go): --nkey-seed
	// or $SEMAQ_NKEY_SEED, --auth-user or $SEMAQ_USER.
	nkeySeed, user string
}

func newRoot(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "semaq",
		Short:         "SemaQ: an AI-native semantic message broker on embedded NATS JetStream",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionLine(),
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			if f := cmd.Flags().Lookup("auth-key"); f != nil && f.Changed {
				fmt.Fprintln(stderr, "semaq: warning: --auth-key is deprecated and goes in the next release: use --key")
			}
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(
		newServeCmd(e),
		newPubCmd(e),
		newSubCmd(e),
		newStreamCmd(e),
		newBenchCmd(e),
		newSchemaCmd(e),
		newDLQCmd(e),
		newRouteCmd(e),
		newAgentCmd(e),
		newWorkerCmd(e),
		newQueueCmd(e),
		newWorkCmd(e),
		newCancelCmd(e),
		newUserCmd(e),
		newClusterCmd(e),
		newKeyCmd(e),
		newAuditCmd(e),
		newSessionCmd(e),
		newPolicyCmd(e),
		newPluginCmd(e),
		newProvenanceCmd(e),
		modelcmd.New(cmdEnv{e}),
		newVersionCmd(e),
	)
	cmdusage.Explain(root)
	return root
}

// addServerFlag adds --server to a client command.
func (e *env) addServerFlag(cmd *cobra.Command) {
	def := os.Getenv("SEMAQ_URL")
	if def == "" {
		def = client.DefaultURL
	}
	f := cmd.Flags()
	f.StringVar(&e.server, "server", def, "broker NATS URL; $SEMAQ_URL sets the default")
	f.StringVar(&e.tlsCA, "tls-ca", "", "PEM CA file to verify the broker's TLS certificate (tls:// URLs; default: the system's CAs)")
	f.StringVar(&e.tlsCert, "tls-cert", "", "PEM client certificate, for a broker that requires one (mutual TLS); needs --tls-key")
	f.StringVar(&e.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	// No default shown: --help must not print $SEMAQ_KEY. connect reads it.
	// --key is the credential on every command; --auth-key, its name on
	// `semaq sub` before --group-key, stays one release with a warning.
	f.StringVar(&e.key, "key", "", "key for a broker started with --auth (semaq user add prints one); default $SEMAQ_KEY")
	f.StringVar(&e.key, "auth-key", "", "the same as --key")
	_ = f.MarkHidden("auth-key")
	e.addCredentialFlags(f)
}

// natsTLS are the NATS options of the --tls-* flags.
func (e *env) natsTLS() ([]nats.Option, error) {
	var opts []nats.Option
	if e.tlsCA != "" {
		opts = append(opts, nats.RootCAs(e.tlsCA))
	}
	switch {
	case e.tlsCert != "" && e.tlsKey != "":
		opts = append(opts, nats.ClientCert(e.tlsCert, e.tlsKey))
	case e.tlsCert != "" || e.tlsKey != "":
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	return opts, nil
}

// startupWait is how long a command waits for a broker that is starting:
// one that does not listen yet, or whose API is not up yet.
const startupWait = 5 * time.Second

// connect dials the broker named by --server. When that fails, it looks
// whether --server names an HTTP port, the commonest wrong address.
func (e *env) connect(ctx context.Context) (*client.Client, error) {
	tlsOpts, err := e.natsTLS()
	if err != nil {
		return nil, err
	}
	creds, err := e.credentials()
	if err != nil {
		return nil, err
	}
	lagging := client.WithLagging(func(_ string, nodes []string) {
		fmt.Fprintf(e.stderr, "semaq: warning: nodes %s had not applied the change when it returned; they apply it late\n",
			strings.Join(nodes, ", "))
	})
	opts := append([]client.Option{client.WithName("semaq-cli"), client.WithNATSOptions(tlsOpts...), lagging,
		client.WithStartupWait(startupWait)}, creds...)
	c, err := client.Connect(ctx, e.server, opts...)
	// A broker started a moment ago (`semaq serve &` then a command) may
	// not listen yet: wait for it a little, saying so once.
	deadline := time.Now().Add(startupWait)
	for pause, said := 50*time.Millisecond, false; errors.Is(err, nats.ErrNoServers) && time.Now().Before(deadline) && ctx.Err() == nil; pause = min(2*pause, 500*time.Millisecond) {
		if !said {
			fmt.Fprintf(e.stderr, "semaq: no broker answers at %s yet; waiting up to %s for it to start\n", e.server, startupWait)
			said = true
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		c, err = client.Connect(ctx, e.server, opts...)
	}
	if err != nil && ctx.Err() == nil {
		if addr := serverAddr(e.server); addr != "" && answersHTTP(ctx, addr) {
			return nil, fmt.Errorf("%s %s looks like an HTTP port (SemaQ's HTTP door?); the NATS port is 4222 by default", e.serverFlag(), addr)
		}
		return nil, e.explainConnect(err)
	}
	return c, err
}

// serverFlag names where --server's value came from: the flag, or
// $SEMAQ_URL when the flag was left out.
func (e *env) serverFlag() string {
	if v := os.Getenv("SEMAQ_URL"); v != "" && v == e.server {
		return "$SEMAQ_URL"
	}
	return "--server"
}

// explainConnect says what to do about a connection the broker refused
// or nothing answered.
func (e *env) explainConnect(err error) error {
	switch {
	case errors.Is(err, nats.ErrNoServers):
		return fmt.Errorf("%w: is `semaq serve` running at %s (%s)?", err, e.server, e.serverFlag())
	case errors.Is(err, nats.ErrAuthorization):
		if e.key == "" && os.Getenv("SEMAQ_KEY") == "" && e.nkeySeed == "" && os.Getenv("SEMAQ_NKEY_SEED") == "" {
			return fmt.Errorf("%w: the broker requires a key: pass --key or set SEMAQ_KEY (semaq user add prints one)", err)
		}
		return fmt.Errorf("%w: the broker refused the credential: an unknown, rotated or removed key, or a user removed (semaq user ls)", err)
	}
	return err
}

// withClient dials the broker named by --server, runs fn with the
// command's context and the client, and closes the client.
func (e *env) withClient(cmd *cobra.Command, fn func(ctx context.Context, c *client.Client) error) error {
	ctx := cmd.Context()
	c, err := e.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(ctx, c)
}

// cmdEnv is env as a clienv.Env, for the command groups in packages of
// their own.
type cmdEnv struct{ e *env }

func (c cmdEnv) Stdout() io.Writer                { return c.e.stdout }
func (c cmdEnv) Stderr() io.Writer                { return c.e.stderr }
func (c cmdEnv) AddServerFlag(cmd *cobra.Command) { c.e.addServerFlag(cmd) }
func (c cmdEnv) WithClient(cmd *cobra.Command, fn func(context.Context, *client.Client) error) error {
	return c.e.withClient(cmd, fn)
}

var _ clienv.Env = cmdEnv{}
