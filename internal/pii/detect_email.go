package pii

import "strings"

func emailDetectors() []detector {
	return []detector{{
		Detector: Detector{
			Type: Email,
			Pattern: `[A-Za-z0-9._%+\-]+@[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?` +
				`(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?)*\.[A-Za-z]{2,24}`,
			Validate: validEmail,
			MaxLen:   254,
		},
		seed: emailSeed,
		ctx:  emailCtx,
	}}
}

// validEmail checks the RFC 5321 limits the pattern cannot: the local part is 1-64 characters that neither start
// nor end with a dot nor hold two in a row, the domain has a dot, labels of 1-63 characters that do not start or
// end with '-', and a letter TLD of at least 2.
func validEmail(s string) bool {
	at := strings.LastIndexByte(s, '@')
	if at <= 0 || at > 64 || len(s) > 254 {
		return false
	}
	local, domain := s[:at], s[at+1:]
	if local[0] == '.' || local[len(local)-1] == '.' || strings.Contains(local, "..") {
		return false
	}
	for i := 0; i < len(local); i++ {
		c := local[i]
		if !isAlnum(c) && !strings.ContainsRune("._%+-", rune(c)) {
			return false
		}
	}
	labels := strings.Split(domain, ".")
	if len(labels) < 2 {
		return false
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			if !isAlnum(l[i]) && l[i] != '-' {
				return false
			}
		}
	}
	tld := labels[len(labels)-1]
	if len(tld) < 2 || fileExtensions[strings.ToLower(tld)] {
		return false
	}
	for i := 0; i < len(tld); i++ {
		if !isUpper(tld[i]) && !isLower(tld[i]) {
			return false
		}
	}
	return true
}

// emailCtx refuses an address glued to more address characters, which the pattern stopped at for a reason (a
// second '@', a TLD running into digits).
func emailCtx(text string, start, end int) bool {
	if start > 0 {
		c := text[start-1]
		if c == '@' || isWord(c) {
			return false
		}
	}
	if end < len(text) {
		c := text[end]
		if isWord(c) || c == '@' || c == '-' {
			return false
		}
	}
	return true
}

// fileExtensions are file name endings that are not top-level domains, so that "icon@2x.png" and
// "style@media.css" are file names, not addresses.
var fileExtensions = map[string]bool{
	"png": true, "jpg": true, "jpeg": true, "gif": true, "svg": true, "webp": true, "bmp": true, "ico": true,
	"js": true, "mjs": true, "ts": true, "css": true, "scss": true, "json": true, "txt": true, "md": true,
	"yaml": true, "yml": true, "html": true, "htm": true, "xml": true, "pdf": true, "csv": true, "lock": true,
}
