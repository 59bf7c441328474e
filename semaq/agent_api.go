package semaq

import (
	"fmt"
	"time"
)

// Agent capability registry. Agents announce the intents they serve; the
// announcement is a heartbeat that holds for its TTL, and an agent whose
// heartbeats stop leaves the table once the TTL has passed. Messages are
// delivered to the live agents serving their AI-Intent through one shared
// durable per intent (client.ServeIntent). See docs/agents.md.
const (
	APIAgentAnnounce = "$SQ.API.AGENT.ANNOUNCE" // AgentAnnounceRequest -> AgentInfo
	APIAgentList     = "$SQ.API.AGENT.LIST"     // (empty) -> AgentListResponse
	APIAgentLeave    = "$SQ.API.AGENT.LEAVE"    // AgentLeaveRequest -> AgentLeaveResponse
)

// Limits on announcements.
const (
	// MinAgentTTL and MaxAgentTTL bound an announcement's TTL.
	MinAgentTTL = 100 * time.Millisecond
	MaxAgentTTL = 24 * time.Hour
	// DefaultAgentTTL is the TTL of an announcement that gives none.
	DefaultAgentTTL = 30 * time.Second
	// MaxAgentIntents bounds the intents of one agent.
	MaxAgentIntents = 64
	// MaxAgentCapabilities bounds the capabilities of one agent.
	MaxAgentCapabilities = 64
)

// Agent is what an agent announces about itself.
type Agent struct {
	// ID identifies the agent: 1 to 128 letters, digits, '-' and '_'.
	ID string `json:"id"`
	// Intents are the AI-Intent values the agent serves.
	Intents []string `json:"intents"`
	// Capabilities are free-form facts about the agent (model, gpu,
	// languages) for others to choose by.
	Capabilities map[string]string `json:"capabilities,omitempty"`
	// Subject is the subject pattern the agent consumes, for information.
	Subject string `json:"subject,omitempty"`
}

// AgentAnnounceRequest announces an agent or renews its announcement: the
// heartbeat. It replaces what the agent announced before.
type AgentAnnounceRequest struct {
	Agent
	// TTL is how long the announcement holds without another; zero means
	// DefaultAgentTTL.
	TTL time.Duration `json:"ttl,omitempty"`
}

// AgentInfo is a live announcement.
type AgentInfo struct {
	Agent
	TTL time.Duration `json:"ttl"`
	// AnnouncedAt is when the broker received the last heartbeat.
	AnnouncedAt time.Time `json:"announced_at"`
	// ExpiresAt is when the agent leaves the table without another.
	ExpiresAt time.Time `json:"expires_at"`
}

// AgentListResponse lists the live agents by ID.
type AgentListResponse struct {
	Agents []AgentInfo `json:"agents"`
}

// AgentLeaveRequest removes an agent from the table.
type AgentLeaveRequest struct {
	ID string `json:"id"`
}

// AgentLeaveResponse confirms a leave.
type AgentLeaveResponse struct {
	Success bool `json:"success"`
}

var (
	// ErrAgentNotFound matches a leave of an agent that is not in the table.
	ErrAgentNotFound = &APIError{Code: 404, ErrCode: ErrCodeAgentNotFound, Description: "agent not found"}
	// ErrBadAgent matches an announcement the broker refuses: a bad ID, no
	// intents, an intent that is not a valid AI-Intent value, a TTL out of
	// bounds.
	ErrBadAgent = &APIError{Code: 400, ErrCode: ErrCodeBadAgent, Description: "invalid agent"}
)

// CheckAgentID accepts agent IDs that are safe as a KV key: 1 to 128
// letters, digits, '-' and '_'.
func CheckAgentID(id string) error {
	if id == "" {
		return fmt.Errorf("agent id is empty")
	}
	if len(id) > 128 {
		return fmt.Errorf("agent id %q is longer than 128 bytes", id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("agent id %q has %q at byte %d; use letters, digits, '-' and '_'", id, c, i)
		}
	}
	return nil
}

// CheckAgent validates an announcement and returns its effective TTL.
func CheckAgent(a *Agent, ttl time.Duration) (time.Duration, error) {
	if err := CheckAgentID(a.ID); err != nil {
		return 0, err
	}
	if len(a.Intents) == 0 {
		return 0, fmt.Errorf("agent %s serves no intents", a.ID)
	}
	if len(a.Intents) > MaxAgentIntents {
		return 0, fmt.Errorf("agent %s has %d intents; at most %d", a.ID, len(a.Intents), MaxAgentIntents)
	}
	for _, in := range a.Intents {
		if err := CheckIntent(in); err != nil {
			return 0, err
		}
	}
	if len(a.Capabilities) > MaxAgentCapabilities {
		return 0, fmt.Errorf("agent %s has %d capabilities; at most %d", a.ID, len(a.Capabilities), MaxAgentCapabilities)
	}
	for k := range a.Capabilities {
		if k == "" {
			return 0, fmt.Errorf("agent %s has a capability with an empty name", a.ID)
		}
	}
	if ttl == 0 {
		ttl = DefaultAgentTTL
	}
	if ttl < MinAgentTTL || ttl > MaxAgentTTL {
		return 0, fmt.Errorf("agent %s: ttl %s is outside %s to %s", a.ID, ttl, MinAgentTTL, MaxAgentTTL)
	}
	return ttl, nil
}

// CheckIntent accepts an intent an agent may serve: a non-empty AI-Intent
// value of printable ASCII without spaces, at most 128 bytes.
func CheckIntent(intent string) error {
	if intent == "" {
		return fmt.Errorf("intent is empty")
	}
	if len(intent) > 128 {
		return fmt.Errorf("intent %q is longer than 128 bytes", intent)
	}
	for i := 0; i < len(intent); i++ {
		if c := intent[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return fmt.Errorf("intent %q has %q at byte %d", intent, c, i)
		}
	}
	return nil
}
