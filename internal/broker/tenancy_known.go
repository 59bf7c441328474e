package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/semaq/semaq/internal/broker/clustersync"
	"github.com/semaq/semaq/semaq"
)

// Tenant accounts known before the routes connect (docs/cluster.md, auth
// on a cluster). The NATS server drops a route's interest in an account
// it does not know and never asks for it again, and a restarted node's
// routes connect before its identity store opens: the other nodes'
// subscribers of a tenant would miss that tenant's core messages
// published on it. So a node with auth on a cluster keeps the tenants of
// its store in TenantsFile and, at its next start, registers their
// accounts (bare: their imports come with the store) between making the
// NATS server and starting it, before any route can connect.
//
// The NATS server gives the global account JetStream by itself only
// when no other account exists, so the node then gives it JetStream's
// dynamic limits itself, through an account of the server's options
// (the only exported way before the server starts).

// TenantsFile is the file, in the data directory of a node with auth on a
// cluster, that lists the tenants of the identity store, one a line.
const TenantsFile = "tenants"

// maxTenantsFileBytes bounds what a start reads of TenantsFile: more
// than a line for each of 100,000 tenants of the longest name.
const maxTenantsFileBytes = 100_000 * (semaq.MaxNameLen + 1)

// readKnownTenants are the tenants TenantsFile lists in dataDir (none
// when there is no file), without the lines that are not tenant names.
func readKnownTenants(dataDir string) (tenants []string, skipped int, err error) {
	f, err := os.Open(filepath.Join(dataDir, TenantsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTenantsFileBytes+1))
	if err != nil {
		return nil, 0, err
	}
	if len(b) > maxTenantsFileBytes {
		return nil, 0, fmt.Errorf("%s is larger than %d bytes", TenantsFile, maxTenantsFileBytes)
	}
	tenants, skipped = parseKnownTenants(b)
	return tenants, skipped, nil
}

// parseKnownTenants reads TenantsFile's content: tenant names, one a
// line, sorted and without duplicates in the result; skipped counts the
// non-empty lines that are not tenant names.
func parseKnownTenants(b []byte) (tenants []string, skipped int) {
	for line := range bytes.Lines(b) {
		name := strings.TrimSpace(string(line))
		if name == "" {
			continue
		}
		if semaq.CheckName(name) != nil {
			skipped++
			continue
		}
		tenants = append(tenants, name)
	}
	slices.Sort(tenants)
	return slices.Compact(tenants), skipped
}

// writeKnownTenants replaces TenantsFile in dataDir with tenants, sorted.
func writeKnownTenants(dataDir string, tenants []string) error {
	var b strings.Builder
	for _, t := range tenants {
		b.WriteString(t)
		b.WriteByte('\n')
	}
	tmp, err := os.CreateTemp(dataDir, TenantsFile+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, there is none
	if _, err := tmp.WriteString(b.String()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dataDir, TenantsFile))
}

// globalJetStreamAccount is an account of the options that, named as the
// global account, gives it JetStream's dynamic limits when the server is
// made: the limits an account of the options can carry are only set by
// the server's configuration parser.
func globalJetStreamAccount() (*server.Account, error) {
	var o server.Options
	if err := o.ProcessConfigString("accounts: { G: { jetstream: enabled } }"); err != nil {
		return nil, fmt.Errorf("broker: JetStream for the global account: %w", err)
	}
	if len(o.Accounts) != 1 {
		return nil, fmt.Errorf("broker: JetStream for the global account: the parser made %d accounts", len(o.Accounts))
	}
	acc := o.Accounts[0]
	acc.Name = server.DEFAULT_GLOBAL_ACCOUNT
	return acc, nil
}

// knownAccounts are the user accounts a node with auth on a cluster
// registers before its NATS server starts: the tenants of TenantsFile
// and the account of users without a tenant. A file that cannot be read
// is logged and leaves those of its tenants to the identity store.
func (s *Server) knownAccounts() []string {
	if !s.cfg.Auth || !s.cfg.Clustered() {
		return nil
	}
	tenants, skipped, err := readKnownTenants(s.cfg.DataDir)
	if err != nil {
		s.log.Warn("auth: reading the tenants known at the last run; their users' subscriptions on other nodes may miss core messages published here until they resubscribe",
			"file", filepath.Join(s.cfg.DataDir, TenantsFile), "err", err)
	}
	if skipped > 0 {
		s.log.Warn("auth: lines of the tenants file that are not tenant names were skipped",
			"file", filepath.Join(s.cfg.DataDir, TenantsFile), "skipped", skipped)
	}
	names := []string{accountName("")}
	for _, t := range tenants {
		names = append(names, accountName(t))
	}
	return names
}

// newNATSServer makes the embedded NATS server from opts, with the
// accounts of names registered before anything listens; with accounts
// (these or the options' own: the public account), the global account
// keeps JetStream.
func newNATSServer(opts *server.Options, names []string) (*server.Server, error) {
	if len(names) == 0 && len(opts.Accounts) == 0 {
		return server.NewServer(opts)
	}
	gacc, err := globalJetStreamAccount()
	if err != nil {
		return nil, err
	}
	opts.Accounts = append(opts.Accounts, gacc)
	ns, err := server.NewServer(opts)
	// The server copied the account's limits to its global account. Left
	// in the options, a reload of them would copy it onto the global
	// account again, dropping the mappings the node added since (the node
	// makes none: ReloadTLS swaps certificates through callbacks).
	opts.Accounts = slices.DeleteFunc(opts.Accounts, func(a *server.Account) bool { return a == gacc })
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		if _, err := ns.RegisterAccount(name); err != nil {
			return nil, fmt.Errorf("broker: account %s: %w", name, err)
		}
	}
	return ns, nil
}

// rememberTenants writes tenants to TenantsFile when they differ from
// what t last wrote, so the next start knows their accounts.
func (s *Server) rememberTenants(tenants []string) {
	if !s.cfg.Auth || !s.cfg.Clustered() {
		return
	}
	if err := s.tenancy.remember(tenants, func(tenants []string) error {
		return writeKnownTenants(s.cfg.DataDir, tenants)
	}); err != nil {
		s.log.Warn("auth: writing the tenants for the next start", "file", filepath.Join(s.cfg.DataDir, TenantsFile), "err", err)
	}
}

// resubscribeLate asks the other nodes to disconnect, once, the
// subscribed users of tenants whose accounts this node registered only
// after its routes connected (tenants added while it was down, or all of
// them at the first start with this file): the routes dropped those
// users' interest, and a route sends interest only when it connects or
// when a subscription is made. No exported call of the NATS server makes
// a route connect again (a reload of the options would, and would close
// every connection made with a key and drop the tenants' accounts), so
// the users' clients reconnect and subscribe again instead. It returns
// once every node reached has done so, or after clustersync.Timeout.
func (s *Server) resubscribeLate(ctx context.Context, tenants []string) {
	if !s.cfg.Auth || !s.cfg.Clustered() {
		return
	}
	var late []string
	for _, t := range tenants {
		if !slices.Contains(s.tenancy.known, accountName(t)) {
			late = append(late, t)
		}
	}
	if len(late) == 0 {
		return
	}
	s.log.Info("auth: tenants unknown to this node when its routes connected; the other nodes disconnect their subscribed users once, so they subscribe again",
		"tenants", late)
	if lagging := s.syncer.Sync(ctx, clustersync.Request{Resubscribe: late}); len(lagging) > 0 {
		s.log.Warn("auth: nodes had not disconnected the subscribers of tenants this node did not know at its start; those subscribers may miss core messages published here until they resubscribe",
			"nodes", lagging, "tenants", late)
	}
}

// disconnectSubscribers closes the connections of tenants' users that
// hold subscriptions on this node, for node, which did not know the
// tenants when its routes connected (resubscribeLate).
func (s *Server) disconnectSubscribers(node string, tenants []string) error {
	if s.tenancy == nil {
		return nil
	}
	n := 0
	for _, t := range tenants {
		if semaq.CheckName(t) != nil {
			return fmt.Errorf("resubscribe: %q is not a tenant name", t)
		}
		cz, err := s.ns.Connz(&server.ConnzOptions{Account: accountName(t), State: server.ConnOpen, Limit: math.MaxInt32})
		if err != nil {
			return fmt.Errorf("resubscribe: connections of tenant %s: %w", t, err)
		}
		for _, c := range cz.Conns {
			if c.NumSubs > 0 && s.ns.DisconnectClientByID(c.Cid) == nil {
				n++
			}
		}
	}
	if n > 0 {
		s.log.Info("auth: disconnected subscribers of tenants another node did not know when its routes connected, so they subscribe again",
			"node", node, "tenants", tenants, "closed_connections", n)
	}
	return nil
}
