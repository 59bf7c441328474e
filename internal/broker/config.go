package broker

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/semaq/semaq/internal/broker/quota"
	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/internal/telemetry"
)

// Sync modes.
const (
	// SyncInterval fsyncs on a timer (JetStream's default, every two
	// minutes); an ack means "in the OS page cache".
	SyncInterval = "interval"
	// SyncAlways fsyncs every write before it is acknowledged; an ack means
	// "on disk".
	SyncAlways = "always"
)

// Config is the configuration of one node. The zero value is not valid; start
// from DefaultConfig.
type Config struct {
	// DataDir holds JetStream's files.
	DataDir string `yaml:"data"`
	// Listen is the NATS client address, host:port. Port 0 picks a free one.
	// Listen and HTTP must be loopback addresses unless Insecure is set.
	Listen string `yaml:"listen"`
	// HTTP is the HTTP front door address; empty disables it.
	HTTP string `yaml:"http"`
	// Sync is SyncInterval or SyncAlways.
	Sync string `yaml:"sync"`
	// SyncEvery is the fsync period in interval mode; 0 means JetStream's
	// default.
	SyncEvery time.Duration `yaml:"sync_interval"`
	// Name names the node (--node); empty lets NATS pick one. A clustered
	// node needs a name unique in its cluster (docs/cluster.md).
	Name string `yaml:"name"`
	// ClusterName names the cluster the node joins; set with ClusterListen.
	ClusterName string `yaml:"cluster_name"`
	// ClusterListen is the address, host:port, other nodes' routes reach
	// this node on; it follows the loopback rule of Listen (cluster.go).
	ClusterListen string `yaml:"cluster_listen"`
	// Routes are the cluster addresses of the other nodes (nats://host:port);
	// listing the node itself is allowed, so every node can share one list.
	Routes []string `yaml:"routes"`
	// MaxHeaderBytes bounds the header block of one message.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxPayload bounds one message (headers and data); 0 means 1 MiB.
	MaxPayload int `yaml:"max_payload"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `yaml:"log_level"`
	// OTLPEndpoint is the OTLP/HTTP collector traces are exported to
	// (docs/tracing.md); empty disables tracing.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// TraceSample is the fraction of messages and requests arriving without
	// a traceparent that start a trace (0..1); ones with a traceparent
	// follow its sampled flag.
	TraceSample float64 `yaml:"trace_sample"`
	// TokenStorage is where token streams are kept: memory (default) or file.
	TokenStorage string `yaml:"token_storage"`
	// IngressTransport is how the ingress's connections reach the node's
	// NATS server: pipe (default), nats-server's in-process connection, or
	// tcp, a loopback TCP connection to the client port, which does not
	// make the server's writer wait for the ingress's reader (more
	// throughput on a busy machine, a few tens of microseconds more per
	// message; docs/benchmarks/ingress.md). tcp needs a client port
	// without TLS.
	IngressTransport string `yaml:"ingress_transport"`
	// GatewayAPIKeys maps the bearer keys of the OpenAI-compatible gateway
	// to tenants; when set, other keys are refused (docs/gateway.md).
	GatewayAPIKeys map[string]string `yaml:"gateway_api_keys"`
	// ExprMaxEvalBytes bounds what one evaluation of a route, filter or key
	// expression may build (docs/expressions.md, Limits); 0 means 1 MiB.
	ExprMaxEvalBytes int64 `yaml:"expr_max_eval_bytes"`
	// ExprEvalTimeout bounds the time of one evaluation; 0 means 5s.
	ExprEvalTimeout time.Duration `yaml:"expr_eval_timeout"`
	// MaxFilters bounds the filtered subscriptions one node runs; 0 means
	// filter.DefaultMax (1000).
	MaxFilters int `yaml:"max_filters"`
	// MaxKeySharedMembers bounds the key-shared members one node serves;
	// 0 means keyshared.DefaultMaxMembers (1000).
	MaxKeySharedMembers int `yaml:"max_key_shared_members"`
	// MaxConnections bounds the NATS client connections of the node (the
	// HTTP front door has its own bound); past it NATS refuses new ones.
	MaxConnections int `yaml:"max_connections"`
	// MaxSubscriptions bounds the subscriptions of one NATS connection.
	MaxSubscriptions int `yaml:"max_subscriptions"`
	// HTTPAllowedHosts are the Host names the HTTP front door answers
	// besides localhost and IP literals (docs/http.md, Limits and safety).
	HTTPAllowedHosts []string `yaml:"http_allowed_hosts"`
	// HTTPAllowedOrigins are the web origins (scheme://host[:port]) whose
	// pages may call the HTTP front door.
	HTTPAllowedOrigins []string `yaml:"http_allowed_origins"`
	// Token-stream bounds (docs/tokens.md); 0 keeps each default:
	// TokenMaxBytes is SQ_TOKENS' size (256 MiB; full refuses new records),
	// TokenStreamMaxBytes and TokenStreamMaxRecords bound one request's
	// stream (16 MiB, 100000), TokenMaxStreams the request ids the relay
	// tracks at once (262144).
	TokenMaxBytes         int64 `yaml:"token_max_bytes"`
	TokenStreamMaxBytes   int64 `yaml:"token_stream_max_bytes"`
	TokenStreamMaxRecords int64 `yaml:"token_stream_max_records"`
	TokenMaxStreams       int   `yaml:"token_max_streams"`
	// HTTPMaxConns bounds the HTTP connections open at once; 0 means 1024.
	HTTPMaxConns int `yaml:"http_max_conns"`
	// AuditMaxAge and AuditMaxBytes bound SQ_AUDIT, the record of admin
	// changes (docs/security.md, Audit); past either the oldest records
	// go. 0 keeps each default: 90 days, 256 MiB.
	AuditMaxAge   time.Duration `yaml:"audit_max_age"`
	AuditMaxBytes int64         `yaml:"audit_max_bytes"`

	// TLSCert and TLSKey are PEM files of the certificate (with its chain)
	// and private key both client ports serve (NATS and HTTP); set both or
	// neither. ReloadTLS (SIGHUP) reads them again.
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`
	// TLSClientCA is a PEM file of the CAs client certificates must chain
	// to; when set, both ports require and verify one (mutual TLS).
	TLSClientCA string `yaml:"tls_client_ca"`
	// Insecure allows the client and HTTP ports on a non-loopback address
	// although no authentication is configured (docs/security.md, TLS).
	Insecure bool `yaml:"insecure"`
	// Auth makes every NATS client authenticate with a key of the
	// identity store and gives it its role's permissions
	// (docs/security.md, Identities). Off, every client without
	// credentials is the public user.
	Auth bool `yaml:"auth"`
	// Quotas are the per-tenant quotas of the node's ingress
	// (docs/quotas.md); users' own quotas live with the users. The zero
	// value limits nothing.
	Quotas quota.Config `yaml:"quotas"`
}

// HTTPConnLimit is the most HTTP connections open at once.
func (c *Config) HTTPConnLimit() int {
	if c.HTTPMaxConns > 0 {
		return c.HTTPMaxConns
	}
	return 1024
}

// exprConfig is the expression limits of the node.
func (c *Config) exprConfig() expr.Config {
	return expr.Config{MaxEvalBytes: c.ExprMaxEvalBytes, EvalTimeout: c.ExprEvalTimeout}
}

// DefaultConfig is the embedded default: everything on loopback, data in ./data.
func DefaultConfig() Config {
	return Config{
		DataDir:        "./data",
		Listen:         "127.0.0.1:4222",
		HTTP:           "127.0.0.1:8080",
		Sync:           SyncInterval,
		MaxHeaderBytes: 16 * 1024,
		MaxPayload:     1 << 20,
		LogLevel:       "info",

		MaxConnections:   10000,
		MaxSubscriptions: 100000,
	}
}

// Validate reports the first problem with c, naming the setting.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("data: the data directory must be set")
	}
	if _, _, err := splitHostPort(c.Listen); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if c.HTTP != "" {
		if _, _, err := splitHostPort(c.HTTP); err != nil {
			return fmt.Errorf("http: %w", err)
		}
	}
	switch c.Sync {
	case SyncInterval, SyncAlways:
	default:
		return fmt.Errorf("sync: %q is not a sync mode (want %s or %s)", c.Sync, SyncAlways, SyncInterval)
	}
	if c.SyncEvery < 0 {
		return fmt.Errorf("sync_interval: %s is negative", c.SyncEvery)
	}
	if c.MaxHeaderBytes < 1024 || c.MaxHeaderBytes > 1<<20 {
		return fmt.Errorf("max_header_bytes: %d is outside 1024..1048576", c.MaxHeaderBytes)
	}
	if c.MaxPayload < 1024 || c.MaxPayload > 64<<20 {
		return fmt.Errorf("max_payload: %d is outside 1024..67108864", c.MaxPayload)
	}
	switch c.TokenStorage {
	case "", "memory", "file":
	default:
		return fmt.Errorf("token_storage: %q is not memory or file", c.TokenStorage)
	}
	if err := checkIngressTransport(c.IngressTransport, c.TLSCert != ""); err != nil {
		return fmt.Errorf("ingress_transport: %w", err)
	}
	if c.OTLPEndpoint != "" {
		if err := telemetry.CheckEndpoint(c.OTLPEndpoint); err != nil {
			return fmt.Errorf("otlp_endpoint: %w", err)
		}
	}
	if c.TraceSample < 0 || c.TraceSample > 1 {
		return fmt.Errorf("trace_sample: %g is outside 0..1", c.TraceSample)
	}
	if c.MaxConnections < 1 || c.MaxSubscriptions < 1 {
		return fmt.Errorf("max_connections (%d) and max_subscriptions (%d) must be at least 1", c.MaxConnections, c.MaxSubscriptions)
	}
	if c.TokenMaxBytes < 0 || c.TokenStreamMaxBytes < 0 || c.TokenStreamMaxRecords < 0 || c.TokenMaxStreams < 0 {
		return errors.New("token_max_bytes, token_stream_max_bytes, token_stream_max_records and token_max_streams may not be negative")
	}
	if c.AuditMaxAge < 0 || (c.AuditMaxAge > 0 && c.AuditMaxAge < time.Minute) {
		return fmt.Errorf("audit_max_age: %s is under one minute", c.AuditMaxAge)
	}
	if c.AuditMaxBytes < 0 || (c.AuditMaxBytes > 0 && c.AuditMaxBytes < 1<<20) {
		return fmt.Errorf("audit_max_bytes: %d is under 1048576 (1 MiB)", c.AuditMaxBytes)
	}
	if c.HTTPMaxConns < 0 {
		return fmt.Errorf("http_max_conns: %d is negative", c.HTTPMaxConns)
	}
	for _, h := range c.HTTPAllowedHosts {
		if h == "" || strings.ContainsAny(h, "/ ") {
			return fmt.Errorf("http_allowed_hosts: %q is not a host name", h)
		}
	}
	for _, o := range c.HTTPAllowedOrigins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return fmt.Errorf("http_allowed_origins: %q is not scheme://host[:port]", o)
		}
	}
	if c.MaxFilters < 0 || c.MaxKeySharedMembers < 0 {
		return errors.New("max_filters and max_key_shared_members may not be negative")
	}
	if err := c.exprConfig().Validate(); err != nil {
		return fmt.Errorf("expr_max_eval_bytes / expr_eval_timeout: %w", err)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log_level: %q is not one of debug, info, warn, error", c.LogLevel)
	}
	if c.Auth && len(c.GatewayAPIKeys) > 0 {
		return errors.New("gateway_api_keys: with auth on the gateway takes the keys of the identity store; " +
			"remove gateway_api_keys and create a user per client instead: " +
			"semaq user add NAME --role service --tenant TENANT --subjects 'ai.infer.>' (docs/gateway.md)")
	}
	if err := c.Quotas.Validate(); err != nil {
		return err
	}
	if err := c.checkCluster(); err != nil {
		return err
	}
	if err := c.checkExposure(); err != nil {
		return err
	}
	if err := c.checkClusterExposure(); err != nil {
		return err
	}
	if _, err := c.loadTLS(); err != nil {
		return err
	}
	return nil
}

// LoadConfigFile reads a YAML config file over c. Unknown keys are errors, so
// a typo does not silently fall back to a default.
func LoadConfigFile(path string, c *Config) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

func splitHostPort(addr string) (string, int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	var p int
	if _, err := fmt.Sscanf(port, "%d", &p); err != nil || p < 0 || p > 65535 || fmt.Sprint(p) != port {
		return "", 0, fmt.Errorf("%q: port %q is not a number in 0..65535", addr, port)
	}
	return host, p, nil
}
