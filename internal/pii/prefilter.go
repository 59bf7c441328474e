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
	clE
)

var byteClass = func() (t [256]uint8) {
	for c := '0'; c <= '9'; c++ {
		t[c] = clDigit
	}
	t['@'], t['+'], t[':'], t['-'], t['_'], t['A'], t['e'] = clAt, clPlus, clColon, clDash, clUnderscore, clA, clE
	return t
}()

// prefilter returns the types that may occur in s: a superset of what Scan finds, from one pass over the bytes
// that allocates nothing. An '@' for email; a '+' and a digit, or a run of 11 digits in groups, for phone; 17
// digits together for cn-id; 13 in groups for card; two capitals and two digits for iban; 9 digits in groups
// for ssn; three dots between digit runs, or "::" or a colon between hex digits, for ip; the fixed prefixes of
// the key families for secret.
func prefilter[T string | []byte](s T) mask {
	var m mask
	n := len(s)
	cluster, dotted := 0, 0 // digits in the current run of groups; dots joining its digit runs
	lastEnd := -2           // end of the previous digit run
	for i := 0; i < n; i++ {
		switch byteClass[s[i]] {
		case clNone:
			continue
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
				m |= CNID.bit() | Card.bit() | Phone.bit() | SSN.bit()
			case cluster >= 13:
				m |= Card.bit() | Phone.bit() | SSN.bit()
			case cluster >= 11:
				m |= Phone.bit() | SSN.bit()
			case cluster >= 9:
				m |= SSN.bit()
			}
			if dotted >= 3 {
				m |= IP.bit()
			}
			if i >= 2 && run >= 2 && isUpper(s[i-2]) && isUpper(s[i-1]) {
				m |= IBAN.bit()
			}
			lastEnd = j
			i = j - 1
		case clAt:
			m |= Email.bit()
		case clPlus:
			if i+1 < n && (isDigit(s[i+1]) || s[i+1] == '(') {
				m |= Phone.bit()
			}
		case clColon:
			if i+1 < n && s[i+1] == ':' {
				m |= IP.bit()
			} else if i > 0 && isHex(s[i-1]) {
				j := i + 1
				for j < n && j <= i+4 && isHex(s[j]) {
					j++
				}
				if j > i+1 && j < n && s[j] == ':' {
					m |= IP.bit()
				}
			}
		case clDash:
			if i+4 < n && s[i+1] == '-' && s[i+2] == '-' && s[i+3] == '-' && s[i+4] == '-' ||
				i >= 2 && s[i-2] == 's' && s[i-1] == 'k' ||
				i >= 4 && s[i-4] == 'x' && s[i-3] == 'o' && s[i-2] == 'x' {
				m |= Secret.bit()
			}
		case clUnderscore:
			if i >= 3 && s[i-3] == 'g' && s[i-2] == 'h' ||
				i >= 2 && (s[i-2] == 's' || s[i-2] == 'r') && s[i-1] == 'k' ||
				i >= 6 && s[i-6] == 'g' && s[i-5] == 'i' && s[i-4] == 't' && s[i-1] == 'b' {
				m |= Secret.bit()
			}
		case clA:
			if i+3 < n && (s[i+1] == 'K' && s[i+2] == 'I' && s[i+3] == 'A' ||
				s[i+1] == 'S' && s[i+2] == 'I' && s[i+3] == 'A' ||
				s[i+1] == 'I' && s[i+2] == 'z' && s[i+3] == 'a') {
				m |= Secret.bit()
			}
		case clE:
			// A JWT's header is a JSON object: '{' and '"' or white space encode as "ey" or "ew" and one of these.
			// In raw JSON the letter before may end an escape such as \n.
			if i+2 < n && (s[i+1] == 'y' || s[i+1] == 'w') && jwtThird[s[i+2]] && (i == 0 || !isWord(s[i-1]) || i >= 2 && s[i-2] == '\\') {
				m |= Secret.bit()
			}
		}
	}
	return m
}

var jwtThird = func() (t [256]bool) {
	for _, c := range "IJABopkl01" {
		t[c] = true
	}
	return t
}()

func isHex(c byte) bool { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }
