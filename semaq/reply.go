package semaq

// CheckReplySubject reports whether the broker may publish to subject on a
// client's behalf: the reply subject given with a request or a publish.
// Callers handle "no reply" (the empty string) before calling; here it is an
// error. Ordinary inboxes (_INBOX.<id>, custom inbox prefixes) pass. Refused:
// wildcards, whitespace, control and invisible formatting characters,
// invalid UTF-8, empty tokens, more than MaxSubjectLen bytes, and the
// reserved namespaces "$" ($JS, $KV, $O, $SQ, $SYS, ...) and "_SQ_" (the
// broker's own inboxes), which would let a client make the broker write
// into a system namespace with the broker's rights. It does not allocate when
// the subject is accepted.
func CheckReplySubject(subject string) error {
	return checkLiteralSubject("reply subject", subject)
}
