package tokens

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string // "" for valid
	}{
		{"default", func(*Config) {}, ""},
		{"short stream", func(c *Config) { c.Tokens = 999 }, "--tokens 999"},
		{"no streams", func(c *Config) { c.Streams = 0 }, "--streams 0"},
		{"no stream tokens", func(c *Config) { c.StreamTokens = 0 }, "--stream-tokens 0"},
		{"no rate", func(c *Config) { c.Rate = 0 }, "--rate 0"},
		{"short duration", func(c *Config) { c.Duration = 99 * time.Millisecond }, "--duration 99ms"},
		{"no answer", func(c *Config) { c.AnswerTokens = 0 }, "--answer-tokens 0"},
		{"huge window", func(c *Config) { c.Window = 65537 }, "--window 65537"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.mod(&cfg)
			err := cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("err = %v, want none", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// A tiny run measures every phase on both targets and reports it in both
// forms.
func TestRunTiny(t *testing.T) {
	cfg := Config{Tokens: 2000, Streams: 4, StreamTokens: 20, Rate: 50, Duration: 400 * time.Millisecond,
		AnswerTokens: 3, Window: 64, Dir: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []StreamRun{rep.Single, rep.Many} {
		if s.Semaq <= 0 || s.Raw <= 0 || s.Ratio <= 0 || s.Records <= 0 || s.FirstToken.P50 <= 0 {
			t.Errorf("streams measured nothing: %+v", s)
		}
	}
	if rep.Many.Streams != 4 || rep.Many.Tokens != 20 {
		t.Errorf("concurrent streams %d × %d, want 4 × 20", rep.Many.Streams, rep.Many.Tokens)
	}
	if g := rep.Gateway; g.Requests != 20 || g.Errors != 0 || g.Direct.P50 <= 0 || g.Gateway.P50 <= 0 {
		t.Errorf("gateway: %+v", g)
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back map[string]json.RawMessage
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"scenario", "config", "env", "single_stream", "concurrent_streams", "gateway", "goals"} {
		if _, ok := back[k]; !ok {
			t.Errorf("JSON report lacks %q: %s", k, js.String())
		}
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"one stream", "concurrent", "through the gateway", "overhead", "goals"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}
