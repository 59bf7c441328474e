package client

// WithAfterCommit lets a test see each commit's outcome and replace it:
// a lost answer (a transient error after the batch was stored), or a
// crash between the commit and the ack.
func WithAfterCommit(f func(m *Msg, err error) error) ProcessOption {
	return func(o *processOptions) error {
		o.afterCommit = f
		return nil
	}
}
