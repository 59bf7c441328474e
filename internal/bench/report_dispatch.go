package bench

import "github.com/semaq/semaq/internal/bench/measure"

// The figures of the dispatch benchmark, which package bench/dispatch
// runs: they are part of Report (Report.Dispatch), whose JSON form is the
// one every `semaq bench` scenario but tokens writes, so they live here
// beside it.

// DispatchReport holds the dispatch scenario's own figures.
type DispatchReport struct {
	// Mode is where the paced phases' load generators and workers ran:
	// DispatchInProcess or DispatchProcesses.
	Mode string `json:"mode"`
	// WorkerAcks is how the paced phases' workers answer: "confirmed"
	// (Job.Ack) or "nowait" (Job.AckNoWait).
	WorkerAcks string             `json:"worker_acks"`
	Priority   PriorityIsolation  `json:"priority"`
	Tenants    TenantIsolation    `json:"tenants"`
	Fairness   TokenFairness      `json:"fairness"`
	Throughput DispatchThroughput `json:"throughput"`
}

// PriorityIsolation compares critical requests' queue wait alone and under
// a bulk flood.
type PriorityIsolation struct {
	CriticalRate  int             `json:"critical_rate"`
	BulkRate      int             `json:"bulk_rate"`
	Alone         measure.Latency `json:"critical_alone_wait_us"`
	Flood         measure.Latency `json:"critical_flood_wait_us"`
	BulkWait      measure.Latency `json:"bulk_flood_wait_us"`
	BulkBacklog   int             `json:"bulk_backlog_at_end"`
	P99Ratio      float64         `json:"p99_ratio"` // for information: the goal is ExtraGoalUS
	CriticalCount int64           `json:"critical_served"`
	// The flood's p99 as alone p99 + one service time + ExtraUS, against
	// ExtraGoalUS; the same for the end-to-end wait (publish call to the
	// worker's fetch returning, a header bench/dispatch stamps).
	ServiceUS   float64         `json:"service_us"`
	ExtraUS     float64         `json:"extra_us"`
	ExtraGoalUS float64         `json:"extra_goal_us"`
	AloneE2E    measure.Latency `json:"critical_alone_e2e_us"`
	FloodE2E    measure.Latency `json:"critical_flood_e2e_us"`
	ExtraE2EUS  float64         `json:"extra_e2e_us"`
	// Under the flood: requests served per second, the service time as
	// the workers' sleep really took, and their round trips between two
	// jobs, Job.Ack and a Fetch that returned a job (one service time
	// covers neither).
	FloodServedPerS float64         `json:"flood_served_per_s"`
	FloodService    measure.Latency `json:"flood_worker_service_us"`
	FloodAck        measure.Latency `json:"flood_worker_ack_us"`
	FloodFetch      measure.Latency `json:"flood_worker_fetch_us"`
	// AloneAck is Job.Ack's round trip without the flood, to compare.
	AloneAck measure.Latency `json:"alone_worker_ack_us"`
	// CPU use of each process in the two phases.
	AloneCPU []ProcessCPU `json:"alone_cpu"`
	FloodCPU []ProcessCPU `json:"flood_cpu"`
}

// TenantIsolation compares tenant B's wait alone and beside a tenant A
// offering TenantFactor times B's load.
type TenantIsolation struct {
	BRate    int             `json:"b_rate"`
	ARate    int             `json:"a_rate"`
	Alone    measure.Latency `json:"b_alone_wait_us"`
	WithA    measure.Latency `json:"b_with_a_wait_us"`
	AWait    measure.Latency `json:"a_wait_us"`
	P99Ratio float64         `json:"p99_ratio"`
	Goal     float64         `json:"goal"`
	// B's p99 beside A stated as the critical request's is: B alone p99 +
	// one service time + ExtraUS. With A's backlog keeping every worker
	// busy, B waits for one to finish as a critical request does under the
	// flood (docs/benchmarks/dispatch.md, "Tenant B beside a saturating A").
	ServiceUS float64 `json:"service_us"`
	ExtraUS   float64 `json:"extra_us"`
	// OfferedPerS is A's and B's load together, CapacityPerS what the
	// workers could serve back to back without any turnaround (workers /
	// service time; 0 without a service time), ServedPerS what they
	// served beside A.
	OfferedPerS  int     `json:"offered_per_s"`
	CapacityPerS float64 `json:"nominal_capacity_per_s"`
	ServedPerS   float64 `json:"served_per_s"`
	// End to end (as PriorityIsolation's), and CPU use of each process.
	AloneE2E measure.Latency `json:"b_alone_e2e_us"`
	WithAE2E measure.Latency `json:"b_with_a_e2e_us"`
	E2ERatio float64         `json:"e2e_p99_ratio"`
	AloneCPU []ProcessCPU    `json:"alone_cpu"`
	WithACPU []ProcessCPU    `json:"with_a_cpu"`
}

// TokenFairness is the tokens served to two backlogged tenants with
// different request sizes.
type TokenFairness struct {
	Requests   int     `json:"requests_served"`
	TokensA    int64   `json:"tokens_a"`
	TokensB    int64   `json:"tokens_b"`
	SizeA      int64   `json:"request_tokens_a"`
	SizeB      int64   `json:"request_tokens_b"`
	MaxGap     int64   `json:"max_gap_tokens"`
	Bound      int64   `json:"vtc_bound_tokens"` // 2 × the largest request
	GapOfBound float64 `json:"max_gap_of_bound"`
}

// DispatchThroughput is the drain rate of a backlog: SemaQ's dispatcher
// against a raw JetStream pull consumer on the same broker.
type DispatchThroughput struct {
	Semaq   float64   `json:"semaq_msgs_per_s"`
	Raw     float64   `json:"jetstream_msgs_per_s"`
	Ratio   float64   `json:"ratio"`
	Goal    float64   `json:"goal"`
	Rounds  []float64 `json:"ratio_by_round"`
	Workers int       `json:"workers"`
	Batch   int       `json:"batch"`
	// Acks is "confirmed" (Job.Ack vs AckSync) or "nowait" (Job.AckNoWait
	// vs Ack).
	Acks string `json:"acks"`
}

// Modes of the paced phases.
const (
	DispatchInProcess = "in-process"
	DispatchProcesses = "processes"
)

// Targets of the dispatch scenario's throughput phase.
const (
	TargetSemaqDispatch = "semaq-dispatch"
	TargetJetStreamPull = "jetstream-pull"
)

// ProcessCPU is one process's CPU use over a paced phase.
type ProcessCPU struct {
	Role string `json:"role"`
	PID  int    `json:"pid"`
	// CPUSeconds is user + system time over the phase, WallSeconds the
	// phase as the process saw it; Utilisation is their ratio (1.0: one
	// core busy throughout). Zero and Measured false where the platform
	// does not say.
	CPUSeconds  float64 `json:"cpu_s"`
	WallSeconds float64 `json:"wall_s"`
	Utilisation float64 `json:"cpu_util"`
	Measured    bool    `json:"measured"`
	// Placement is the CPU pinning and nice value applied, or why they
	// were not.
	Placement string `json:"placement,omitempty"`
}
