package semaq

import "time"

// RouteTargetHealth is how an adaptive split judges one target on one node
// (docs/routing.md, "Adaptive splits").
type RouteTargetHealth struct {
	Subject string `json:"subject"`
	// Weight is the configured weight; Effective the weight routed with
	// now, between MinAdaptiveShare of Weight and Weight.
	Weight    int     `json:"weight"`
	Effective float64 `json:"effective"`
	// Health is the score in [0, 1] Effective follows.
	Health float64 `json:"health"`
	// ErrorRate is the smoothed share of routed messages its consumers
	// nak'd, terminated or gave up on; AckLatency the smoothed time to ack
	// of sampled messages (0 when no consumer samples acks).
	ErrorRate  float64       `json:"error_rate"`
	AckLatency time.Duration `json:"ack_latency,omitempty"`
	// Errors counts the error events seen since the rule was loaded.
	Errors uint64 `json:"errors"`
}

// Bounds of adaptive splits.
const (
	// MinAdaptiveShare is the floor of a target's effective weight as a
	// share of its configured weight: a failing target keeps a trickle, so
	// its recovery is seen.
	MinAdaptiveShare = 0.05
	// MaxAdaptiveStep bounds how far an effective weight moves per
	// interval, as a share of the configured weight.
	MaxAdaptiveStep = 0.2
)
