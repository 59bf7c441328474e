package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// authEnv is a broker started with auth on, its admin and a few users.
type authEnv struct {
	s     *broker.Server
	base  string
	admin *client.Client
	keys  map[string]string // role → key
}

func newAuthEnv(t *testing.T) *authEnv {
	t.Helper()
	s := brokertest.Start(t, brokertest.WithAuth)
	e := &authEnv{s: s, base: "http://" + s.HTTPAddr(), keys: map[string]string{semaq.RoleAdmin: brokertest.AdminKey(t, s)}}
	e.admin = brokertest.ConnectKey(t, s, e.keys[semaq.RoleAdmin])
	brokertest.AddStream(t, e.admin, "ORD", "orders.>")
	for _, u := range []semaq.UserAddRequest{
		{Name: "ingest", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"orders.acme.>"}},
		{Name: "alice", Tenant: "acme", Role: semaq.RoleReader, Subjects: []string{"orders.>"}},
	} {
		e.keys[u.Role] = e.addUser(t, u)
	}
	return e
}

func (e *authEnv) addUser(t *testing.T, u semaq.UserAddRequest) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := e.admin.AddUser(ctx, u)
	if err != nil {
		t.Fatalf("add user %s: %v", u.Name, err)
	}
	return r.Key
}

type authAnswer struct {
	status int
	header http.Header
	body   string
}

// call sends a request with key as bearer ("" sends no Authorization).
func (e *authEnv) call(t *testing.T, method, path, key, ctype, body string) authAnswer {
	t.Helper()
	req, err := http.NewRequest(method, e.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return authAnswer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func TestAuthRefusesRequestsWithoutAValidKey(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t)
	revoked := e.addUser(t, semaq.UserAddRequest{Name: "gone", Role: semaq.RoleReader, Subjects: []string{"orders.>"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.admin.RemoveUser(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	adminKey := e.keys[semaq.RoleAdmin]
	unknown := adminKey[:len(adminKey)-4] + "AAAA"
	endpoints := []struct{ method, path, ctype, body string }{
		{"POST", "/api/v1/publish/orders.acme.x", "application/json", `{}`},
		{"GET", "/api/v1/subscribe/orders.>?count=1", "", ""},
		{"GET", "/api/v1/streams/ORD", "", ""},
		{"GET", "/v1/models", "", ""},
		{"POST", "/v1/chat/completions", "application/json", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"GET", "/subjects", "", ""},
		{"GET", "/metrics", "", ""},
		{"GET", "/no/such/path", "", ""},
	}
	for _, key := range []struct{ name, header string }{
		{"missing", ""}, {"malformed", "sq_nope"}, {"unknown", unknown}, {"revoked", revoked},
	} {
		for _, ep := range endpoints {
			t.Run(key.name+" "+ep.method+" "+ep.path, func(t *testing.T) {
				a := e.call(t, ep.method, ep.path, key.header, ep.ctype, ep.body)
				if a.status != http.StatusUnauthorized || !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
					t.Fatalf("got %d (WWW-Authenticate %q) %s, want 401", a.status, a.header.Get("WWW-Authenticate"), a.body)
				}
				if key.header != "" && strings.Contains(a.body, key.header) {
					t.Fatal("the answer echoes the key")
				}
				if strings.HasPrefix(ep.path, "/v1/") {
					var b struct {
						Error struct{ Type, Code string } `json:"error"`
					}
					if err := json.Unmarshal([]byte(a.body), &b); err != nil || b.Error.Code != "invalid_api_key" || b.Error.Type == "" {
						t.Fatalf("OpenAI door answered %s, want OpenAI's error shape with code invalid_api_key", a.body)
					}
				}
			})
		}
	}
	// Far more than the free failures came from this IP: the next one is
	// slowed down as on the NATS door (lower bound only).
	start := time.Now()
	if a := e.call(t, "GET", "/subjects", unknown, "", ""); a.status != http.StatusUnauthorized {
		t.Fatalf("unknown key: %d", a.status)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("a repeated failure was answered after %v, want slowed down to at least 100ms", d)
	}
	if a := e.call(t, "GET", "/healthz", "", "", ""); a.status != http.StatusOK {
		t.Fatalf("/healthz without a key: %d %s, want 200 (liveness stays open)", a.status, a.body)
	}
	// Refusals are counted with the NATS door's.
	if a := e.call(t, "GET", "/metrics", adminKey, "", ""); !strings.Contains(a.body, `semaq_auth_failures_total{reason="no_key"}`) {
		t.Fatalf("HTTP refusals not counted in semaq_auth_failures_total")
	}
}

func TestAuthActsWithTheKeysRights(t *testing.T) {
	e := newAuthEnv(t)
	pub, read, admin := e.keys[semaq.RolePublisher], e.keys[semaq.RoleReader], e.keys[semaq.RoleAdmin]
	for _, tc := range []struct {
		name, method, path, key, ctype, body string
		want                                 int
	}{
		{"publisher on its subject", "POST", "/api/v1/publish/orders.acme.1", pub, "application/json", `{"n":1}`, 200},
		{"publisher outside its subjects", "POST", "/api/v1/publish/orders.other.1", pub, "application/json", `{}`, 403},
		{"publisher cannot read", "GET", "/api/v1/subscribe/orders.acme.>?count=1", pub, "", "", 403},
		{"reader cannot publish", "POST", "/api/v1/publish/orders.acme.2", read, "application/json", `{}`, 403},
		{"reader reads its subjects", "GET", "/api/v1/subscribe/orders.>?count=1", read, "", "", 200},
		{"reader outside its subjects", "GET", "/api/v1/subscribe/other.>?count=1", read, "", "", 403},
		{"reader stream info", "GET", "/api/v1/streams/ORD", read, "", "", 200},
		{"reader registry read", "GET", "/subjects", read, "", "", 200},
		{"reader registry write", "POST", "/subjects/orders-value/versions", read, "application/vnd.schemaregistry.v1+json",
			`{"schemaType":"JSON","schema":"{\"type\":\"object\"}"}`, 403},
		{"publisher registry delete", "DELETE", "/subjects/orders-value", pub, "", "", 403},
		{"admin registry write", "POST", "/subjects/orders-value/versions", admin, "application/vnd.schemaregistry.v1+json",
			`{"schemaType":"JSON","schema":"{\"type\":\"object\"}"}`, 200},
		{"reader metrics", "GET", "/metrics", read, "", "", 403},
		{"publisher metrics", "GET", "/metrics", pub, "", "", 403},
		{"admin metrics", "GET", "/metrics", admin, "", "", 200},
		{"admin publishes anywhere", "POST", "/api/v1/publish/orders.other.3", admin, "application/json", `{}`, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := e.call(t, tc.method, tc.path, tc.key, tc.ctype, tc.body)
			if a.status != tc.want {
				t.Fatalf("%s %s: %d %s, want %d", tc.method, tc.path, a.status, a.body, tc.want)
			}
			if tc.want == 403 && !strings.Contains(a.body, "role") {
				t.Fatalf("403 without a clear message: %s", a.body)
			}
			if tc.name == "reader reads its subjects" && !strings.Contains(a.body, "orders.acme.1") {
				t.Fatalf("reader's event stream: %s", a.body)
			}
		})
	}
}

// Revoking a key ends what its connection does: the next request is 401.
func TestAuthRevocationOverHTTP(t *testing.T) {
	e := newAuthEnv(t)
	key := e.addUser(t, semaq.UserAddRequest{Name: "temp", Role: semaq.RolePublisher, Subjects: []string{"orders.acme.>"}})
	if a := e.call(t, "POST", "/api/v1/publish/orders.acme.t", key, "application/json", `{}`); a.status != 200 {
		t.Fatalf("before revocation: %d %s", a.status, a.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := e.admin.RemoveUser(ctx, "temp")
	if err != nil {
		t.Fatal(err)
	}
	if r.Closed < 1 {
		t.Fatalf("revocation closed %d connections, want the HTTP door's pooled one", r.Closed)
	}
	if a := e.call(t, "POST", "/api/v1/publish/orders.acme.t", key, "application/json", `{}`); a.status != http.StatusUnauthorized {
		t.Fatalf("after revocation: %d %s, want 401", a.status, a.body)
	}
}

// An open event stream ends when its key stops being valid: a removed user's
// stream and a rotated key's stream each get a final event: error naming
// why, instead of staying open and silent (docs/security.md, Revocation).
func TestRevocationEndsEventStreams(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name   string
		revoke func(user string) error
	}{
		{"user removed", func(user string) error { _, err := e.admin.RemoveUser(ctx, user); return err }},
		{"key rotated", func(user string) error { _, err := e.admin.RotateKey(ctx, user); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			user := strings.ReplaceAll(tc.name, " ", "-")
			key := e.addUser(t, semaq.UserAddRequest{Name: user, Role: semaq.RoleReader, Subjects: []string{"orders.>"}})
			for _, path := range []string{"/api/v1/subscribe/orders.>", "/api/v1/subscribe/orders.>?filter=true"} {
				req, err := http.NewRequestWithContext(ctx, "GET", e.base+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b, _ := io.ReadAll(resp.Body)
					t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
				}
				buf := make([]byte, 4096)
				n, err := resp.Body.Read(buf)
				if err != nil || !strings.Contains(string(buf[:n]), ": subscribed") {
					t.Fatalf("%s: first read %q, %v", path, buf[:n], err)
				}
				if path == "/api/v1/subscribe/orders.>" {
					// Both streams open: revoke once, below.
					defer func() {
						if rest, ok := readUntil(resp.Body, "no longer valid"); !ok || !strings.Contains(rest, "event: error") {
							t.Errorf("%s after %s: %q, want a final event: error naming the key", path, tc.name, rest)
						}
					}()
					continue
				}
				if err := tc.revoke(user); err != nil {
					t.Fatal(err)
				}
				if rest, ok := readUntil(resp.Body, "no longer valid"); !ok || !strings.Contains(rest, "event: error") {
					t.Fatalf("%s after %s: %q, want a final event: error naming the key", path, tc.name, rest)
				}
			}
		})
	}
}

// readUntil reads r until what it read contains want (true), or r ends.
func readUntil(r io.Reader, want string) (string, bool) {
	var got []byte
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		got = append(got, buf[:n]...)
		if strings.Contains(string(got), want) {
			return string(got), true
		}
		if err != nil {
			return string(got), false
		}
	}
}
