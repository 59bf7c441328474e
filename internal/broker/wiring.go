package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/agents"
	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/audit"
	"github.com/semaq/semaq/internal/broker/chains"
	"github.com/semaq/semaq/internal/broker/clustersync"
	"github.com/semaq/semaq/internal/broker/dispatch"
	"github.com/semaq/semaq/internal/broker/dlq"
	"github.com/semaq/semaq/internal/broker/filter"
	"github.com/semaq/semaq/internal/broker/ingress"
	"github.com/semaq/semaq/internal/broker/jsguard"
	"github.com/semaq/semaq/internal/broker/keyshared"
	"github.com/semaq/semaq/internal/broker/models"
	"github.com/semaq/semaq/internal/broker/policies"
	"github.com/semaq/semaq/internal/broker/pump"
	"github.com/semaq/semaq/internal/broker/quota"
	"github.com/semaq/semaq/internal/broker/routes"
	"github.com/semaq/semaq/internal/broker/schemas"
	"github.com/semaq/semaq/internal/broker/sessions"
	"github.com/semaq/semaq/internal/broker/streams"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/broker/tokens"
	"github.com/semaq/semaq/internal/broker/users"
	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/internal/identity"
	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/internal/registry"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/internal/telemetry"
	"github.com/semaq/semaq/policy"
	"github.com/semaq/semaq/semaq"
)

// The open functions of the list in subsystems.go, in its order: each
// gives one subsystem what it needs of the node (its Deps) and hands back
// what closes it.

// openObservability makes the node's metrics and, with an OTLP endpoint,
// its tracer: every subsystem after it may record. Closing it exports the
// spans still buffered.
func openObservability(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	s.metrics = metrics.New(metrics.Options{Version: Version})
	t, err := telemetry.New(ctx, telemetry.Config{
		Endpoint:       s.cfg.OTLPEndpoint,
		SampleRatio:    s.cfg.TraceSample,
		ServiceVersion: Version,
	})
	if err != nil {
		return nil, fmt.Errorf("broker: tracing: %w", err)
	}
	s.tracing = t
	s.metrics.SetConsumerSource(s.consumerStats)
	return subsystem.Func(t.Shutdown), nil
}

// openNATS runs the embedded NATS server, with the user accounts' imports
// made before JetStream starts: an account JetStream finds without an
// import of $JS.API.INFO gets JetStream's whole API from the system
// account, beside the broker's imports.
func openNATS(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	tlsFiles, err := s.cfg.loadTLS()
	if err != nil {
		return nil, err
	}
	if tlsFiles != nil {
		s.tls.serve(tlsFiles)
	}
	opts, err := s.natsOptions(tlsFiles)
	if err != nil {
		return nil, err
	}
	if err := s.checkStore(); err != nil {
		return nil, err
	}
	known := s.knownAccounts()
	ns, err := newNATSServer(opts, known)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	nl := &natsLogger{log: s.log.With("component", "nats"), fatal: make(chan error, 1), started: time.Now()}
	ns.SetLoggerV2(nl, s.cfg.LogLevel == "debug", false, false)
	s.ns = ns
	shutdown := subsystem.Func(func(context.Context) error {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil
	})
	if s.tenancy, err = newTenancy(ns, s.resources.Services()); err != nil {
		return nil, err
	}
	if s.cfg.Auth {
		s.tenancy.known = known
		err = s.tenancy.ensureAccounts(ns, known)
	} else {
		err = s.tenancy.public(ns)
	}
	if err != nil {
		return nil, err
	}
	s.gate.Go("nats-start", func(context.Context) { ns.Start() })
	if err := waitNATSReady(ctx, ns, nl.fatal, natsReadyTimeout); err != nil {
		_ = shutdown.Close(ctx)
		// A listen error names the address itself, as the HTTP port's does.
		return nil, fmt.Errorf("broker: nats: %w", err)
	}
	if !ns.GlobalAccount().JetStreamEnabled() {
		_ = shutdown.Close(ctx)
		return nil, fmt.Errorf("broker: the NATS server did not enable JetStream for the node's account")
	}
	if err := s.waitJetStreamCluster(ctx); err != nil {
		_ = shutdown.Close(ctx)
		return nil, err
	}
	return shutdown, nil
}

// openConnections connects the semantic layer: the internal connection
// (and JetStream on it) and the egress connection (permissions.go).
// Closing them drains both.
func openConnections(_ context.Context, s *Server) (subsystem.Subsystem, error) {
	var err error
	s.nc, err = nats.Connect("", nats.InProcessServer(s.ns), s.internalAuth(),
		nats.Name("semaq-internal"), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				s.log.Warn("semantic layer disconnected from the NATS server", "err", err)
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			s.log.Error("semantic layer connection error", "subject", subj, "err", err)
		}))
	if err != nil {
		return nil, fmt.Errorf("broker: internal connection: %w", err)
	}
	closeBoth := subsystem.Func(func(ctx context.Context) error {
		if s.egress != nil {
			_ = s.egress.Drain()
		}
		if err := closeConn(ctx, s.nc); err != nil {
			return fmt.Errorf("internal connection: %w", err)
		}
		return nil
	})
	s.egress, err = nats.Connect("", nats.InProcessServer(s.ns), s.egressAuth(),
		nats.Name("semaq-egress"), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			// A permissions violation here is a reply subject a check
			// above missed: the server refused it, which is the point.
			s.log.Warn("egress connection refused a send", "err", err)
		}))
	if err != nil {
		_ = closeBoth.Close(context.Background())
		return nil, fmt.Errorf("broker: egress connection: %w", err)
	}
	if s.js, err = jetstream.New(s.nc); err != nil {
		_ = closeBoth.Close(context.Background())
		return nil, fmt.Errorf("broker: %w", err)
	}
	return closeBoth, nil
}

// openRegistry opens the schema registry: schema-on-write, its REST API
// (the front door) and its NATS API (openSchemaAPI).
func openRegistry(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	var err error
	s.reg, err = registry.Open(ctx, s.js, registry.Config{Log: s.log.With("component", "registry"), Replicas: s.ownReplicas()})
	if err != nil {
		return nil, fmt.Errorf("broker: schema registry: %w", err)
	}
	return subsystem.Func(func(context.Context) error { return s.reg.Close() }), nil
}

// openMemory bounds the node's memory (memory.go), when max_memory or the
// cgroup sets one.
func openMemory(_ context.Context, s *Server) (subsystem.Subsystem, error) {
	limit, source := ResolveMaxMemory(s.cfg.MaxMemory)
	gate := s.gate.Child("memory")
	if s.memory = newMemoryGuard(limit, source, gate); s.memory == nil {
		return gate, nil
	}
	s.metrics.WatchMemory(limit, s.memory.inUse.Load)
	s.log.Info("memory: publishes are refused past 90% of max_memory", "max_memory_mib", limit>>20, "from", source)
	return gate, nil
}

// openAudit creates SQ_AUDIT before any handler is served, so no change
// goes unrecorded; it serves $SQ.API.AUDIT.LIST.
func openAudit(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	l, err := audit.Open(ctx, audit.Deps{
		JS: s.js, Conn: s.nc, Log: s.log.With("component", "audit"),
		MaxAge: s.cfg.AuditMaxAge, MaxBytes: s.cfg.AuditMaxBytes, Replicas: s.ownReplicas(),
		Written: s.metrics.AuditRecord, Failed: s.metrics.AuditWriteFailure,
	})
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	s.audits = audit.NewRecorder(l, s.ns.Name(), s.principal)
	return l, nil
}

// routeCheck answers a route dry run ($SQ.API.ROUTE.TEST) with the
// ingress's own pipeline (ingress.Check), for the request's sender or, with
// as, for that store user: its tenant stamped and its policy applied as
// when it publishes. Only admins and the node reach the route API.
func routeCheck(s *Server) func(ctx context.Context, m *nats.Msg, as string) (routes.Checked, *semaq.APIError, error) {
	return func(ctx context.Context, m *nats.Msg, as string) (routes.Checked, *semaq.APIError, error) {
		who := s.principal(api.RequestHeader(ctx))
		if as != "" {
			if !s.cfg.Auth || s.identities == nil {
				return routes.Checked{}, nil, semaq.NewAPIError(semaq.ErrBadRequest, "route test: as %q: the node runs without --auth, so every publisher is the same public user", as)
			}
			u, err := s.identities.Get(as)
			if err != nil {
				return routes.Checked{}, nil, semaq.NewAPIError(semaq.ErrBadRequest, "route test: as %q: %v", as, err)
			}
			who = api.Principal{Who: api.User, User: u.Name, Tenant: u.Tenant, Role: u.Role}
		}
		d, err := s.ingress.Check(ctx, m, who)
		c := routes.Checked{Stream: d.Stream, Subject: d.Subject, Rule: d.Rule, Target: d.Target, RefusedBy: d.RefusedBy}
		if err != nil {
			var e *semaq.APIError
			if !errors.As(err, &e) {
				e = semaq.NewAPIError(semaq.ErrUnavailable, "%v", err)
			}
			return c, e, nil
		}
		return c, nil, nil
	}
}

// streamsCapturing names the SemaQ streams that capture a public subject,
// as $SQ.API.STREAM.LOOKUP finds them.
func streamsCapturing(s *Server) func(ctx context.Context, subject string) ([]string, error) {
	return func(ctx context.Context, subject string) ([]string, error) {
		var names []string
		lister := s.js.StreamNames(ctx, jetstream.WithStreamListSubject(reserved.StoragePrefix+subject))
		for n := range lister.Name() {
			names = append(names, n)
		}
		if err := lister.Err(); err != nil {
			return nil, api.JSError(err, "looking up the stream of %s", subject)
		}
		return names, nil
	}
}

// openRoutes opens the route rules before the ingress, which takes them:
// no message is stored unrouted while they load. Closing them stops the
// rule watcher and the health interval; the ingress keeps the last table.
func openRoutes(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	s.served = ingress.NewServed()
	rt, err := routes.Open(ctx, routes.Deps{
		Log:              s.log.With("component", "routes"),
		JS:               s.js,
		Replicas:         s.ownReplicas(),
		Conn:             s.nc,
		Expr:             s.cfg.exprConfig(),
		StreamFor:        s.served.StreamFor,
		StreamSubjects:   s.served.Subjects,
		StreamsCapturing: streamsCapturing(s),
		Check:            routeCheck(s),
		Audit:            s.audit,
		Applied: func(ctx context.Context, rev uint64) {
			s.syncer.Sync(ctx, clustersync.Request{Routes: rev})
		},
		Node:      s.ns.Name(),
		Clustered: s.cfg.Clustered(),
		Gate:      s.gate.Child("routes"),
	})
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	s.routes = rt
	s.audits.Reads(rt.AuditRead, semaq.AuditOpRouteAdd, semaq.AuditOpRouteDelete)
	return rt, nil
}

// openPolicies opens the stored policy rules and plugins
// (internal/broker/policies): before the ingress, whose first policy step
// runs them, and the token relay, which filters streams with them.
func openPolicies(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	key, err := s.vaultKey()
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	pluginKeys, err := s.cfg.pluginKeys()
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	st, err := policies.Open(ctx, policies.Deps{
		Log: s.log.With("component", "policy"), JS: s.js, Conn: s.nc, Replicas: s.ownReplicas(), Node: s.ns.Name(), Clustered: s.cfg.Clustered(),
		Principal: s.principal, Audit: s.audit, Metrics: s.metrics,
		Applied: func(ctx context.Context, rev uint64) {
			s.syncer.Sync(ctx, clustersync.Request{Policy: rev})
		},
		VaultKey: key, VaultTTL: s.cfg.PIIVaultTTL, PluginKeys: pluginKeys,
		PluginCacheDir: cmp.Or(s.cfg.PluginCacheDir, filepath.Join(s.cfg.DataDir, "plugin-cache")),
		Gate:           s.gate.Child("policies"),
	})
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	s.policies = st
	return st, nil
}

// openIngress opens the ingress (internal/broker/ingress) with the node's
// parts: it serves no stream until the streams open. Closing it hands
// the messages in flight to JetStream.
func openIngress(_ context.Context, s *Server) (subsystem.Subsystem, error) {
	dial, err := s.ingressDialer()
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	d := ingress.Deps{
		Log:            s.log.With("component", "ingress"),
		Dial:           dial,
		Shards:         s.ingressShards,
		Egress:         s.egress,
		Conn:           s.nc,
		Served:         s.served,
		MaxHeaderBytes: s.cfg.MaxHeaderBytes,
		Registry:       s.reg,
		Routes:         s.routes.Table,
		Policy:         append([]policy.Step{s.policies.Step()}, s.policy...),
		Principal:      s.principal,
		MayPublish:     s.authorizePublish,
		Metrics:        s.metrics,
		Tracing:        s.tracing,
		StoreDir:       s.account().streamDir,
		SyncFile:       s.syncFile,
		Clustered:      s.cfg.Clustered(),
		Gate:           s.gate.Child("ingress"),
		SigningKey:     s.chains.Key(),
		Workloads:      s.cfg.Workloads,
		ClassKnown:     func(name string) bool { _, ok := s.classes.Class(name); return ok },
	}
	if s.memory != nil {
		d.Memory = s.memory.refusal
	}
	s.ingress, err = ingress.New(d)
	if err != nil {
		return nil, err
	}
	for _, st := range s.policy {
		s.log.Info("ingress policy step enabled", "step", st.Name())
	}
	return subsystem.Func(s.ingress.Shutdown), nil
}

// openProvenance loads the node's signing key of session chains and
// serves the provenance API (internal/broker/chains).
func openProvenance(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	c, err := chains.Open(ctx, chains.Deps{
		Log: s.log.With("component", "provenance"), JS: s.js, Conn: s.nc, Node: s.ns.Name(),
		KeyFile: filepath.Join(s.cfg.DataDir, chains.KeysFile), Replicas: s.ownReplicas(), Principal: s.principal,
	})
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	s.chains = c
	return c, nil
}

// openDLQ makes sure SQ_DLQ exists and follows the advisories.
func openDLQ(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	d, err := dlq.Open(ctx, dlq.Deps{
		Log:           s.log,
		JS:            s.js,
		Replicas:      s.ownReplicas(),
		Conn:          s.nc,
		IsSemaqStream: streams.IsSemaqStream,
		OnDeadLetter:  s.metrics.DeadLetter,
		OnRefused:     s.metrics.DLQAdvisoryRefused,
		Audit:         s.audit,
	})
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	s.dlq = d
	return d, nil
}

// openTokens opens the token streams: relay, retention, status API. Each
// node's relay takes the records of the writers connected to it
// (tokens/bind.go).
func openTokens(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	tokenWrites := tokens.NodeWritePrefix(s.ns.Name())
	if err := s.ns.GlobalAccount().AddMapping(semaq.TokenWritePrefix+">", tokenWrites+">"); err != nil {
		return nil, fmt.Errorf("broker: token writes: %w", err)
	}
	t, err := tokens.New(tokens.Deps{JS: s.js, Conn: s.nc, Egress: s.egress, Log: s.log.With("component", "tokens"),
		Limits: tokens.Limits{StoreBytes: s.cfg.TokenMaxBytes, StreamBytes: s.cfg.TokenStreamMaxBytes,
			StreamRecords: s.cfg.TokenStreamMaxRecords, MaxStreams: s.cfg.TokenMaxStreams},
		FileStorage: s.cfg.TokenStorage == "file", Replicas: s.ownReplicas(), QueuedJob: func(id string) (string, bool) { return s.streams.QueuedJob(id) }, Reply: s.ingress.ReplyVia, ReplyDropped: s.ingress.ReplyDropped, Metrics: s.metrics, Tracing: s.tracing,
		Sender: s.tokenSender, Node: s.ns.Name(), ShareBinds: s.cfg.Clustered(), WritePrefix: tokenWrites,
		Filter: s.tokenFilter, Gate: s.gate.Child("tokens")})
	if err != nil {
		return nil, err
	}
	if err := t.Start(ctx); err != nil {
		_ = t.Close(ctx)
		return nil, err
	}
	s.tokens = t
	return t, nil
}

// tokenFilter is the policy of a token stream (tokens.Deps.Filter).
func (s *Server) tokenFilter(id, tenant string) tokens.Filter {
	if f := s.policies.TokenStream(id, tenant); f != nil {
		return f
	}
	return nil
}

// openAgents opens (or creates) the announcement bucket and serves the
// agent registry on $SQ.API.AGENT.*.
func openAgents(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	r, err := agents.Open(ctx, agents.Deps{JS: s.js, Replicas: s.ownReplicas(), Log: s.log})
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	return r, nil
}

// openSessions opens the session store (internal/broker/sessions) and
// tells the ingress to report the messages that carry a session to it.
func openSessions(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	st, err := sessions.Open(ctx, sessions.Deps{
		Log: s.log.With("component", "sessions"), JS: s.js, Conn: s.nc, Replicas: s.ownReplicas(), Clustered: s.cfg.Clustered(),
		MaxBytes: s.cfg.SessionMaxBytes, Principal: s.principal, Gate: s.gate.Child("sessions"),
		Audit: s.audit, Metrics: s.metrics, Admit: s.admitSessionChange,
	})
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	s.ingress.SetSessions(st.Observe)
	s.sessions = st
	return st, nil
}

// openModels opens the model registry (internal/broker/models) and gives
// the ingress its binding: from here on a request for a registered model
// is bound to a version at admission.
func openModels(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	r, err := models.Open(ctx, models.Deps{
		Log: s.log.With("component", "models"), JS: s.js, Conn: s.nc, Replicas: s.ownReplicas(),
		Principal: s.principal, Audit: s.audit, Metrics: s.metrics, Moved: s.sessions.DependencyMoved, Gate: s.gate.Child("models"),
		Applied: func(ctx context.Context, rev uint64) { s.syncer.Sync(ctx, clustersync.Request{Models: rev}) },
	})
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	s.models = r
	s.ingress.SetModels(r.Bind)
	s.audits.Reads(r.AuditRead, semaq.AuditOpModelRegister, semaq.AuditOpModelPromote, semaq.AuditOpModelRollback,
		semaq.AuditOpModelDrain, semaq.AuditOpModelReport)
	return r, nil
}

// admitSessionChange charges a session's content change of n bytes to
// the quotas, as the ingress charges a message (docs/quotas.md): one
// request and its bytes' tokens, of the session's tenant and of the
// sender.
func (s *Server) admitSessionChange(ctx context.Context, tenant string, n int) error {
	q := s.ingress.Quota()
	if q == nil {
		return nil
	}
	r := quota.Request{Tenant: tenant, Tokens: quota.RequestTokens(-1, n)}
	if p := s.principal(api.RequestHeader(ctx)); p.Who == api.User {
		r.User = p.User
	}
	ref := q.Admit(r)
	if ref == nil {
		return nil
	}
	s.metrics.QuotaRefused(ref.Tenant, string(ref.Kind), string(ref.Scope))
	e := semaq.NewAPIError(semaq.ErrOverloaded, "session change: quota: %s", ref.Error())
	e.RetryAfterMs = quota.CeilMs(ref.RetryAfter).Milliseconds()
	e.Quota = string(ref.Kind)
	return e
}

// openStreams serves the streams on the ingress, the work queues on their
// dispatchers (one per queue, on its stream's leader), and the stream and
// queue API; it follows JetStream's stream advisories (internal/broker/
// streams). Closing it stops the dispatchers.
func openStreams(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	m, err := streams.Open(ctx, streams.Deps{
		Log: s.log, JS: s.js, Conn: s.nc, Gate: s.gate.Child("streams"),
		Ingress: s.ingress, SetQueues: func(t map[string]streams.Admitter) {
			q := make(map[string]ingress.Admitter, len(t))
			for name, a := range t {
				q[name] = a
			}
			s.ingress.SetQueues(q)
		},
		Registry: s.reg, Audit: s.audit, Metrics: s.metrics,
		Synced: func(ctx context.Context, schemas bool, subjects []string) {
			s.syncer.Sync(ctx, clustersync.Request{Schemas: schemas, Streams: true, Subjects: subjects})
		},
		RouteSubjects: s.tenancy.addStreamSubjects, CheckSubjects: s.tenancy.checkStreamSubjects,
		Principal: s.principal,
		Self: func() semaq.ServerInfo {
			return semaq.ServerInfo{Version: Version, Name: s.ns.Name(), NATSURL: s.ClientURL(), HTTPAddr: s.HTTPAddr(),
				Sync: s.cfg.Sync, JetStream: s.ns.JetStreamEnabled()}
		},
		Node: s.ns.Name(), Clustered: s.cfg.Clustered(), Sync: s.cfg.Sync, Replicas: s.ownReplicas,
		DefaultDurability: s.defaultDurability(), CheckDurability: s.checkClusterDurability, DefaultMaxBytes: s.cfg.StreamMaxBytes,
		Dispatch: func(ctx context.Context, qc semaq.QueueConfig, resync func()) (streams.Dispatcher, error) {
			d, err := dispatch.Start(ctx, qc, dispatchDeps(s, resync))
			if err != nil {
				return nil, err
			}
			return d, nil
		},
		Remote:        func(queue string) streams.Remote { return dispatch.NewRemote(s.nc, queue, s.log.Debug) },
		DeleteLeases:  func(ctx context.Context, queue string) error { return dispatch.DeleteLeases(ctx, s.js, queue) },
		QueueMaxBytes: func(qc semaq.QueueConfig) int64 { return dispatch.StreamMaxBytes(qc, s.nc.MaxPayload()) },
		ClassKnown:    func(name string) bool { _, ok := s.classes.Class(name); return ok },
	})
	if err != nil {
		return nil, err
	}
	s.streams = m
	s.audits.Reads(m.AuditStream, semaq.AuditOpStreamCreate, semaq.AuditOpStreamDelete)
	s.audits.Reads(m.AuditQueue, semaq.AuditOpQueueCreate, semaq.AuditOpQueueDelete)
	return m, nil
}

// dispatchDeps is what a work queue's dispatcher may use of the node
// (package dispatch); resync asks the streams subsystem to check which
// queues the node dispatches.
func dispatchDeps(s *Server, resync func()) dispatch.Deps {
	d := dispatch.Deps{
		Internal: func(opts ...nats.Option) (*nats.Conn, error) {
			return nats.Connect("", append([]nats.Option{nats.InProcessServer(s.ns), s.internalAuth()}, opts...)...)
		},
		Egress: func(opts ...nats.Option) (*nats.Conn, error) {
			return nats.Connect("", append([]nats.Option{nats.InProcessServer(s.ns), s.egressAuth()}, opts...)...)
		},
		Interest:     s.account().hasInterest,
		Authorize:    s.authorizeQueue,
		CancelRights: s.cancelRights,
		Match:        subjectMatches,
		StoreDeadLetter: func(ctx context.Context, dl *semaq.DeadLetter, hdr nats.Header, data []byte) error {
			ev := dlq.Event{Stream: dl.Stream, Consumer: dl.Consumer, Seq: dl.StreamSeq, Deliveries: dl.Deliveries, Reason: dl.Reason}
			_, err := s.dlq.Put(ctx, ev, dl, hdr, data)
			return err
		},
		BindJob: func(id, tenant, lease string, ch api.AnswerChain) { s.tokens.BindJob(id, tenant, lease, ch) },
		EndJob:  func(id, tenant string, te *semaq.TokenError) { s.tokens.EndJob(id, tenant, te) },
		Served: func(tenant string, outputTokens int64) {
			// A worker's reported output tokens count in its tenant's
			// tokens per minute.
			if q := s.ingress.Quota(); q != nil {
				q.ChargeOutput(tenant, outputTokens)
			}
		},
		Observer: dispatchObserver{s},
		Classes:  classSlots{s.classes},
		Node:     s.ns.Name(),
		Resync:   resync,
		Log:      s.log.With("component", "dispatch"),
		Gate:     s.gate.Child("dispatch"),
	}
	if s.tracing != nil { // nil without tracing: the dispatcher skips span work altogether
		d.Tracer = s.tracing.Tracer()
	}
	return d
}

// pumpDeps are what filtered subscriptions and key-shared groups share.
func pumpDeps(s *Server) (pump.Deps, error) {
	env, err := expr.NewEnvConfig(s.cfg.exprConfig())
	if err != nil {
		return pump.Deps{}, err
	}
	return pump.Deps{JS: s.js, Egress: s.egress, Env: env, Streams: streamsCapturing(s), Authorize: s.authorizeRead, Node: s.ns.Name()}, nil
}

// openFilters runs filtered subscriptions ($SQ.API.FILTER.*). Pumps
// publish on the internal connection: they close before it drains.
func openFilters(_ context.Context, s *Server) (subsystem.Subsystem, error) {
	deps, err := pumpDeps(s)
	if err != nil {
		return nil, fmt.Errorf("broker: filters: %w", err)
	}
	fd := filter.Deps{Deps: deps, Schemas: s.reg, NC: s.nc,
		Plugin: func(ctx context.Context, name string) (filter.Predicate, error) {
			p, err := s.policies.FilterPlugin(ctx, name)
			return filter.Predicate(p), err
		},
		Delivered: func(stream string) func(string, nats.Header) {
			pos := s.streamPatterns(stream)
			return func(subject string, h nats.Header) { recordDelivered(pos, subject, h) }
		},
	}
	fd.Log, fd.Max, fd.Gate = s.log.With("component", "filter"), s.cfg.MaxFilters, s.gate.Child("filters")
	if s.filters, err = filter.New(fd); err != nil {
		return nil, fmt.Errorf("broker: filters: %w", err)
	}
	return s.filters, nil
}

// openKeyShared runs key-shared groups ($SQ.API.KEYSHARED.*).
func openKeyShared(_ context.Context, s *Server) (subsystem.Subsystem, error) {
	deps, err := pumpDeps(s)
	if err != nil {
		return nil, fmt.Errorf("broker: key-shared groups: %w", err)
	}
	kd := keyshared.Deps{Deps: deps, NC: s.nc}
	kd.Log, kd.Max, kd.Gate = s.log.With("component", "keyshared"), s.cfg.MaxKeySharedMembers, s.gate.Child("keyshared")
	if s.keyShared, err = keyshared.New(kd); err != nil {
		return nil, fmt.Errorf("broker: key-shared groups: %w", err)
	}
	return s.keyShared, nil
}

// openSchemaAPI serves the schema registry on $SQ.API.SCHEMA.* and gives
// the front door its REST API (FrontDoorDeps.Routes); both record their
// writes and, in a cluster, return once every node enforces them.
func openSchemaAPI(_ context.Context, s *Server) (subsystem.Subsystem, error) {
	s.schemas = schemas.New(schemas.Deps{
		Registry: s.reg, Log: s.log, Audit: s.audit, AuditAs: s.audits.As,
		Sync:     func(ctx context.Context) { s.syncer.Sync(ctx, clustersync.Request{Schemas: true}) },
		SyncHTTP: s.syncer.HTTP,
	})
	s.audits.Reads(s.schemas.AuditSubject, semaq.AuditOpSchemaRegister, semaq.AuditOpSchemaDelete)
	s.audits.Reads(s.schemas.AuditConfig, semaq.AuditOpSchemaConfigSet)
	s.audits.Reads(s.schemas.AuditBinding, semaq.AuditOpSchemaBind, semaq.AuditOpSchemaUnbind)
	return s.schemas, nil
}

// openUsers opens the identity store and serves $SQ.API.USER.* (package
// users); with auth off, only answers that users need it.
func openUsers(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	u, err := users.Open(ctx, users.Deps{
		Auth: s.cfg.Auth, Log: s.log, JS: s.js, Replicas: s.ownReplicas(),
		AdminKey:        filepath.Join(s.cfg.DataDir, AdminKeyFile),
		NATS:            s.ns,
		ReservedNkey:    s.authn.IsNodeNkey, // s.authn is nil with auth off: not called then
		EnsureTenants:   func(tenants []string) error { return s.tenancy.ensureTenants(s.ns, tenants) },
		RememberTenants: s.rememberTenants,
		Admit: func(st *identity.Store) {
			s.identities = st
			s.authn.SetStore(st)
		},
		Audit:     s.audit,
		Clustered: s.cfg.Clustered(),
		Sync: func(ctx context.Context, rev uint64) {
			s.syncer.Sync(ctx, clustersync.Request{Users: rev})
		},
		Gate: s.gate.Child("users"),
	})
	if err != nil {
		return nil, err
	}
	s.audits.Reads(u.AuditRead, semaq.AuditOpUserAdd, semaq.AuditOpUserRemove, semaq.AuditOpKeyRotate, semaq.AuditOpUserQuota)
	if s.identities != nil {
		// Users the other nodes disconnect may come back here.
		s.resubscribeLate(ctx, s.identities.Tenants())
	}
	return u, nil
}

// openQuotas gives the ingress the node's quotas (docs/quotas.md): the
// config file's, per tenant, and with auth on the users' own, read from
// the identity store's snapshot. With neither the ingress has no limiter
// and pays nothing for quotas. Called once the identity store is open;
// until then (the node is not ready) no quota applies.
func openQuotas(_ context.Context, s *Server) (subsystem.Subsystem, error) {
	if s.cfg.Quotas.IsZero() && !s.cfg.Auth {
		return nil, nil
	}
	deps := quota.Deps{QueuedTokens: s.streams.TenantQueued, Now: s.quotaNow}
	if st := s.identities; st != nil {
		deps.UserLimits = func(user string) quota.Limits {
			u, err := st.Get(user)
			if err != nil {
				return quota.Limits{}
			}
			return quota.Limits{RPM: u.RPM, TPM: u.TPM}
		}
	}
	lim, err := quota.New(s.cfg.Quotas, deps)
	if err != nil {
		return nil, err
	}
	s.ingress.SetQuota(lim)
	return nil, nil
}

// openJetStreamGuard checks user accounts' consumer creates before
// JetStream sees them (package jsguard), on every node.
func openJetStreamGuard(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	g, err := jsguard.Open(ctx, jsguard.Deps{
		Internal: func(opts ...nats.Option) (*nats.Conn, error) {
			return nats.Connect("", append([]nats.Option{nats.InProcessServer(s.ns), s.internalAuth()}, opts...)...)
		},
		Egress:      s.egress,
		Auth:        s.cfg.Auth,
		PublicInbox: publicInbox,
		ReplyPrefix: responsePrefix,
		Principal:   s.principal,
		Refused:     s.metrics.JetStreamRefused,
		Log:         s.log,
		Gate:        s.gate.Child("jetstream-guard"),
	})
	if err != nil {
		return nil, err
	}
	return g, nil
}
