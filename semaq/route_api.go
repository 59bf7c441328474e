package semaq

import (
	"fmt"
	"time"
)

// Route rules. The ingress applies them to every message after validating
// its envelope and schema: rules whose Subject pattern matches the publish
// subject are tried in (Order, Name) order, and the first whose When
// expression is true stores the message under its target subject instead
// of the one it was published to, with AI-Origin-Subject naming the
// original. Rules live in a KV bucket only the broker writes; every node
// reloads them on each change. See docs/routing.md.
const (
	APIRouteAdd    = "$SQ.API.ROUTE.ADD"    // RouteAddRequest -> RouteInfo
	APIRouteList   = "$SQ.API.ROUTE.LIST"   // (empty) -> RouteListResponse
	APIRouteDelete = "$SQ.API.ROUTE.DELETE" // RouteDeleteRequest -> RouteDeleteResponse
	APIRouteTest   = "$SQ.API.ROUTE.TEST"   // RouteTestRequest -> RouteTestResponse
)

// Route is one route rule.
type Route struct {
	// Name identifies the rule: 1 to 128 letters, digits, '-' and '_'.
	Name string `json:"name"`
	// Subject is the pattern of publish subjects the rule applies to
	// (wildcards allowed: ai.inference.>).
	Subject string `json:"subject"`
	// When is a CEL filter (docs/expressions.md); empty always matches.
	When string `json:"when,omitempty"`
	// To is the target subject: literal, captured by a SemaQ stream. A rule
	// has To or Split, not both.
	To string `json:"to,omitempty"`
	// Split sends matching messages to several targets in proportion to
	// their weights (A/B tests).
	Split []RouteSplit `json:"split,omitempty"`
	// StickyKey is a CEL key expression (a string or int, such as
	// tenant or payload.user_id) for a Split: messages with the same key go
	// to the same target while the weights stay the same. Without it each
	// message picks at random.
	StickyKey string `json:"sticky_key,omitempty"`
	// Adaptive makes a Split health-weighted: the broker moves weight away
	// from targets whose consumers nak, terminate or exhaust deliveries
	// (or ack slowly) and back when they recover (docs/routing.md).
	Adaptive bool `json:"adaptive,omitempty"`
	// Order ranks the rule: lower is tried first, then by name.
	Order int `json:"order,omitempty"`
}

// RouteSplit is one target of a split and its weight.
type RouteSplit struct {
	Subject string `json:"subject"`
	Weight  int    `json:"weight"`
}

// Limits on route rules.
const (
	// MaxRouteSplitTargets bounds the targets of one split.
	MaxRouteSplitTargets = 64
	// MaxRouteWeight bounds one split weight.
	MaxRouteWeight = 1_000_000
)

// RouteAddRequest adds a rule. A rule of the same name is refused
// (ErrRouteExists) unless Replace is set; a replacement takes effect
// atomically, with fresh statistics.
type RouteAddRequest struct {
	Route
	Replace bool `json:"replace,omitempty"`
}

// RouteInfo is a stored rule as one node runs it.
type RouteInfo struct {
	Route
	// Created is when this version of the rule was stored.
	Created time.Time `json:"created"`
	// Revision is the rule's KV revision.
	Revision uint64 `json:"revision"`
	// Stats are this node's counters since it loaded this version.
	Stats RouteStats `json:"stats"`
	// Health is, for an adaptive split, each target's health and the
	// weight this node routes with.
	Health []RouteTargetHealth `json:"health,omitempty"`
	// Error says why this node could not load the stored rule (written by a
	// newer version, say); such a rule routes nothing here.
	Error string `json:"error,omitempty"`
}

// RouteStats count what one rule did on one node.
type RouteStats struct {
	// Matched counts messages the rule routed.
	Matched uint64 `json:"matched"`
	// Errors counts messages on which When or StickyKey failed to
	// evaluate (a missing field, a payload that is not JSON): the rule did
	// not match them.
	Errors uint64 `json:"errors"`
	// LastError is the most recent of those errors.
	LastError string `json:"last_error,omitempty"`
	// Targets counts the messages each target of a split received.
	Targets map[string]uint64 `json:"targets,omitempty"`
}

// RouteListResponse lists the rules in the order they are tried.
type RouteListResponse struct {
	Routes []RouteInfo `json:"routes"`
}

// RouteDeleteRequest names the rule to delete.
type RouteDeleteRequest struct {
	Name string `json:"name"`
}

// RouteDeleteResponse confirms a delete.
type RouteDeleteResponse struct {
	Success bool `json:"success"`
}

// RouteTestRequest is a message to route without storing it: a dry run of
// the ingress's pipeline (envelope, policy, schema, routing) on the node
// that answers.
type RouteTestRequest struct {
	Subject string              `json:"subject"`
	Headers map[string][]string `json:"headers,omitempty"`
	Data    []byte              `json:"data,omitempty"`
	// As names a store user the message is tried as sent by (auth on):
	// its tenant is stamped and its rights apply, as when it publishes.
	// Empty: the caller's own.
	As string `json:"as,omitempty"`
}

// RouteTestResponse is what the ingress would do with the message.
type RouteTestResponse struct {
	// Subject is the publish subject.
	Subject string `json:"subject"`
	// Route is the rule that matched; empty when none did.
	Route string `json:"route,omitempty"`
	// Target is the subject the message would be stored under: Subject
	// when no rule matched.
	Target string `json:"target"`
	// Key is the sticky key's value, for a sticky split.
	Key string `json:"key,omitempty"`
	// Random reports a split without a sticky key: Target is one random
	// pick; a publish may pick another.
	Random bool `json:"random,omitempty"`
	// Stream is the stream that would store the message; empty when the
	// publish would be refused.
	Stream string `json:"stream,omitempty"`
	// Refused says why the ingress would refuse the message: an invalid
	// envelope, a policy step's refusal, a payload that does not match its
	// schema, no stream capturing the target. Empty when it would be
	// stored. A dry run takes no quota and reserves no queue room: those
	// refusals it cannot foresee.
	Refused string `json:"refused,omitempty"`
	// RefusedBy names the step that refused: subject, envelope, policy,
	// schema or route.
	RefusedBy string `json:"refused_by,omitempty"`
	// Headers are the message's headers as they would be stored (the
	// tenant stamped, what a policy step rewrote), when it would be.
	Headers map[string][]string `json:"headers,omitempty"`
	// Data is the payload as it would be stored, when it would be.
	Data []byte `json:"data,omitempty"`
	// Trials are the rules in the order they are tried, up to and
	// including the one that matched.
	Trials []RouteTrial `json:"trials"`
}

// RouteTrial is how one rule judged the message.
type RouteTrial struct {
	Name    string `json:"name"`
	Subject string `json:"subject"`
	Order   int    `json:"order"`
	// Result is one of the RouteResult constants.
	Result string `json:"result"`
	// Reason explains Result: the subject that did not match, the
	// evaluation error, the target picked.
	Reason string `json:"reason,omitempty"`
}

// Results of a RouteTrial.
const (
	RouteResultMatched      = "matched"       // the rule routes the message
	RouteResultFalse        = "false"         // When is false
	RouteResultError        = "error"         // When or StickyKey failed to evaluate: not a match
	RouteResultOtherSubject = "other_subject" // the rule's Subject pattern does not match
	RouteResultNotLoaded    = "not_loaded"    // the stored rule cannot run on this node
)

var (
	// ErrRouteNotFound matches a rule name that is not stored.
	ErrRouteNotFound = &APIError{Code: 404, ErrCode: ErrCodeRouteNotFound, Description: "route not found"}
	// ErrRouteExists matches an add of a name already stored, without
	// Replace.
	ErrRouteExists = &APIError{Code: 409, ErrCode: ErrCodeRouteExists, Description: "route already exists"}
	// ErrBadRoute matches a rule the broker refuses: an expression that
	// does not compile (the description gives its position), a target no
	// stream captures, bad weights.
	ErrBadRoute = &APIError{Code: 400, ErrCode: ErrCodeBadRoute, Description: "invalid route"}
)

// CheckRouteName accepts rule names that are safe as a KV key: 1 to 128
// letters, digits, '-' and '_'.
func CheckRouteName(name string) error {
	if name == "" {
		return fmt.Errorf("route name is empty")
	}
	if len(name) > 128 {
		return fmt.Errorf("route name %q is longer than 128 bytes", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("route name %q has %q at byte %d; use letters, digits, '-' and '_'", name, c, i)
		}
	}
	return nil
}
