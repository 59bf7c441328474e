package semaq

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The model registry (docs/models.md): models, their versions and
// lifecycle, the canary split and the promotion gate. Admins change it;
// every user may read it; a worker or service reports a version's figures.
const (
	APIModelRegister = "$SQ.API.MODEL.REGISTER" // ModelRegisterRequest -> ModelInfo
	APIModelPromote  = "$SQ.API.MODEL.PROMOTE"  // ModelPromoteRequest -> ModelInfo
	APIModelRollback = "$SQ.API.MODEL.ROLLBACK" // ModelRef -> ModelInfo
	APIModelDrain    = "$SQ.API.MODEL.DRAIN"    // ModelRef (with version) -> ModelDrainResponse
	APIModelReport   = "$SQ.API.MODEL.REPORT"   // ModelReportRequest -> ModelInfo
	APIModelGet      = "$SQ.API.MODEL.GET"      // ModelRef -> ModelInfo
	APIModelList     = "$SQ.API.MODEL.LIST"     // (empty) -> ModelListResponse
)

// HdrModelRevision is stamped by the ingress beside AI-Model-Version on a
// request it bound to a registered model's version: the registry revision
// the admitting node had applied. A client may not set it.
const HdrModelRevision = "AI-Model-Revision"

// ModelEventPrefix starts the subjects of lifecycle events, kept in the
// stream ModelEventStream: ModelEventPrefix + "<model token>.<event>",
// the model's name as NameToken makes it a subject token.
const (
	ModelEventPrefix = "$SQ.MODEL.EVENT."
	ModelEventStream = "SQ_MODEL_EVENTS"
)

// ModelEventSubject is the subject of event ev of model.
func ModelEventSubject(model, ev string) string {
	return ModelEventPrefix + ModelToken(model) + "." + ev
}

// ModelVersionKey is the key of a model's version in
// QueueStatus.ByVersion: "<model>@<version>".
func ModelVersionKey(model, version string) string { return model + "@" + version }

// ModelToken is model's name as a subject token and registry key.
func ModelToken(model string) string { return NameToken(model, 96) }

// The lifecycle events (the seeds' names where they have one).
const (
	ModelRegistered   = "ModelRegistered"
	ModelReported     = "ModelReported"
	ModelValidated    = "ModelValidated" // the promotion gate passed (or was forced)
	ModelGateRefused  = "ModelGateRefused"
	ModelCanary       = "ModelCanary"
	ModelDeployed     = "ModelDeployed"
	ModelRolledBack   = "ModelRolledBack"
	ModelDrainStarted = "ModelDrainStarted"
	ModelRetired      = "ModelRetired"
)

// ModelState is where a version is in its lifecycle:
// registered -> canary -> active -> draining -> retired.
type ModelState string

const (
	ModelStateRegistered ModelState = "registered"
	ModelStateCanary     ModelState = "canary"
	ModelStateActive     ModelState = "active"
	ModelStateDraining   ModelState = "draining"
	ModelStateRetired    ModelState = "retired"
)

// Bounds of the registry.
const (
	MaxModelNameLen     = 256
	MaxModelVersionLen  = 64
	MaxModelVersions    = 64  // versions kept per model; retired ones are dropped first
	MaxModelHistory     = 100 // changes kept per model, newest last
	MaxModelLabels      = 16
	MaxModels           = 1024
	DefaultGateDriftPct = 8.0
	DefaultGateMemPct   = 15.0
	DefaultGateColdMs   = 300.0
)

// ModelGate is a model's promotion gate; a zero field takes the seeds'
// default. P95DriftPct bounds |p95(candidate)/p95(active) - 1| in percent,
// MemoryGrowthPct the candidate's memory over the active's, ColdStartMs
// the candidate's cold start.
type ModelGate struct {
	P95DriftPct     float64 `json:"p95_drift_pct,omitempty"`
	MemoryGrowthPct float64 `json:"memory_growth_pct,omitempty"`
	ColdStartMs     float64 `json:"cold_start_ms,omitempty"`
}

// WithDefaults is g with its zero fields set to the defaults.
func (g ModelGate) WithDefaults() ModelGate {
	if g.P95DriftPct == 0 {
		g.P95DriftPct = DefaultGateDriftPct
	}
	if g.MemoryGrowthPct == 0 {
		g.MemoryGrowthPct = DefaultGateMemPct
	}
	if g.ColdStartMs == 0 {
		g.ColdStartMs = DefaultGateColdMs
	}
	return g
}

// ModelFigures are what a worker or user reports of one version.
type ModelFigures struct {
	P95Ms       float64 `json:"p95_ms"`
	MemoryMB    float64 `json:"memory_mb"`
	ColdStartMs float64 `json:"cold_start_ms"`
}

// ModelGateResult is the gate's verdict, with the figures it judged.
type ModelGateResult struct {
	Passed          bool         `json:"passed"`
	Forced          bool         `json:"forced,omitempty"`
	Baseline        string       `json:"baseline,omitempty"` // the active version compared with; "" when none
	Candidate       ModelFigures `json:"candidate"`
	Active          ModelFigures `json:"active"`
	P95DriftPct     float64      `json:"p95_drift_pct"`
	MemoryGrowthPct float64      `json:"memory_growth_pct"`
	Gate            ModelGate    `json:"gate"`
	Failures        []string     `json:"failures,omitempty"`
}

// ModelVersion is one version of a model.
type ModelVersion struct {
	Version      string            `json:"version"`
	State        ModelState        `json:"state"`
	Labels       map[string]string `json:"labels,omitempty"`
	RegisteredAt time.Time         `json:"registered_at"`
	Figures      *ModelFigures     `json:"figures,omitempty"` // the last report
	ReportedAt   time.Time         `json:"reported_at,omitzero"`
}

// ModelChange is one entry of a model's history.
type ModelChange struct {
	Event   string     `json:"event"`
	Version string     `json:"version,omitempty"`
	From    ModelState `json:"from,omitempty"`
	To      ModelState `json:"to,omitempty"`
	At      time.Time  `json:"at"`
	By      string     `json:"by,omitempty"`
	Detail  string     `json:"detail,omitempty"`
}

// ModelInfo is a model as the registry keeps it. Revision is the registry
// revision that wrote it: requests bound with an AI-Model-Revision at or
// past it were bound by this state or a later one.
type ModelInfo struct {
	Name          string         `json:"name"`
	Active        string         `json:"active,omitempty"`
	Previous      string         `json:"previous,omitempty"` // what rollback returns to
	Canary        string         `json:"canary,omitempty"`
	CanaryPercent float64        `json:"canary_percent,omitempty"`
	Sticky        string         `json:"sticky,omitempty"` // "session" or "tenant"
	Gate          ModelGate      `json:"gate"`
	Versions      []ModelVersion `json:"versions"`
	History       []ModelChange  `json:"history,omitempty"`
	Revision      uint64         `json:"revision"`
}

// Version is the version named v, or nil.
func (m *ModelInfo) Version(v string) *ModelVersion {
	for i := range m.Versions {
		if m.Versions[i].Version == v {
			return &m.Versions[i]
		}
	}
	return nil
}

// ModelRef names a model, and a version where the call takes one.
type ModelRef struct {
	Model   string `json:"model"`
	Version string `json:"version,omitempty"`
}

// ModelRegisterRequest adds a version to a model (making the model).
// Gate, when set, replaces the model's gate.
type ModelRegisterRequest struct {
	ModelRef
	Labels map[string]string `json:"labels,omitempty"`
	Gate   *ModelGate        `json:"gate,omitempty"`
}

// ModelPromoteRequest makes Version the canary of CanaryPercent of the
// traffic (sticky by Sticky: "session", the default, or "tenant"), or,
// with CanaryPercent 0, the active version in one switch, after the gate.
type ModelPromoteRequest struct {
	ModelRef
	CanaryPercent float64 `json:"canary_percent,omitempty"`
	Sticky        string  `json:"sticky,omitempty"`
	Force         bool    `json:"force,omitempty"` // past a failing gate; audited
}

// ModelReportRequest reports a version's figures.
type ModelReportRequest struct {
	ModelRef
	ModelFigures
}

// ModelDrainResponse says how far a drain is: Done once the version is
// retired, its requests all answered.
type ModelDrainResponse struct {
	Model    string     `json:"model"`
	Version  string     `json:"version"`
	State    ModelState `json:"state"`
	InFlight int        `json:"in_flight"`
	Done     bool       `json:"done"`
}

// ModelListResponse lists the registry.
type ModelListResponse struct {
	Models   []ModelInfo `json:"models"`
	Revision uint64      `json:"revision"` // the revision the answering node has applied
}

// ModelEvent is a lifecycle event, published on ModelEventSubject.
type ModelEvent struct {
	ModelChange
	Model    string           `json:"model"`
	Revision uint64           `json:"revision"`
	Gate     *ModelGateResult `json:"gate,omitempty"`
}

// Model registry errors.
var (
	ErrModelNotFound = &APIError{Code: 404, ErrCode: ErrCodeModelNotFound, Description: "model or version not found"}
	ErrBadModel      = &APIError{Code: 400, ErrCode: ErrCodeBadModel, Description: "invalid model request"}
	ErrModelConflict = &APIError{Code: 409, ErrCode: ErrCodeModelConflict, Description: "the version's state does not allow the change"}
	ErrModelGate     = &APIError{Code: 409, ErrCode: ErrCodeModelGate, Description: "the promotion gate refused the version"}
	ErrModelDraining = &APIError{Code: 409, ErrCode: ErrCodeModelDraining, Description: "the version is draining or retired: it admits no request"}
)

// CheckModelRef checks a model name (visible ASCII) and, when needed or
// given, a version (letters, digits, '.', '_', '-').
func CheckModelRef(r ModelRef, needVersion bool) error {
	if r.Model == "" || len(r.Model) > MaxModelNameLen {
		return fmt.Errorf("model name: 1 to %d characters", MaxModelNameLen)
	}
	if _, err := token(r.Model); err != nil {
		return fmt.Errorf("model name: %w", err)
	}
	if r.Version == "" && !needVersion {
		return nil
	}
	return CheckModelVersion(r.Version)
}

// CheckModelVersion checks a version name.
func CheckModelVersion(v string) error {
	if v == "" || len(v) > MaxModelVersionLen {
		return fmt.Errorf("version %q: 1 to %d characters", v, MaxModelVersionLen)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("version %q has %q: use letters, digits, '.', '_' and '-'", v, c)
		}
	}
	return nil
}

// CheckModelFigures refuses figures that are not finite and non-negative.
func CheckModelFigures(f ModelFigures) error {
	for _, x := range []struct {
		n string
		v float64
	}{{"p95_ms", f.P95Ms}, {"memory_mb", f.MemoryMB}, {"cold_start_ms", f.ColdStartMs}} {
		if math.IsNaN(x.v) || math.IsInf(x.v, 0) || x.v < 0 || x.v > 1e12 {
			return fmt.Errorf("%s %v: a finite number from 0 to 1e12", x.n, x.v)
		}
	}
	return nil
}

// CheckModelGate refuses a gate with a negative or absurd bound.
func CheckModelGate(g ModelGate) error {
	return CheckModelFigures(ModelFigures{P95Ms: g.P95DriftPct, MemoryMB: g.MemoryGrowthPct, ColdStartMs: g.ColdStartMs})
}

// ParseCanaryPercent reads a canary share as the CLI takes it: "10%",
// "10" or "2.5%", more than 0 and less than 100.
func ParseCanaryPercent(s string) (float64, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "%")
	p, err := strconv.ParseFloat(t, 64)
	if err != nil || t != strings.TrimSpace(t) || strings.ContainsAny(t, "eExXpP_") {
		return 0, fmt.Errorf("canary %q: want a percentage such as 10%%", s)
	}
	if !(p > 0 && p < 100) {
		return 0, fmt.Errorf("canary %q: more than 0%% and less than 100%%; promote without --canary for all traffic", s)
	}
	return p, nil
}
