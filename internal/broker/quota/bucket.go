package quota

import (
	"math/bits"
	"time"
)

// Window is the period every rate is counted over: a limit of N allows N
// units a minute, refilled evenly, and at most N at once.
const Window = time.Minute

// A bucket is a token bucket kept as the generic cell rate algorithm
// keeps it: one number, the theoretical arrival time (TAT), which is when
// the bucket will be full again. A bucket of limit N per Window charges
// Window/N per unit, so TAT-now is how much of the Window the bucket owes,
// and a request fits when, after its charge, that debt is at most Window.
// A bucket whose TAT is not after now is full and is the same as no
// bucket at all, which is what lets the tables forget it (table.go).
//
// Times are nanoseconds since the limiter's epoch; charges are rounded
// up, so rounding can only refuse a unit early, never admit one more.
type bucket struct {
	tat int64
}

// charge is the time n units cost in a bucket of limit per Window:
// ceil(n*Window/limit) nanoseconds, saturating far above Window (a charge
// beyond Window is refused or admitted as one oversize request alike).
func charge(n, limit int64) int64 {
	if n <= 0 || limit <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(n), uint64(Window))
	if hi >= uint64(limit) {
		return maxCharge
	}
	q, r := bits.Div64(hi, lo, uint64(limit))
	if r != 0 {
		q++
	}
	if q > uint64(maxCharge) {
		return maxCharge
	}
	return int64(q)
}

// maxCharge caps a charge: a thousand windows, far beyond anything that
// fits, and small enough that TAT arithmetic never overflows.
const maxCharge = int64(1000 * Window)

// take charges inc to b at now when it fits and reports whether it did; on
// a refusal, wait is how long until the same charge would fit (with
// nothing else charged in between).
//
// A charge larger than the whole Window (a request bigger than a minute's
// allowance) would never fit: it is admitted when the bucket is full, and
// the bucket then owes more than a Window, so the next request waits the
// excess out. One oversize request a refill, never two at once.
func (b *bucket) take(now, inc int64) (ok bool, wait time.Duration) {
	w := int64(Window)
	base := max(b.tat, now)
	next := base + inc
	if next-now <= w {
		b.tat = next
		return true, 0
	}
	if inc > w {
		if b.tat <= now {
			b.tat = next
			return true, 0
		}
		return false, time.Duration(b.tat - now)
	}
	return false, time.Duration(next - w - now)
}

// force charges inc whether it fits or not: tokens already spent. The
// bucket may then owe more than a Window, and later charges wait the debt
// out; one forced charge owes at most maxCharge.
func (b *bucket) force(now, inc int64) { b.tat = max(b.tat, now) + inc }

// refund gives back a charge of inc taken before. The bucket never holds
// more than full: a TAT in the past is a full bucket.
func (b *bucket) refund(inc int64) { b.tat -= inc }

// fits reports whether take would admit inc at now, without charging; on
// false, wait is as take's.
func (b *bucket) fits(now, inc int64) (ok bool, wait time.Duration) {
	c := *b
	return c.take(now, inc)
}

// full reports whether b holds its whole allowance at now: nothing to
// remember.
func (b *bucket) full(now int64) bool { return b.tat <= now }
