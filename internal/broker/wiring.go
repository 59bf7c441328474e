package broker

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/audit"
	"github.com/semaq/semaq/internal/broker/dispatch"
	"github.com/semaq/semaq/internal/broker/dlq"
	"github.com/semaq/semaq/internal/broker/filter"
	"github.com/semaq/semaq/internal/broker/ingress"
	"github.com/semaq/semaq/internal/broker/keyshared"
	"github.com/semaq/semaq/internal/broker/pump"
	"github.com/semaq/semaq/internal/broker/routes"
	"github.com/semaq/semaq/internal/broker/streams"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/broker/tokens"
	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/internal/registry"
	"github.com/semaq/semaq/internal/telemetry"
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
	known := s.knownAccounts()
	ns, err := newNATSServer(opts, known)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	nl := &natsLogger{log: s.log.With("component", "nats"), fatal: make(chan error, 1)}
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
	go ns.Start()
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
	if s.memory = newMemoryGuard(limit, source); s.memory == nil {
		return nil, nil
	}
	s.metrics.WatchMemory(limit, s.memory.inUse.Load)
	s.log.Info("memory: publishes are refused past 90% of max_memory", "max_memory_mib", limit>>20, "from", source)
	return subsystem.Func(func(context.Context) error { s.memory.close(); return nil }), nil
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
	s.auditReaders(s.audits)
	return l, nil
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
		StreamsCapturing: s.streamsCapturing,
		Check:            s.routeCheck,
		Audit:            s.audit,
		Applied: func(ctx context.Context, rev uint64) {
			s.clusterSync(ctx, syncRequest{Routes: rev})
		},
		Node:      s.ns.Name(),
		Clustered: s.cfg.Clustered(),
	})
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	s.routes = rt
	return rt, nil
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
		Sender: s.tokenSender, Node: s.ns.Name(), ShareBinds: s.cfg.Clustered(), WritePrefix: tokenWrites})
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
			s.clusterSync(ctx, syncRequest{Schemas: schemas, Streams: true, Subjects: subjects})
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
			ev := dlqEvent{stream: dl.Stream, consumer: dl.Consumer, seq: dl.StreamSeq, deliveries: dl.Deliveries, reason: dl.Reason}
			_, err := s.storeDeadLetter(ctx, ev, dl, hdr, data)
			return err
		},
		BindJob:  func(id, tenant, lease string) { s.tokens.BindJob(id, tenant, lease) },
		EndJob:   func(id, tenant string, te *semaq.TokenError) { s.tokens.EndJob(id, tenant, te) },
		Served:   s.quotaServed,
		Observer: dispatchObserver{s},
		Node:     s.ns.Name(),
		Resync:   resync,
		Log:      s.log.With("component", "dispatch"),
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
	return pump.Deps{JS: s.js, Egress: s.egress, Env: env, Streams: s.streamsCapturing, Authorize: s.authorizeRead, Node: s.ns.Name()}, nil
}

// openFilters runs filtered subscriptions ($SQ.API.FILTER.*). Pumps
// publish on the internal connection: they close before it drains.
func openFilters(_ context.Context, s *Server) (subsystem.Subsystem, error) {
	deps, err := pumpDeps(s)
	if err != nil {
		return nil, fmt.Errorf("broker: filters: %w", err)
	}
	fd := filter.Deps{Deps: deps, Schemas: s.reg, NC: s.nc,
		Delivered: func(stream string) func(string, nats.Header) {
			pos := s.streamPatterns(stream)
			return func(subject string, h nats.Header) { recordDelivered(pos, subject, h) }
		},
	}
	fd.Log, fd.Max = s.log.With("component", "filter"), s.cfg.MaxFilters
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
	kd.Log, kd.Max = s.log.With("component", "keyshared"), s.cfg.MaxKeySharedMembers
	if s.keyShared, err = keyshared.New(kd); err != nil {
		return nil, fmt.Errorf("broker: key-shared groups: %w", err)
	}
	return s.keyShared, nil
}
