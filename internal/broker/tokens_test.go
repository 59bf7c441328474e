package broker_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

func TestTokenStreamConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "semaq.yaml")
	if err := os.WriteFile(file, []byte("token_storage: file\ngateway_api_keys:\n  k1: tenant-a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := broker.DefaultConfig()
	if err := broker.LoadConfigFile(file, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.TokenStorage != "file" || cfg.GatewayAPIKeys["k1"] != "tenant-a" {
		t.Fatalf("loaded %+v", cfg)
	}
	bad := broker.DefaultConfig()
	bad.TokenStorage = "disk"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "token_storage") {
		t.Fatalf("token_storage disk: %v", err)
	}

	for _, storage := range []string{"", "file"} {
		s := brokertest.Start(t, func(c *broker.Config) { c.TokenStorage = storage })
		nc, err := brokertest.DialOperator(s)
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := js.Stream(ctx, semaq.TokenStream)
		cancel()
		nc.Close()
		if err != nil {
			t.Fatal(err)
		}
		want := jetstream.MemoryStorage
		if storage == "file" {
			want = jetstream.FileStorage
		}
		c := st.CachedInfo().Config
		if c.Storage != want || c.MaxAge != semaq.MaxTokenAge || len(c.Subjects) != 1 || c.Subjects[0] != reserved.TokenStorePrefix+">" ||
			c.SubjectTransform == nil || c.SubjectTransform.Destination != semaq.TokenPrefix+">" ||
			c.RePublish == nil || c.RePublish.Destination != semaq.TokenLivePrefix+">" ||
			c.MaxBytes != semaq.DefaultTokenStoreMaxBytes || c.Discard != jetstream.DiscardNew {
			t.Fatalf("token_storage %q: stream config %+v", storage, c)
		}
	}
}
