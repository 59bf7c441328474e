package pii

// Byte classes of the prefilter: the bytes at which an entity can begin or be recognised.
const (
	clNone = iota
	clDigit
	clAt
	clPlus
	clColon
	clDash
	clUnderscore
	clA
	clDot
	// In a JSON string only:
	clQuote
	clBackslash
	clControl
)

var byteClass = func() (t [256]uint8) {
	for c := '0'; c <= '9'; c++ {
		t[c] = clDigit
	}
	t['@'], t['+'], t[':'], t['-'], t['_'], t['A'], t['.'] = clAt, clPlus, clColon, clDash, clUnderscore, clA, clDot
	t['"'], t['\\'] = clQuote, clBackslash
	for c := 0; c < 0x20; c++ {
		t[c] = clControl
	}
	return t
}()

// prefilter returns the types that may occur in s: a superset of what Scan finds, from one pass over the bytes
// that allocates nothing. An '@' for email; a '+' and a digit, or a run of 11 digits in groups, for phone; 17
// digits together for cn-id; 13 in groups for card; two capitals and two digits for iban; 9 digits in groups
// for ssn; three dots between digit runs, or "::" or a colon between hex digits, for ip; the fixed prefixes of
// the key families for secret.
func prefilter[T string | []byte](s T) mask {
	m, _, _ := prefilterFrom(s, 0, false)
	return m
}

// prefilterFrom is prefilter from s[i]. With inJSON it reads the raw content of a JSON string, whose opening
// quote is before i, and stops at its closing quote: end is that quote's index, and flags say the string holds
// escapes (strEsc), a \u escape, which can spell anything and so needs the decoded text prefiltered (strUEsc),
// or is not valid JSON (strBad). Reading the string and prefiltering it are one pass.
func prefilterFrom[T string | []byte](s T, i int, inJSON bool) (m mask, end int, flags uint8) {
	n := len(s)
	cluster, dotted := 0, 0 // digits in the current run of groups; dots joining its digit runs
	lastEnd := -2           // end of the previous digit run
	for ; i < n; i++ {
		switch byteClass[s[i]] {
		case clNone:
			continue
		case clQuote:
			if inJSON {
				return m, i, flags
			}
		case clBackslash:
			if inJSON {
				flags |= strEsc
				if i+1 >= n {
					return m, n, flags | strBad
				}
				switch s[i+1] {
				case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
					i++
				case 'u':
					if i+5 >= n || !isHex(s[i+2]) || !isHex(s[i+3]) || !isHex(s[i+4]) || !isHex(s[i+5]) {
						return m, n, flags | strBad
					}
					flags |= strUEsc
					i += 5
				default:
					return m, n, flags | strBad
				}
			}
		case clControl:
			if inJSON {
				return m, i, flags | strBad
			}
		case clDigit:
			j := i + 1
			for j < n && isDigit(s[j]) {
				j++
			}
			run := j - i
			if i == lastEnd+1 && (s[lastEnd] == ' ' || s[lastEnd] == '-') {
				cluster += run
			} else {
				cluster = run
			}
			if i == lastEnd+1 && s[lastEnd] == '.' {
				dotted++
			} else {
				dotted = 0
			}
			switch {
			case run >= 17:
				m |= bitCNID | bitCard | bitPhone | bitSSN
			case cluster >= 13:
				m |= bitCard | bitPhone | bitSSN
			case cluster >= 11:
				m |= bitPhone | bitSSN
			case cluster >= 9:
				m |= bitSSN
			}
			if dotted >= 3 {
				m |= bitIP
			}
			if i >= 2 && run >= 2 && isUpper(s[i-2]) && isUpper(s[i-1]) {
				m |= bitIBAN
			}
			lastEnd = j
			i = j - 1
		case clAt:
			m |= bitEmail
		case clPlus:
			if i+1 < n && (isDigit(s[i+1]) || s[i+1] == '(') {
				m |= bitPhone
			}
		case clColon:
			if i+1 < n && s[i+1] == ':' {
				m |= bitIP
			} else if i > 0 && isHex(s[i-1]) {
				j := i + 1
				for j < n && j <= i+4 && isHex(s[j]) {
					j++
				}
				if j > i+1 && j < n && s[j] == ':' {
					m |= bitIP
				}
			}
		case clDash:
			if i+4 < n && s[i+1] == '-' && s[i+2] == '-' && s[i+3] == '-' && s[i+4] == '-' ||
				i >= 2 && s[i-2] == 's' && s[i-1] == 'k' ||
				i >= 4 && s[i-4] == 'x' && s[i-3] == 'o' && s[i-2] == 'x' {
				m |= bitSecret
			}
		case clUnderscore:
			if i >= 3 && s[i-3] == 'g' && s[i-2] == 'h' ||
				i >= 2 && (s[i-2] == 's' || s[i-2] == 'r') && s[i-1] == 'k' ||
				i >= 6 && s[i-6] == 'g' && s[i-5] == 'i' && s[i-4] == 't' && s[i-1] == 'b' {
				m |= bitSecret
			}
		case clA:
			if i+3 < n && (s[i+1] == 'K' && s[i+2] == 'I' && s[i+3] == 'A' ||
				s[i+1] == 'S' && s[i+2] == 'I' && s[i+3] == 'A' ||
				s[i+1] == 'I' && s[i+2] == 'z' && s[i+3] == 'a') {
				m |= bitSecret
			}
		case clDot:
			// A JWT: a dot inside a run of base64url that starts like a JSON object's encoding. Only the
			// first dot of a run looks back, so each byte is looked at twice at most.
			if i == 0 || i+1 >= n || !isB64URL(s[i-1]) || !isB64URL(s[i+1]) || m&bitSecret != 0 {
				continue
			}
			j := i - 1
			for j > 0 && isB64URL(s[j-1]) {
				j--
			}
			if j > 0 && s[j-1] == '.' {
				continue
			}
			// '{' and '"' or white space encode as "ey" or "ew" and one of jwtThird. In raw JSON the run
			// may start with the letter of an escape such as \n.
			if j > 0 && s[j-1] == '\\' {
				j++
			}
			if i-j >= 3 && s[j] == 'e' && (s[j+1] == 'y' || s[j+1] == 'w') && jwtThird[s[j+2]] {
				m |= bitSecret
			}
		}
	}
	if inJSON {
		return m, n, flags | strBad // no closing quote
	}
	return m, n, flags
}

// What prefilterFrom learnt of a JSON string.
const (
	strEsc  = 1 << iota // holds escapes
	strUEsc             // holds a \u escape
	strBad              // is not valid JSON
)

func isB64URL(c byte) bool { return isWord(c) || c == '-' }

var jwtThird = func() (t [256]bool) {
	for _, c := range "IJABopkl01" {
		t[c] = true
	}
	return t
}()

func isHex(c byte) bool { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }
