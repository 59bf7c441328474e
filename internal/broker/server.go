package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/semaq/semaq/internal/broker/audit"
	"github.com/semaq/semaq/internal/broker/auth"
	"github.com/semaq/semaq/internal/broker/chains"
	"github.com/semaq/semaq/internal/broker/classes"
	"github.com/semaq/semaq/internal/broker/clusterstatus"
	"github.com/semaq/semaq/internal/broker/clustersync"
	"github.com/semaq/semaq/internal/broker/dlq"
	"github.com/semaq/semaq/internal/broker/filter"
	"github.com/semaq/semaq/internal/broker/ingress"
	"github.com/semaq/semaq/internal/broker/keyshared"
	"github.com/semaq/semaq/internal/broker/models"
	"github.com/semaq/semaq/internal/broker/policies"
	"github.com/semaq/semaq/internal/broker/routes"
	"github.com/semaq/semaq/internal/broker/schemas"
	"github.com/semaq/semaq/internal/broker/sessions"
	"github.com/semaq/semaq/internal/broker/streams"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/broker/tokens"
	"github.com/semaq/semaq/internal/identity"
	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/internal/quietlog"
	"github.com/semaq/semaq/internal/registry"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/internal/telemetry"
	"github.com/semaq/semaq/policy"
)

// Version is the SemaQ release this code is (CHANGELOG.md). The node
// reports it in $SQ.API.INFO, the cluster status, semaq_build_info and its
// traces' service.version; `semaq version` prints it with the commit. A
// build may set it: -ldflags '-X github.com/semaq/semaq/internal/broker.Version=…'.
var Version = "0.1.0"

// Server is one SemaQ node. Create it with New, then Start; Shutdown stops it.
// Its methods are safe for concurrent use.
type Server struct {
	cfg Config
	log *slog.Logger

	ns       *server.Server
	users    nodeUsers  // the node's own NATS users (permissions.go)
	nc       *nats.Conn // internal connection of the semantic layer
	egress   *nats.Conn // sends to subjects clients chose (permissions.go)
	js       jetstream.JetStream
	ingress  *ingress.Ingress
	served   *ingress.Served    // the streams the ingress serves; the route rules read it
	chains   *chains.Chains     // the provenance API and the node's signing key
	reg      *registry.Registry // schema registry: schema-on-write; its APIs are s.schemas
	schemas  *schemas.Service   // the registry's REST and NATS API (internal/broker/schemas)
	routes   *routes.Router     // route rules (internal/broker/routes)
	policies *policies.Store    // stored policy rules and plugins (internal/broker/policies)
	classes  *classes.Classes   // hardware classes of work queues (internal/broker/classes)
	dlq      *dlq.Store         // dead letters (internal/broker/dlq)
	memory   *memoryGuard       // nil without a memory bound (memory.go)
	filters  *filter.Service    // filtered subscriptions (filter/)
	streams  *streams.Manager   // streams and work queues (internal/broker/streams)
	metrics  *metrics.Metrics   // Prometheus metrics (observe.go)
	tracing  *telemetry.Tracing // nil without an OTLP endpoint (observe.go)
	tokens   *tokens.Store      // token streams: relay, retention, status API (tokens/)
	sessions *sessions.Store    // sessions (internal/broker/sessions): the registry degrades them
	models   *models.Registry   // the model registry (internal/broker/models)

	audits *audit.Recorder // records admin changes (audit/recorder.go; the readers: audit.go)

	syncer *clustersync.Syncer   // changes wait for the other nodes; nil outside a cluster (clustersync/)
	status *clusterstatus.Status // $SQ.API.CLUSTER and the nodes' reports (clusterstatus/)

	authn      *auth.Authenticator // the NATS door's authenticator with auth on (authenticator.go)
	identities *identity.Store     // users and keys with auth on (internal/identity; opened by users/)
	tenancy    *tenancy            // the user accounts: tenants' with auth on, the public one without (tenancy.go)

	keyShared *keyshared.Service // key-shared groups (keyshared/)

	frontDoor     FrontDoorFunc    // builds the HTTP front door (frontdoor.go)
	policy        []policy.Step    // the ingress's policy steps: WithIngressPolicy's, then Config.Policy's
	policyReg     *policy.Registry // where Config.Policy's steps are found (WithPolicyRegistry)
	ingressShards int              // the ingress's shards; 0 picks by cores (ingress/wire.go)
	operators     []string         // public nkeys of operator users (WithOperator)
	front         FrontDoor        // nil without HTTP
	tls           tlsState         // certificates of both client ports (tls.go)

	shutdownOnce sync.Once

	gate      *subsystem.Gate  // every goroutine of the node starts here
	opened    []opened         // the subsystems open now, in order (subsystems.go)
	embedded  []subsystem.Spec // WithSubsystem's
	resources *reserved.Table  // what the node keeps for itself (internal/reserved)

	// syncFile replaces fsync in group commits; tests inject faults here.
	syncFile func(*os.File) error
	// quotaNow replaces the quotas' clock; tests step it (WithQuotaClock).
	quotaNow func() time.Time
}

// New validates cfg and prepares a server. Nothing listens until Start.
func New(cfg Config, log *slog.Logger, opts ...Option) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	users, err := newNodeUsers()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, users: users}
	for _, o := range opts {
		o(s)
	}
	for _, pub := range s.operators {
		if !nkeys.IsValidPublicUserKey(pub) {
			return nil, fmt.Errorf("broker: operator %q is not a public user nkey (U…)", pub)
		}
	}
	if s.policy, err = s.policySteps(); err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	var extra []reserved.Resource
	var services []reserved.Service
	for _, spec := range s.embedded {
		if spec.Name == "" || spec.Open == nil {
			return nil, errors.New("broker: a subsystem needs a name and an Open")
		}
		extra = append(extra, spec.Resources...)
		services = append(services, spec.Services...)
	}
	if s.resources, err = reserved.NewTable(extra, services); err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	s.gate = subsystem.NewGate("node")
	return s, nil
}

// Start opens the node's subsystems in order (subsystems.go): the
// embedded NATS server, the semantic layer's connections, the streams,
// the HTTP front door. It returns when the node is ready to serve, or with
// an error and nothing left running.
func (s *Server) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			_ = s.closeAll(context.Background())
		}
	}()
	if err := s.openAll(ctx); err != nil {
		return err
	}
	s.log.Info("semaq ready", "nats", s.ClientURL(), "http", s.httpURL(), "data", s.cfg.DataDir, "sync", s.cfg.Sync,
		"node", s.cfg.Name, "cluster", s.cfg.ClusterName)
	s.log.Info(ackMeaning(&s.cfg))
	return nil
}

// ackMeaning says in one line what a publisher's acknowledgement means
// under the node's default durability (docs/durability.md): said at start,
// so whoever runs the node knows what it promises.
func ackMeaning(c *Config) string {
	if c.Sync == SyncAlways {
		return "acks (streams without their own --durability): an acknowledged message is fsynced to disk first (--sync always; group-committed), on a quorum of its replicas on a cluster: it survives a crash or power loss of every machine"
	}
	every := c.SyncEvery
	if every <= 0 {
		every = 2 * time.Minute // JetStream's default
	}
	where := "the node's"
	if c.ClusterName != "" {
		where = "a quorum of its replicas'"
	}
	return fmt.Sprintf("acks (streams without their own --durability): an acknowledged message is in %s memory (OS page cache) and fsynced within %s (--sync interval): it survives a process crash, not a power loss of those machines in that window; --sync always fsyncs before every ack (docs/durability.md)", where, every)
}

// natsOptions are the embedded server's options; tlsFiles, when not nil,
// are served on the client port.
func (s *Server) natsOptions(tlsFiles *tlsFiles) (*server.Options, error) {
	host, port, err := splitHostPort(s.cfg.Listen)
	if err != nil {
		return nil, err
	}
	pub := server.NewAccount(publicAccount)
	opts := &server.Options{
		ServerName: s.cfg.Name,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   s.cfg.DataDir,
		NoSigs:     true,
		MaxPayload: int32(s.cfg.MaxPayload),
		MaxConn:    s.cfg.MaxConnections,
		MaxSubs:    s.cfg.MaxSubscriptions,
		// A single node never has JetStream fsync per message: streams
		// with durability fsync are group-committed by the ingress
		// (groupcommit/), the rest rely on JetStream's periodic sync. A
		// clustered node with --sync always runs JetStream's sync_always:
		// its Raft log is fsynced on a quorum before an ack, which the
		// ingress's committer cannot arrange (docs/durability.md).
		SyncInterval: s.cfg.SyncEvery,
		SyncAlways:   s.jetstreamSyncs(),
		// Atomic batches: batch frames, stock clients' batches and every
		// chained session's batch (docs/provenance.md) stay open for the
		// moment between their first message and their commit. The
		// ingress bounds them (docs/batches.md#limits); JetStream's
		// default of 50 per stream would refuse busy sessions first.
		JetStreamLimits: server.JSLimitOpts{MaxBatchInflightPerStream: 1000, MaxBatchInflightTotal: 4096},
		// The semantic layer authenticates with a key made for this process;
		// everyone else is the public user, whose permissions keep them out
		// of storage.
		Nkeys: []*server.NkeyUser{
			{Nkey: s.users.internal.pub},
			{Nkey: s.users.egress.pub, Permissions: egressPermissions()},
			{Nkey: s.users.front.pub, Permissions: publicPermissions(s.resources)},
		},
		Users:      []*server.User{{Username: publicUser, Permissions: publicPermissions(s.resources), Account: pub}},
		NoAuthUser: publicUser,
		// The public user lives in an account of its own (tenancy.go).
		Accounts: []*server.Account{pub},
	}
	for _, pub := range s.operators {
		// All rights, as the internal user: see WithOperator.
		opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: pub})
	}
	if s.cfg.Auth {
		// Custom authentication replaces the server's users: the
		// authenticator admits the node users and operators above with
		// the same permissions, and store users by role; no one is
		// anonymous (authenticator.go, docs/security.md).
		s.authn = s.newAuthenticator()
		opts.CustomClientAuthentication = s.authn
		opts.AlwaysEnableNonce = true // nkey users sign it
		opts.Nkeys, opts.Users, opts.NoAuthUser, opts.Accounts = nil, nil, "", nil
	}
	if port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	if tlsFiles != nil {
		s.tls.setNATS(opts)
	}
	if err := s.cfg.setCluster(opts, tlsFiles, &s.tls); err != nil {
		return nil, err
	}
	if err := s.guardRoutes(opts); err != nil {
		return nil, err
	}
	return opts, nil
}

// ClientURL is the NATS URL clients connect to.
func (s *Server) ClientURL() string {
	if s.ns == nil {
		return ""
	}
	return s.ns.ClientURL()
}

// HTTPAddr is the address of the HTTP front door, or "" when disabled.
func (s *Server) HTTPAddr() string {
	if s.front == nil {
		return ""
	}
	return s.front.Addr()
}

// httpURL is the HTTP door's URL for the ready line, https:// with TLS;
// "" without the door.
func (s *Server) httpURL() string {
	addr := s.HTTPAddr()
	switch {
	case addr == "":
		return ""
	case s.cfg.TLSCert != "":
		return "https://" + addr
	}
	return "http://" + addr
}

// NATSServer exposes the embedded server, for in-process clients
// (nats.InProcessServer) and benchmarks.
func (s *Server) NATSServer() *server.Server { return s.ns }

// IngressTransport is how the ingress's connections reach the NATS
// server: IngressPipe or IngressTCP (Config.IngressTransport).
func (s *Server) IngressTransport() string {
	if s.cfg.IngressTransport == "" {
		return IngressPipe
	}
	return s.cfg.IngressTransport
}

// internalAuth authenticates a connection as the internal user.
func (s *Server) internalAuth() nats.Option { return s.users.internal.auth() }

// egressAuth authenticates a connection as the egress user: the one that
// sends to subjects clients chose.
func (s *Server) egressAuth() nats.Option { return s.users.egress.auth() }

// defaultDurability is the durability of a stream that names none.
func (s *Server) defaultDurability() string {
	if s.cfg.Sync == SyncAlways {
		return DurabilityFsync
	}
	return DurabilityInterval
}

// Config returns the configuration the server runs with.
func (s *Server) Config() Config { return s.cfg }

// ready reports whether the node can take traffic, for /healthz.
func (s *Server) ready() error {
	if s.ns == nil || !s.ns.Running() {
		return errors.New("nats server not running")
	}
	if !s.ns.JetStreamEnabled() {
		return errors.New("jetstream not enabled")
	}
	if s.nc == nil || !s.nc.IsConnected() {
		return errors.New("semantic layer not connected")
	}
	return nil
}

// Shutdown stops the node gracefully: the HTTP front door stops taking
// requests, in-flight ingress messages are handed to JetStream, and the NATS
// server shuts down. It returns when everything has stopped or ctx is done.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.shutdownOnce.Do(func() { err = s.stop(ctx) })
	return err
}

func (s *Server) stop(ctx context.Context) error { return s.closeAll(ctx) }

// natsReadyTimeout bounds the embedded server's start when it reports no
// failure: JetStream recovering a large store takes a while.
const natsReadyTimeout = 30 * time.Second

// waitNATSReady waits until ns listens for clients, or fails with the first
// fatal error it logged (a busy port: "address already in use"; JetStream
// that cannot start), rather than wait out the timeout: nats-server's
// Start logs such errors and returns, and would never become ready.
func waitNATSReady(ctx context.Context, ns *server.Server, fatal <-chan error, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		// Addr is set once the client listener is open, the last step
		// of Start; ReadyForConnections then has nothing to wait for.
		if ns.Addr() != nil && ns.ReadyForConnections(time.Second) {
			return nil
		}
		select {
		case err := <-fatal:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("not ready for clients after %s", timeout)
		case <-tick.C:
		}
	}
}

// natsLogger sends the embedded server's log lines to slog. nats-server
// calls Fatalf where it would exit, and carries on when the logger does
// not; the first fatal error also goes to fatal, so Start fails with it.
type natsLogger struct {
	log   *slog.Logger
	fatal chan error // buffered 1; nil keeps nothing
	quiet quietlog.Gate
	// started is when the node started: routes that do not connect yet
	// in its first routeGrace are its peers starting too.
	started time.Time
}

// routeGrace is how long after its start a node logs its routes' connect
// errors at info: the other nodes of a cluster start at about the same
// time, and a route that connects on its next try needs no operator.
const routeGrace = 30 * time.Second

// clientCaused are NATS server errors a client causes (a bad key, a
// publish or subscription its permissions refuse): nothing for an operator
// to do, so they are logged at info, once a second per kind, and counted
// by the broker's own metrics where it refuses.
var clientCaused = []struct{ match, reason string }{
	{"Authorization Violation", "authorization"},
	{"authentication error", "authentication"},
	{"Publish Violation", "publish"},
	{"Subscription Violation", "subscription"},
	{"Maximum Payload Violation", "payload"},
	{"maximum connections exceeded", "connections"},
}

// routine are NATS server warnings of a cluster at work, at info: a node
// starting or rejoining asks for state its peers have not all sent yet.
var routine = []string{
	"Did not receive all stream info results",
	"Did not receive all consumer info results",
	"Recovering stream state from index errored",
}

// Notices are the NATS startup banner and routine news; SemaQ prints its own.
func (l *natsLogger) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *natsLogger) Warnf(format string, v ...any) {
	// The public user has no password by design: it is the NoAuthUser
	// every anonymous client maps to. NATS warns about that as if it were a
	// weak password.
	if strings.HasPrefix(format, "Plaintext passwords detected") {
		return
	}
	msg := fmt.Sprintf(format, v...)
	for _, r := range routine {
		if strings.Contains(msg, r) {
			l.log.Info(msg)
			return
		}
	}
	l.log.Warn(msg)
}
func (l *natsLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg)
	err := errors.New(msg)
	// "Error listening on port: %s, %q" with the listen error: keep the
	// net error itself, as the busy HTTP port reports it. Other listen
	// errors (the cluster's "Error listening on router port: %d - %v")
	// keep their words and wrap the net error, so a caller can tell a
	// busy port (errors.Is syscall.EADDRINUSE) and try another.
	if strings.HasPrefix(format, "Error listening on port") && len(v) == 2 {
		if e, ok := v[1].(error); ok {
			err = e
		}
	} else if len(v) > 0 {
		if e, ok := v[len(v)-1].(error); ok {
			err = &natsFatal{msg: msg, err: e}
		}
	}
	select {
	case l.fatal <- err:
	default:
	}
}

// natsFatal is a fatal log line of the NATS server with the error it names.
type natsFatal struct {
	msg string
	err error
}

func (e *natsFatal) Error() string { return e.msg }
func (e *natsFatal) Unwrap() error { return e.err }

func (l *natsLogger) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	switch {
	case strings.Contains(msg, "Error trying to connect to route") && time.Since(l.started) < routeGrace:
		if l.quiet.Open("route") {
			l.log.Info(msg + " (its node may be starting; retried)")
		}
	case l.clientCaused(msg):
	default:
		l.log.Error(msg)
	}
	// The server's refusal names the subject only; a stock client on its
	// default inbox with auth on meets it first (docs/security.md).
	if strings.Contains(msg, `Subscription Violation - Subject "_INBOX.`) && l.quiet.Open("inbox") {
		l.log.Info("a client subscribed to the shared reply inbox _INBOX.: with auth on a user receives replies on " +
			"its own inbox only, _INBOX_<user>; set the client's inbox prefix (nats.go CustomInboxPrefix, nats.js inboxPrefix, " +
			"natscli --inbox-prefix) or use the SemaQ SDK with its key")
	}
}

// clientCaused logs msg at info, once a second per kind, if a client
// caused it, and reports whether it did.
func (l *natsLogger) clientCaused(msg string) bool {
	for _, c := range clientCaused {
		if strings.Contains(msg, c.match) {
			if l.quiet.Open(c.reason) {
				l.log.Info(msg + " (a client's; more of the kind are not logged for a second)")
			}
			return true
		}
	}
	return false
}

func (l *natsLogger) Debugf(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *natsLogger) Tracef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
