package broker_test

import (
	"context"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// Every user stream has a bound: one created without max_bytes gets the
// node's stream_max_bytes (1 GiB on file, 256 MiB in memory by default), so
// a publisher, or a loop of deliveries between streams, fills it to that and
// no further; an explicit max_bytes wins, and -1 turns the default off.
func TestStreamsBoundedByDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	for _, tc := range []struct {
		cfg  semaq.StreamConfig
		want int64
	}{
		{semaq.StreamConfig{Name: "F", Subjects: []string{"f.>"}}, broker.DefaultStreamMaxBytes},
		{semaq.StreamConfig{Name: "M", Subjects: []string{"m.>"}, Storage: "memory"}, broker.DefaultStreamMaxBytesMemory},
		{semaq.StreamConfig{Name: "E", Subjects: []string{"e.>"}, MaxBytes: 5 << 20}, 5 << 20},
	} {
		info, err := c.AddStream(ctx, tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.MaxBytes != tc.want {
			t.Errorf("stream %s: max_bytes %d, want %d", tc.cfg.Name, info.Config.MaxBytes, tc.want)
		}
	}

	small := brokertest.Start(t, func(cfg *broker.Config) { cfg.StreamMaxBytes = 64 << 10 })
	sc := brokertest.Connect(t, small)
	if _, err := sc.AddStream(ctx, semaq.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	payload := strings.Repeat("x", 4<<10)
	for i := range 64 { // 256 KiB offered to a 64 KiB stream
		if _, err := sc.Publish(ctx, "s.x", []byte(payload)); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	info, err := sc.StreamInfo(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Bytes > 64<<10 || info.State.Messages == 0 || info.State.LastSeq != 64 {
		t.Fatalf("after 256 KiB into a stream bounded at 64 KiB: %d bytes, %d messages, last seq %d", info.State.Bytes, info.State.Messages, info.State.LastSeq)
	}

	unbounded := brokertest.Start(t, func(cfg *broker.Config) { cfg.StreamMaxBytes = -1 })
	uc := brokertest.Connect(t, unbounded)
	if info, err := uc.AddStream(ctx, semaq.StreamConfig{Name: "U", Subjects: []string{"u.>"}}); err != nil || info.Config.MaxBytes != 0 {
		t.Fatalf("stream_max_bytes -1: %+v, %v; want no limit (0)", info, err)
	}

	bad := broker.DefaultConfig()
	bad.StreamMaxBytes = -2
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "stream_max_bytes: -2") {
		t.Fatalf("stream_max_bytes -2: %v", err)
	}
}
