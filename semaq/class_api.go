package semaq

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Hardware classes and placement (docs/queues.md, Hardware classes): a
// request may require or prefer worker labels, and may name a class, a
// replicated definition that groups requirements and may cap how many of
// its requests workers hold at once across the cluster.
const (
	// HdrClass names the request's class; a queue with a class of its own
	// (QueueConfig.Class) puts every request in it, whatever this says.
	HdrClass = "AI-Class"
	// HdrRequire are labels a worker must announce to get the request:
	// "key=value,key=value".
	HdrRequire = "AI-Require"
	// HdrPrefer are labels the request would rather have: a worker lacking
	// them gets it only when no live worker has them, or once it has
	// waited the queue's affinity wait.
	HdrPrefer = "AI-Prefer"
	// HdrLatencySLA is the latency the sender wants ("200ms", "2s", or
	// milliseconds "200"); with HdrWorkload it derives the request's
	// priority when it names none (Workloads.Priority).
	HdrLatencySLA = "AI-Latency-SLA"
	// HdrWorkload is the request's workload class (rag, agent, finetune,
	// rl by default; Workloads).
	HdrWorkload = "AI-Workload"
)

// The $SQ.API.CLASS management API: admins only.
const (
	APIClassAdd    = "$SQ.API.CLASS.ADD"    // ClassAddRequest -> ClassInfo
	APIClassDelete = "$SQ.API.CLASS.DELETE" // ClassNameRequest -> ClassDeleteResponse
	APIClassList   = "$SQ.API.CLASS.LIST"   // (empty) -> ClassListResponse
)

// Bounds of classes and label sets.
const (
	// MaxClasses is how many classes a cluster keeps.
	MaxClasses = 256
	// MaxLabels bounds a request's required or preferred labels and a
	// class's (a worker announces up to 32, FetchRequest).
	MaxLabels = 16
	// MaxClassConcurrency bounds a class's MaxConcurrency.
	MaxClassConcurrency = 4096
)

// QueueClass is a class of requests: the labels its workers must have and
// would rather have, and how many of its requests workers may hold at once
// in the whole cluster (0: no cap).
type QueueClass struct {
	Name           string            `json:"name"`
	Description    string            `json:"description,omitempty"`
	Require        map[string]string `json:"require,omitempty"`
	Prefer         map[string]string `json:"prefer,omitempty"`
	MaxConcurrency int               `json:"max_concurrency,omitempty"`
}

// Check reports the first invalid field.
func (c *QueueClass) Check() error {
	if err := CheckStreamName(c.Name); err != nil {
		return fmt.Errorf("class name: %s", strings.Replace(err.Error(), "stream name", "name", 1))
	}
	if len(c.Description) > 1024 {
		return fmt.Errorf("class %s: description is %d bytes; the limit is 1024", c.Name, len(c.Description))
	}
	for what, set := range map[string]map[string]string{"require": c.Require, "prefer": c.Prefer} {
		if len(set) > MaxLabels {
			return fmt.Errorf("class %s: %d %s labels; the limit is %d", c.Name, len(set), what, MaxLabels)
		}
		for k, v := range set {
			if err := checkLabel(k, v); err != nil {
				return fmt.Errorf("class %s: %s: %w", c.Name, what, err)
			}
		}
	}
	if c.MaxConcurrency < 0 || c.MaxConcurrency > MaxClassConcurrency {
		return fmt.Errorf("class %s: max concurrency %d is not from 0 (no cap) to %d", c.Name, c.MaxConcurrency, MaxClassConcurrency)
	}
	return nil
}

// ClassAddRequest adds a class, or replaces one with Replace.
type ClassAddRequest struct {
	QueueClass
	Replace bool `json:"replace,omitempty"`
}

// ClassNameRequest names a class.
type ClassNameRequest struct {
	Name string `json:"name"`
}

// ClassInfo is a class with what the cluster holds of it.
type ClassInfo struct {
	QueueClass
	Revision uint64 `json:"revision"`
	// Held is how many of its requests workers hold now, cluster-wide, as
	// the answering node last heard from the class's slots.
	Held int `json:"held"`
}

// ClassListResponse lists the classes by name.
type ClassListResponse struct {
	Classes []ClassInfo `json:"classes"`
}

// ClassDeleteResponse answers APIClassDelete.
type ClassDeleteResponse struct {
	Deleted bool `json:"deleted"`
}

// ClassStat is what a queue holds of one class (QueueStatus.Classes).
type ClassStat struct {
	Class  string `json:"class"`
	Queued int    `json:"queued"`
	Held   int    `json:"held"` // by this queue's workers
	// ClusterHeld is the class's held requests in the whole cluster and
	// Max its cap (0: none).
	ClusterHeld int `json:"cluster_held"`
	Max         int `json:"max,omitempty"`
}

var (
	// ErrClassNotFound matches a class that is not defined.
	ErrClassNotFound = &APIError{Code: 404, ErrCode: ErrCodeClassNotFound, Description: "class not found"}
	// ErrClassExists matches an add of a class that exists (without replace).
	ErrClassExists = &APIError{Code: 400, ErrCode: ErrCodeClassExists, Description: "class exists"}
	// ErrBadClass matches an invalid class definition.
	ErrBadClass = &APIError{Code: 400, ErrCode: ErrCodeBadClass, Description: "invalid class"}
)

// ParseLabels reads a label set "key=value,key=value" (spaces around
// items are ignored): a worker's labels, AI-Require, AI-Prefer. Keys are
// 1 to 64 letters, digits and . _ - /; values 1 to 128 bytes of visible
// ASCII without , and =.
// A key given twice, more than MaxLabels labels, or an empty set is an
// error.
func ParseLabels(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("no labels in %q (want key=value,...)", s)
	}
	out := make(map[string]string)
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("label %q is not key=value", item)
		}
		if err := checkLabel(k, v); err != nil {
			return nil, err
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("label %s is given twice", k)
		}
		if len(out) == MaxLabels {
			return nil, fmt.Errorf("more than %d labels", MaxLabels)
		}
		out[k] = v
	}
	return out, nil
}

// checkLabel checks one label.
func checkLabel(k, v string) error {
	if k == "" || len(k) > 64 {
		return fmt.Errorf("label key %q is empty or longer than 64 bytes", k)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '/') {
			return fmt.Errorf("label key %q has %q at byte %d; use letters, digits and . _ - /", k, c, i)
		}
	}
	if v == "" || len(v) > 128 {
		return fmt.Errorf("label %s: value %q is empty or longer than 128 bytes", k, v)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c >= 0x7f || c == ',' || c == '=' {
			return fmt.Errorf("label %s: value %q has %q at byte %d; use visible ASCII without , and =", k, v, c, i)
		}
	}
	return nil
}

// FormatLabels writes a label set as ParseLabels reads it, keys sorted.
func FormatLabels(m map[string]string) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + m[k])
	}
	return b.String()
}
