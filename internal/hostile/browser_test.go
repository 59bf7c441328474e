package hostile

// Browser attacks: a real headless Chromium (Debian's chromium package)
// loads an attacker's page on another loopback origin, and the test
// asserts that nothing the page asked for happened; and a DNS-rebinding
// client with a foreign Host.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// findChromium finds the browser. On a fresh Debian machine where the test
// runs as root, it installs Debian's chromium package first, so the README's
// test command sets up what it needs; anywhere else a missing browser fails
// the test, saying how to install it.
func findChromium(t *testing.T) string {
	t.Helper()
	if p := lookChromium(); p != "" {
		return p
	}
	if apt, err := exec.LookPath("apt-get"); err == nil && os.Geteuid() == 0 {
		t.Log("chromium not found: installing Debian's chromium package")
		for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "--no-install-recommends", "chromium"}} {
			cmd := exec.Command(apt, args...)
			cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("apt-get %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		if p := lookChromium(); p != "" {
			return p
		}
	}
	t.Fatal("chromium not found: this test drives a real browser; install it (Debian: apt-get install -y --no-install-recommends chromium) or set SEMAQ_CHROMIUM")
	return ""
}

func lookChromium() string {
	for _, p := range []string{os.Getenv("SEMAQ_CHROMIUM"), "/usr/bin/chromium"} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// webVictim is broker state a page must not be able to change.
type webVictim struct {
	c         *client.Client
	js        jetstream.JetStream
	consumers []string
}

const (
	webStream = "HOSTILE"
	webQueue  = "HQ"
	webReq    = "victim-req"
)

func setupWebVictim(t *testing.T, ctx context.Context, c *client.Client) *webVictim {
	t.Helper()
	brokertest.AddStream(t, c, webStream, "hostile.>")
	if _, err := c.Publish(ctx, "hostile.seed", []byte("seed")); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, webStream, jetstream.ConsumerConfig{Durable: "victim", FilterSubject: "hostile.seed", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddQueue(ctx, semaq.QueueConfig{Name: webQueue, Subjects: []string{"hq.in"}, Storage: "memory"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "hq.in", []byte(`{"job":1}`), client.WithMsgID(webReq)); err != nil {
		t.Fatal(err)
	}
	v := &webVictim{c: c, js: js}
	v.consumers = v.consumerNames(t, ctx)
	return v
}

func (v *webVictim) consumerNames(t *testing.T, ctx context.Context) []string {
	t.Helper()
	s, err := v.js.Stream(ctx, webStream)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	lister := s.ConsumerNames(ctx)
	for n := range lister.Name() {
		names = append(names, n)
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// unchanged fails the test for everything a page managed to do.
func (v *webVictim) unchanged(t *testing.T, ctx context.Context) {
	t.Helper()
	info, err := v.c.StreamInfo(ctx, webStream)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Messages != 1 {
		t.Errorf("stored: stream %s holds %d messages, want only the seed (a cross-site POST published)", webStream, info.State.Messages)
	}
	if got := v.consumerNames(t, ctx); !slices.Equal(got, v.consumers) {
		t.Errorf("registered: consumers %v, were %v (a GET made a durable)", got, v.consumers)
	}
	ci, err := v.js.Consumer(ctx, webStream, "victim")
	if err != nil {
		t.Fatal(err)
	}
	if st := ci.CachedInfo(); st.Delivered.Stream != 0 || st.AckFloor.Stream != 0 {
		t.Errorf("acked: durable victim delivered up to %d, acked up to %d (a GET read it)", st.Delivered.Stream, st.AckFloor.Stream)
	}
	subjects, err := v.c.SchemaSubjects(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subjects {
		if strings.HasPrefix(s, "hostile") {
			t.Errorf("registered: schema subject %s (a no-cors POST registered a schema)", s)
		}
	}
	q, err := v.c.QueueInfo(ctx, webQueue)
	if err != nil {
		t.Fatal(err)
	}
	if q.Status.Queued != 1 || q.Status.Counters.Cancelled != 0 {
		t.Errorf("cancelled: queue %s has %d queued, %d cancelled (a no-cors POST cancelled a request)", webQueue, q.Status.Queued, q.Status.Counters.Cancelled)
	}
}

// webAttackPage is the attacker's page: every request a page can make
// without CORS letting it read the answer, aimed at the broker.
func webAttackPage(broker string) string {
	return strings.ReplaceAll(`<!doctype html><html><head><title>attacker</title></head><body>
<form id="f" method="POST" enctype="text/plain" action="BROKER/api/v1/publish/hostile.form"><input name='{"stolen":"' value='x"}'></form>
<script>
const B = "BROKER";
const schema = '{"schemaType":"JSON","schema":"{}"}';
const img = (src) => Promise.race([
  new Promise(r => { const i = new Image(); i.onload = i.onerror = r; i.src = src; }),
  new Promise(r => setTimeout(r, 3000)),
]);
async function attack() {
  await Promise.allSettled([
    fetch(B + "/api/v1/publish/hostile.text", {method: "POST", mode: "no-cors", body: "stolen"}),
    fetch(B + "/api/v1/publish/hostile.blob", {method: "POST", mode: "no-cors", body: new Blob(["stolen"])}),
    fetch(B + "/subjects/hostile-text/versions", {method: "POST", mode: "no-cors", body: schema}),
    fetch(B + "/subjects/hostile-blob/versions", {method: "POST", mode: "no-cors", body: new Blob([schema])}),
    fetch(B + "/api/v1/queues/HQ/cancel/victim-req", {method: "POST", mode: "no-cors"}),
    img(B + "/api/v1/subscribe/hostile.seed?durable=victim&count=1"),
    img(B + "/api/v1/subscribe/hostile.seed?durable=evilnew&count=1&deliver=all"),
  ]);
  document.getElementById("f").submit();
}
attack();
</script></body></html>`, "BROKER", broker)
}

// webAttackPaths are the broker paths the page requests; the test waits for
// the broker's answer to each, so it knows the browser sent them all.
var webAttackPaths = []string{
	"/api/v1/publish/hostile.text", "/api/v1/publish/hostile.blob", "/api/v1/publish/hostile.form",
	"/subjects/hostile-text/versions", "/subjects/hostile-blob/versions",
	"/api/v1/queues/HQ/cancel/victim-req",
	"/api/v1/subscribe/hostile.seed?durable=victim", "/api/v1/subscribe/hostile.seed?durable=evilnew",
}

// A page on another origin (same site: another port of 127.0.0.1; cross
// site: localhost) fires simple requests at the broker: nothing it asks
// for may happen.
func TestBrowserCannotDriveTheBroker(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("slow: drives a headless Chromium (installing it when missing); runs without -short")
	}
	exe := findChromium(t)
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	broker := "http://" + srv.HTTPAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	v := setupWebVictim(t, ctx, c)

	actx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()))
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", exe, err)
	}

	page := webAttackPage(broker)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	attacker := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = fmt.Fprint(w, page)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = attacker.Serve(ln) }()
	t.Cleanup(func() { _ = attacker.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	for _, host := range []string{"127.0.0.1", "localhost"} {
		t.Run("page on "+host, func(t *testing.T) {
			tctx, closeTab := chromedp.NewContext(bctx)
			defer closeTab()
			var mu sync.Mutex
			answered, sent := map[string]int64{}, map[string]int64{}
			if err := chromedp.Listen(tctx, func(ev any) {
				mu.Lock()
				defer mu.Unlock()
				switch e := ev.(type) {
				case *network.EventRequestWillBeSent:
					if strings.HasPrefix(e.Request.URL, broker) {
						sent[strings.TrimPrefix(e.Request.URL, broker)] = 0
					}
				case *network.EventResponseReceived:
					if strings.HasPrefix(e.Response.URL, broker) {
						answered[strings.TrimPrefix(e.Response.URL, broker)] = e.Response.Status
					}
				}
			}); err != nil {
				t.Fatal(err)
			}
			nctx, cancelNav := context.WithTimeout(tctx, 30*time.Second)
			defer cancelNav()
			if err := chromedp.Do(nctx, chromedp.Navigate(fmt.Sprintf("http://%s:%d/", host, port))); err != nil {
				t.Fatalf("loading the attacker's page: %v", err)
			}
			// Wait until the browser sent every request of the page and the
			// broker answered them (an event stream it holds open unanswered
			// is logged: what counts is the state checked below).
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				var unsent, unanswered []string
				for _, p := range webAttackPaths {
					if !slices.ContainsFunc(webKeys(sent), func(u string) bool { return strings.HasPrefix(u, p) }) {
						unsent = append(unsent, p)
					}
					if !slices.ContainsFunc(webKeys(answered), func(u string) bool { return strings.HasPrefix(u, p) }) {
						unanswered = append(unanswered, p)
					}
				}
				got := fmt.Sprint(answered)
				mu.Unlock()
				if len(unanswered) == 0 {
					t.Logf("broker answered the page: %s", got)
					break
				}
				if time.Now().After(deadline) {
					if len(unsent) > 0 {
						t.Fatalf("the browser did not send %v (answered: %s)", unsent, got)
					}
					t.Logf("no answer (yet) to %v; answered: %s", unanswered, got)
					break
				}
				select {
				case <-time.After(20 * time.Millisecond):
				case <-ctx.Done():
					t.Fatal(ctx.Err())
				}
			}
			v.unchanged(t, ctx)
		})
	}
}

func webKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// DNS rebinding: a page whose host name now resolves to the broker sends
// requests with its own Host. The broker must refuse them: reading or
// writing through it would give the page the victim's network position.
func TestDNSRebindingHostRefused(t *testing.T) {
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	addr := srv.HTTPAddr()
	_, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	brokertest.AddStream(t, c, "REBIND", "rebind.>")

	do := func(method, path, host, body string) int {
		req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatal(err)
			}
			return 0 // the connection refused outright counts as refused
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// The broker's own name works, so the refusals below are about Host.
	if st := do("GET", "/api/v1/streams", addr, ""); st != 200 {
		t.Fatalf("GET /api/v1/streams with Host %s: %d", addr, st)
	}
	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1.evil.example:" + port} {
		for _, r := range []struct{ method, path, body string }{
			{"GET", "/api/v1/streams", ""},
			{"GET", "/v1/models", ""},
			{"POST", "/api/v1/publish/rebind.x", `{"stolen":true}`},
			{"POST", "/subjects/rebind-value/versions", `{"schemaType":"JSON","schema":"{}"}`},
		} {
			if st := do(r.method, r.path, host, r.body); st != 0 && (st < 400 || st > 499) {
				t.Errorf("%s %s with Host %s: status %d, want a 4xx refusal", r.method, r.path, host, st)
			}
		}
	}
	info, err := c.StreamInfo(ctx, "REBIND")
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Messages != 0 {
		t.Errorf("stored %d messages sent with a foreign Host", info.State.Messages)
	}
	if subjects, err := c.SchemaSubjects(ctx, true); err != nil || slices.Contains(subjects, "rebind-value") {
		t.Errorf("schema subjects %v %v: registered with a foreign Host", subjects, err)
	}
}
