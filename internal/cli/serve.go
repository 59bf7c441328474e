package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/node"
	"github.com/semaq/semaq/internal/wallclock"
)

// configKeys are the keys of a --config file, for --help; the flags are
// the first few. serve_test.go checks the list against broker.Config.
var configKeys = []string{
	"data", "listen", "http", "sync", "sync_interval", "name", "log_level", "otlp_endpoint", "trace_sample",
	"max_header_bytes", "max_payload", "token_storage", "ingress_transport", "gateway_api_keys",
	"gateway_session_budget", "gateway_degraded_policy", "gateway_model_wait",
	"max_connections", "max_subscriptions", "max_filters", "max_key_shared_members",
	"expr_max_eval_bytes", "expr_eval_timeout",
	"token_max_bytes", "token_stream_max_bytes", "token_stream_max_records", "token_max_streams", "session_max_bytes",
	"http_max_conns", "http_allowed_hosts", "http_allowed_origins", "audit_max_age", "audit_max_bytes", "stream_max_bytes", "max_memory",
	"tls_cert", "tls_key", "tls_client_ca", "insecure", "auth",
	"cluster_name", "cluster_listen", "cluster_advertise", "store_check", "routes", "cluster_secret_file", "quotas", "policy",
	"pii_vault_key_file", "pii_vault_ttl", "plugin_keys", "plugin_cache_dir", "workloads",
}

// shutdownGrace bounds a graceful shutdown after SIGINT or SIGTERM.
const shutdownGrace = 30 * time.Second

func newServeCmd(e *env) *cobra.Command {
	var (
		configFile string
		flags      broker.Config
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a broker (embedded NATS JetStream, ingress, HTTP front door)",
		Long: `Run a SemaQ broker. With no flags it serves NATS on 127.0.0.1:4222 and HTTP on
127.0.0.1:8080 and keeps its data in ./data. Settings come from the defaults,
then --config (YAML), then flags. SIGINT or SIGTERM drain in-flight messages
and exit 0.

With --tls-cert and --tls-key both ports serve TLS (NATS: tls://, HTTP:
https://); --tls-client-ca requires client certificates from that CA.
SIGHUP reads the three files again for new connections; open ones stay.
With --auth every NATS client and HTTP request authenticates with a key of the
broker's user store (semaq user add; over HTTP as Authorization: Bearer <key>);
at first start the broker creates the user admin and writes its key to
<data>/admin.key (mode 0600). Without --auth every client is the public user,
so --listen and --http must be loopback addresses unless --insecure is given
(docs/security.md).

With --cluster-name, --cluster-listen, --node and --routes the node joins a
cluster of SemaQ nodes (docs/cluster.md); --cluster-listen follows the same
loopback rule, and routes use the node's TLS settings.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := broker.DefaultConfig()
			if configFile != "" {
				if err := broker.LoadConfigFile(configFile, &cfg); err != nil {
					return err
				}
			}
			f := cmd.Flags()
			if f.Changed("data") {
				cfg.DataDir = flags.DataDir
			}
			if f.Changed("listen") {
				cfg.Listen = flags.Listen
			}
			if f.Changed("http") {
				cfg.HTTP = flags.HTTP
			}
			if f.Changed("sync") {
				cfg.Sync = flags.Sync
			}
			if f.Changed("log-level") {
				cfg.LogLevel = flags.LogLevel
			}
			if f.Changed("otlp-endpoint") {
				cfg.OTLPEndpoint = flags.OTLPEndpoint
			}
			if f.Changed("trace-sample") {
				cfg.TraceSample = flags.TraceSample
			}
			if f.Changed("tls-cert") {
				cfg.TLSCert = flags.TLSCert
			}
			if f.Changed("tls-key") {
				cfg.TLSKey = flags.TLSKey
			}
			if f.Changed("tls-client-ca") {
				cfg.TLSClientCA = flags.TLSClientCA
			}
			if f.Changed("insecure") {
				cfg.Insecure = flags.Insecure
			}
			if f.Changed("auth") {
				cfg.Auth = flags.Auth
			}
			if f.Changed("node") {
				cfg.Name = flags.Name
			}
			if f.Changed("cluster-name") {
				cfg.ClusterName = flags.ClusterName
			}
			if f.Changed("cluster-listen") {
				cfg.ClusterListen = flags.ClusterListen
			}
			if f.Changed("routes") {
				cfg.Routes = flags.Routes
			}
			if f.Changed("cluster-secret-file") {
				cfg.ClusterSecretFile = flags.ClusterSecretFile
			}
			if f.Changed("gateway-session-budget") {
				cfg.GatewaySessionBudget = flags.GatewaySessionBudget
			}
			if f.Changed("gateway-degraded-policy") {
				cfg.GatewayDegradedPolicy = flags.GatewayDegradedPolicy
			}
			return serve(cmd.Context(), e, cfg)
		},
	}
	def := broker.DefaultConfig()
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "YAML config file; keys: "+strings.Join(configKeys, ", ")+" (docs/cli.md, docs/security.md)")
	f.StringVar(&flags.DataDir, "data", def.DataDir, "data directory")
	f.StringVar(&flags.Listen, "listen", def.Listen, "NATS client address host:port (port 0 picks one)")
	f.StringVar(&flags.HTTP, "http", def.HTTP, `HTTP address host:port ("" disables HTTP)`)
	f.StringVar(&flags.Sync, "sync", def.Sync, "default stream durability: always (an ack means fsynced; group-committed; on a cluster every stream, by JetStream sync_always) or interval (periodic fsync)")
	f.StringVar(&flags.LogLevel, "log-level", def.LogLevel, "debug, info, warn or error")
	f.StringVar(&flags.OTLPEndpoint, "otlp-endpoint", def.OTLPEndpoint, "export traces over OTLP/HTTP to this collector URL, e.g. http://127.0.0.1:4318 (empty: no tracing)")
	f.Float64Var(&flags.TraceSample, "trace-sample", def.TraceSample, "fraction (0..1) of messages and requests without a traceparent that start a trace")
	f.StringVar(&flags.TLSCert, "tls-cert", "", "PEM certificate (and chain) both ports serve over TLS; needs --tls-key; SIGHUP reloads it")
	f.StringVar(&flags.TLSKey, "tls-key", "", "PEM private key of --tls-cert")
	f.StringVar(&flags.TLSClientCA, "tls-client-ca", "", "PEM CA file: require client certificates from it on both ports (mutual TLS)")
	f.BoolVar(&flags.Insecure, "insecure", false, "allow --listen/--http on a non-loopback address although no authentication is configured")
	f.StringVar(&flags.Name, "node", "", "node name, unique in the cluster (config key name; required with --cluster-name)")
	f.StringVar(&flags.ClusterName, "cluster-name", "", "join the cluster of this name (docs/cluster.md)")
	f.StringVar(&flags.ClusterListen, "cluster-listen", "", "cluster address host:port other nodes' routes reach (loopback unless --insecure, or --auth with --tls-client-ca)")
	f.StringSliceVar(&flags.Routes, "routes", nil, "cluster addresses of the nodes, comma-separated: nats://host:port,... (this node's own may be listed)")
	f.StringVar(&flags.ClusterSecretFile, "cluster-secret-file", "", "file (mode 600) of the secret every node of the cluster shares and routes prove; required with --auth (semaq cluster secret makes one)")
	f.IntVar(&flags.GatewaySessionBudget, "gateway-session-budget", 0, "tokens of a session's history the OpenAI gateway sends before a request naming the session (X-SemaQ-Session); 0: 4096 (docs/gateway.md)")
	f.StringVar(&flags.GatewayDegradedPolicy, "gateway-degraded-policy", "", "what the OpenAI gateway does with a degraded session: proceed (default), warn (a header says why) or refuse (409)")
	f.BoolVar(&flags.Auth, "auth", false, "authenticate every NATS client with a key of the user store (semaq user); lets --listen leave loopback")
	return cmd
}

func serve(ctx context.Context, e *env, cfg broker.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := portsFree(cfg); err != nil {
		return err
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
	// The process is the node's: its max_memory is the Go runtime's soft
	// limit too (the broker refuses publishes near it either way).
	if limit, _ := broker.ResolveMaxMemory(cfg.MaxMemory); limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	if err := wallclock.FromEnv(ctx, log); err != nil {
		return err
	}
	srv, err := node.New(cfg, log)
	if err != nil {
		return err
	}
	// Registered before Start: a SIGHUP from then on reloads, never kills.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if err := srv.Start(ctx); err != nil {
		return err
	}
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-hup:
			reloadTLS(srv, cfg, log)
		}
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// reloadTLS answers SIGHUP: new certificates for new connections, or the
// old ones kept with the reason.
func reloadTLS(srv *broker.Server, cfg broker.Config, log *slog.Logger) {
	switch err := srv.ReloadTLS(); {
	case errors.Is(err, broker.ErrTLSNotConfigured):
		log.Info("SIGHUP: nothing to reload, TLS is not configured")
	case err != nil:
		log.Error("SIGHUP: TLS reload failed; the certificates in service stay", "err", err)
	default:
		log.Info("SIGHUP: TLS certificates reloaded for new connections", "tls_cert", cfg.TLSCert, "tls_client_ca", cfg.TLSClientCA)
	}
}

// portsFree reports every client port already taken, each with the flag
// (or config key) that names it, before the node starts: the node itself
// would stop at the first with the listener's bare error.
func portsFree(cfg broker.Config) error {
	var busy []string
	for _, p := range []struct{ flag, addr string }{{"--listen", cfg.Listen}, {"--http", cfg.HTTP}} {
		if p.addr == "" || strings.HasSuffix(p.addr, ":0") {
			continue
		}
		l, err := net.Listen("tcp", p.addr)
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				busy = append(busy, fmt.Sprintf("%s %s", p.flag, p.addr))
				continue
			}
			return fmt.Errorf("%s %s: %w", p.flag, p.addr, err)
		}
		_ = l.Close()
	}
	if len(busy) > 0 {
		return fmt.Errorf("%s: in use (another semaq serve? stop it, or give a free port)", strings.Join(busy, " and "))
	}
	return nil
}
