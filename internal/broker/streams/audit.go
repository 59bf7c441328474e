package streams

import "context"

// The readers of the audit records' before and after (audit.Recorder
// Reads): a stream's and a queue's configuration as they are now.

// AuditStream is the configuration of SemaQ stream name; nil when there is
// none.
func (m *Manager) AuditStream(ctx context.Context, name string) any {
	st, err := m.deps.JS.Stream(ctx, name)
	if err != nil || !IsSemaqStream(&st.CachedInfo().Config) {
		return nil
	}
	return m.streamInfo(st.CachedInfo()).Config
}

// AuditQueue is the configuration of queue name; nil when there is none.
func (m *Manager) AuditQueue(ctx context.Context, name string) any {
	st, err := m.deps.JS.Stream(ctx, name)
	if err != nil {
		return nil
	}
	if qc, ok := QueueConfigOf(&st.CachedInfo().Config); ok {
		return qc
	}
	return nil
}
