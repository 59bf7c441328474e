package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
)

func TestServeFlagsOverrideConfigFile(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "semaq.yaml")
	fromFile, fromFlag := filepath.Join(dir, "file-data"), filepath.Join(dir, "flag-data")
	yaml := "data: " + fromFile + "\nlisten: 127.0.0.1:0\nhttp: \"\"\nsync: always\nlog_level: info\n"
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startChild(t, "--config", cfgFile, "--data", fromFlag)
	ctx := context.Background()
	c, err := client.Connect(ctx, srv.url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := c.ServerInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Sync != "always" {
		t.Errorf("sync = %q, want always from the config file", info.Sync)
	}
	if info.HTTPAddr != "" {
		t.Errorf("http = %q, want disabled by the config file", info.HTTPAddr)
	}
	if _, err := os.Stat(filepath.Join(fromFlag, "jetstream")); err != nil {
		t.Errorf("--data not used: %v", err)
	}
	if _, err := os.Stat(fromFile); !os.IsNotExist(err) {
		t.Errorf("config file's data dir used although --data overrides it (%v)", err)
	}
}

func TestServeRejectsBadSettings(t *testing.T) {
	dir := t.TempDir()
	unknown := filepath.Join(dir, "unknown.yaml")
	_ = os.WriteFile(unknown, []byte("listen: 127.0.0.1:0\nsynk: always\n"), 0o600)
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"serve", "--sync", "sometimes"}, `sync: "sometimes" is not a sync mode`},
		{[]string{"serve", "--listen", "localhost"}, "listen:"},
		{[]string{"serve", "--listen", "127.0.0.1:99999"}, "port"},
		{[]string{"serve", "--config", unknown}, "synk"},
		{[]string{"serve", "--config", filepath.Join(dir, "missing.yaml")}, "no such file"},
		{[]string{"serve", "--log-level", "loud"}, "log_level"},
		{[]string{"serve", "--gateway-session-budget", "-1"}, "gateway_session_budget: -1 is outside 1..131072 tokens"},
		{[]string{"serve", "--gateway-degraded-policy", "ignore"}, `gateway_degraded_policy: "ignore" is not one of proceed, warn, refuse`},
		{[]string{"serve", "extra"}, "unknown command"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(tc.args, strings.NewReader(""), &stdout, &stderr)
		if code == 0 {
			t.Errorf("%v: exit 0", tc.args)
			continue
		}
		msg := stderr.String()
		if !strings.HasPrefix(msg, "semaq: ") || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, tc.says) {
			t.Errorf("%v: stderr %q is not one line saying %q", tc.args, msg, tc.says)
		}
	}
}

// serve --help names every key a --config file may hold.
func TestServeHelpNamesConfigKeys(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := Main([]string{"serve", "--help"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("serve --help: exit %d, %s", code, errb.String())
	}
	help := strings.Join(strings.Fields(out.String()), " ")
	typ := reflect.TypeFor[broker.Config]()
	n := 0
	for i := range typ.NumField() {
		key, _, _ := strings.Cut(typ.Field(i).Tag.Get("yaml"), ",")
		if key == "" || key == "-" {
			continue
		}
		n++
		if !strings.Contains(help, key+",") && !strings.Contains(help, key+" ") {
			t.Errorf("serve --help does not name config key %s", key)
		}
	}
	if n < 20 {
		t.Fatalf("found %d config keys in broker.Config, expected more", n)
	}
}
