package semaq

import (
	"fmt"
	"strings"
)

// CheckSubject validates NATS subject syntax: 1 to 1024 bytes of non-empty
// dot-separated tokens without spaces or control characters. With
// wildcards, '*' may stand for a whole token and '>' for the last one;
// without, a wildcard is an error (a publish needs a literal subject).
func CheckSubject(subj string, wildcards bool) error {
	if subj == "" {
		return fmt.Errorf("subject is empty")
	}
	if len(subj) > 1024 {
		return fmt.Errorf("subject is longer than 1024 bytes")
	}
	last := strings.Count(subj, ".")
	i := 0
	for t := range strings.SplitSeq(subj, ".") {
		if t == "" {
			return fmt.Errorf("subject %q has an empty token", subj)
		}
		for j := 0; j < len(t); j++ {
			if c := t[j]; c <= ' ' || c == 0x7f {
				return fmt.Errorf("subject %q has a space or control character", subj)
			}
		}
		if strings.ContainsAny(t, "*>") {
			if !wildcards {
				return fmt.Errorf("subject %q has a wildcard; publish to a literal subject", subj)
			}
			if len(t) != 1 {
				return fmt.Errorf("subject %q has a wildcard inside token %q", subj, t)
			}
			if t == ">" && i != last {
				return fmt.Errorf("subject %q has '>' before its last token", subj)
			}
		}
		i++
	}
	return nil
}
