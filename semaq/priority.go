package semaq

import (
	"fmt"
	"strings"
)

// Priority is the urgency of a message on one scale for the whole system:
// 0 is the most urgent, 9 the least. The named levels are fixed points on it.
// docs/envelope.md maps it to vLLM, Triton and the Gateway API Inference
// Extension.
type Priority uint8

// Named priority levels. Each names the even number of its band: the band of
// PriorityHigh is 2 and 3, and so on.
const (
	PriorityCritical Priority = 0
	PriorityHigh     Priority = 2
	PriorityNormal   Priority = 4
	PriorityLow      Priority = 6
	PriorityBulk     Priority = 8

	// PriorityDefault is the priority of a message that names none.
	PriorityDefault = PriorityNormal
	// PriorityLowest is the largest valid value.
	PriorityLowest Priority = 9
)

var levelNames = [...]string{"critical", "high", "normal", "low", "bulk"}

// ParsePriority reads a priority given as a level name (critical, high,
// normal, low, bulk; any case) or as a digit 0-9.
func ParsePriority(s string) (Priority, error) {
	if len(s) == 1 && s[0] >= '0' && s[0] <= '9' {
		return Priority(s[0] - '0'), nil
	}
	for i, n := range levelNames {
		if strings.EqualFold(s, n) {
			return Priority(2 * i), nil
		}
	}
	return 0, fmt.Errorf("unknown priority %q (use critical, high, normal, low, bulk or 0-9)", s)
}

// Level returns the name of the band p falls in.
func (p Priority) Level() string {
	if p > PriorityLowest {
		return "invalid"
	}
	return levelNames[p/2]
}

// String returns the digit form, which is what the ingress stores.
func (p Priority) String() string {
	if p > PriorityLowest {
		return fmt.Sprintf("Priority(%d)", uint8(p))
	}
	return string(rune('0' + p))
}
