package quota

import (
	"encoding/binary"
	"math/big"
	"testing"
	"time"
)

func TestCharge(t *testing.T) {
	for _, c := range []struct {
		n, limit, want int64
	}{
		{1, 60, int64(time.Second)},
		{0, 60, 0},
		{5, 0, 0},
		{1, 7, (int64(Window) + 6) / 7}, // rounded up
		{60, 60, int64(Window)},
		{1, 1 << 62, 1},                // a tiny charge is still one nanosecond
		{1 << 62, 1, maxCharge},        // saturates
		{100_000_000, 1000, maxCharge}, // 6e12 s: saturates
		{1_000_000, 1_000_000, int64(Window)},
	} {
		if got := charge(c.n, c.limit); got != c.want {
			t.Errorf("charge(%d, %d) = %d, want %d", c.n, c.limit, got, c.want)
		}
	}
}

func TestBucketTake(t *testing.T) {
	w := int64(Window)
	var b bucket
	inc := charge(1, 3) // 20 s
	for i := range 3 {
		if ok, _ := b.take(0, inc); !ok {
			t.Fatalf("request %d of 3 refused", i+1)
		}
	}
	ok, wait := b.take(0, inc)
	if ok || wait != 20*time.Second {
		t.Fatalf("4th request: ok %v wait %s, want refused for 20s", ok, wait)
	}
	if ok, _ := b.take(int64(wait)-1, inc); ok {
		t.Fatal("admitted a nanosecond before the wait ended")
	}
	if ok, _ := b.take(int64(wait), inc); !ok {
		t.Fatal("refused once the wait ended")
	}
	// Oversize: twice the window, admitted only when full.
	b = bucket{}
	if ok, _ := b.take(0, 2*w); !ok {
		t.Fatal("an oversize charge on a full bucket was refused")
	}
	// The bucket owes two windows: half a window's charge waits one and a half.
	ok, wait = b.take(0, w/2)
	if ok || wait != time.Duration(w+w/2) {
		t.Fatalf("after an oversize charge: ok %v wait %s, want the debt waited out (%s)", ok, wait, time.Duration(w+w/2))
	}
}

// FuzzBucket checks the bucket arithmetic on any sequence of charges:
// what it admits never exceeds limit units per Window plus one Window's
// burst (one oversize request's worth when larger); a refusal charges
// nothing and its wait is exact: the same charge fits at now+wait and not
// a nanosecond before.
func FuzzBucket(f *testing.F) {
	f.Add(uint32(3), []byte{0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 200, 0, 1})
	f.Add(uint32(100), []byte{10, 0, 50, 1, 0, 250, 255, 255, 7})
	f.Add(uint32(1), []byte{0, 0, 9, 0, 0, 1})
	f.Fuzz(func(t *testing.T, limit uint32, ops []byte) {
		if limit == 0 {
			return
		}
		var (
			b       bucket
			now     int64
			t0      int64 = -1
			units         = new(big.Int)
			charged int64
			maxInc  int64
			w       = int64(Window)
			lim     = int64(limit)
		)
		for len(ops) >= 3 {
			// dt: up to 65535 * 10 ms; n: 0..255 units.
			now += int64(binary.BigEndian.Uint16(ops)) * int64(10*time.Millisecond)
			n := int64(ops[2])
			ops = ops[3:]
			inc := charge(n, lim)
			before := b
			ok, wait := b.take(now, inc)
			if !ok {
				if b != before {
					t.Fatalf("a refusal changed the bucket: %+v -> %+v", before, b)
				}
				if wait <= 0 {
					t.Fatalf("refused with wait %s", wait)
				}
				if ok, _ := before.fits(now+int64(wait), inc); !ok {
					t.Fatalf("refused with wait %s, still refused after it (tat %d now %d inc %d)", wait, before.tat, now, inc)
				}
				if ok, _ := before.fits(now+int64(wait)-1, inc); ok {
					t.Fatalf("wait %s is longer than needed", wait)
				}
				continue
			}
			if t0 < 0 {
				t0 = now
			}
			units.Add(units, big.NewInt(n))
			charged += inc
			maxInc = max(maxInc, inc)
			if bound := now - t0 + max(w, maxInc); charged > bound {
				t.Fatalf("charged %d ns of allowance in %d ns", charged, now-t0)
			}
			// In units: units*W <= limit*(elapsed + max(W, maxInc)).
			lhs := new(big.Int).Mul(units, big.NewInt(w))
			rhs := new(big.Int).Mul(big.NewInt(lim), big.NewInt(now-t0+max(w, maxInc)))
			if lhs.Cmp(rhs) > 0 {
				t.Fatalf("admitted %s units at limit %d per minute in %s", units, lim, time.Duration(now-t0))
			}
		}
	})
}
