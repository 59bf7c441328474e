package pii

import (
	"net/netip"
	"strings"
)

func ipDetectors() []detector {
	return []detector{
		{
			Detector: Detector{Type: IP, Pattern: `\b(?:\d{1,3}\.){3}\d{1,3}\b`, Validate: validIP, MaxLen: 15},
			seed:     digitsSeed(4, 0, 0),
			ctx:      ip4Ctx,
		},
		{
			Detector: Detector{
				Type: IP,
				// The form ending in a dotted quad comes first, or "::ffff:192" would be taken.
				Pattern: `[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){1,6}:(?:\d{1,3}\.){3}\d{1,3}|` +
					`[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}`,
				Validate: validIP,
				MaxLen:   45,
			},
			seed: ip6Seed,
			ctx:  ip6Ctx,
		},
	}
}

// validIP checks an IP address. IPv4: a dotted quad of 0-255 without leading zeros. IPv6: what net/netip parses,
// without a zone, holding at least one decimal digit (so that C++ scopes such as "A::B" are not addresses).
func validIP(s string) bool {
	if !strings.Contains(s, ":") {
		a, err := netip.ParseAddr(s)
		return err == nil && a.Is4()
	}
	if !strings.ContainsAny(s, "0123456789") {
		return false
	}
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is6() && a.Zone() == ""
}

// ip6Ctx refuses a candidate glued to more of a token (a name before "::", a zone after '%', a port-like run).
func ip6Ctx(text string, start, end int) bool {
	if start > 0 {
		c := text[start-1]
		if isWord(c) || c == ':' || c == '.' {
			return false
		}
	}
	if end < len(text) {
		c := text[end]
		if isWord(c) || c == ':' || c == '%' || c == '.' && end+1 < len(text) && isDigit(text[end+1]) {
			return false
		}
	}
	return true
}

// notAddress are words after which a dotted quad is a version or a section number, not an address.
var notAddress = []string{"version", "ver", "v", "rev", "revision", "release", "build", "firmware", "fw",
	"chapter", "section", "rule", "clause", "step"}

// ip4Ctx is numberCtx, and refuses a dotted quad right after one of notAddress ("version 1.2.3.4").
func ip4Ctx(text string, start, end int) bool {
	if !numberCtx(text, start, end) {
		return false
	}
	i := start
	for i > 0 && (text[i-1] == ' ' || text[i-1] == ':') {
		i--
	}
	j := i
	for j > 0 && (isUpper(text[j-1]) || isLower(text[j-1])) {
		j--
	}
	for _, w := range notAddress {
		if strings.EqualFold(text[j:i], w) {
			return false
		}
	}
	return true
}
