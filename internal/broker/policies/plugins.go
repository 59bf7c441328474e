package policies

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/plugin"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/policy"
	"github.com/semaq/semaq/semaq"
)

// Plugins: a module is uploaded in chunks to the node that took the ADD
// (its chunk subject names that node), checked there (ABI, stage,
// signature, a first instance within its limits), stored in the object
// store SQ_PLUGINS under its SHA-256, and its record written to
// SQ_POLICY. Every node then fetches, checks and loads it, and swaps it
// into the plugin's slot: calls in flight finish on the old version,
// which closes once idle (plugin.Slot).

// Upload bounds.
const (
	maxUploads    = 4                // uploads open at once on a node
	uploadIdle    = 2 * time.Minute  // an upload with no chunk for this long is dropped
	defaultFailAt = 10               // consecutive failures that disable a plugin
	pluginObjMax  = 512 << 20        // SQ_PLUGINS on disk
	loadPlugin    = 90 * time.Second // fetching and loading one plugin on a node: compiling a Go module takes seconds, tens on a busy machine
)

func pluginObjects(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.ObjectStore, error) {
	os, err := jsutil.ObjectBucket(ctx, js, jetstream.ObjectStoreConfig{
		Bucket:      reserved.PluginObjects,
		Description: "SemaQ plugin modules, by SHA-256",
		MaxBytes:    pluginObjMax,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("policy: object store %s: %w", reserved.PluginObjects, err)
	}
	return os, nil
}

// loadedPlugin is a plugin in the table: its record and the slot that
// holds the version this node runs.
type loadedPlugin struct {
	def     semaq.Plugin
	rev     uint64
	created time.Time
	slot    *plugin.Slot
}

// limits are the plugin.Limits of d.
func limits(d *semaq.Plugin) plugin.Limits {
	l := plugin.Limits{Timeout: pluginTimeout(d), FailAfter: d.FailAfter}
	if d.MemoryMiB > 0 {
		l.MemoryPages = uint32(d.MemoryMiB) * 16
	}
	if l.FailAfter == 0 {
		l.FailAfter = defaultFailAt
	}
	return l
}

// load checks and loads one version of d from its module's bytes.
func (s *Store) load(ctx context.Context, d semaq.Plugin, wasm []byte) (*plugin.Plugin, error) {
	sum := sha256.Sum256(wasm)
	if hex.EncodeToString(sum[:]) != d.SHA256 {
		return nil, fmt.Errorf("the module's SHA-256 is %x, not %s", sum, d.SHA256)
	}
	stage, err := plugin.ParseStage(d.Stage)
	if err != nil {
		return nil, err
	}
	opts := []plugin.LoadOption{plugin.WithOnDisable(func(reason string) { s.disabled(d.Name, reason) })}
	if d.Signature != "" {
		sig, err := base64.StdEncoding.DecodeString(d.Signature)
		if err != nil {
			return nil, fmt.Errorf("signature: not base64: %v", err)
		}
		opts = append(opts, plugin.WithSignature(sig))
	}
	return s.runtime.Load(ctx, d.Name, wasm, []plugin.Stage{stage}, limits(&d), opts...)
}

// loadPlugin fetches d's module and swaps the new version into its slot
// (the watcher's goroutine: model.applyPlugin).
func (s *Store) loadPlugin(ctx context.Context, d semaq.Plugin) (*loadedPlugin, error) {
	var buf bytes.Buffer
	obj, err := s.objects.Get(ctx, d.SHA256)
	// The module was stored before its record, yet may not be found for a
	// moment: the object store reads its metadata with a direct get, which
	// a replica that has not applied the write yet may answer.
	for wait := 10 * time.Millisecond; errors.Is(err, jetstream.ErrObjectNotFound) && wait <= time.Second; wait *= 2 {
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		obj, err = s.objects.Get(ctx, d.SHA256)
	}
	if err != nil {
		return nil, fmt.Errorf("fetching module %s: %w", d.SHA256, err)
	}
	_, err = io.Copy(&buf, io.LimitReader(obj, semaq.MaxPluginBytes+1))
	_ = obj.Close()
	if err != nil {
		return nil, fmt.Errorf("reading module %s: %w", d.SHA256, err)
	}
	p, err := s.load(ctx, d, buf.Bytes())
	if err != nil {
		return nil, err
	}
	slot := s.model.slot(d.Name)
	if err := slot.Swap(ctx, p); err != nil {
		_ = p.Close(context.Background())
		return nil, err
	}
	return &loadedPlugin{def: d, slot: slot}, nil
}

// slot is the slot of plugin name, made on first use.
func (m *model) slot(name string) *plugin.Slot {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.slots == nil {
		m.slots = map[string]*plugin.Slot{}
	}
	sl := m.slots[name]
	if sl == nil {
		sl = new(plugin.Slot)
		m.slots[name] = sl
	}
	return sl
}

// dropSlot closes plugin name's slot once its calls are done.
func (m *model) dropSlot(ctx context.Context, name string) error {
	m.mu.Lock()
	sl := m.slots[name]
	delete(m.slots, name)
	m.mu.Unlock()
	if sl == nil {
		return nil
	}
	return sl.Close(ctx)
}

// disabled records a plugin that disabled itself after consecutive
// failures: the audit log, an event, the metric.
func (s *Store) disabled(name, reason string) {
	s.log.Warn("plugin disabled after consecutive failures", "plugin", name, "reason", reason)
	s.deps.Metrics.PluginEnabled(name, false, false)
	var out any = map[string]string{"reason": reason, "node": s.deps.Node}
	var err error
	s.deps.Audit(context.Background(), semaq.AuditOpPluginDisabled, name)(&out, &err)
	var tenant string
	if lp := s.Table().plugin(name); lp != nil {
		tenant = lp.def.Tenant
	}
	s.event(semaq.PolicyEvent{Kind: "plugin_disabled", Plugin: name, Tenant: tenant, Reason: reason})
}

// call runs f on the plugin's current version, with the stage's metrics;
// no version (removed while the table was read) is a failure.
func (s *Store) call(ctx context.Context, lp *loadedPlugin, f func(context.Context, *plugin.Plugin) (string, error)) error {
	p, release := lp.slot.Get()
	if p == nil {
		return plugin.ErrClosed
	}
	defer release()
	start := time.Now()
	result, err := f(ctx, p)
	if err != nil {
		result = failureResult(err)
	}
	s.deps.Metrics.PluginCall(lp.def.Name, lp.def.Stage, result, time.Since(start).Seconds())
	return err
}

func failureResult(err error) string {
	switch {
	case errors.Is(err, plugin.ErrTrap):
		return "trap"
	case errors.Is(err, plugin.ErrTimeout):
		return "timeout"
	case errors.Is(err, plugin.ErrMemory):
		return "memory"
	case errors.Is(err, plugin.ErrBadOutput):
		return "bad_output"
	case errors.Is(err, plugin.ErrDisabled), errors.Is(err, plugin.ErrClosed):
		return "disabled"
	}
	return "error"
}

// runIngressPlugin runs an ingress plugin on m.
func (s *Store) runIngressPlugin(ctx context.Context, lp *loadedPlugin, m *policy.Message, dry bool) (policy.Verdict, error) {
	var res *plugin.IngressResult
	err := s.call(ctx, lp, func(ctx context.Context, p *plugin.Plugin) (string, error) {
		var err error
		res, err = p.Ingress(ctx, &plugin.Message{Subject: m.Subject, Header: m.Header, Data: m.Data})
		if err != nil {
			return "", err
		}
		if res.Action == plugin.IngressReject {
			return "reject", nil
		}
		return "ok", nil
	})
	if err != nil {
		if lp.def.OnFailure == semaq.PluginFailPass {
			return policy.Pass, nil
		}
		return policy.Pass, semaq.NewAPIError(semaq.ErrPluginFailed, "plugin %s failed on the message on %s: %v; nothing was stored", lp.def.Name, m.Subject, err)
	}
	switch res.Action {
	case plugin.IngressPass:
		return policy.Pass, nil
	case plugin.IngressReject:
		return policy.Pass, semaq.NewAPIError(semaq.ErrPolicy, "plugin %s refused the message on %s: %s", lp.def.Name, m.Subject, res.Reason)
	case plugin.IngressRewrite:
		m.Header = nats.Header(res.Header)
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Data = res.Data
		return policy.Rewrite, nil
	}
	// Several messages out, stored as one atomic batch, come with batch
	// publishing; until then a plugin that emits fails its message.
	if lp.def.OnFailure == semaq.PluginFailPass {
		return policy.Pass, nil
	}
	return policy.Pass, semaq.NewAPIError(semaq.ErrPluginFailed, "plugin %s answered emit on %s, which the ingress does not store yet; nothing was stored", lp.def.Name, m.Subject)
}

// FilterPlugin is the predicate of filter-stage plugin name, for the
// filtered subscription the request in ctx starts. The plugin is looked up
// on every message, so a new version takes over running subscriptions;
// one removed keeps nothing (reject) or everything (pass), as its failure
// policy said. A plugin of one tenant serves that tenant's users only.
func (s *Store) FilterPlugin(ctx context.Context, name string) (func(ctx context.Context, subject string, h nats.Header, data []byte) bool, error) {
	lp := s.Table().plugin(name)
	if lp == nil || lp.def.Stage != semaq.PluginStageFilter {
		return nil, semaq.NewAPIError(semaq.ErrPluginNotFound, "filter: no filter-stage plugin %s", name)
	}
	if lp.def.Tenant != "" && s.deps.Principal != nil {
		p := s.deps.Principal(api.RequestHeader(ctx))
		if p.Who == api.User && p.Role != semaq.RoleAdmin && p.Tenant != lp.def.Tenant {
			// The same answer as a plugin that is not there.
			return nil, semaq.NewAPIError(semaq.ErrPluginNotFound, "filter: no filter-stage plugin %s", name)
		}
	}
	pass := lp.def.OnFailure == semaq.PluginFailPass
	return func(ctx context.Context, subject string, h nats.Header, data []byte) bool {
		cur := s.Table().plugin(name)
		if cur == nil {
			return pass
		}
		var keep bool
		err := s.call(ctx, cur, func(ctx context.Context, p *plugin.Plugin) (string, error) {
			var err error
			keep, err = p.Filter(ctx, &plugin.Message{Subject: subject, Header: h, Data: data})
			return "ok", err
		})
		if err != nil {
			return cur.def.OnFailure == semaq.PluginFailPass
		}
		return keep
	}, nil
}

// tokenPlugins runs the tokens-stage plugins attached to a stream of
// tenant on text the rules released: a rewrite replaces it, stop ends the
// stream, flag sends an event. A failure applies the plugin's policy:
// pass lets the text by, reject stops the stream.
func (s *Store) tokenPlugins(t *Table, id, tenant, text string) (out string, stop bool, reason string) {
	out = text
	for _, lp := range t.plugins {
		if lp.def.Stage != semaq.PluginStageTokens || lp.def.Tenant != "" && semaq.TokenTenant(lp.def.Tenant) != tenant {
			continue
		}
		var res *plugin.TokensResult
		err := s.call(context.Background(), lp, func(ctx context.Context, p *plugin.Plugin) (string, error) {
			var err error
			res, err = p.Tokens(ctx, id, out)
			return "ok", err
		})
		switch {
		case err != nil && lp.def.OnFailure == semaq.PluginFailPass:
			continue
		case err != nil:
			return "", true, fmt.Sprintf("plugin %s failed on the stream: %v", lp.def.Name, err)
		}
		switch res.Action {
		case plugin.TokensRewrite:
			out = res.Text
		case plugin.TokensStop:
			s.event(semaq.PolicyEvent{Kind: "stop", Plugin: lp.def.Name, Tenant: tenantOfToken(tenant), Request: id, Reason: res.Reason})
			return "", true, fmt.Sprintf("plugin %s stopped the stream: %s", lp.def.Name, res.Reason)
		case plugin.TokensFlag:
			s.event(semaq.PolicyEvent{Kind: "flag", Plugin: lp.def.Name, Tenant: tenantOfToken(tenant), Request: id, Reason: res.Reason})
		}
	}
	return out, false, ""
}

// uploads are the plugin uploads open on this node.
type uploads struct {
	node string // the node's token in chunk subjects

	mu   sync.Mutex
	open map[string]*upload
}

type upload struct {
	def     semaq.Plugin
	replace bool
	buf     []byte
	next    int
	timer   *time.Timer
}

func newUploads() *uploads { return &uploads{node: nuid.Next(), open: map[string]*upload{}} }

func (u *uploads) closeAll() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for id, up := range u.open {
		up.timer.Stop()
		delete(u.open, id)
	}
}

func (s *Store) pluginHandlers() api.Handlers {
	return api.Handlers{
		semaq.APIPluginAdd:    api.Op(s.log, "plugin add", s.pluginAdd, nil),
		semaq.APIPluginList:   api.Op(s.log, "plugin list", s.pluginList, nil),
		semaq.APIPluginDelete: api.Op(s.log, "plugin delete", s.pluginRemove, nil),
		// Only this node holds its uploads: its chunk subject is its own.
		"$SQ.API.PLUGIN.CHUNK." + s.uploads.node + ".*.*": s.chunkHandler(),
	}
}

func badPlugin(name string, err error) *semaq.APIError {
	return semaq.NewAPIError(semaq.ErrBadPlugin, "plugin %s: %v", name, err)
}

func (s *Store) pluginAdd(_ context.Context, req *semaq.PluginAddRequest) (any, error) {
	d := req.Plugin
	if err := checkPlugin(&d); err != nil {
		return nil, badPlugin(d.Name, err)
	}
	if d.Signature != "" {
		if sig, err := base64.StdEncoding.DecodeString(d.Signature); err != nil || len(sig) != ed25519.SignatureSize {
			return nil, badPlugin(d.Name, errors.New("signature: base64 of a 64-byte ed25519 signature"))
		}
	}
	t := s.Table()
	if t.plugin(d.Name) != nil && !req.Replace {
		return nil, semaq.NewAPIError(semaq.ErrPluginExists, "plugin %s already exists; remove it first or replace it", d.Name)
	}
	if t.plugin(d.Name) == nil && len(t.plugins) >= semaq.MaxPlugins {
		return nil, badPlugin(d.Name, fmt.Errorf("the node keeps at most %d plugins; remove one first", semaq.MaxPlugins))
	}
	u := s.uploads
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.open) >= maxUploads {
		return nil, semaq.NewAPIError(semaq.ErrOverloaded, "plugin %s: this node takes %d uploads at once; retry later", d.Name, maxUploads)
	}
	id := nuid.Next()
	up := &upload{def: d, replace: req.Replace, buf: make([]byte, 0, d.Size)}
	up.timer = time.AfterFunc(uploadIdle, func() {
		u.mu.Lock()
		delete(u.open, id)
		u.mu.Unlock()
	})
	u.open[id] = up
	return semaq.PluginUpload{Upload: u.node + "." + id, Chunk: semaq.MaxPluginChunk}, nil
}

// chunkHandler takes one chunk of an upload; the empty chunk commits it.
func (s *Store) chunkHandler() nats.MsgHandler {
	return func(m *nats.Msg) {
		toks := strings.Split(m.Subject, ".")
		id := toks[len(toks)-2]
		n, err := strconv.Atoi(toks[len(toks)-1])
		u := s.uploads
		u.mu.Lock()
		up := u.open[id]
		switch {
		case up == nil:
			u.mu.Unlock()
			api.ReplyErr(s.log, m, semaq.NewAPIError(semaq.ErrBadPlugin, "plugin upload %s: no such upload on this node (finished, idle for %v, or never started)", id, uploadIdle))
			return
		case err != nil || n != up.next:
			u.mu.Unlock()
			api.ReplyErr(s.log, m, semaq.NewAPIError(semaq.ErrBadPlugin, "plugin upload %s: chunk %q out of order; the upload expects chunk %d", id, toks[len(toks)-1], up.next))
			return
		case len(m.Data) > semaq.MaxPluginChunk || int64(len(up.buf)+len(m.Data)) > up.def.Size:
			delete(u.open, id)
			up.timer.Stop()
			u.mu.Unlock()
			api.ReplyErr(s.log, m, badPlugin(up.def.Name, fmt.Errorf("upload: chunk %d takes it past %d bytes (chunks of at most %d); start again", n, up.def.Size, semaq.MaxPluginChunk)))
			return
		case len(m.Data) > 0:
			up.buf = append(up.buf, m.Data...)
			up.next++
			up.timer.Reset(uploadIdle)
			got := int64(len(up.buf))
			u.mu.Unlock()
			api.ReplyJSON(s.log, m, semaq.PluginChunkResponse{Received: got})
			return
		}
		delete(u.open, id)
		up.timer.Stop()
		u.mu.Unlock()
		// The commit loads a module: minutes at worst, off the API's
		// subscription goroutine.
		h := api.OpWithin(s.log, "plugin commit", loadPlugin*2, func(ctx context.Context, _ *struct{}) (any, error) {
			return s.commit(ctx, up)
		}, nil)
		if !s.deps.Gate.Go("plugin commit", func(context.Context) { h(&nats.Msg{Subject: m.Subject, Reply: m.Reply, Header: m.Header, Sub: m.Sub}) }) {
			api.ReplyErr(s.log, m, semaq.NewAPIError(semaq.ErrUnavailable, "plugin %s: the node is stopping", up.def.Name))
		}
	}
}

// commit checks a complete upload, stores the module and the record, and
// answers once every node runs it.
func (s *Store) commit(ctx context.Context, up *upload) (out any, err error) {
	d := up.def
	defer s.deps.Audit(ctx, semaq.AuditOpPluginAdd, d.Name)(&out, &err)
	if int64(len(up.buf)) != d.Size {
		return nil, badPlugin(d.Name, fmt.Errorf("upload: %d bytes received of %d", len(up.buf), d.Size))
	}
	lctx, cancel := context.WithTimeout(ctx, loadPlugin)
	p, err := s.load(lctx, d, up.buf)
	cancel()
	if err != nil {
		return nil, badPlugin(d.Name, err)
	}
	_ = p.Close(ctx)
	if _, err := s.objects.PutBytes(ctx, d.SHA256, up.buf); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "plugin %s: storing the module: %v", d.Name, err)
	}
	val, err := json.Marshal(d)
	if err != nil {
		return nil, badPlugin(d.Name, err)
	}
	var rev uint64
	if up.replace {
		rev, err = s.kv.Put(ctx, pluginPrefix+d.Name, val)
	} else {
		rev, err = s.kv.Create(ctx, pluginPrefix+d.Name, val)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil, semaq.NewAPIError(semaq.ErrPluginExists, "plugin %s already exists; remove it first or replace it", d.Name)
		}
	}
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "plugin %s: storing: %v", d.Name, err)
	}
	t, err := s.waitRev(ctx, rev)
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "plugin %s stored but not yet running on this node: %v", d.Name, err)
	}
	s.applied(ctx, rev)
	s.log.Info("plugin added", "plugin", d.Name, "stage", d.Stage, "sha256", d.SHA256, "revision", rev)
	for _, b := range t.broken {
		if b.plugin != nil && b.name == d.Name && b.rev == rev {
			return nil, badPlugin(d.Name, fmt.Errorf("stored, but this node cannot run it: %s", b.err))
		}
	}
	if lp := t.plugin(d.Name); lp != nil {
		return lp.info(), nil
	}
	return semaq.PluginInfo{Plugin: d, Revision: rev, Created: time.Now().UTC()}, nil
}

func (lp *loadedPlugin) info() semaq.PluginInfo {
	out := semaq.PluginInfo{Plugin: lp.def, Created: lp.created, Revision: lp.rev}
	if p, release := lp.slot.Get(); p != nil {
		st := p.Stats()
		release()
		out.Stats = semaq.PluginStats{Calls: st.Calls, Failures: st.Failures, Disabled: st.Disabled, DisabledReason: st.DisabledReason, LastError: st.LastError}
	}
	return out
}

func (s *Store) pluginList(_ context.Context, _ *struct{}) (any, error) {
	t := s.Table()
	out := semaq.PluginListResponse{Plugins: make([]semaq.PluginInfo, 0, len(t.plugins))}
	for _, lp := range t.plugins {
		out.Plugins = append(out.Plugins, lp.info())
	}
	for _, b := range t.broken {
		if b.plugin != nil && t.plugin(b.name) == nil {
			out.Plugins = append(out.Plugins, semaq.PluginInfo{Plugin: *b.plugin, Created: b.created, Revision: b.rev, Error: b.err})
		}
	}
	slices.SortStableFunc(out.Plugins, func(a, b semaq.PluginInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (s *Store) pluginRemove(ctx context.Context, req *semaq.PluginNameRequest) (out any, err error) {
	defer s.deps.Audit(ctx, semaq.AuditOpPluginDelete, req.Name)(&out, &err)
	if err := checkName("plugin", req.Name); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "plugin delete: %v", err)
	}
	if err := s.deleteKey(ctx, pluginPrefix+req.Name, "plugin", req.Name, semaq.ErrPluginNotFound); err != nil {
		return nil, err
	}
	s.log.Info("plugin removed", "plugin", req.Name)
	return semaq.PolicyDeleteResponse{Deleted: true}, nil
}

var _ = slog.LevelInfo
