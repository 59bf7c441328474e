package pii

func ssnDetectors() []detector {
	return []detector{
		{
			Detector: Detector{Type: SSN, Pattern: `\b\d{3}[ \-]\d{2}[ \-]\d{4}\b`, Validate: validSSN, MaxLen: 11},
			seed:     digitsSeed(9, 0, 0),
			ctx:      numberCtx,
		},
		{
			// Nine bare digits are an SSN only after its keyword; the value is the group.
			Detector: Detector{
				Type:     SSN,
				Pattern:  `(?i)\b(?:ssn|social security(?: number| no\.?| #)?)[\s:#=]{0,3}(?:is[\s:]{1,2})?(\d{9})\b`,
				Validate: validSSN,
				MaxLen:   11,
			},
			seed: ssnKeywordSeed,
			ctx:  numberCtx,
		},
	}
}

// validSSN checks a US social security number: ddd-dd-dddd, ddd dd dddd or nine bare digits, whose area is not
// 000, 666 or 9xx, group not 00 and serial not 0000.
func validSSN(s string) bool {
	var d [9]byte
	switch len(s) {
	case 9:
		copy(d[:], s)
	case 11:
		if s[3] != s[6] || (s[3] != '-' && s[3] != ' ') {
			return false
		}
		copy(d[:3], s[:3])
		copy(d[3:5], s[4:6])
		copy(d[5:], s[7:])
	default:
		return false
	}
	for _, c := range d {
		if !isDigit(c) {
			return false
		}
	}
	area, group, serial := string(d[:3]), string(d[3:5]), string(d[5:])
	return area != "000" && area != "666" && d[0] != '9' && group != "00" && serial != "0000"
}
