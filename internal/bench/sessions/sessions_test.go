package sessions

import (
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
		{"no sessions", func(c *Config) { c.Sessions = 0 }, "--sessions 0"},
		{"no clients", func(c *Config) { c.Clients = 0 }, "--clients 0"},
		{"too many clients", func(c *Config) { c.Clients = MaxClients + 1 }, "--clients 65"},
		{"too many sessions in all", func(c *Config) { c.Sessions, c.Clients = 1000, 11 }, "11000 sessions"},
		{"tiny patch", func(c *Config) { c.Size = MinSize - 1 }, "--size 31"},
		{"huge patch", func(c *Config) { c.Size = MaxSize + 1 }, "--size 65537"},
		{"no rounds", func(c *Config) { c.Rounds = 0 }, "--rounds 0"},
		{"no duration", func(c *Config) { c.Duration = 0 }, "--duration 0s"},
		{"rounds too short", func(c *Config) { c.Duration, c.Rounds = 10*time.Millisecond, 20 }, "under 1ms"},
		{"negative warm-up", func(c *Config) { c.Warmup = -time.Second }, "--warmup -1s"},
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
