package dispatch

// A stored request as the index sees it: the scheduling fields read from
// its headers (the consumer delivers headers only) and its sizes.

import (
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/dispatch/sched"
	"github.com/semaq/semaq/internal/broker/quota"
	"github.com/semaq/semaq/semaq"
)

// natsMsgSize is the header a headers-only consumer delivery carries the
// payload's size in.
const natsMsgSize = "Nats-Msg-Size"

// newJob reads the scheduling fields of a stored request from its headers
// (the consumer delivers headers only, with the payload's size). The
// strings it keeps are copies, so the delivery can be collected.
func newJob(md *jetstream.MsgMetadata, jm jetstream.Msg, cfg semaq.QueueConfig) *sched.Job {
	hdr := jm.Headers()
	j := &sched.Job{
		Seq:     md.Sequence.Stream,
		Subject: strings.Clone(jm.Subject()),
		JSReply: jm.Reply(),
		Arrived: md.Timestamp,
		Prio:    int(semaq.PriorityDefault),
		Tokens:  -1,
	}
	dataLen, _ := strconv.Atoi(hdr.Get(natsMsgSize))
	if hdr != nil {
		j.ID = strings.Clone(hdr.Get(semaq.HdrMsgID))
		j.Tenant = strings.Clone(hdr.Get(semaq.HdrTenant))
		j.Publisher = strings.Clone(hdr.Get(semaq.HdrPublisher))
		j.CancelSum = strings.Clone(hdr.Get(semaq.HdrCancelSum))
		j.Model = strings.Clone(hdr.Get(semaq.HdrModel))
		if hdr.Get(semaq.HdrModelRevision) != "" {
			j.Version = strings.Clone(hdr.Get(semaq.HdrModelVersion))
		}
		j.Adapter = strings.Clone(hdr.Get(semaq.HdrAdapter))
		if cfg.ChainAnswers != "" {
			j.Session = strings.Clone(hdr.Get(semaq.HdrSession))
		}
		if p, err := semaq.ParsePriority(hdr.Get(semaq.HdrPriority)); err == nil {
			j.Prio = int(p)
		}
		if n, err := strconv.ParseInt(hdr.Get(semaq.HdrPromptTokens), 10, 64); err == nil && n >= 0 {
			j.Tokens = n
		}
		if t, err := time.Parse(time.RFC3339Nano, hdr.Get(semaq.HdrReceived)); err == nil {
			j.Arrived = t
		}
		if t, err := time.Parse(time.RFC3339Nano, hdr.Get(semaq.HdrDeadline)); err == nil {
			j.Deadline = t
			j.HasDL = true
		}
	}
	if j.Tokens < 0 {
		j.Tokens = quota.EstimateTokens(dataLen)
		j.Estimate = true
	}
	j.Bytes = int64(dataLen) + semaq.QueueRequestOverhead
	j.Size = dataLen + frameJobOverhead
	for k, vs := range hdr {
		for _, v := range vs {
			j.Size += len(k) + len(v) + 4
		}
	}
	if j.Deadline.IsZero() && cfg.DefaultTimeout > 0 {
		j.Deadline = j.Arrived.Add(cfg.DefaultTimeout)
	}
	return j
}

// tokensDeclared is the prompt tokens as the ingress counted them for
// admission: -1 when estimated.
func tokensDeclared(j *sched.Job) int64 {
	if j.Estimate {
		return -1
	}
	return j.Tokens
}

// dataLen is the payload's size.
func dataLen(j *sched.Job) int { return int(j.Bytes - semaq.QueueRequestOverhead) }

// frameJobOverhead is what a job's entry in a batch frame
// (semaq.AppendFrameJob) adds to its stored headers and data: the reply
// subject, the Semaq-* headers and the length prefixes, generously. With
// 4 bytes per stored header it is the one bound of a job's frame size
// (sched.Job.Size) that fetches are cut by.
const frameJobOverhead = 640
