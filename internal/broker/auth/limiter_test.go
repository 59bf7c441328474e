package auth

import (
	"fmt"
	"testing"
	"time"
)

func TestLimiterDelays(t *testing.T) {
	now := time.Unix(0, 0)
	l := &Limiter{Free: 3, Window: time.Minute, Base: 100 * time.Millisecond, Max: time.Second, Size: 10, now: func() time.Time { return now }}
	var got []time.Duration
	for range 9 {
		got = append(got, l.Delay("1.2.3.4"))
		l.Fail("1.2.3.4")
	}
	want := []time.Duration{0, 0, 0, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("delays %v, want %v", got, want)
	}
	if l.Delay("5.6.7.8") != 0 {
		t.Fatal("another IP is slowed down")
	}
	now = now.Add(2 * time.Minute)
	if d := l.Delay("1.2.3.4"); d != 0 {
		t.Fatalf("failures outlive the window: %v", d)
	}
	for range 5 {
		l.Fail("9.9.9.9")
	}
	l.Succeed("9.9.9.9")
	if l.Delay("9.9.9.9") != 0 {
		t.Fatal("a success does not forget the failures")
	}
}

// Many addresses never grow the table past its bound.
func TestLimiterBounded(t *testing.T) {
	now := time.Unix(0, 0)
	l := &Limiter{Free: 1, Window: time.Minute, Base: time.Millisecond, Max: time.Second, Size: 100, now: func() time.Time { return now }}
	for i := range 100000 {
		l.Fail(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
		if l.Len() > 100 {
			t.Fatalf("table at %d entries after %d addresses", l.Len(), i+1)
		}
	}
	if l.Len() != 100 {
		t.Fatalf("table at %d", l.Len())
	}
}
