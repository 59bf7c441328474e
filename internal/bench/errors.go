package bench

import "errors"

// ErrBadConfig is matched (errors.Is) by every configuration error; the
// error's text names the setting and what was wrong with it.
var ErrBadConfig = errors.New("bench: invalid configuration")

// ErrNoAcks means a target acknowledged nothing during a measured phase, so
// there is no figure to report; the error carries the first publish error.
var ErrNoAcks = errors.New("bench: no message was acknowledged")

// ErrNothingReceived means a target's consumer received none of the
// messages of a rate in the end-to-end measure, so there is no figure to
// report.
var ErrNothingReceived = errors.New("bench: no message was received end to end")
