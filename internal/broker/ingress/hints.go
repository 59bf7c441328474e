package ingress

import (
	"github.com/semaq/semaq/internal/hints"
	"github.com/semaq/semaq/semaq"
)

// Dispatch hints (docs/queues.md): the class, the required and preferred
// labels, the latency SLA and the workload a request names are checked
// here, once, so that the dispatcher reads only values that parse; a
// request that names an SLA and no AI-Priority gets the priority the SLA
// derives, stored as its AI-Priority (an explicit AI-Priority wins).

// defaultWorkloads are the bases of a node configured with none.
var defaultWorkloads = hints.DefaultWorkloads()

// hintConfig is what the ingress checks hints against.
type hintConfig struct {
	// workloads are the SLA bases (hints.DefaultWorkloads when nil).
	workloads hints.Workloads
	// known reports whether a class is defined; nil: any name.
	known func(class string) bool
}

// hints checks p's dispatch hints and derives its priority from its SLA.
func (in *Ingress) hints(p *publication) *semaq.APIError {
	h := p.m.Header
	dh, err := hints.Parse(h, true)
	if err != nil {
		return semaq.NewAPIError(semaq.ErrEnvelope, "publish on %s: %v", p.m.Subject, err)
	}
	if dh.Class != "" && in.hintCfg.known != nil && !in.hintCfg.known(dh.Class) {
		return semaq.NewAPIError(semaq.ErrClassNotFound, "publish on %s: header %s: class %s is not defined (semaq queue class ls)",
			p.m.Subject, semaq.HdrClass, dh.Class)
	}
	if dh.LatencySLA == 0 && dh.Workload == "" {
		return nil
	}
	w := in.hintCfg.workloads
	if w == nil {
		w = defaultWorkloads
	}
	sla := dh.LatencySLA
	if sla == 0 {
		sla = hints.MaxLatencySLA // a workload alone: its name is checked, the priority left alone
	}
	prio, _, err := w.Priority(dh.Workload, sla)
	if err != nil {
		return semaq.NewAPIError(semaq.ErrEnvelope, "publish on %s: header %s: %v", p.m.Subject, semaq.HdrWorkload, err)
	}
	if dh.LatencySLA > 0 && !dh.PriorityGiven {
		h[semaq.HdrPriority] = []string{prio.String()}
		p.env.Priority = prio
	}
	return nil
}
