package pii

import "time"

func cnidDetectors() []detector {
	return []detector{{
		Detector: Detector{Type: CNID, Pattern: `\b[1-68]\d{16}[\dXx]\b`, Validate: validCNID, MaxLen: 18},
		seed:     digitsSeed(17, 0, 1),
		ctx:      numberCtx,
	}}
}

// cnidWeights are the ISO 7064 MOD 11-2 weights of the 17 digits, 2^(17-i) mod 11.
var cnidWeights = [17]int{7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2}

// validCNID checks a resident identity number: 17 digits and a check character (a digit or X), a region code
// whose first digit is 1-6 or 8, a birth date YYYYMMDD between 1900-01-01 and today, and the ISO 7064 MOD 11-2
// check character.
func validCNID(s string) bool {
	if len(s) != 18 {
		return false
	}
	sum := 0
	for i := 0; i < 17; i++ {
		if !isDigit(s[i]) {
			return false
		}
		sum += int(s[i]-'0') * cnidWeights[i]
	}
	if r := s[0]; r < '1' || r > '8' || r == '7' {
		return false
	}
	if !validBirth(s[6:14]) {
		return false
	}
	want := "10X98765432"[sum%11]
	got := s[17]
	if got == 'x' {
		got = 'X'
	}
	return got == want
}

func validBirth(ymd string) bool {
	n := func(s string) int {
		v := 0
		for i := 0; i < len(s); i++ {
			v = v*10 + int(s[i]-'0')
		}
		return v
	}
	y, m, d := n(ymd[:4]), n(ymd[4:6]), n(ymd[6:])
	if y < 1900 || m < 1 || m > 12 || d < 1 {
		return false
	}
	t := time.Date(y, time.Month(m), d, 0, 0, 0, 0, time.UTC)
	if t.Day() != d { // 31 April rolled over
		return false
	}
	return !t.After(time.Now())
}
