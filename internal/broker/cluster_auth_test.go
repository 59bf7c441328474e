package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/identity"
	"github.com/semaq/semaq/semaq"
)

// With auth on, the admin reads the cluster status; no other role may ask
// for it or for a node's report.
func TestClusterStatusAdminOnly(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, brokertest.WithAuth)
	admin := brokertest.ConnectKey(t, s, brokertest.AdminKey(t, s))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if st, err := admin.ClusterStatus(ctx); err != nil || len(st.Nodes) != 1 {
		t.Fatalf("admin: %+v, %v", st, err)
	}
	for _, u := range []semaq.UserAddRequest{
		{Name: "ingest", Role: semaq.RolePublisher, Subjects: []string{"ai.>"}},
		{Name: "alice", Role: semaq.RoleReader, Subjects: []string{"ai.>"}},
		{Name: "svc", Role: semaq.RoleService, Subjects: []string{"svc.>"}},
		{Name: "gpu", Role: semaq.RoleWorker, Queues: []string{"INFER_*"}},
	} {
		resp, err := admin.AddUser(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		k, err := identity.ParseKey(resp.Key)
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 16)
		nc, err := nats.Connect(s.ClientURL(), nats.Token(resp.Key), nats.CustomInboxPrefix(semaq.UserInboxPrefix+k.Name),
			nats.MaxReconnects(0), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				select {
				case errs <- err:
				default:
				}
			}))
		if err != nil {
			t.Fatalf("%s: %v", u.Role, err)
		}
		for _, subj := range []string{semaq.APIClusterStatus, semaq.APIClusterNode} {
			// A refused request is not answered: its permissions
			// violation comes on its own.
			if _, err := nc.Request(subj, nil, 500*time.Millisecond); err == nil {
				t.Fatalf("%s asked %s and was answered", u.Role, subj)
			}
			select {
			case err := <-errs:
				if !strings.Contains(err.Error(), "Permissions Violation") || !strings.Contains(err.Error(), subj) {
					t.Fatalf("%s asking %s: %v, want a permissions violation", u.Role, subj, err)
				}
			case <-ctx.Done():
				t.Fatalf("%s asking %s: no permissions violation", u.Role, subj)
			}
		}
		nc.Close()
	}
}
