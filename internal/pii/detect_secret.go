package pii

import (
	"encoding/base64"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
)

// secretShapes are the key families: a pattern, its longest value, where it can start, and the check beyond
// the pattern.
var secretShapes = []struct {
	pattern string
	maxLen  int
	seed    seeder
	check   func(string) bool
}{
	// AWS access key id
	{`\b(?:AKIA|ASIA)[A-Z0-9]{16}\b`, 20, literalSeed(20, "AKIA", "ASIA"), nil},
	// GitHub token
	{`\bgh[pousr]_[A-Za-z0-9]{36,251}\b`, 255, literalSeed(255, "ghp_", "gho_", "ghu_", "ghs_", "ghr_"), nil},
	// GitHub fine-grained token
	{`\bgithub_pat_[A-Za-z0-9_]{22,244}\b`, 255, literalSeed(255, "github_pat_"), nil},
	// OpenAI key
	{`\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,200}`, 220, literalSeed(220, "sk-"), mixed},
	// Slack token
	{`\bxox[abprs]-[A-Za-z0-9\-]{10,250}`, 255, literalSeed(255, "xox"), hasDigit},
	// Google API key
	{`\bAIza[0-9A-Za-z_\-]{35}`, 39, literalSeed(39, "AIza"), nil},
	// Stripe key
	{`\b[rs]k_live_[0-9A-Za-z]{16,247}\b`, 255, literalSeed(255, "sk_live_", "rk_live_"), nil},
	// PEM private key
	{`-----BEGIN (?:[A-Z0-9]+ ){0,3}PRIVATE KEY-----`, 64, literalSeed(64, "-----BEGIN "), nil},
	// JWT
	{`\be[wy][A-Za-z0-9_\-]{6,}\.[A-Za-z0-9_\-]{2,}\.[A-Za-z0-9_\-]*`, maxJWT, jwtSeed, validJWT},
}

func secretDetectors() []detector {
	var ds []detector
	for _, s := range secretShapes {
		ds = append(ds, detector{
			Detector: Detector{Type: Secret, Pattern: s.pattern, Validate: validSecret, MaxLen: s.maxLen},
			seed:     s.seed,
			ctx:      secretCtx,
		})
	}
	return ds
}

// maxJWT bounds a JWT.
const maxJWT = 16384

// validSecret checks a value against the key families:
//   - AWS access key id: AKIA or ASIA and 16 upper-case letters or digits;
//   - GitHub token: gh[pousr]_ and at least 36 letters or digits, or github_pat_ and at least 22;
//   - OpenAI key: sk-, sk-proj-, sk-svcacct- or sk-admin- and at least 20 key characters holding a digit, an
//     upper-case and a lower-case letter (so that "sk-learn-compatible" is not one);
//   - Slack token: xox[abprs]- and at least 10 key characters holding a digit;
//   - Google API key: AIza and 35 key characters;
//   - Stripe key: sk_live_ or rk_live_ and at least 16 letters or digits;
//   - a PEM private key: its "-----BEGIN ... PRIVATE KEY-----" line (the body that follows is not part of the
//     finding; a block of base64 lines cannot be told from other data);
//   - a JWT: three base64url parts split by dots, the first decoding to a JSON object with an "alg" member.
func validSecret(s string) bool {
	for i, d := range secretAnchored() {
		if d.MatchString(s) && (secretShapes[i].check == nil || secretShapes[i].check(s)) {
			return true
		}
	}
	return false
}

var (
	secretOnce sync.Once
	secretRes  []*regexp.Regexp
)

// secretAnchored is each shape's pattern matching a whole value.
func secretAnchored() []*regexp.Regexp {
	secretOnce.Do(func() {
		for _, s := range secretShapes {
			secretRes = append(secretRes, regexp.MustCompile(`^(?:`+s.pattern+`)$`))
		}
	})
	return secretRes
}

func mixed(s string) bool {
	body := s[strings.LastIndexByte(s[:min(len(s), 12)], '-')+1:]
	return hasDigit(body) && strings.IndexFunc(body, func(r rune) bool { return 'A' <= r && r <= 'Z' }) >= 0 &&
		strings.IndexFunc(body, func(r rune) bool { return 'a' <= r && r <= 'z' }) >= 0
}

func hasDigit(s string) bool { return strings.ContainsAny(s, "0123456789") }

// validJWT checks that the header part decodes to a JSON object with "alg".
func validJWT(s string) bool {
	parts := strings.Split(s, ".")
	if len(s) > maxJWT || len(parts) != 3 || len(parts[0]) > 4096 {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[0], "="))
	if err != nil {
		return false
	}
	var header map[string]json.RawMessage
	if json.Unmarshal(raw, &header) != nil {
		return false
	}
	_, ok := header["alg"]
	return ok
}

// secretCtx refuses a key glued to more key characters; the PEM line is exempt, as dashes end it.
func secretCtx(text string, start, end int) bool {
	if text[start] == '-' {
		return true
	}
	return tokenCtx(text, start, end)
}

// jwtSeed emits each run of base64url characters and dots that starts like a JWT's header.
func jwtSeed(text string, emit func(lo, hi int)) {
	n := len(text)
	for i := 0; i+2 < n; i++ {
		if text[i] != 'e' || (text[i+1] != 'y' && text[i+1] != 'w') || !jwtThird[text[i+2]] || i > 0 && isWord(text[i-1]) {
			continue
		}
		j := i
		for j < n && j-i <= maxJWT && (isWord(text[j]) || text[j] == '-' || text[j] == '.') {
			j++
		}
		emit(i, j)
		i = j
	}
}
