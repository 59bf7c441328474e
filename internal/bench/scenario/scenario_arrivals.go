package scenario

import (
	"context"
	"math/rand/v2"
	"time"
)

// arrivals paces one publisher's Poisson arrivals: each next is due an
// exponentially distributed gap after the previous one, from start. A rate
// of 0 runs closed loop: every arrival is due now.
type arrivals struct {
	rng   *rand.Rand
	rate  float64 // per second
	due   time.Time
	timer *time.Timer
}

func newArrivals(rng *rand.Rand, rate float64, start time.Time) *arrivals {
	return &arrivals{rng: rng, rate: rate, due: start, timer: time.NewTimer(time.Hour)}
}

// next waits until the next arrival is due and returns when it was due,
// or ctx's error.
func (a *arrivals) next(ctx context.Context) (time.Time, error) {
	if a.rate <= 0 {
		a.due = time.Now()
		return a.due, nil
	}
	a.due = a.due.Add(time.Duration(a.rng.ExpFloat64() / a.rate * float64(time.Second)))
	if wait := time.Until(a.due); wait > 0 {
		a.timer.Reset(wait)
		select {
		case <-a.timer.C:
		case <-ctx.Done():
			return a.due, ctx.Err()
		}
	}
	return a.due, nil
}

func (a *arrivals) stop() { a.timer.Stop() }
