package pii

func cardDetectors() []detector {
	return []detector{{
		Detector: Detector{Type: Card, Pattern: `\b\d(?:[ \-]?\d){12,18}\b`, Validate: validCard, MaxLen: 19 + 18},
		seed:     digitsSeed(13, 0, 0),
		refine:   true,
		ctx:      numberCtx,
	}}
}

// validCard checks a payment card number: 13-19 digits, written together or in groups of 3-6 split by one space
// or one dash (the same throughout), Luhn valid, in a known issuer range at a length that issuer uses.
func validCard(s string) bool {
	var digits [19]byte
	n := 0
	var sep byte
	group := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isDigit(c):
			if n == len(digits) {
				return false
			}
			digits[n] = c - '0'
			n++
			group++
		case c == ' ' || c == '-':
			if sep != 0 && c != sep || group < 3 || group > 6 {
				return false
			}
			sep = c
			group = 0
		default:
			return false
		}
	}
	if n < 13 || (sep != 0 && (group < 3 || group > 6)) {
		return false
	}
	if !luhn(digits[:n]) {
		return false
	}
	return knownIIN(digits[:n])
}

func luhn(d []byte) bool {
	sum := 0
	for i := len(d) - 1; i >= 0; i -= 2 {
		sum += int(d[i])
	}
	for i := len(d) - 2; i >= 0; i -= 2 {
		v := int(d[i]) * 2
		if v > 9 {
			v -= 9
		}
		sum += v
	}
	return sum%10 == 0
}

func knownIIN(d []byte) bool {
	prefix := func(k int) int {
		v := 0
		for i := 0; i < k; i++ {
			v = v*10 + int(d[i])
		}
		return v
	}
	n := len(d)
	p2, p3, p4 := prefix(2), prefix(3), prefix(4)
	switch {
	case d[0] == 4: // Visa
		return n == 13 || n == 16 || n == 19
	case p2 >= 51 && p2 <= 55, p4 >= 2221 && p4 <= 2720: // Mastercard
		return n == 16
	case p2 == 34 || p2 == 37: // American Express
		return n == 15
	case p4 == 6011 || p2 == 65 || p3 >= 644 && p3 <= 649: // Discover
		return n >= 16
	case p2 == 62: // UnionPay
		return n >= 16
	case p4 >= 3528 && p4 <= 3589: // JCB
		return n >= 16
	case p2 == 36 || p2 == 38 || p3 >= 300 && p3 <= 305: // Diners Club
		return n >= 14 && n <= 16
	}
	return false
}
